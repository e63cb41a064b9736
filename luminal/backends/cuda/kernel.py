"""Kernel ops: the CUDA dialect of the LLIR, and the C codegen helpers they share.

A kernel op is a frozen dataclass holding its HLIR op's fields plus the dtype(s) the kernel needs
(class name == egglog constructor, field order == argument order); egglog unions it into the HLIR
op's e-class (ruleset `kernel_lower`, the .egg files in kernels/). `render(slots)` returns CUDA C
generated from the z-expression strides: 64-bit index math in C, dims read from the plan's device
dims buffer (`dims[slots[name]]`), so one compiled plan serves every value of a dim.

Kernel ABI: every argument is a 64-bit pointer, in the order (out, in0, .., in{k-1}, dims[, scratch][, zeroed]):
scratch when `scratch_bytes` is not 0, zeroed when `zeroed_bytes` is not 0.
Every kernel bounds-checks against sizes computed from `dims`, so a launch of one block over an
empty tensor is a no-op (CUDA graphs keep such nodes; eager launches skip them).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from luminal.dtype import DType
from luminal.errors import BackendError
from luminal.hlir.op import EList, Op
from luminal.shape.expr import ZERO, Expression, ceil_div
from luminal.shape.tracker import ShapeTracker

EW_BLOCK = 256  # threads per block of elementwise kernels
EW_UNROLL = 4  # elements per thread (strided by EW_BLOCK: coalesced, 4 loads in flight)
EW_TILE = EW_BLOCK * EW_UNROLL
ERROR_SLOT = "!error"  # slots key: dims-buffer index of the (flag, value) pair kernels report errors in


@dataclass(frozen=True)
class Launch:
    """One kernel launch of an op: entry name, blocks (an Expression of dims), threads, shared bytes."""

    name: str
    grid: Expression
    block: int
    shared: int = 0


@dataclass(frozen=True)
class Kernel:
    """The rendered code of one op: __global__ entries (no includes) + their launches in order."""

    code: str
    launches: tuple[Launch, ...]
    headers: frozenset[str]


class KernelOp(Op):
    """Base of CUDA kernel ops. `hlir_class` is the HLIR op this kernel implements; its fields are
    the leading fields of the kernel op."""

    hlir_class: ClassVar[type]
    prefix: ClassVar[str] = "k"
    # inside a fused kernel (16/8-bit floats held in f32): whether the op reads its operands rounded
    # to their dtype, because its result is discontinuous in them (%, <, casts)
    exact_operands: ClassVar[bool] = False

    def hlir(self) -> Op:
        names = [f.name for f in dataclasses.fields(self.hlir_class)]  # type: ignore[arg-type]
        return self.hlir_class(*(getattr(self, n) for n in names))

    def out_dtype(self, in_dtypes):
        return self.hlir().out_dtype(in_dtypes)

    def out_size(self) -> Expression:
        return self.hlir().out_size()

    def scratch_bytes(self) -> Expression:
        """Device scratch the kernel needs while it runs (live for this op's step only)."""
        return ZERO

    def zeroed_bytes(self) -> int:
        """Bytes of device memory the kernel needs zeroed before its first launch and leaves zeroed
        when it ends (self-resetting counters): the runtime zeroes them once, when it allocates them,
        and keeps them for the executor's life (every replay of the step's graph sees zeros)."""
        return 0

    def reference(self, ins, in_dtypes, env):
        # Same semantics as the HLIR op: lets the reference executor run a CUDA LLIR in tests.
        return self.hlir().reference(ins, in_dtypes, env)

    def input_views(self) -> tuple[tuple[EList, EList], ...]:
        """The (shape, strides) view through which the kernel reads each input, in input order."""
        raise NotImplementedError

    def input_reads(self) -> tuple[tuple[int, EList, EList], ...]:
        """(input position, shape, strides) of every view the kernel reads an input through."""
        return tuple((k, sh, st) for k, (sh, st) in enumerate(self.input_views()))

    def render(self, slots: Mapping[str, int]) -> Kernel:
        raise NotImplementedError


# -- C spellings --------------------------------------------------------------------------------------
_HEADERS = {DType.f16: "cuda_fp16.h", DType.bf16: "cuda_bf16.h", DType.f8e4m3: "cuda_fp8.h", DType.f8e5m2: "cuda_fp8.h"}
# unsigned types wrapping arithmetic is done in (>= 32 bits: unsigned short * unsigned short would
# promote to a signed int and overflow)
_UNSIGNED = {DType.i8: "unsigned int", DType.i16: "unsigned int", DType.i32: "unsigned int",
             DType.i64: "unsigned long long", DType.u8: "unsigned int", DType.bool: "unsigned int"}  # fmt: skip


def headers(*dts: DType) -> frozenset[str]:
    return frozenset(_HEADERS[d] for d in dts if d in _HEADERS)


def ctype(dt: DType) -> str:
    return dt.cuda


def compute_type(dt: DType) -> str:
    """C type arithmetic on `dt` happens in: 16/8-bit floats in float (rounded once at the store)."""
    if dt == DType.f64:
        return "double"
    if dt.is_float:
        return "float"
    return dt.cuda


def load(dt: DType, x: str) -> str:
    """A stored value as its compute type."""
    if dt == DType.f16:
        return f"__half2float({x})"
    if dt == DType.bf16:
        return f"__bfloat162float({x})"
    if dt in (DType.f8e4m3, DType.f8e5m2):
        return f"((float)({x}))"
    return x


def store(dt: DType, v: str) -> str:
    """A compute-type value rounded once (to nearest even) into `dt`'s storage type."""
    if dt == DType.f16:
        return f"__float2half_rn({v})"
    if dt == DType.bf16:
        return f"__float2bfloat16_rn({v})"
    if dt == DType.f8e4m3:
        return f"to_e4m3((float)({v}))"
    if dt == DType.f8e5m2:
        return f"to_e5m2((float)({v}))"
    return f"(({dt.cuda})({v}))"


def operand(dt: DType, x: str, wide: bool, exact: bool = False) -> str:
    """`x` as dt's compute type: a stored value is widened; a `wide` one (a fused kernel's register,
    already in the compute type) is taken as it is, or first rounded to dt when `exact` (an op whose
    result jumps with its operand's last bit -- %, <, casts -- sees the dtype's value)."""
    if not wide:
        return load(dt, x)
    return load(dt, store(dt, x)) if exact and dt.is_float and dt.bits < 32 else x


def result(dt: DType, v: str, wide: bool) -> str:
    """A compute-type result as stored (rounded into dt), or kept in the compute type when `wide`."""
    return f"(({compute_type(dt)})({v}))" if wide else store(dt, v)


def unsigned(dt: DType) -> str:
    return _UNSIGNED[dt]


def dim_decls(names: frozenset[str], slots: Mapping[str, int]) -> str:
    missing = sorted(n for n in names if n not in slots)
    if missing:
        raise BackendError(f"kernel uses dims {missing} that the plan's dims buffer does not hold ({sorted(slots)})")
    return "".join(f"  const long long d_{n} = dims[{slots[n]}];\n" for n in sorted(names))


def spell(zvar: str):
    return lambda v: zvar if v == "z" else f"d_{v}"


def c_expr(e: Expression, zvar: str = "i") -> str:
    """An Expression as 64-bit C with `z` spelled `zvar` and dim `s` spelled `d_s`."""
    return e.to_c(spell(zvar))


def index_c(shape: EList, strides: EList, zvar: str = "i") -> str:
    """Physical index of flat logical index `zvar` in a (shape, strides) view, as C."""
    return c_expr(ShapeTracker(tuple(shape), tuple(strides)).index_expression(), zvar)


def name_code(prefix: str, code: str) -> tuple[str, str]:
    """Give the entries of `code` (spelled KNAME...) a content-derived name, so the source and its
    cache key do not depend on where the op sits in a graph. Every entry gets its PDL sync here
    (`with_pdl`), before the name and the cache key are taken from the code."""
    code = with_pdl(code)
    h = hashlib.sha1(code.encode()).hexdigest()[:12]
    name = f"{prefix}_{h}"
    return name, code.replace("KNAME", name)


def ew_grid(n: Expression) -> Expression:
    return ceil_div(n, EW_TILE)


def elementwise(prefix: str, out_dt: DType, in_dts: list[DType], n: Expression, body: str, decls: str,
                hdrs: frozenset[str], vector: bool = False) -> Kernel:  # fmt: skip
    """An elementwise kernel over flat output index `i` < n whose `body` writes out[i].

    Strided views: EW_UNROLL elements per thread, strided by the block, so loads coalesce.
    `vector=True` (every input read as in{k}[i] and every buffer 16-byte aligned, which arena
    and allocation offsets are): each thread moves 16 bytes of the widest buffer per access
    with one vector load per input and one vector store; the tail runs the scalar body."""
    params = "".join(f", const {d.cuda}* __restrict__ in{k}" for k, d in enumerate(in_dts))
    head = (f'extern "C" __global__ void __launch_bounds__({EW_BLOCK}) KNAME({out_dt.cuda}* __restrict__ out{params}, '
            f"const long long* __restrict__ dims) {{\n{decls}  const long long n = {c_expr(n)};\n")  # fmt: skip
    if vector:
        v = 16 // max(d.itemsize for d in (out_dt, *in_dts))
        vbody = body.replace("out[i] = ", "r.v[u] = ")
        loads = ""
        for k, d in enumerate(in_dts):
            vbody = vbody.replace(f"in{k}[i]", f"x{k}.v[u]")
            loads += (f"    struct __align__({v * d.itemsize}) V{k} {{ {d.cuda} v[{v}]; }};\n"
                      f"    const V{k} x{k} = reinterpret_cast<const V{k}*>(in{k})[t];\n")  # fmt: skip
        code = (head + f"  const long long t = (long long)blockIdx.x * {EW_BLOCK} + threadIdx.x;\n"
                f"  const long long i0 = t * {v};\n  if (i0 + {v} <= n) {{\n{loads}"
                f"    struct __align__({v * out_dt.itemsize}) VO {{ {out_dt.cuda} v[{v}]; }};\n    VO r;\n"
                f"#pragma unroll\n    for (int u = 0; u < {v}; ++u) {{\n{vbody}\n    }}\n"
                f"    reinterpret_cast<VO*>(out)[t] = r;\n  }} else {{\n"
                f"    for (long long i = i0; i < n; ++i) {{\n{body}\n    }}\n  }}\n}}\n")  # fmt: skip
        name, code = name_code(prefix, code)
        return Kernel(code, (Launch(name, ceil_div(n, EW_BLOCK * v), EW_BLOCK),), hdrs)
    code = (head + f"  const long long base = (long long)blockIdx.x * {EW_TILE} + threadIdx.x;\n"
            f"#pragma unroll\n  for (int u = 0; u < {EW_UNROLL}; ++u) {{\n"
            f"    const long long i = base + (long long)u * {EW_BLOCK};\n"
            f"    if (i < n) {{\n{body}\n    }}\n  }}\n}}\n")  # fmt: skip
    name, code = name_code(prefix, code)
    return Kernel(code, (Launch(name, ew_grid(n), EW_BLOCK),), hdrs)


# -- programmatic dependent launch ------------------------------------------------------------------
# The step's CUDA graph chains kernel nodes with programmatic edges (driver.Graph, LUMINAL_PDL): a
# kernel may start while the one before it still runs, and must itself wait (griddepcontrol.wait)
# for that one to complete -- and its writes to be visible -- before it touches any buffer it did not
# own before (arena buffers are reused: read-after-write and write-after-read hazards alike). Every
# entry therefore opens with PDL_SYNC: wait, then let the next kernel launch (so at most two grids are
# in flight and the next one's own wait covers everything before). An entry may place it later itself
# (the GEMV: after the L2 prefetch of its weights, which nothing writes); it then reads nothing but
# kernel parameters and the dims words of the dims buffer before it (the host writes those before the
# graph launch; no kernel writes them). Without PDL the two instructions return at once.
PDL_SYNC = "lm_pdl_sync();"
_ENTRY = re.compile(r'extern\s+"C"\s+__global__\b')


_TOKEN = re.compile(r"//|/\*|[\"'{}]")  # what _close must look at: comments, literals, braces


def _close(code: str, i: int) -> int:
    """Index of the brace closing the one at code[i], skipping comments and string/char literals (jumps
    from token to token: a per-character walk cost ~3 ms per 8 KB kernel, paid again by every warm
    compile to key its kernels in NVRTC's index)."""
    depth, n = 0, len(code)
    while (m := _TOKEN.search(code, i)) is not None:
        t, i = m.group(), m.start()
        if t == "//":
            j = code.find("\n", i)
            if j < 0:
                break
            i = j
        elif t == "/*":
            j = code.find("*/", i + 2)
            if j < 0:
                break
            i = j + 1
        elif t in "\"'":
            i += 1
            while i < n and code[i] != t:
                i += 2 if code[i] == "\\" else 1
        elif t == "{":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise BackendError("a generated __global__ entry has no closing brace")


def entry_bodies(code: str) -> list[tuple[int, int]]:
    """(index of the opening brace, index of the closing brace) of every __global__ entry's body."""
    spans = []
    for m in _ENTRY.finditer(code):
        open_ = code.index("{", m.end())
        if not code[m.end() : open_].rstrip().endswith(")"):
            raise BackendError(f"cannot find the body of the __global__ entry at: {code[m.start() : open_ + 1]!r}")
        spans.append((open_, _close(code, open_)))
    return spans


def with_pdl(code: str) -> str:
    """`code` with PDL_SYNC as the first statement of every __global__ entry that does not call it itself."""
    for open_, close in reversed(entry_bodies(code)):
        if PDL_SYNC not in code[open_:close]:
            at = open_ + 1 + (code[open_ + 1 : open_ + 2] == "\n")
            code = f"{code[:at]}  {PDL_SYNC}\n{code[at:]}"
    return code


def source(kernels: list[Kernel]) -> str:
    """One translation unit holding every kernel in `kernels` (deduplicated); every entry syncs for
    PDL (`with_pdl`: already done by `name_code`, here for code that did not go through it)."""
    hdrs = sorted(frozenset().union(*(k.headers for k in kernels))) if kernels else []
    inc = "".join(f"#include <{h}>\n" for h in hdrs)
    codes = list(dict.fromkeys(with_pdl(k.code) for k in kernels))
    return inc + PRELUDE + (FP8_PRELUDE if "cuda_fp8.h" in hdrs else "") + "\n".join(codes)


# f32 -> fp8 without saturation (overflow gives NaN for e4m3, inf for e5m2, like ml_dtypes),
# round to nearest even.
FP8_PRELUDE = """
__device__ __forceinline__ __nv_fp8_e4m3 to_e4m3(float v) {
  __nv_fp8_e4m3 r; r.__x = __nv_cvt_float_to_fp8(v, __NV_NOSAT, __NV_E4M3); return r;
}
__device__ __forceinline__ __nv_fp8_e5m2 to_e5m2(float v) {
  __nv_fp8_e5m2 r; r.__x = __nv_cvt_float_to_fp8(v, __NV_NOSAT, __NV_E5M2); return r;
}
"""

PRELUDE = """
// luminal CUDA kernels: generated from HLIR fields; every argument is a 64-bit pointer.
// PDL (sm_90): wait until the kernel before this one in the graph has completed and its writes are
// visible, then let the next kernel launch. Both return at once in a launch without PDL.
__device__ __forceinline__ void lm_pdl_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void two_sum_f(float a, float b, float& s, float& e) {
  s = a + b; float bb = s - a; e = (a - (s - bb)) + (b - bb);
}
__device__ __forceinline__ void two_sum_d(double a, double b, double& s, double& e) {
  s = a + b; double bb = s - a; e = (a - (s - bb)) + (b - bb);
}
"""
