"""`luminal.torch.compile`: torch.export a module, decompose to ATen (SDPA kept whole), translate,
compile with luminal, and return a callable with the module's signature.

Weights and buffers are not copied into an artifact: the returned object reads them from the module
itself (numpy views of their memory, or their device addresses on CUDA, bound once as persistent
inputs). Buffers and user inputs the forward mutates (a KV cache updated with `index_copy_`,
torch.export's BUFFER_MUTATION / USER_INPUT_MUTATION outputs) are luminal state: the Program
updates the tensor itself (in place on CUDA, copied back on the host path), so the module's state
and the caller's tensors match eager execution.
"""

from __future__ import annotations

import inspect
import logging

import torch
import torch.utils._pytree as pytree
from torch.export import Dim, ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from luminal.errors import InputError
from luminal.torch.program import Program
from luminal.torch.translate import translate

log = logging.getLogger(__name__)

_SDPA = ("scaled_dot_product", "_scaled_dot_product")


def decompositions() -> dict:
    """torch.export's core-ATen decomposition table, minus scaled_dot_product_attention (kept whole)."""
    table = torch.export.default_decompositions()
    for op in list(table.keys()):
        if any(s in str(op) for s in _SDPA):
            del table[op]
    return table


def _dynamic_shapes(module, args: tuple, kwargs: dict, dynamic):
    """`dynamic`: None/False static; True/"auto" every tensor dim Dim.AUTO; otherwise torch.export's
    own `dynamic_shapes` spec, passed through."""
    if dynamic in (None, False):
        return None
    if dynamic is True or dynamic == "auto":

        def spec(x):
            if isinstance(x, torch.Tensor):
                return {i: Dim.AUTO for i in range(x.ndim)}
            return pytree.tree_map(spec, x) if isinstance(x, (list, tuple, dict)) else None

        bound = inspect.signature(module.forward).bind(*args, **kwargs)
        return {k: spec(v) for k, v in bound.arguments.items()}
    return dynamic


class CompiledModule:
    """The compiled forward: call it like the module; returns what the module returns (as tensors)."""

    def __init__(self, module: torch.nn.Module, ep: ExportedProgram, program: Program):
        self.module, self.ep, self.program = module, ep, program
        sig = ep.graph_signature
        self._sources: list = []  # per placeholder: ("state", tensor getter) | ("user", k)
        self._writeback: list = []  # per output: None | ("state", name) | ("user", input name)
        user_names = [s.arg.name for s in sig.input_specs if s.kind == InputKind.USER_INPUT]
        for s in sig.input_specs:
            if s.kind in (InputKind.PARAMETER, InputKind.BUFFER):
                self._sources.append(("state", s.target))
            elif s.kind == InputKind.CONSTANT_TENSOR:
                self._sources.append(("const", s.target))
            elif s.kind == InputKind.USER_INPUT:
                self._sources.append(("user", user_names.index(s.arg.name)))
            else:
                raise InputError(f"torch.export input kind {s.kind} is not supported by luminal.torch.compile")
        for s in sig.output_specs:
            if s.kind == OutputKind.BUFFER_MUTATION:
                self._writeback.append(("state", s.target))
            elif s.kind == OutputKind.USER_INPUT_MUTATION:
                self._writeback.append(("user", user_names.index(s.target)))
            else:
                self._writeback.append(None)

    @property
    def stats(self) -> dict:
        return self.program.stats

    def _state(self, name: str) -> torch.Tensor:
        try:
            return self.module.get_parameter(name)
        except AttributeError:
            return self.module.get_buffer(name)

    def __call__(self, *args, **kwargs):
        flat, spec = pytree.tree_flatten((args, kwargs))
        if spec != self.ep.call_spec.in_spec:
            raise InputError(f"arguments {spec} do not match the compiled signature {self.ep.call_spec.in_spec}")
        feed = []
        for kind, ref in self._sources:
            if kind == "state":
                feed.append(self._state(ref))
            elif kind == "const":
                feed.append(self.ep.constants[ref])
            else:
                feed.append(flat[ref])
        outs = self.program(*feed)
        user = []
        with torch.no_grad():
            for wb, val in zip(self._writeback, outs, strict=True):
                if wb is None:
                    user.append(val)
                elif wb[0] == "state":
                    target = self._state(wb[1])
                    if val is not target:  # the Program updated the buffer itself (luminal state)
                        target.copy_(val)
                elif val is not flat[wb[1]]:
                    flat[wb[1]].copy_(val)
        return pytree.tree_unflatten(user, self.ep.call_spec.out_spec)


def compile(module, example_inputs, dynamic=None, backend: str = "auto", example_kwargs: dict | None = None,
            **options) -> CompiledModule:  # fmt: skip
    """Export `module` at `example_inputs`, translate the ATen graph and compile it with luminal.

    dynamic: None (static shapes), True / "auto" (every tensor dim symbolic: one compile serves every
    size in torch's inferred range), or a torch.export `dynamic_shapes` spec, e.g.
    `({1: Dim("s", min=1, max=512)},)`. backend: "reference" | "cuda" | "auto". Other options go to
    `Graph.compile` (search_budget, seed, ...).
    """
    if not isinstance(module, torch.nn.Module):
        module = _FnModule(module)
        if isinstance(dynamic, (tuple, list)):  # forward(*args): the spec of the one `args` parameter
            dynamic = (tuple(dynamic),)
    args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    kwargs = dict(example_kwargs or {})
    with torch.no_grad():
        ep = torch.export.export(module, args, kwargs, dynamic_shapes=_dynamic_shapes(module, args, kwargs, dynamic),
                                 strict=False)  # fmt: skip
        ep = ep.run_decompositions(decompositions())
    sig = ep.graph_signature
    mutated = set(sig.buffers_to_mutate.values())
    persistent, names, buffers, users = set(), [], {}, {}
    for i, s in enumerate(sig.input_specs):
        names.append(s.target if s.target is not None else s.arg.name)
        if s.kind == InputKind.BUFFER:
            buffers[s.target] = i
        if s.kind == InputKind.USER_INPUT:
            users[s.arg.name] = i
        if s.kind in (InputKind.PARAMETER, InputKind.CONSTANT_TENSOR) or (
            s.kind == InputKind.BUFFER and s.target not in mutated
        ):
            persistent.add(i)
    # a buffer or user-input mutation output is the next value of that placeholder: luminal state
    # (bound by address on CUDA and updated there -- a KV cache passed as an argument is not
    # copied in and out each call)
    state = {k: buffers[s.target] for k, s in enumerate(sig.output_specs) if s.kind == OutputKind.BUFFER_MUTATION}
    state |= {k: users[s.target] for k, s in enumerate(sig.output_specs) if s.kind == OutputKind.USER_INPUT_MUTATION}
    tr = translate(ep.graph_module, persistent, names, state)
    tr.ranges = {**_ranges(ep), **tr.ranges}  # a handler's specialized dims stay fixed
    return CompiledModule(module, ep, Program(tr, backend, **options))


def _ranges(ep: ExportedProgram) -> dict[str, tuple[int, int | None]]:
    out = {}
    for sym, vr in ep.range_constraints.items():
        name = getattr(sym, "name", None)
        if name is None:
            continue
        lo = int(vr.lower) if vr.lower.is_Integer else 0
        hi = int(vr.upper) if vr.upper.is_Integer else None
        out[name] = (lo, hi)
    return out


class _FnModule(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args, **kwargs):
        return self.fn(*args, **kwargs)
