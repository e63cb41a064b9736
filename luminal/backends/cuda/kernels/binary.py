"""Binary elementwise kernels: KernelAdd KernelMul KernelMod KernelLessThan.

Fields: the HLIR op's (shape, a_strides, b_strides) + dtype (of the operands). Integer semantics
match the reference exactly: + and * wrap (computed in the unsigned type of the same width, so
no signed-overflow UB), % truncates with x % 0 == 0 (and MIN % -1 == 0), bool + is or and * is and.
Floats: 16/8-bit in f32 rounded once at the store, `fmodf` for %, LessThan compares in the
compute type (NaN compares false); + and * are `__fadd_rn`/`__fmul_rn` (`__d..` for f64), never
contracted into an FMA, so each rounds once like the reference.
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
    unsigned,
)
from luminal.dtype import DType
from luminal.hlir import Add, LessThan, Mod, Mul
from luminal.hlir.op import EList
from luminal.shape.expr import prod


@dataclass(frozen=True)
class KernelBinary(KernelOp):
    shape: EList
    a_strides: EList
    b_strides: EList
    dtype: DType
    n_inputs: ClassVar[int] = 2

    def value(self, dt: DType) -> str:
        """C expression of the result in the compute type, from operands `a` and `b`."""
        raise NotImplementedError

    def result_dtype(self) -> DType:
        return self.dtype

    def input_views(self):
        return ((self.shape, self.a_strides), (self.shape, self.b_strides))

    def inline(self, out: str, args: list[str], pos: str, wide: bool = False) -> str:
        """C statements setting `out` from the operands `args` (stored values, or compute-type
        registers with `wide`, as KernelUnary.inline)."""
        dt, ct, ex = self.dtype, compute_type(self.dtype), self.exact_operands
        return (f"{{ const {ct} a = {operand(dt, args[0], wide, ex)}; const {ct} b = {operand(dt, args[1], wide, ex)}; "
                f"{out} = {result(self.result_dtype(), self.value(dt), wide)}; }}")  # fmt: skip

    def render(self, slots) -> Kernel:
        dt, odt = self.dtype, self.result_dtype()
        ia, ib = index_c(self.shape, self.a_strides), index_c(self.shape, self.b_strides)
        body = "      " + self.inline("out[i]", [f"in0[{ia}]", f"in1[{ib}]"], "i")
        decls = dim_decls(self.dim_names(), slots)
        return elementwise(self.prefix, odt, [dt, dt], prod(self.shape), body, decls, headers(dt, odt),
                           vector=ia == ib == "i")  # fmt: skip


def _float_rn(dt: DType, op: str) -> str:
    """Float + / * as the round-to-nearest intrinsics, which NVRTC never contracts into an FMA
    (its default --fmad=true would fuse a Mul feeding an Add, inside one kernel and across the ops
    of a fused kernel): every HLIR Add and Mul rounds once, as in the reference, which the exact
    compositions rely on (Dekker products in f64 division, docs/numerics.md)."""
    return f"__{'d' if dt == DType.f64 else 'f'}{op}_rn(a, b)"


def _wrap(dt: DType, op: str) -> str:
    u = unsigned(dt)
    return f"(({dt.cuda})(({u})a {op} ({u})b))"


@dataclass(frozen=True)
class KernelAdd(KernelBinary):
    hlir_class: ClassVar[type] = Add
    prefix: ClassVar[str] = "add"

    def value(self, dt):
        if dt == DType.bool:
            return "(a || b)"
        return _float_rn(dt, "add") if dt.is_float else _wrap(dt, "+")


@dataclass(frozen=True)
class KernelMul(KernelBinary):
    hlir_class: ClassVar[type] = Mul
    prefix: ClassVar[str] = "mul"

    def value(self, dt):
        if dt == DType.bool:
            return "(a && b)"
        return _float_rn(dt, "mul") if dt.is_float else _wrap(dt, "*")


@dataclass(frozen=True)
class KernelMod(KernelBinary):
    hlir_class: ClassVar[type] = Mod
    prefix: ClassVar[str] = "mod"
    exact_operands: ClassVar[bool] = True

    def value(self, dt):
        if dt == DType.f64:
            return "fmod(a, b)"
        if dt.is_float:
            return "fmodf(a, b)"
        if dt == DType.bool:
            return "false"  # a % 1 == 0 and a % 0 == 0
        if dt.is_signed:
            return f"((b == 0 || b == ({dt.cuda})-1) ? ({dt.cuda})0 : ({dt.cuda})(a % b))"
        return f"(b == 0 ? ({dt.cuda})0 : ({dt.cuda})(a % b))"


@dataclass(frozen=True)
class KernelLessThan(KernelBinary):
    hlir_class: ClassVar[type] = LessThan
    prefix: ClassVar[str] = "lt"
    exact_operands: ClassVar[bool] = True

    def result_dtype(self):
        return DType.bool

    def value(self, dt):
        return "(a < b)"


BINARY_KERNELS = (KernelAdd, KernelMul, KernelMod, KernelLessThan)
