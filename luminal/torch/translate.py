"""ATen FX graph -> luminal Graph: one walk over the nodes, one registry lookup per op.

Both frontends meet here: `luminal.torch.compile` (torch.export, then decompositions) and the
`torch.compile` backend (Dynamo, then AOTAutograd) hand over an FX graph of ATen ops whose
placeholders are weights, buffers, user tensors and SymInts. Placeholders become graph inputs
(weights and unmutated buffers persistent), SymInts become dims, each op goes through its handler
(luminal/torch/registry.py), and every result is checked against torch's own metadata for the
node (rank, sizes, dtype) so a handler bug is a CompileError here, not a wrong number later.

Input mutations (a KV cache's `index_copy_`, kept in the graph by AOTAutograd as a final
`copy_(input, new_value)`; torch.export's BUFFER_MUTATION outputs) become luminal *state*: the input
is persistent and `new_value` is an output named like it, so the runtime updates the bound memory
itself -- in place when the plan's scatter writes into the input (docs/engine.md, "State").
"""

from __future__ import annotations

import logging
import operator
from dataclasses import dataclass, field

import torch
import torch.fx
import torch.utils._pytree as pytree

import luminal as lm
from luminal.dtype import DType
from luminal.errors import CompileError, LuminalError
from luminal.shape.expr import Expression
from luminal.shape.tracker import ShapeTracker
from luminal.torch import registry
from luminal.torch.symbolic import to_expr
from luminal.torch.tensors import lm_dtype

log = logging.getLogger(__name__)


class UnsupportedOpError(CompileError):
    """An ATen op the translator has no handler for (or cannot translate with these arguments)."""


@dataclass
class InputSpec:
    """One placeholder: a tensor input (`name`), a SymInt (`expr`), or a constant Python value."""

    kind: str  # "tensor" | "sym" | "const"
    name: str | None = None
    persistent: bool = False
    expr: Expression | None = None
    shape: tuple[Expression, ...] = ()
    state: bool = False  # mutated: the output of the same name is its next value
    dtype: torch.dtype | None = None


@dataclass
class OutputSpec:
    """One graph output: a luminal output `name` of torch dtype `dtype`, a symbolic int, or None."""

    kind: str  # "tensor" | "sym" | "none" | "const" | "input" (the mutated input `index`, updated)
    name: str | None = None
    dtype: torch.dtype | None = None
    expr: Expression | None = None
    value: object = None
    shape: tuple[Expression, ...] = ()
    index: int = -1


@dataclass
class Translation:
    graph: lm.Graph
    inputs: list[InputSpec]
    outputs: list[OutputSpec]
    ranges: dict[str, tuple[int, int | None]] = field(default_factory=dict)  # dim -> (min, max)
    aten_ops: set[str] = field(default_factory=set)  # the ATen overloads this graph used
    constants: dict[str, torch.Tensor] = field(default_factory=dict)  # get_attr tensors, bound persistent
    state: dict[str, int] = field(default_factory=dict)  # mutated input name -> its placeholder index


@dataclass
class Pending:
    """A tensor placeholder or constant not read yet: it becomes a graph input at its first read."""

    make: object  # () -> GraphTensor


class Values(dict):
    """FX node -> its translated value. Inputs are created where an op first reads them, not with the
    placeholders that open an FX graph: a layer's weights and cache are then made inside the layer,
    as a model built with luminal.nn makes them, and the loop roller (luminal/egraph/roll.py) sees
    every layer as the same window of nodes (with every input made up front, each layer read other
    nodes from outside and no two layers were alike)."""

    def __getitem__(self, node):
        v = super().__getitem__(node)
        if isinstance(v, Pending):
            v = v.make()
            self[node] = v
        return v


def where_from(node: torch.fx.Node) -> str:
    """The user's source line a node came from (the last frame of its stack trace)."""
    st = node.meta.get("stack_trace") or ""
    lines = [ln.strip() for ln in st.strip().splitlines() if ln.strip()]
    frames = [i for i, ln in enumerate(lines) if ln.startswith("File ")]
    if not frames:
        return "(no source location recorded)"
    i = frames[-1]
    code = lines[i + 1] if i + 1 < len(lines) and not lines[i + 1].startswith("File ") else ""
    return f"{lines[i]}: {code}" if code else lines[i]


def _meta(node) -> object:
    return node.meta.get("val", node.meta.get("example_value")) if isinstance(node, torch.fx.Node) else node


class Missing:
    """An output of a multi-output op that is not translated (SDPA's logsumexp, ...): an error if used."""

    def __init__(self, what: str, node: torch.fx.Node):
        self._what, self._node = what, node

    def __getattr__(self, name):
        raise UnsupportedOpError(f"{self._what} is not translated but is used (at {where_from(self._node)})")


