"""Graph endpoints and sources: Input, Output, Constant, Iota, and the dtype conversion Cast."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from luminal.dtype import DType
from luminal.hlir.op import EList, Op, view
from luminal.shape.expr import ONE, Expression, prod


@dataclass(frozen=True)
class Input(Op):
    """A named user buffer (activations, weights, caches)."""

    label: str
    dtype: DType
    sort_class: ClassVar[str] = "IR"

    def out_dtype(self, in_dtypes):
        return self.dtype


@dataclass(frozen=True)
class Output(Op):
    """Marks its (contiguous) input as the observable output `label`."""

    label: str
    n_inputs: ClassVar[int] = 1
    sort_class: ClassVar[str] = "IR"

    def reference(self, ins, in_dtypes, env):
        return ins[0]


@dataclass(frozen=True)
class Constant(Op):
    """A one-element f32 buffer."""

    value: float

    def out_dtype(self, in_dtypes):
        return DType.f32

    def out_size(self) -> Expression:
        return ONE

    def reference(self, ins, in_dtypes, env):
        return np.array([self.value], np.float32)


@dataclass(frozen=True)
class Iota(Op):
    """i32 buffer of `length` elements, element i = expr(z = i) (dims resolved)."""

    expr: Expression
    length: Expression

    def out_dtype(self, in_dtypes):
        return DType.i32

    def out_size(self) -> Expression:
        return self.length

    def reference(self, ins, in_dtypes, env):
        n = int(self.length.evaluate(env))
        v = self.expr.evaluate({**env, "z": np.arange(n, dtype=np.int64)})
        return np.broadcast_to(np.asarray(v, np.int64), (n,)).astype(np.int32)


def cast_array(x: np.ndarray, src: DType, dst: DType) -> np.ndarray:
    """Exact conversion semantics (docs/numerics.md): float->int truncates and saturates (NaN -> 0),
    int->int wraps, anything->bool is `!= 0`, bool->number is 0/1, to 16/8-bit floats rounds to
    nearest even."""
    if dst == DType.bool:
        return x != 0
    if src.is_float and dst.is_int:
        info = np.iinfo(dst.np)
        f = np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=np.inf, neginf=-np.inf))
        out = np.clip(f, float(info.min), float(info.max)).astype(dst.np)
        return np.where(f >= float(info.max), info.max, np.where(f <= float(info.min), info.min, out)).astype(dst.np)
    if src.is_int and dst.is_int:
        return x.astype(np.int64).astype(dst.np) if src == DType.u8 else x.astype(dst.np)
    if dst in (DType.f8e4m3, DType.f8e5m2) or src in (DType.f8e4m3, DType.f8e5m2):
        return x.astype(np.float32).astype(dst.np)
    return x.astype(dst.np)


@dataclass(frozen=True)
class Cast(Op):
    """Elementwise dtype conversion of a view into a contiguous buffer."""

    shape: EList
    strides: EList
    dtype: DType
    n_inputs: ClassVar[int] = 1

    def out_dtype(self, in_dtypes):
        return self.dtype

    def out_size(self) -> Expression:
        return prod(self.shape)

    def reference(self, ins, in_dtypes, env):
        x = view(ins[0], self.shape, self.strides, env).reshape(-1)
        with np.errstate(all="ignore"):
            return cast_array(x, in_dtypes[0], self.dtype)
