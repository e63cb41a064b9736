"""Unary elementwise kernels: KernelLog2 KernelExp2 KernelSin KernelSqrt KernelRecip.

Fields: the HLIR op's (shape, strides) + dtype. One thread per element (EW_UNROLL per thread),
16/8-bit floats computed in f32 and rounded once at the store; f64 in double. Precise libm
(`log2f`, `exp2f`, `sinf`, IEEE `sqrtf` and division): NVRTC runs without fast-math.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from luminal.backends.cuda.kernel import (
    Kernel,
    KernelOp,
    compute_type,
    dim_decls,
    elementwise,
    headers,
    index_c,
    operand,
    result,
)
from luminal.dtype import DType
from luminal.errors import BackendError
from luminal.hlir import Exp2, Log2, Recip, Sin, Sqrt
from luminal.hlir.op import EList
from luminal.shape.expr import prod


@dataclass(frozen=True)
class KernelUnary(KernelOp):
    shape: EList
    strides: EList
    dtype: DType
    n_inputs: ClassVar[int] = 1
    f32: ClassVar[str] = ""  # C spelling on float, {x} the operand
    f64: ClassVar[str] = ""

    def input_views(self):
        return ((self.shape, self.strides),)

    def inline(self, out: str, args: list[str], pos: str, wide: bool = False) -> str:
        """C statements setting `out` from the operand `args[0]`: stored values (the result rounded
        into the dtype), or with `wide` compute-type registers in and out (kernel.py operand/result)."""
        dt = self.dtype
        if not dt.is_float:
            raise BackendError(f"{type(self).__name__} on {dt}: unary kernels are float-only (cast first)")
        fn = (self.f64 if dt == DType.f64 else self.f32).format(x="v")
        return f"{{ const {compute_type(dt)} v = {operand(dt, args[0], wide)}; {out} = {result(dt, fn, wide)}; }}"

    def render(self, slots) -> Kernel:
        dt = self.dtype
        ix = index_c(self.shape, self.strides)
        body = "      " + self.inline("out[i]", [f"in0[{ix}]"], "i")
        decls = dim_decls(self.dim_names(), slots)
        return elementwise(self.prefix, dt, [dt], prod(self.shape), body, decls, headers(dt), vector=ix == "i")


@dataclass(frozen=True)
class KernelLog2(KernelUnary):
    hlir_class: ClassVar[type] = Log2
    prefix: ClassVar[str] = "log2"
    f32: ClassVar[str] = "log2f({x})"
    f64: ClassVar[str] = "log2({x})"


@dataclass(frozen=True)
class KernelExp2(KernelUnary):
    hlir_class: ClassVar[type] = Exp2
    prefix: ClassVar[str] = "exp2"
    f32: ClassVar[str] = "exp2f({x})"
    f64: ClassVar[str] = "exp2({x})"


@dataclass(frozen=True)
class KernelSin(KernelUnary):
    hlir_class: ClassVar[type] = Sin
    prefix: ClassVar[str] = "sin"
    f32: ClassVar[str] = "sinf({x})"
    f64: ClassVar[str] = "sin({x})"


@dataclass(frozen=True)
class KernelSqrt(KernelUnary):
    hlir_class: ClassVar[type] = Sqrt
    prefix: ClassVar[str] = "sqrt"
    f32: ClassVar[str] = "sqrtf({x})"
    f64: ClassVar[str] = "sqrt({x})"


@dataclass(frozen=True)
class KernelRecip(KernelUnary):
    hlir_class: ClassVar[type] = Recip
    prefix: ClassVar[str] = "recip"
    f32: ClassVar[str] = "(1.0f / {x})"
    f64: ClassVar[str] = "(1.0 / {x})"


UNARY_KERNELS = (KernelLog2, KernelExp2, KernelSin, KernelSqrt, KernelRecip)
