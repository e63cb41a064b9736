"""HLIR op base: frozen dataclass fields double as the op's egglog constructor signature.

Every HLIR op is a frozen dataclass whose class name is its egglog constructor and whose field
order is the constructor's argument order. Its inputs (other nodes' buffers) are not fields: the
graph stores them as an ordered tuple. Each op also carries its exact reference semantics in
numpy (`reference`), run by the reference backend: inputs are flat physical buffers, the result is
a flat contiguous buffer.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from luminal.dtype import DType
from luminal.hlir.fexpr import FArgs  # noqa: F401 (a field type field_sorts resolves)
from luminal.shape.expr import Expression
from luminal.shape.tracker import ShapeTracker, linear_step

EList = tuple[Expression, ...]
Env = Mapping[str, int]

# python field type -> egglog sort
# (a fused op's `Op` field is an inline op term, its `FArgs` field the argument expressions: hlir/fexpr.py)
SORTS = {"Expression": "Expression", "EList": "EList", "DType": "DType", "int": "i64", "str": "String",
         "float": "f64", "bool": "bool", "Op": "OpKind", "FArgs": "FList"}  # fmt: skip


class Op:
    """Base of HLIR (and backend LLIR) ops. Subclasses are frozen dataclasses."""

    n_inputs: ClassVar[int] = 0
    # "IR" ops are graph-level (Input, Output); "OpKind" ops are wrapped as (Op <kind> <inputs>).
    sort_class: ClassVar[str] = "OpKind"

    def __init_subclass__(cls, **kw) -> None:
        """A subclass's own `dim_names` is memoized per op object (`_memo_dim_names`)."""
        super().__init_subclass__(**kw)
        if "dim_names" in cls.__dict__:
            cls.dim_names = _memo_dim_names(cls.__dict__["dim_names"])  # type: ignore[method-assign]

    @classmethod
    def field_sorts(cls) -> list[tuple[str, str]]:
        hints = typing.get_type_hints(cls, globalns={"EList": EList, **globals()})
        out = []
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            t = hints[f.name]
            name = "EList" if t == EList else getattr(t, "__name__", str(t))
            out.append((f.name, SORTS[name]))
        return out

    def fields(self) -> tuple:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))  # type: ignore[arg-type]

    def dim_names(self) -> frozenset[str]:
        """Every dim symbol the op's fields mention (what a compiled launch of it depends on)."""
        out: set[str] = set()
        for v in self.fields():
            for e in v if isinstance(v, tuple) else (v,):
                if isinstance(e, Expression):
                    out |= e.dims()
        return frozenset(out)

    def out_dtype(self, in_dtypes: tuple[DType, ...]) -> DType:
        return in_dtypes[0]

    def out_size(self) -> Expression:
        """Number of elements of the op's (contiguous) output buffer."""
        raise NotImplementedError

    # Aliasing contract (docs/architecture.md, "Aliasing"): an op whose output lives inside one of
    # its inputs' buffers returns (input position, byte offset) here. Runtimes then give the node no
    # buffer of its own: its bytes are the input's bytes from that offset on, and the input's buffer
    # lives as long as the alias does. `inplace` ops also write those bytes (an in-place update);
    # the others only read them (a zero-copy view).
    inplace: ClassVar[bool] = False

    def alias(self) -> tuple[int, Expression] | None:
        return None

    # An in-place op may also overwrite other inputs' buffers (KernelScatterPair: a layer's v cache
    # beside its k cache, the alias): their positions. A node aliasing such an input after the op
    # (KernelAliasAfter) is its new value.
    def also_writes(self) -> tuple[int, ...]:
        return ()

    def reference(self, ins: list[np.ndarray], in_dtypes: tuple[DType, ...], env: Env) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} has no reference semantics")


def _memo_dim_names(fn):
    """`fn` (a `dim_names`) memoized per op object: an op is frozen, so its dim names never change, and
    the compiler asks for them per node of every candidate plan (an unrolled plan repeats its body's op
    objects; a fused op walks its whole body: ~0.4 s of gemma-3-1b's cold CUDA compile on the CPU). Kept
    in the object's __dict__ (dataclass equality, hashing and `replace` see fields only), keyed by
    `fn`, so a subclass's `super().dim_names()` never reads the subclass's answer."""

    @functools.wraps(fn)
    def dim_names(self) -> frozenset[str]:
        memo = self.__dict__.setdefault("_dim_names_memo", {})
        out = memo.get(fn)
        if out is None:
            out = memo[fn] = fn(self)
        return out

    return dim_names


Op.dim_names = _memo_dim_names(Op.dim_names)  # type: ignore[method-assign]


def view(buf: np.ndarray, dims: EList, strides: EList, env: Env) -> np.ndarray:
    """Read a strided view of a flat buffer as an array of the view's logical shape.

    Linear strides (c * z, or 0) give a zero-copy, read-only numpy view; anything else (merged
    non-contiguous axes, z % n tiling) is gathered through the physical index grid."""
    steps = _linear_steps(dims, strides)
    shape = tuple(int(d.evaluate(env)) for d in dims)
    if steps is not None and buf.ndim == 1 and buf.flags.c_contiguous:
        st = [int(c.evaluate(env)) for c in steps]
        span = 1 + sum((n - 1) * c for n, c in zip(shape, st, strict=True)) if all(shape) else 0
        if min(st, default=0) >= 0 and span <= buf.size:
            item = buf.itemsize  # as_strided through same-width uints: it rejects some ml_dtypes (fp8)
            raw = buf.view(f"u{item}")
            out = np.lib.stride_tricks.as_strided(raw, shape, tuple(c * item for c in st), writeable=False)
            return out.view(buf.dtype)
    return buf[ShapeTracker(dims, strides).physical_indices(env)]


@functools.lru_cache(maxsize=65536)
def _linear_steps(dims: EList, strides: EList) -> tuple[Expression, ...] | None:
    """Per-axis element steps when every stride is c * z (c free of z) or 0, else None."""
    out = tuple(linear_step(st) for st in strides)
    return None if any(c is None for c in out) else out  # type: ignore[return-value]


def compute_dtype(dt: DType) -> np.dtype:
    """The numpy type arithmetic on `dt` is done in: 16-bit and 8-bit floats compute in f32."""
    if dt.is_float:
        return np.dtype(np.float64) if dt == DType.f64 else np.dtype(np.float32)
    return dt.np
