"""LLIR: the backend-neutral graph of chosen ops that extraction produces and a backend loads.

Nodes are in topological order; each holds an op (an HLIR op or a backend op, a frozen
dataclass), its ordered input node indices and its output dtype: the same shape as
`Graph.nodes`, so an executor that runs HLIR nodes runs LLIR unchanged. The fingerprint is a
hash of a canonical text form (stable across processes); `to_json`/`from_json` round-trip
exactly (the compile cache stores plans this way); `to_dot`/`to_html` render the plan.
"""

from __future__ import annotations

import hashlib
import html
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path

from luminal.dtype import DType
from luminal.errors import CompileError
from luminal.hlir import Input, Output, fexpr
from luminal.hlir.fexpr import FLeaf, FNode
from luminal.hlir.op import Op
from luminal.shape.expr import Expression


@dataclass(frozen=True)
class LNode:
    op: Op
    inputs: tuple[int, ...]
    dtype: DType


@dataclass
class LLIRGraph:
    nodes: list[LNode]
    outputs: dict[str, int]  # output label -> index of its Output node
    inputs: dict[str, int] = field(default_factory=dict)  # input label -> index of its Input node
    # the dims of the graph it was compiled from (set by the compiler; not part of its identity): a backend
    # numbers its runtime dims by them, as it does when it profiles plans of that graph at its dims
    dims: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.inputs:
            self.inputs = {n.op.label: i for i, n in enumerate(self.nodes) if isinstance(n.op, Input)}

    def __len__(self) -> int:
        return len(self.nodes)

    def op_counts(self) -> dict[str, int]:
        return dict(sorted(Counter(type(n.op).__name__ for n in self.nodes).items()))

    # -- identity ---------------------------------------------------------------------------------
    def canonical(self) -> str:
        lines = [f"{i} {_op_text(n.op)} {n.dtype.value} {list(n.inputs)}" for i, n in enumerate(self.nodes)]
        lines.append("outputs " + json.dumps(self.outputs, sort_keys=True))
        return "\n".join(lines)

    def fingerprint(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()[:32]

    def validate(self) -> None:
        """Raise CompileError unless the graph is topologically ordered and every op is well-formed."""
        arity: dict[int, int] = {}  # per op object: a fused op counts its body's leaves (an unrolled plan repeats ops)
        for i, n in enumerate(self.nodes):
            if any(not 0 <= s < i for s in n.inputs):
                raise CompileError(f"LLIR node {i} ({type(n.op).__name__}) reads a later or missing node {n.inputs}")
            want = arity.get(id(n.op))
            if want is None:
                want = arity[id(n.op)] = n.op.n_inputs
            if len(n.inputs) != want:
                raise CompileError(f"LLIR node {i} ({type(n.op).__name__}) has {len(n.inputs)} inputs, needs {want}")
        for label, i in self.outputs.items():
            op = self.nodes[i].op
            if not isinstance(op, Output) or op.label != label:
                raise CompileError(f"LLIR output {label!r} points at {op!r}")

    # -- (de)serialization --------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {
            "nodes": [[type(n.op).__name__, [_enc(v) for v in n.op.fields()], list(n.inputs), n.dtype.value]
                      for n in self.nodes],
            "outputs": self.outputs,
        }  # fmt: skip

    @staticmethod
    def from_json(data: Mapping, op_classes: Mapping[str, type[Op]]) -> LLIRGraph:
        nodes = []
        for name, vals, ins, dt in data["nodes"]:
            op = _dec_op(name, vals, op_classes)
            nodes.append(LNode(op, tuple(int(i) for i in ins), DType(dt)))
        return LLIRGraph(nodes, {str(k): int(v) for k, v in data["outputs"].items()})

    # -- rendering ----------------------------------------------------------------------------------
    def to_dot(self, title: str = "LLIR") -> str:
        out = [f'digraph "{title}" {{', "  node [shape=box, fontname=monospace, fontsize=10];"]
        for i, n in enumerate(self.nodes):
            color = {"Input": "lightblue", "Output": "lightgreen"}.get(type(n.op).__name__, "white")
            label = _dot_escape(f"{i}: {_short(n.op)}\\n{n.dtype.value}")
            out.append(f'  n{i} [label="{label}", style=filled, fillcolor={color}];')
            for k, s in enumerate(n.inputs):
                out.append(f'  n{s} -> n{i} [label="{k}"];')
        out.append("}")
        return "\n".join(out)

    def to_html(self, title: str = "LLIR") -> str:
        rows = "\n".join(
            f"<tr><td>{i}</td><td>{html.escape(type(n.op).__name__)}</td><td>{n.dtype.value}</td>"
            f"<td>{list(n.inputs)}</td><td><code>{html.escape(_op_text(n.op))}</code></td></tr>"
            for i, n in enumerate(self.nodes)
        )
        counts = ", ".join(f"{k}: {v}" for k, v in self.op_counts().items())
        return (
            f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif}td{padding:2px 8px;border-bottom:1px solid #ddd}"
            "code{font-size:11px}</style></head><body>"
            f"<h2>{html.escape(title)}</h2><p>{len(self.nodes)} nodes ({html.escape(counts)}); "
            f"fingerprint <code>{self.fingerprint()}</code></p>"
            f"<table><tr><th>#</th><th>op</th><th>dtype</th><th>inputs</th><th>fields</th></tr>{rows}</table>"
            f"<h3>Graphviz</h3><pre>{html.escape(self.to_dot(title))}</pre></body></html>"
        )

    def save(self, path: str | Path) -> Path:
        """Write `.dot`, `.html` or `.json` (by suffix)."""
        p = Path(path)
        if p.suffix == ".dot":
            p.write_text(self.to_dot())
        elif p.suffix in (".html", ".htm"):
            p.write_text(self.to_html())
        elif p.suffix == ".json":
            p.write_text(json.dumps(self.to_json()))
        else:
            raise CompileError(f"cannot render LLIR as {p.suffix!r}: use .dot, .html or .json")
        return p


