"""Graph: the HLIR DAG a user builds through GraphTensor, and the entry point to `compile`.

Nodes are appended in creation order, so a node's inputs always come before it and the node list
is a topological order. Each node holds one HLIR op, its ordered input node ids, its output dtype
and the number of elements of its (contiguous) output buffer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from luminal.dtype import DType, to_dtype
from luminal.errors import InputError, ShapeError
from luminal.hlir import Constant, Input, Iota, MaxReduce, Op, Output
from luminal.shape.expr import ZERO, Expression, ExprLike, dim, expr
from luminal.shape.tracker import ShapeTracker

if TYPE_CHECKING:
    from luminal.compiled import CompiledModel
    from luminal.tensor import GraphTensor


def shape_tuple(shape, what: str) -> tuple:
    """A shape given as one dim or a sequence of dims, as a tuple (ShapeError otherwise)."""
    if isinstance(shape, (int, np.integer, str, Expression)) and not isinstance(shape, bool):
        return (shape,)
    if not isinstance(shape, (tuple, list)):
        raise ShapeError(f"{what}: a shape is a tuple of ints and dim names, got {shape!r}")
    return tuple(shape)


def empty_max_message(where: str) -> str:
    return (f"max/min over {where}: an empty max has no value, so luminal raises like numpy "
            "(max, min, argmax, argmin, softmax and log_softmax reduce with a max; docs/numerics.md)")  # fmt: skip


@dataclass(frozen=True)
class Node:
    op: Op
    inputs: tuple[int, ...]
    dtype: DType
    size: Expression  # elements in the output buffer (Input: its declared shape's product)


@dataclass
class Graph:
    """A static tensor program. Build it with `tensor`, GraphTensor ops and `output`, then `compile`."""

    nodes: list[Node] = field(default_factory=list)
    inputs: dict[str, int] = field(default_factory=dict)  # name -> Input node
    input_shapes: dict[str, tuple[Expression, ...]] = field(default_factory=dict)
    outputs: dict[str, int] = field(default_factory=dict)  # name -> Output node
    output_shapes: dict[str, tuple[Expression, ...]] = field(default_factory=dict)
    persistent: set[str] = field(default_factory=set)
    _consts: dict = field(default_factory=dict, repr=False)

    # -- building -------------------------------------------------------------------------------
    def add(self, op: Op, inputs: Sequence[int], dtype: DType, size: Expression) -> int:
        if isinstance(op, MaxReduce) and op.iters is ZERO:
            raise ShapeError(empty_max_message(f"an axis of size 0 (result shape {list(op.shape)})"))
        self.nodes.append(Node(op, tuple(inputs), dtype, size))
        return len(self.nodes) - 1

    def node(self, op: Op, inputs: Sequence[GraphTensor], shape: Sequence[ExprLike]) -> GraphTensor:
        """Add a compute node over `inputs` (whose views the op already baked in); contiguous result."""
        from luminal.tensor import GraphTensor

        dts = tuple(t.dtype for t in inputs)
        tr = ShapeTracker.new(tuple(shape))
        nid = self.add(op, [t.id for t in inputs], op.out_dtype(dts), op.out_size())
        return GraphTensor(self, nid, tr, self.nodes[nid].dtype)

    def tensor(self, name: str, shape: Sequence[ExprLike], dtype: object = DType.f32) -> GraphTensor:
        """A named input of `shape` (ints and dim names such as 's')."""
        from luminal.tensor import GraphTensor

        if not isinstance(name, str) or not name:
            raise InputError(f"input names must be non-empty strings, got {name!r}")
        if name in self.inputs:
            raise InputError(f"an input named {name!r} already exists in this graph")
        dims = tuple(dim(d) if isinstance(d, str) else expr(d) for d in shape_tuple(shape, f"input {name!r}"))
        dt = to_dtype(dtype)
        tr = ShapeTracker.new(dims)
        nid = self.add(Input(name, dt), (), dt, tr.n_elements())
        self.inputs[name] = nid
        self.input_shapes[name] = dims
        return GraphTensor(self, nid, tr, dt)

    def constant(self, value: float | int | bool, dtype: object = DType.f32) -> GraphTensor:
        """A scalar constant tensor (shape ()), exact in `dtype` (hlir Constant.of: floats round once,
        integers out of the dtype's range raise DTypeError)."""
        from luminal.tensor import GraphTensor

        dt = to_dtype(dtype)
        if isinstance(value, np.generic):
            value = value.item()
        key = (type(value).__name__, repr(value), dt)  # repr: -0.0 and 0.0 are different constants
        if key in self._consts:
            return self._consts[key]
        nid = self.add(Constant.of(value, dt), (), dt, expr(1))
        self._consts[key] = t = GraphTensor(self, nid, ShapeTracker.new(()), dt)
        return t

    def iota(self, index: ExprLike, shape: Sequence[ExprLike]) -> GraphTensor:
        """i32 tensor of `shape` whose element at flat index z is `index(z)` (an Expression in z)."""
        from luminal.tensor import GraphTensor

        tr = ShapeTracker.new(shape_tuple(shape, "iota"))
        n = tr.n_elements()
        nid = self.add(Iota(expr(index), n), (), DType.i32, n)
        return GraphTensor(self, nid, tr, DType.i32)

    def arange(self, n: ExprLike) -> GraphTensor:
        """i32 [0, 1, .., n-1]."""
        return self.iota("z", (n,))

    def full(self, shape: Sequence[ExprLike], value: float, dtype: object = DType.f32) -> GraphTensor:
        return self.constant(value, dtype).expand(*shape_tuple(shape, "full"))

    def zeros(self, shape: Sequence[ExprLike], dtype: object = DType.f32) -> GraphTensor:
        return self.full(shape, 0, dtype)

    def ones(self, shape: Sequence[ExprLike], dtype: object = DType.f32) -> GraphTensor:
        return self.full(shape, 1, dtype)

    def mark_output(self, t: GraphTensor, name: str | None) -> GraphTensor:
        if name is not None and (not isinstance(name, str) or not name):
            raise InputError(f"output(name): the name must be a non-empty string or None, got {name!r}")
        name = name if name is not None else f"out{len(self.outputs)}"
        if name in self.outputs:
            raise InputError(f"an output named {name!r} already exists in this graph")
        src = t.contiguous()
        nid = self.add(Output(name), (src.id,), src.dtype, src.view.n_elements())
        self.outputs[name] = nid
        self.output_shapes[name] = src.shape
        return src

    def max_lengths(self) -> list[Expression]:
        """The distinct symbolic lengths of the MaxReduces the outputs depend on: `run` checks none is 0."""
        live, todo = set(), list(self.outputs.values())
        while todo:
            i = todo.pop()
            if i not in live:
                live.add(i)
                todo.extend(self.nodes[i].inputs)
        found = {self.nodes[i].op.iters for i in live if isinstance(self.nodes[i].op, MaxReduce)}
        return sorted((n for n in found if not n.is_num), key=lambda n: n.key)

    def dims(self) -> frozenset[str]:
        """Every dim symbol the graph's inputs and nodes use."""
        out: set[str] = set()
        for shp in self.input_shapes.values():
            for d in shp:
                out |= d.dims()
        for n in self.nodes:
            out |= n.size.dims()
        return frozenset(out)

    # -- compiling ------------------------------------------------------------------------------
    def compile(self, backend: str = "auto", **options) -> CompiledModel:
        """Compile for `backend` ("reference" | "cuda" | "auto": cuda when a GPU is usable)."""
        from luminal.compiled import compile_graph

        return compile_graph(self, backend, **options)

    def __repr__(self) -> str:
        return f"Graph({len(self.nodes)} nodes, inputs={list(self.inputs)}, outputs={list(self.outputs)})"