@dataclass
class Call:
    """The node being translated, as its handler sees it."""

    node: torch.fx.Node
    graph: lm.Graph
    env: dict = field(default_factory=dict)  # the translated value of every earlier node
    fixed: dict = field(default_factory=dict)  # dim name -> the value a handler specialized it to
    literal: dict = field(default_factory=dict)  # torch dims translated as numbers (see `translate`)

    def specialize(self, dim: Expression, value: int) -> None:
        """Build this op for `dim == value` only (a rule needs a literal): the Program then refuses
        any other value of the dim (its range becomes [value, value]). A torch dim specialized
        here is a number in the final translation (`translate` runs again with it as a literal)."""
        if dim.is_num and int(dim) == value:
            return
        name = str(dim.args[0]) if dim.op == "var" else None
        if name is None or self.fixed.get(name, value) != value:
            raise CompileError(f"{self.node.target}: cannot specialize {dim} to {value}")
        self.fixed[name] = value

    def value_of(self, node):
        """The translated value of an earlier FX node (for handlers that look at their inputs' producers)."""
        return self.env[node] if isinstance(node, torch.fx.Node) else node

    @property
    def meta(self):
        return _meta(self.node)

    @property
    def dtype(self) -> DType:
        """The luminal dtype of the (first) tensor output, as torch computed it."""
        m = self.meta
        m = m[0] if isinstance(m, (tuple, list)) else m
        return lm_dtype(m.dtype)

    @property
    def shape(self) -> tuple[Expression, ...]:
        m = self.meta
        m = m[0] if isinstance(m, (tuple, list)) else m
        return tuple(self.expr(d) for d in m.shape)

    def expr(self, x) -> Expression:
        """A torch size (int, SymInt) as a luminal Expression, the specialized dims as numbers."""
        return to_expr(x, self.literal)

    def shape_of(self, i: int) -> tuple[Expression, ...]:
        return tuple(self.expr(d) for d in self.meta[i].shape)

    def arg_meta(self, i: int):
        a = self.node.args[i] if i < len(self.node.args) else None
        return _meta(a)

    def common_dtype(self, *positions: int) -> DType:
        """torch's promoted dtype of the listed arguments (tensors and scalars), e.g. for comparisons."""
        from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

        vals = [v for v in (self.arg_meta(i) for i in positions) if v is not None]
        vals = [1 if isinstance(v, torch.SymInt) else 1.0 if isinstance(v, torch.SymFloat) else v for v in vals]
        _, dt = elementwise_dtypes(*vals, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
        return lm_dtype(dt)

    def tensor(self, x, dtype: DType | None = None):
        """x as a GraphTensor of `dtype` (default: the output dtype): casts tensors, lifts scalars."""
        dt = dtype or self.dtype
        if isinstance(x, lm.GraphTensor):
            return x.cast(dt)
        if isinstance(x, Expression):
            t = self.graph.iota(x, ())
            return t.cast(dt)
        if isinstance(x, bool) and dt != DType.bool:
            x = int(x)
        if isinstance(x, float) and not dt.is_float:
            return self.graph.constant(x, DType.f64).cast(dt)
        return self.graph.constant(x, dt)

    def fix(self, t, dims):
        """t with its view's dims spelled as `dims` (torch's sizes for the same values; luminal's own
        symbolic slice arithmetic is correct but unsimplified, e.g. a select's min/max length)."""
        return t.with_view(ShapeTracker(tuple(self.expr(d) for d in dims), t.view.strides))

    def unsupported(self, why: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"{self.node.target}: {why} (node {self.node.name}, at {where_from(self.node)})")


class Translator:
    """Walks one FX graph. `input_kinds[i]` says how placeholder i is bound (see InputSpec)."""

    def __init__(self, gm: torch.fx.GraphModule, persistent: set[int] | None = None, names: list[str] | None = None,
                 state_outputs: dict[int, int] | None = None, literal: dict[str, int] | None = None):  # fmt: skip
        self.gm = gm
        self.literal = dict(literal or {})  # torch dims translated as these numbers
        self.g = lm.Graph()
        self.names = names
        places = [n for n in gm.graph.nodes if n.op == "placeholder"]
        # mutated inputs: copy_(placeholder, value) nodes, and outputs the caller says update one
        self.copies = {n: places.index(n.args[0]) for n in gm.graph.nodes if _is_input_copy(n)}
        self.state_outputs = dict(state_outputs or {})
        self.mutated = set(self.copies.values()) | set(self.state_outputs.values())
        self.persistent = set(persistent or ()) | self.mutated
        self.state: dict[int, object] = {}  # placeholder index -> its next value (a GraphTensor)
        self.env = Values()
        self.inputs: list[InputSpec] = []
        self.outputs: list[OutputSpec] = []
        self.used: set[str] = set()
        self.constants: dict[str, torch.Tensor] = {}
        self.handlers = registry.load()
        self.fixed: dict[str, int] = {}  # dims specialized by a handler (Call.specialize)

    def run(self) -> Translation:
        placeholder = 0
        for node in self.gm.graph.nodes:
            try:
                if node.op == "placeholder":
                    self.env[node] = self._placeholder(node, placeholder)
                    placeholder += 1
                elif node.op == "get_attr":
                    self.env[node] = self._attr(node)
                elif node.op == "call_function":
                    self.env[node] = self._call(node)
                elif node.op == "output":
                    self._output(node)
                else:
                    raise UnsupportedOpError(f"FX node kind {node.op} ({node.target}) at {where_from(node)}")
            except LuminalError as e:
                if isinstance(e, UnsupportedOpError) or "(node " in str(e):
                    raise
                raise type(e)(f"{e} (ATen {node.target}, node {node.name}, at {where_from(node)})") from e
        for node in list(self.env):  # an input no op reads is still an input of the graph
            _ = self.env[node]
        names = {}
        for i, value in self.state.items():  # state: an output named like the input is its next value
            name = self.inputs[i].name
            value.output(name)
            names[name] = i
        ranges = {d: (v, v) for d, v in {**self.literal, **self.fixed}.items()}
        return Translation(self.g, self.inputs, self.outputs, ranges, aten_ops=self.used, constants=self.constants,
                           state=names)  # fmt: skip

    # -- placeholders and constants ---------------------------------------------------------------
    def _placeholder(self, node: torch.fx.Node, i: int):
        val = _meta(node)
        # the specs keep torch's dims (the Program solves them from the arguments and refuses a
        # specialized dim's other values by name); the graph sees the specialized ones as numbers
        if isinstance(val, torch.SymInt):
            self.inputs.append(InputSpec("sym", expr=to_expr(val)))
            return self._expr(val)
        if isinstance(val, torch.Tensor):
            name = self.names[i] if self.names else node.name
            shape = tuple(to_expr(d) for d in val.shape)
            keep = i in self.persistent
            self.inputs.append(InputSpec("tensor", name, keep, shape=shape, state=i in self.mutated, dtype=val.dtype))
            dims = tuple(self._expr(d) for d in val.shape)
            return Pending(lambda: self._input(name, dims, lm_dtype(val.dtype), keep))
        self.inputs.append(InputSpec("const"))
        return val

    def _attr(self, node: torch.fx.Node):
        val = operator.attrgetter(node.target)(self.gm)
        if not isinstance(val, torch.Tensor):
            return val
        # a tensor constant of the graph: a persistent input the Program binds itself (not an argument)
        name = f"const.{node.target}"
        self.constants[name] = val
        return Pending(lambda: self._input(name, tuple(val.shape), lm_dtype(val.dtype), True))

    def _input(self, name: str, dims: tuple, dtype: DType, persistent: bool):
        t = self.g.tensor(name, dims, dtype)
        return t.persist() if persistent else t

    # -- ops ----------------------------------------------------------------------------------------
    def _value(self, a):
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self._value(x) for x in a)
        if isinstance(a, torch.SymInt):
            return self._expr(a)
        return a

    def _expr(self, x) -> Expression:
        return to_expr(x, self.literal)

    def _call(self, node: torch.fx.Node):
        target = node.target
        val = _meta(node)
        if target is operator.getitem:
            seq, k = self._value(node.args[0]), node.args[1]
            out = seq[k]
            return out if out is not None else Missing(f"output {k} of {node.args[0].target}", node)
        if (
            isinstance(val, (torch.SymInt, int))
            and not isinstance(val, bool)
            and not isinstance(target, torch._ops.OpOverload)
        ):
            return self._expr(val)  # symbolic-int arithmetic (operator.mul, sym_size, ...): torch already folded it
        name = str(target)
        if isinstance(val, torch.SymInt) and name in (
            "aten.sym_size.int",
            "aten.sym_numel.default",
            "aten.sym_stride.int",
        ):
            return self._expr(val)
        if name in registry.IGNORED:
            return None
        if node in self.copies:  # copy_(input, value): the input's next value (state), in the input's dtype
            i = self.copies[node]
            if i in self.state:
                raise UnsupportedOpError(f"input {self.inputs[i].name!r} is mutated twice (at {where_from(node)})")
            c = Call(node, self.g, self.env, self.fixed, self.literal)
            out = self._check(c, self.handlers["aten.copy.default"].fn(c, *self._value(tuple(node.args))), val)
            self.state[i] = out
            return out
        h = self.handlers.get(name)
        if h is None:
            raise UnsupportedOpError(
                f"luminal has no translation for the ATen op {name} (target {target!r}) at {where_from(node)}; "
                "see docs/torch.md for the supported ops, or compile with fallback=True to run this graph eagerly"
            )
        self.used.add(name)
        c = Call(node, self.g, self.env, self.fixed, self.literal)
        out = h.fn(c, *self._value(tuple(node.args)), **{k: self._value(v) for k, v in node.kwargs.items()})
        return self._check(c, out, val)

    def _check(self, c: Call, out, val):
        """Align a handler's result with torch's metadata: dtype cast, symbolic dims spelled torch's way."""
        if isinstance(val, (tuple, list)):
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            return tuple(self._check(c, o, v) if o is not None else None for o, v in zip(outs, val, strict=False))
        if not isinstance(val, torch.Tensor):
            return out
        if not isinstance(out, lm.GraphTensor):
            out = c.tensor(out, lm_dtype(val.dtype))
        want = tuple(self._expr(d) for d in val.shape)
        if len(want) != out.ndim:
            raise CompileError(f"{c.node.target}: translated rank {out.ndim} {list(out.shape)} != torch's {list(want)}")
        for got, w in zip(out.shape, want, strict=True):
            if got is not w and (got.is_num and w.is_num):
                raise CompileError(f"{c.node.target}: translated shape {list(out.shape)} != torch's {list(want)}")
        if out.shape != want:  # same sizes, spelled differently (min/max folds): use torch's spelling
            out = out.with_view(ShapeTracker(want, out.view.strides))
        dt = lm_dtype(val.dtype)
        return out.cast(dt) if out.dtype != dt else out

    def _output(self, node: torch.fx.Node) -> None:
        for k, a in enumerate(pytree.tree_leaves(node.args[0], is_leaf=lambda x: x is None)):
            v = self._value(a)
            if isinstance(v, Missing):
                _ = v.dtype  # raises: an untranslated output is returned
            if k in self.state_outputs or a in self.copies:  # the mutated input itself, updated
                i = self.state_outputs[k] if k in self.state_outputs else self.copies[a]
                if i in self.state and self.state[i] is not v:
                    raise UnsupportedOpError(f"input {self.inputs[i].name!r} is mutated twice")
                self.state[i] = v
                self.outputs.append(OutputSpec("input", index=i))
            elif v is None:
                self.outputs.append(OutputSpec("none"))
            elif isinstance(v, lm.GraphTensor):
                name = f"out{k}"
                v.output(name)
                shape = tuple(to_expr(d) for d in _meta(a).shape)
                self.outputs.append(OutputSpec("tensor", name, dtype=_meta(a).dtype, shape=shape))
            elif isinstance(v, Expression):
                self.outputs.append(OutputSpec("sym", expr=v))
            else:
                self.outputs.append(OutputSpec("const", value=v))


