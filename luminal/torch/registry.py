"""The one registry of ATen op handlers: ATen overload name -> the function that builds it in luminal.

A handler is `fn(c, *args, **kwargs)`: `c` is the call being translated (luminal/torch/translate.py:
`Call`, with the output's dtype and symbolic shape from torch's metadata) and the arguments are the
node's, with tensors already GraphTensors and SymInts luminal Expressions. It returns a GraphTensor,
a tuple of them (multi-output ops), or a Python/Expression scalar. Every entry here is tested
against eager torch (tests/torch/test_ops.py) and listed in docs/torch.md; both are generated from
this table, so neither can drift from it.

The handlers live in luminal/torch/ops/ (imported by `load()`); each module registers its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Handler:
    name: str  # ATen overload, e.g. "aten.add.Tensor"
    fn: Callable
    family: str  # the luminal/torch/ops module that owns it (groups the doc table)
    note: str  # how it maps onto luminal, for the doc table


OPS: dict[str, Handler] = {}

# Graph bookkeeping that computes nothing: runtime shape assertions and constraints (torch checks
# them itself while tracing; luminal's shapes are exact), and aliases the translation ignores.
IGNORED = frozenset({
    "aten._assert_scalar.default", "aten._assert_tensor_metadata.default", "aten.sym_constrain_range.default",
    "aten.sym_constrain_range_for_size.default", "aten._assert_async.msg", "aten._functional_assert_scalar.default",
})  # fmt: skip


def aten(*names: str, note: str = "") -> Callable[[Callable], Callable]:
    """Register `fn` as the handler of the ATen overloads `names` ("add.Tensor" -> "aten.add.Tensor")."""

    def deco(fn: Callable) -> Callable:
        family = fn.__module__.rsplit(".", 1)[-1]
        for n in names:
            full = n if n.startswith(("aten.", "prims.")) else f"aten.{n}"
            if full in OPS:
                raise ValueError(f"ATen op {full} registered twice ({OPS[full].fn.__qualname__}, {fn.__qualname__})")
            OPS[full] = Handler(full, fn, family, note or (fn.__doc__ or "").strip().split("\n")[0])
        return fn

    return deco


def load() -> dict[str, Handler]:
    """The full table (importing the handler modules registers them)."""
    from luminal.torch.ops import attention, create, elementwise, indexing, linalg, reduce, shape  # noqa: F401

    return OPS


def op_table() -> str:
    """docs/torch.md's supported-op table, as markdown, from the registry."""
    ops = load()
    lines = ["| ATen op | family | luminal |", "|---|---|---|"]
    for name in sorted(ops, key=lambda n: (ops[n].family, n)):
        h = ops[name]
        lines.append(f"| `{name}` | {h.family} | {h.note} |")
    return "\n".join(lines) + "\n"


def write_doc(path: str = "docs/torch.md") -> None:
    """Regenerate the op table between the markers of docs/torch.md (`python -m luminal.torch.registry`)."""
    from pathlib import Path

    p = Path(path)
    text = p.read_text()
    head, rest = text.split(TABLE_BEGIN, 1)
    _, tail = rest.split(TABLE_END, 1)
    p.write_text(f"{head}{TABLE_BEGIN}\n{op_table()}{TABLE_END}{tail}")


TABLE_BEGIN, TABLE_END = (
    "<!-- op-table:begin (generated: python -m luminal.torch.registry) -->",
    "<!-- op-table:end -->",
)

if __name__ == "__main__":  # run as a script this module is __main__; the table lives in the package's copy
    from luminal.torch import registry

    registry.write_doc()