@lru_cache(maxsize=1 << 16)
def _op_text(op: Op) -> str:
    """Canonical text of one op (memoized: every candidate of a search re-extracts the same ops)."""
    return f"{type(op).__name__}(" + ", ".join(json.dumps(_enc(v)) for v in op.fields()) + ")"


def _short(op: Op) -> str:
    parts = []
    for (f, s), v in zip(type(op).field_sorts(), op.fields(), strict=True):
        if s == "EList":
            parts.append(f"{f}={list(v)}")
        elif s in ("Expression", "i64", "f64", "bool", "DType"):
            parts.append(f"{f}={v}")
        else:
            parts.append(f"{f}={v!r}")
    return f"{type(op).__name__} " + " ".join(parts)


def _dot_escape(s: str) -> str:
    return s.replace('"', '\\"')


# Expression <-> JSON: the hash-consed (op, args) structure itself, so decoding yields the very
# object the plan held (Expression(op, args) interns; no refolding).
def _enc(v: object) -> object:
    if isinstance(v, Op):  # an inline op (a fused op's root)
        return {"op": [type(v).__name__, [_enc(x) for x in v.fields()]]}
    if isinstance(v, tuple) and v and isinstance(v[0], (FLeaf, FNode)):  # a fused op's arguments
        return fexpr.encode(v, _enc)
    if isinstance(v, Expression):
        if v.op in ("num", "var"):
            return [v.op, v.args[0]]
        return [v.op, *[_enc(a) for a in v.args]]
    if isinstance(v, tuple):
        return {"list": [_enc(x) for x in v]}
    if isinstance(v, DType):
        return {"dtype": v.value}
    if isinstance(v, float):
        return {"f64": repr(v)}
    return v


def _dec_expr(x: list) -> Expression:
    op = x[0]
    if op in ("num", "var"):
        return Expression(op, (x[1],))
    return Expression(op, tuple(_dec_expr(a) for a in x[1:]))


@cache
def _sorts(cls: type[Op]) -> tuple[str, ...]:
    """A class's field sorts (memoized: `field_sorts` resolves type hints, ~1 ms a call)."""
    return tuple(s for _, s in cls.field_sorts())


def _dec_op(name: str, vals: list, op_classes: Mapping[str, type[Op]]) -> Op:
    cls = op_classes[name]
    sorts = _sorts(cls)
    return cls(*[_dec(s, v, op_classes) for s, v in zip(sorts, vals, strict=True)])


def _dec(sort: str, v: object, op_classes: Mapping[str, type[Op]]) -> object:
    if sort == "OpKind":
        return _dec_op(*v["op"], op_classes)  # type: ignore[index]
    if sort == "FList":
        return () if "list" in v else fexpr.decode(v, lambda x: _dec("OpKind", x, op_classes))  # type: ignore[operator]
    if sort == "EList":
        return tuple(_dec_expr(x) for x in v["list"])  # type: ignore[index]
    if sort == "Expression":
        return _dec_expr(v)  # type: ignore[arg-type]
    if sort == "DType":
        return DType(v["dtype"])  # type: ignore[index]
    if sort == "f64":
        return float(v["f64"])  # type: ignore[index]
    if sort == "i64":
        return int(v)  # type: ignore[call-overload]
    if sort == "bool":
        return bool(v)
    return v