def _is_input_copy(node: torch.fx.Node) -> bool:
    return (
        node.op == "call_function"
        and node.target is torch.ops.aten.copy_.default
        and isinstance(node.args[0], torch.fx.Node)
        and node.args[0].op == "placeholder"
    )


def translate(gm: torch.fx.GraphModule, persistent: set[int] | None = None, names: list[str] | None = None,
              state_outputs: dict[int, int] | None = None) -> Translation:  # fmt: skip
    """Translate `gm` (ATen ops) into a luminal Graph plus the binding specs the runtime needs.
    `persistent`: placeholder indices bound once; `state_outputs`: graph output k is the next value
    of placeholder i (torch.export's buffer mutations; AOTAutograd's `copy_` nodes are found here).

    A torch dim a handler specialized (a static cache's capacity: cache_attention.py) is a number in
    the graph: the walk runs again with those dims as literals. Dynamo gives each layer's cache its
    own capacity symbol, so with the symbols left in, no two layers were the same graph and the
    compiler could not roll them into one body (session 8: a 16-layer HF decode compiled as 16
    distinct layers). The Program still solves the symbols from the arguments and refuses other
    values of them by name."""
    tr = Translator(gm, persistent, names, state_outputs).run()
    torch_dims = {d for spec in tr.inputs for e in (*spec.shape, *((spec.expr,) if spec.expr is not None else ()))
                  for d in e.dims()}  # fmt: skip
    literal = {d: lo for d, (lo, hi) in tr.ranges.items() if lo == hi and d in torch_dims}
    if not literal:
        return tr
    log.info("luminal: dims %s specialized; translated again with them as numbers", literal)
    again = Translator(gm, persistent, names, state_outputs, literal).run()
    again.ranges = {**tr.ranges, **again.ranges}
    return again
