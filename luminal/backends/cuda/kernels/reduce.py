"""Reduction kernels over one axis: KernelSumReduce and KernelMaxReduce.

Fields: the HLIR op's (shape, iters, strides, iter_stride) + dtype. Parallel: each output row is
reduced by a group of TPR threads (a whole 256-thread block for long rows, a warp for medium
rows, one thread for rows of <= 16 elements), combined with warp shuffles and shared memory.
Float sums accumulate in f32 (f64 for f64) as compensated (value, error) pairs (TwoSum at every
add and every combine), rounded once at the store. Integer sums wrap like the reference. Max
orders floats totally by their bit patterns (+NaN above +inf, -NaN below everything), so the
result is one of the input elements, bit for bit. Empty reductions give 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from luminal.backends.cuda.kernel import (
    Kernel,
    KernelOp,
    Launch,
    c_expr,
    dim_decls,
    headers,
    index_c,
    load,
    name_code,
    store,
)
from luminal.dtype import DType
from luminal.errors import BackendError
from luminal.hlir import MaxReduce, SumReduce
from luminal.hlir.op import EList
from luminal.shape.expr import ZERO, Expression, Z, ceil_div, prod, z

BLOCK = 256
# float dtype -> (bit storage type, signed bit type, mask turning a negative pattern into its order key)
_FLOAT_BITS = {
    DType.f32: ("unsigned int", "int", "0x7fffffff"),
    DType.f64: ("unsigned long long", "long long", "0x7fffffffffffffffLL"),
    DType.f16: ("unsigned short", "short", "0x7fff"),
    DType.bf16: ("unsigned short", "short", "0x7fff"),
    DType.f8e4m3: ("unsigned char", "signed char", "0x7f"),
    DType.f8e5m2: ("unsigned char", "signed char", "0x7f"),
}


def threads_per_row(iters: Expression) -> int:
    if iters.is_num and iters.value <= 16:
        return 1
    if iters.is_num and iters.value <= 1024:
        return 32
    return BLOCK


@dataclass(frozen=True)
class KernelReduce(KernelOp):
    shape: EList
    iters: Expression
    strides: EList
    iter_stride: Expression
    dtype: DType
    n_inputs: ClassVar[int] = 1

    def vector_width(self, tpr: int) -> int:
        """Elements per 16-byte load when every row is contiguous, a whole number of vectors long
        and starts 16-byte aligned (kept strides are multiples of the vector), else 1."""
        v = 16 // self.dtype.itemsize
        if tpr != BLOCK or self.iter_stride is not z or not self.iters.is_num or self.iters.value % v:
            return 1
        for st in self.strides:
            step = st.substitute(Z, 1)
            if st is not ZERO and (st is not z * step or not step.is_num or step.value % v):
                return 1
        return v

    def parts(self) -> dict[str, str]:
        """C pieces: acc type `T`, `init`, `add` (folds loaded `v`), `comb` (folds s2/c2), `final`,
        and `in_t`/`out_t` pointer types and `load` (C of element at index `ix`)."""
        raise NotImplementedError

    def input_views(self):
        return (((*self.shape, self.iters), (*self.strides, self.iter_stride)),)

    def render(self, slots) -> Kernel:
        dt = self.dtype
        if dt == DType.bool:
            raise BackendError(f"{type(self).__name__} of bool: cast to an integer dtype first")
        p = self.parts()
        tpr = threads_per_row(self.iters)
        rpb = BLOCK // tpr
        rows = prod(self.shape)
        ix = f"base + {c_expr(self.iter_stride, 'k')}"
        vec = self.vector_width(tpr)
        if vec > 1:  # contiguous, aligned rows: one 16-byte load per thread per step
            loop = (f"  struct __align__(16) VI {{ {p['in_t']} v[{vec}]; }};\n"
                    f"  for (long long k = lane * {vec}; k < iters; k += {tpr * vec}) {{\n"
                    f"    const VI xv = reinterpret_cast<const VI*>(in0 + base + k)[0];\n"
                    f"#pragma unroll\n    for (int u = 0; u < {vec}; ++u) {{\n"
                    f"      const T v = {p['load'].replace('in0[{ix}]', 'xv.v[u]')};\n"
                    f"      {p['add']}\n    }}\n  }}\n")  # fmt: skip
        else:
            loop = (f"  for (long long k = lane; k < iters; k += {tpr}) {{\n"
                    f"    const T v = {p['load'].format(ix=ix)};\n    {p['add']}\n  }}\n")  # fmt: skip
        shfl = ""
        if tpr > 1:
            c2 = "    const T c2 = __shfl_down_sync(0xffffffffu, c, off);\n" if "c2" in p["comb"] else ""
            shfl = ("  for (int off = 16; off > 0; off >>= 1) {\n"
                    "    const T s2 = __shfl_down_sync(0xffffffffu, s, off);\n"
                    f"{c2}    {p['comb']}\n  }}\n")  # fmt: skip
        block = ""
        if tpr == BLOCK:
            block = (f"  __shared__ T sh_s[{BLOCK // 32}], sh_c[{BLOCK // 32}];\n"
                     "  if ((threadIdx.x & 31) == 0) { sh_s[threadIdx.x >> 5] = s; sh_c[threadIdx.x >> 5] = c; }\n"
                     "  __syncthreads();\n"
                     f"  if (threadIdx.x >= 32) return;\n"
                     f"  s = threadIdx.x < {BLOCK // 32} ? sh_s[threadIdx.x] : {p['init']};\n"
                     f"  c = threadIdx.x < {BLOCK // 32} ? sh_c[threadIdx.x] : {p['zero_c']};\n"
                     + shfl)  # fmt: skip
        sig = (
            f"({p['out_t']}* __restrict__ out, const {p['in_t']}* __restrict__ in0, const long long* __restrict__ dims)"
        )
        code = f"""extern "C" __global__ void __launch_bounds__({BLOCK}) KNAME{sig} {{
  typedef {p["T"]} T;
{dim_decls(self.dim_names(), slots)}  const long long rows = {c_expr(rows)};
  const long long iters = {c_expr(self.iters)};
  const long long o = (long long)blockIdx.x * {rpb} + threadIdx.x / {tpr};
  const int lane = threadIdx.x % {tpr};
  if (o >= rows) return;  // uniform per row group (a warp or the whole block)
  const long long base = {index_c(self.shape, self.strides, "o")};
  T s = {p["init"]}, c = {p["zero_c"]};
{loop}{shfl}{block}  if (lane == 0) out[o] = {p["final"]};
}}
"""
        name, code = name_code(self.prefix, code)
        return Kernel(code, (Launch(name, ceil_div(rows, rpb), BLOCK),), p.get("headers", frozenset()))


@dataclass(frozen=True)
class KernelSumReduce(KernelReduce):
    hlir_class: ClassVar[type] = SumReduce
    prefix: ClassVar[str] = "sum"

    def parts(self):
        dt = self.dtype
        base = {"in_t": dt.cuda, "out_t": dt.cuda, "headers": headers(dt)}
        if dt.is_float:
            acc, ts = ("double", "two_sum_d") if dt == DType.f64 else ("float", "two_sum_f")
            return base | {
                "T": acc, "init": "0", "zero_c": "0", "load": f"({acc}){load(dt, 'in0[{ix}]')}",
                "add": f"{{ T t, e; {ts}(s, v, t, e); s = t; c += e; }}",
                "comb": f"{{ T t, e; {ts}(s, s2, t, e); s = t; c += c2 + e; }}",
                "final": store(dt, "(s + c)"),
            }  # fmt: skip
        acc = "unsigned long long" if dt.bits == 64 else "unsigned int"
        return base | {"T": acc, "init": "0", "zero_c": "0", "load": "(T)in0[{ix}]", "add": "s += v;",
                       "comb": "s += s2;", "final": f"(({dt.cuda})s)"}  # fmt: skip


@dataclass(frozen=True)
class KernelMaxReduce(KernelReduce):
    hlir_class: ClassVar[type] = MaxReduce
    prefix: ClassVar[str] = "max"

    def parts(self):
        dt = self.dtype
        comb = "s = s2 > s ? s2 : s;"
        if dt.is_float:
            # Reduce over order keys of the bit patterns: key = b < 0 ? b ^ mask : b is an involution.
            bits, sbits, mask = _FLOAT_BITS[dt]
            key_t = "long long" if dt == DType.f64 else "int"
            lo = "(-9223372036854775807LL - 1)" if dt == DType.f64 else "(-2147483647 - 1)"
            key = f"(({key_t})({sbits})in0[{{ix}}])"
            return {
                "in_t": bits, "out_t": bits, "T": key_t, "init": lo, "zero_c": "0",
                "load": f"({key} < 0 ? ({key} ^ {mask}) : {key})",
                "add": "s = v > s ? v : s;", "comb": comb,
                "final": f"(iters == 0 ? ({bits})0 : ({bits})(s < 0 ? (s ^ {mask}) : s))",
            }  # fmt: skip
        return {
            "in_t": dt.cuda, "out_t": dt.cuda, "T": "long long", "init": "(-9223372036854775807LL - 1)",
            "zero_c": "0", "load": "(long long)in0[{ix}]", "add": "s = v > s ? v : s;", "comb": comb,
            "final": f"(iters == 0 ? ({dt.cuda})0 : ({dt.cuda})s)",
        }  # fmt: skip


REDUCE_KERNELS = (KernelSumReduce, KernelMaxReduce)
