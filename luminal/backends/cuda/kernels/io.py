"""Source and conversion kernels: KernelIota, KernelConstant, KernelCast.

KernelIota = Iota's (expr, length) + dtype (i32): out[i] = (int)expr(z = i), 64-bit math wrapped
to i32 like the reference. KernelConstant = Constant's fields (value, dtype, exact): one thread
writes the value exactly (hex float literals, NaN/inf by bit pattern; integers as 64-bit
literals). KernelCast = Cast's (shape, strides, dtype) + in_dtype, with the reference's conversion
rules: float -> int truncates and saturates (NaN -> 0), int -> int wraps, -> bool is != 0, to
16-bit floats rounds to nearest even once.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from luminal.backends.cuda.kernel import (
    Kernel,
    KernelOp,
    Launch,
    dim_decls,
    elementwise,
    headers,
    index_c,
    load,  # fmt: skip
    name_code,
    store,
)
from luminal.dtype import DType
from luminal.hlir import Cast, Constant, Iota
from luminal.hlir.op import EList
from luminal.shape.expr import ONE, Expression, prod


@dataclass(frozen=True)
class KernelIota(KernelOp):
    expr: Expression
    length: Expression
    dtype: DType
    hlir_class: ClassVar[type] = Iota
    prefix: ClassVar[str] = "iota"

    def input_views(self):
        return ()

    def inline(self, out: str, args: list[str], pos: str, wide: bool = False) -> str:
        """C setting `out` to the value at flat position `pos` (a C expression)."""
        return f"{out} = (int)({self.expr.to_c(lambda v: pos if v == 'z' else f'd_{v}')});"

    def render(self, slots) -> Kernel:
        body = "      " + self.inline("out[i]", [], "i")
        return elementwise(self.prefix, DType.i32, [], self.length, body, dim_decls(self.dim_names(), slots),
                           frozenset())  # fmt: skip


def f32_literal(value: float) -> str:
    """The C spelling of `value` rounded to f32 (exact: hex float or bit pattern)."""
    v = np.float32(value)
    if not math.isfinite(v):
        bits = struct.unpack("<I", struct.pack("<f", v))[0]
        return f"__int_as_float(0x{bits:08x})"
    return f"{float(v).hex()}f"


def c_literal(value: float, exact: int, dt: DType, wide: bool = False) -> str:
    """The C spelling of a Constant's value in dt's compute type (`wide`) or storage type, exact:
    hex floats (bit patterns for NaN / inf), integer literals for integer dtypes."""
    if dt == DType.f64:
        if not math.isfinite(value):
            bits = struct.unpack("<q", struct.pack("<d", value))[0]
            return f"__longlong_as_double({bits}LL)"
        return f"{value.hex()}"
    if dt.is_float:  # f16/bf16/fp8 values are f32 values: the f32 literal is exact, the store too
        lit = f32_literal(value)
        return lit if wide or dt == DType.f32 else store(dt, lit)
    if dt == DType.bool:
        return "true" if exact else "false"
    if exact == -(2**63):
        return f"(({dt.cuda})(-9223372036854775807LL - 1))"
    return f"(({dt.cuda}){exact}LL)"


@dataclass(frozen=True)
class KernelConstant(KernelOp):
    value: float
    dtype: DType
    exact: int = 0
    hlir_class: ClassVar[type] = Constant
    prefix: ClassVar[str] = "const"
    __eq__ = Constant.__eq__  # value by bit pattern (Constant): -0.0 is not 0.0
    __hash__ = Constant.__hash__

    def input_views(self):
        return ()

    def inline(self, out: str, args: list[str], pos: str, wide: bool = False) -> str:
        return f"{out} = {c_literal(self.value, self.exact, self.dtype, wide)};"

    def render(self, slots) -> Kernel:
        dt = self.dtype
        sig = f"({dt.cuda}* __restrict__ out, const long long* __restrict__ dims)"
        code = (f'extern "C" __global__ void KNAME{sig} {{\n'
                f"  if (blockIdx.x == 0 && threadIdx.x == 0) {self.inline('out[0]', [], '0')}\n}}\n")  # fmt: skip
        name, code = name_code(self.prefix, code)
        return Kernel(code, (Launch(name, ONE, 1),), headers(dt))


def convert(src: DType, dst: DType, x: str) -> tuple[str, str]:
    """(statements, C value in dst's storage type) converting stored `x` of `src` to `dst`."""
    if src == dst:
        return "", x
    if dst == DType.bool:
        return "", f"({load(src, x)} != 0)"
    if src == DType.bool:
        x, src = f"(int)({x} ? 1 : 0)", DType.i32
    if src.is_float and dst.is_int:
        info = np.iinfo(dst.np)
        lo = f"({info.min + 1}LL - 1)" if info.min else "0"
        pre = f"      const double f = (double){load(src, x)};\n"
        val = (f"(f != f ? ({dst.cuda})0 : f >= {float(info.max)!r} ? ({dst.cuda}){info.max}LL : "
               f"f <= {float(info.min)!r} ? ({dst.cuda}){lo} : ({dst.cuda})f)")  # fmt: skip
        return pre, val
    if src.is_int and dst.is_int:
        return "", f"(({dst.cuda}){x})"
    if dst == DType.f16 and (src == DType.f64 or src.is_int):  # one rounding, like numpy's double -> half
        return "", f"__double2half((double){load(src, x)})"
    if dst == DType.f64:
        return "", f"((double){load(src, x)})"
    return "", store(dst, f"(float){load(src, x)}")


@dataclass(frozen=True)
class KernelCast(KernelOp):
    shape: EList
    strides: EList
    dtype: DType
    in_dtype: DType
    n_inputs: ClassVar[int] = 1
    exact_operands: ClassVar[bool] = True
    hlir_class: ClassVar[type] = Cast
    prefix: ClassVar[str] = "cast"

    def input_views(self):
        return ((self.shape, self.strides),)

    def inline(self, out: str, args: list[str], pos: str, wide: bool = False) -> str:
        """The conversion of `args[0]`. With `wide` the operand and the result are compute-type
        registers: the operand is first rounded to its dtype (a cast converts the dtype's value),
        and a 16/8-bit float result is held in f32 again."""
        src, dst = self.in_dtype, self.dtype
        x = store(src, args[0]) if wide else args[0]
        pre, val = convert(src, dst, x)
        if wide:
            val = load(dst, val)
        return f"{{ {pre.strip()} {out} = {val}; }}" if pre else f"{out} = {val};"

    def render(self, slots) -> Kernel:
        ix = index_c(self.shape, self.strides)
        body = "      " + self.inline("out[i]", [f"in0[{ix}]"], "i")
        decls = dim_decls(self.dim_names(), slots)
        hdrs = headers(self.dtype, self.in_dtype)
        return elementwise(
            self.prefix, self.dtype, [self.in_dtype], prod(self.shape), body, decls, hdrs, vector=ix == "i"
        )


IO_KERNELS = (KernelIota, KernelConstant, KernelCast)
