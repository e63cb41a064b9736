"""Runs KernelAttention's rendered CUDA C on the CPU: g++ (C++20) with one std::thread per CUDA
thread, warps emulated with barriers (shuffles, and the inline-asm intrinsics of the prefill kernel
-- mma.m16n8k16, ldmatrix.x4 (.trans), cp.async -- replaced by functions that implement the PTX
fragment layouts on the warp's exchanged registers). Every launch of the op runs in order with
the op's grid, block, dims buffer, scratch and zeroed words, exactly as the CUDA runtime would launch them."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np

from luminal.backends.cuda.kernel import PRELUDE
from luminal.backends.cuda.kernels.attention import KernelAttention
from luminal.backends.cuda.kernels.attention_prefill import INTRINSICS_BEGIN, INTRINSICS_END
from luminal.dtype import DType

SHIM = r"""
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>
using std::min;
using std::max;
struct uint4 { unsigned x, y, z, w; };
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
static inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
struct dim3 { unsigned x; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(unsigned u) { return __uint_as_float(u); }
struct __nv_bfloat16 { uint16_t b; };
struct __half { uint16_t b; };
struct __half2 { __half x, y; };
static inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float((unsigned)h.b << 16); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {(uint16_t)((u >> 16) | 0x40)};  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u); return {(uint16_t)(u >> 16)};
}
static inline float __half2float(__half h) { _Float16 v; memcpy(&v, &h.b, 2); return (float)v; }
static inline __half __float2half_rn(float f) { _Float16 v = (_Float16)f; __half h; memcpy(&h.b, &v, 2); return h; }
static inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.b; }
static inline unsigned short __half_as_ushort(__half h) { return h.b; }
thread_local dim3 threadIdx, blockIdx;
static std::barrier<>* block_bar;
static std::barrier<>* warp_bar[32];
static inline void __syncthreads() { block_bar->arrive_and_wait(); }
static float lanes[32][32];
static inline float __shfl_xor_sync(unsigned, float v, int off) {
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  lanes[w][l] = v; warp_bar[w]->arrive_and_wait();
  const float r = lanes[w][l ^ off]; warp_bar[w]->arrive_and_wait(); return r;
}
static inline float __shfl_sync(unsigned, float v, int src) {
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  lanes[w][l] = v; warp_bar[w]->arrive_and_wait();
  const float r = lanes[w][src & 31]; warp_bar[w]->arrive_and_wait(); return r;
}
static inline void __syncwarp() { warp_bar[threadIdx.x >> 5]->arrive_and_wait(); }
static inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline unsigned atomicExch(unsigned* p, unsigned v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
static inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
static inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
static inline float __fsqrt_rn(float a) { volatile float r = std::sqrt(a); return r; }
static inline float __frcp_rn(float a) { volatile float r = 1.0f / a; return r; }
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
template <class T> static inline T __ldcg(const T* p) { return *p; }
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
struct WarpX { unsigned a[32][4]; unsigned b[32][2]; const unsigned short* p[32]; };
static WarpX wx[32];
"""

# The intrinsics on exchanged warp registers. ELEM converts one 16-bit pattern to float.
EMU = r"""
typedef const char* KNAME_sa;  // a shared-memory address, offsets in bytes
static inline KNAME_sa KNAME_saddr(const unsigned short* p) { return (const char*)p; }
static inline void KNAME_mma(float* d, const unsigned* a, const unsigned b0, const unsigned b1) {
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31, g = l >> 2, c = l & 3;
  for (int i = 0; i < 4; ++i) wx[w].a[l][i] = a[i];
  wx[w].b[l][0] = b0; wx[w].b[l][1] = b1;
  warp_bar[w]->arrive_and_wait();
  auto half = [](unsigned v, int hi) { return ELEM((unsigned short)(hi ? v >> 16 : v & 0xffffu)); };
  auto A = [&](int row, int col) {  // a0: (g, 2c..), a1: (g+8, 2c..), a2: (g, 2c+8..), a3: (g+8, 2c+8..)
    const int reg = (row >= 8 ? 1 : 0) + (col >= 8 ? 2 : 0), lane = (row % 8) * 4 + (col % 8) / 2;
    return half(wx[w].a[lane][reg], col & 1);
  };
  auto B = [&](int k, int n) {  // b0: (2c.., g), b1: (2c+8.., g)
    return half(wx[w].b[n * 4 + (k % 8) / 2][k >= 8 ? 1 : 0], k & 1);
  };
  float r[4];
  for (int e = 0; e < 4; ++e) {
    const int row = g + (e >= 2 ? 8 : 0), col = c * 2 + (e & 1);
    float s = d[e];
    for (int k = 0; k < 16; ++k) s += A(row, k) * B(k, col);
    r[e] = s;
  }
  warp_bar[w]->arrive_and_wait();
  for (int e = 0; e < 4; ++e) d[e] = r[e];
}
static inline void KNAME_ldsm4t(unsigned* r, const KNAME_sa s) {
  const unsigned short* p = (const unsigned short*)s;
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  wx[w].p[l] = p;
  warp_bar[w]->arrive_and_wait();
  for (int i = 0; i < 4; ++i) {  // matrix i: rows at the addresses of lanes 8i .. 8i+7; .trans
    const unsigned short* r0 = wx[w].p[i * 8 + 2 * (l % 4)];
    const unsigned short* r1 = wx[w].p[i * 8 + 2 * (l % 4) + 1];
    r[i] = (unsigned)r0[l / 4] | ((unsigned)r1[l / 4] << 16);
  }
  warp_bar[w]->arrive_and_wait();
}
static inline void KNAME_ldsm4(unsigned* r, const KNAME_sa s) {
  const unsigned short* p = (const unsigned short*)s;
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  wx[w].p[l] = p;
  warp_bar[w]->arrive_and_wait();
  for (int i = 0; i < 4; ++i) {  // matrix i: rows at the addresses of lanes 8i .. 8i+7; lane l: row l/4, cols 2(l%4)..
    const unsigned short* row = wx[w].p[i * 8 + l / 4];
    r[i] = (unsigned)row[2 * (l % 4)] | ((unsigned)row[2 * (l % 4) + 1] << 16);
  }
  warp_bar[w]->arrive_and_wait();
}
static inline void KNAME_cp16(const KNAME_sa dst, const void* src, const bool valid) {
  if (valid) memcpy((char*)dst, src, 16); else memset((char*)dst, 0, 16);
}
static unsigned short KNAME_dyn_emu[1 << 17] __attribute__((aligned(16)));  // dynamic shared memory (256 KB)
static inline unsigned short* KNAME_smem() { return KNAME_dyn_emu; }
static inline float KNAME_exp2(const float x) { return exp2f(x); }
static inline void KNAME_cp_commit() {}
static inline void KNAME_cp_wait1() {}
static inline void KNAME_cp_wait0() {}
template <int N> static inline void KNAME_cp_wait() {}
"""

RUN = r"""
extern "C" void run_{entry}(void** ins, const long long* dims, float* scratch, unsigned* zeroed, int grid,
                            int block) {{
  std::barrier<> bar(block); block_bar = &bar;
  std::barrier<> done(block);
  for (int i = 0; i < (block + 31) / 32; ++i) warp_bar[i] = new std::barrier<>(32);
  std::vector<std::thread> ts;
  for (int t = 0; t < block; ++t)
    ts.emplace_back([=, &done] {{
      threadIdx.x = t;
      for (int b = 0; b < grid; ++b) {{
        blockIdx.x = b;
        {entry}(({T}*)ins[0], {args}dims, scratch, zeroed);
        done.arrive_and_wait();
      }}
    }});
  for (auto& t : ts) t.join();
  for (int i = 0; i < (block + 31) / 32; ++i) delete warp_bar[i];
}}
"""

_ELEM = {
    DType.bf16: "static inline float ELEM(unsigned short b) { return __uint_as_float((unsigned)b << 16); }\n",
    DType.f16: "static inline float ELEM(unsigned short b) { __half h{b}; return __half2float(h); }\n",
    DType.f32: "static inline float ELEM(unsigned short b) { return 0.0f; }\n",
}
_CTYPE = {DType.f32: "float", DType.bf16: "__nv_bfloat16", DType.f16: "__half"}


class Emulated:
    """The ops' kernels compiled for the CPU into one library (one g++ run);
    `run(op, q, k, v, env)` runs every launch of `op` in order."""

    def __init__(self, ops: list[KernelAttention], slots: dict[str, int], tmp: Path, variant=None):
        """`variant`: the decode schedule (attention_decode.DecodeVariant) every op renders with."""
        self.slots, self.variant = slots, variant
        self.kernels = {op: op.render(slots, variant) for op in ops}
        parts = []
        for op, kern in self.kernels.items():
            code = kern.code
            if INTRINSICS_BEGIN in code:
                a, b = code.index(INTRINSICS_BEGIN), code.index(INTRINSICS_END) + len(INTRINSICS_END)
                name = kern.launches[0].name.rsplit("_", 1)[0]
                code = code[:a] + EMU.replace("KNAME", name) + code[b:]
            elem = _ELEM[op.dtype].replace("ELEM", f"{kern.launches[0].name}_elem")
            parts.append(elem + code.replace("ELEM(", f"{kern.launches[0].name}_elem("))
            t = _CTYPE[op.dtype]
            args = "".join(f"(const {t}*)ins[{k}], " for k in (1, 2, 3))
            # after q, k, v: (rows, pos) of a paged op, then (cos, sin) of a rope op (KernelAttentionRope,
            # KernelPagedAttentionRope), then a q-norm's weight (KernelAttentionNormRope): the kernel's order
            extra = ["const int*"] * 2 * hasattr(op, "slots") + ["const float*"] * 2 * hasattr(op, "rot")
            extra += [f"const {t}*"] * hasattr(op, "wst")
            args += "".join(f"({ct})ins[{k}], " for k, ct in zip(range(4, op.n_inputs + 1), extra, strict=True))
            parts += [RUN.format(entry=ln.name, T=t, args=args) for ln in kern.launches]
        src, lib = tmp / "attention_emu.cpp", tmp / "attention_emu.so"
        src.write_text(SHIM + PRELUDE + "".join(dict.fromkeys(parts)))  # PRELUDE: the PDL sync (a no-op here)
        cmd = ["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w", "-o", str(lib), str(src)]
        subprocess.run(cmd, check=True, capture_output=True)
        self.so = ctypes.CDLL(str(lib))

    def run(
        self, op: KernelAttention, *ins: np.ndarray, env: dict[str, int], grid_env: dict | None = None
    ) -> np.ndarray:
        """`grid_env`: the bucket's upper bounds a pinned plan sizes its grids at (runtime.py: a step
        launches max(live grid, pinned grid) blocks; the kernels must exit past the live sizes)."""
        dims = np.zeros(len(self.slots) + 2, np.int64)
        for name, i in self.slots.items():
            if not name.startswith("!"):
                dims[i] = env[name]
        n = int(op.out_size().evaluate(env))
        out = np.full(n + 8, np.nan, op.dtype.np)  # 8 past the end: must stay untouched
        size = int(op.scratch_bytes(self.variant).evaluate(grid_env or env))
        scratch = np.full(max(1, size // 4), np.nan, np.float32)
        zeroed = np.zeros(max(1, op.zeroed_bytes(self.variant) // 4), np.uint32)  # as the runtime: zeroed once
        ptrs = (ctypes.c_void_p * (1 + len(ins)))(*(a.ctypes.data for a in (out, *ins)))
        args = [ptrs, *(ctypes.c_void_p(a.ctypes.data) for a in (dims, scratch, zeroed))]
        for ln in self.kernels[op].launches:  # as in a CUDA graph: a gated-off launch still runs one block
            grid = max(1, int(ln.grid.evaluate(env)), int(ln.grid.evaluate(grid_env or env)))
            getattr(self.so, f"run_{ln.name}")(*args, grid, ln.block)
        assert np.isnan(out[n:].astype(np.float32)).all(), "the kernel wrote past its output"
        assert not zeroed.any(), f"the kernels left their zeroed words at {zeroed[zeroed != 0][:8]}: not self-resetting"
        return out[:n]
