"""Elementwise primitives: unary Log2 Exp2 Sin Sqrt Recip and binary Add Mul Mod LessThan.

All read strided views of their inputs over one logical shape and write a contiguous buffer.
Binary ops take two same-shape views of same-dtype inputs (broadcasting is a stride-0 view built
by the frontend). Floats narrower than 32 bits compute in f32 and round once at the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from luminal.dtype import DType
from luminal.hlir.op import EList, Op, compute_dtype, view
from luminal.shape.expr import Expression, prod


@dataclass(frozen=True)
class Unary(Op):
    shape: EList
    strides: EList
    n_inputs: ClassVar[int] = 1
    fn: ClassVar = None

    def out_size(self) -> Expression:
        return prod(self.shape)

    def reference(self, ins, in_dtypes, env):
        dt = in_dtypes[0]
        x = view(ins[0], self.shape, self.strides, env).reshape(-1).astype(compute_dtype(dt))
        with np.errstate(all="ignore"):
            return type(self).fn(x).astype(dt.np)


@dataclass(frozen=True)
class Log2(Unary):
    fn: ClassVar = np.log2


@dataclass(frozen=True)
class Exp2(Unary):
    fn: ClassVar = np.exp2


@dataclass(frozen=True)
class Sin(Unary):
    fn: ClassVar = np.sin


@dataclass(frozen=True)
class Sqrt(Unary):
    fn: ClassVar = np.sqrt


@dataclass(frozen=True)
class Recip(Unary):
    fn: ClassVar = np.reciprocal


@dataclass(frozen=True)
class Binary(Op):
    shape: EList
    a_strides: EList
    b_strides: EList
    n_inputs: ClassVar[int] = 2

    def out_size(self) -> Expression:
        return prod(self.shape)

    def operands(self, ins, dt: DType, env):
        a = view(ins[0], self.shape, self.a_strides, env).reshape(-1)
        b = view(ins[1], self.shape, self.b_strides, env).reshape(-1)
        return a.astype(compute_dtype(dt)), b.astype(compute_dtype(dt))

    def reference(self, ins, in_dtypes, env):
        dt = in_dtypes[0]
        a, b = self.operands(ins, dt, env)
        with np.errstate(all="ignore"):
            return self.apply(a, b, dt).astype(self.out_dtype(in_dtypes).np)

    def apply(self, a, b, dt: DType):
        raise NotImplementedError


@dataclass(frozen=True)
class Add(Binary):
    """a + b; narrow ints wrap; on bool it is logical or."""

    def apply(self, a, b, dt):
        return a | b if dt == DType.bool else a + b


@dataclass(frozen=True)
class Mul(Binary):
    """a * b; narrow ints wrap; on bool it is logical and."""

    def apply(self, a, b, dt):
        return a & b if dt == DType.bool else a * b


@dataclass(frozen=True)
class Mod(Binary):
    """Truncated remainder (sign of a) for ints, fmod for floats; int x % 0 is 0."""

    def apply(self, a, b, dt):
        if dt.is_float:
            return np.fmod(a, b)
        safe = np.where(b == 0, 1, b)
        return np.where(b == 0, 0, np.fmod(a, safe))


@dataclass(frozen=True)
class LessThan(Binary):
    """a < b as bool (NaN compares false)."""

    def out_dtype(self, in_dtypes):
        return DType.bool

    def apply(self, a, b, dt):
        return a < b
