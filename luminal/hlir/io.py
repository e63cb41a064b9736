"""Graph endpoints and sources: Input, Output, Constant, Iota, and the dtype conversion Cast."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from luminal.dtype import DType
from luminal.errors import DTypeError
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
    """A one-element buffer of `dtype` holding a value exact in that dtype (docs/numerics.md).

    Float dtypes: `value` (an f64, which holds every f16/bf16/f32/fp8 value exactly) is the value,
    already rounded to the dtype; `exact` is 0. Integer and bool dtypes: `exact` is the integer
    (egglog i64: exact beyond 2^53) and `value` its nearest f64, for reading and for rules that
    match values. Build constants with `Constant.of`, which rounds and range-checks."""

    value: float
    dtype: DType
    exact: int = 0

    @classmethod
    def of(cls, value: object, dtype: DType) -> Constant:
        """The constant `value` in `dtype`: floats round to nearest even (beyond the range: ±inf, like
        numpy); integers must be whole and in the dtype's range, else DTypeError (numpy raises
        OverflowError); bool takes 0/1."""
        if isinstance(value, np.generic):
            value = value.item()
        if not isinstance(value, (int, float)):
            raise DTypeError(f"constant: {value!r} ({type(value).__name__}) is not a number: give an int/float/bool")
        if dtype.is_float:
            try:
                wide = float(value)
            except OverflowError:
                raise DTypeError(f"constant {value} is beyond the range of every float dtype") from None
            with np.errstate(all="ignore"):
                return cls(float(cast_array(np.array([wide]), DType.f64, dtype)[0]), dtype)
        if isinstance(value, float) and not value.is_integer():
            raise DTypeError(f"constant {value!r} is not a whole number but the dtype is {dtype}")
        n = int(value)
        lo, hi = (0, 1) if dtype == DType.bool else (int(np.iinfo(dtype.np).min), int(np.iinfo(dtype.np).max))
        if not lo <= n <= hi:
            raise DTypeError(f"constant {value!r} does not fit {dtype} [{lo}, {hi}]; cast the tensor to a wider dtype")
        return cls(float(n), dtype, n)

    # value by bit pattern: -0.0 and 0.0 are different constants (1 / x, copysign), a NaN equals itself;
    # the dataclass's field-tuple == would conflate the zeros in every memo keyed by op (renders, fused
    # bodies' interning, plan keys)
    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and constant_key(self) == constant_key(other)  # type: ignore[arg-type]

    def __hash__(self) -> int:
        return hash((type(self).__name__, constant_key(self)))

    def out_dtype(self, in_dtypes):
        return self.dtype

    def out_size(self) -> Expression:
        return ONE

    def reference(self, ins, in_dtypes, env):
        if self.dtype.is_float:
            with np.errstate(all="ignore"):
                return cast_array(np.array([self.value]), DType.f64, self.dtype)
        return np.array([self.exact], self.dtype.np)


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


def float_bits(v: float) -> int:
    """The IEEE-754 binary64 bit pattern of `v` (-0.0 and 0.0 differ; NaNs by payload)."""
    return struct.unpack("<q", struct.pack("<d", float(v)))[0]


def constant_key(op: Constant) -> tuple:
    """What identifies a constant op (Constant, KernelConstant): its fields, floats by bit pattern."""
    return tuple(float_bits(v) if isinstance(v, float) else v for v in op.fields())


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
