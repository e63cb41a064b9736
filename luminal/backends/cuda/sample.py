"""Token sampling on the device: one kernel (one block per row of logits), only the ids come back;
greedy rows by a multi-block argmax (`argmax_kernel`: SPLIT blocks a row, the last to finish reduces).

The algorithm and its integer spelling are luminal/sampling.py's (the numpy oracle): greedy
argmax; else y = x / T in f32, top-k by an exact radix select over order-preserving u32 keys,
fixed-point u64 weights floor(exp(f64(y - max)) * 2^32), top-p by a weighted radix select over
the same keys (integer masses: the result does not depend on the order of atomic adds), and the
draw by a block scan of per-thread chunk sums in index order against floor(u * Z'), u from the
splitmix64 hash of (seed, position, row). Output buffer (i64): [error flag, error value, id per
row], the error pair copied from the plan's dims buffer, so one read returns both.
"""

from __future__ import annotations

import struct

import numpy as np

from luminal.backends.cuda.kernel import Kernel, Launch, headers, load, name_code
from luminal.dtype import DType
from luminal.errors import InputError
from luminal.sampling import GOLDEN, M64, Sampler

BLOCK = 1024
SPLIT = 32  # argmax blocks per row (<= 32: the last block reduces their partials in one warp)
ARGMAX_BLOCK = 512  # threads per argmax block: 16K threads a row, 8 logits each at a 128K vocab

_CODE = r"""
__device__ __forceinline__ unsigned long long KNAME_mix(unsigned long long x) {
  x ^= x >> 30; x *= 0xBF58476D1CE4E5B9ull; x ^= x >> 27; x *= 0x94D049BB133111EBull; return x ^ (x >> 31);
}
__device__ __forceinline__ unsigned int KNAME_key(float y) {
  const unsigned int u = __float_as_uint(y);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float KNAME_x(const TYPE* __restrict__ x, long long i) { return LOAD; }
// block-wide sum of one u64 per thread (integer: the same in any order)
__device__ unsigned long long KNAME_sum(unsigned long long v, unsigned long long* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : 0ull;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) red[0] = v;
  }
  __syncthreads();
  return red[0];
}
extern "C" __global__ void __launch_bounds__(BLOCK) KNAME(
    long long* __restrict__ out, const TYPE* __restrict__ logits, const long long* __restrict__ err,
    long long rows, long long V, long long tbits, long long top_k, long long pbits, long long seed,
    long long position) {
  __shared__ float s_v[32];
  __shared__ long long s_i[32];
  __shared__ unsigned long long hist[256];
  __shared__ unsigned long long scan[BLOCK];
  __shared__ unsigned long long red[32];
  __shared__ unsigned int s_prefix;
  __shared__ unsigned long long s_rest;
  const int tid = threadIdx.x;
  if (blockIdx.x == 0 && tid == 0) { out[0] = err ? err[0] : 0; out[1] = err ? err[1] : 0; }
  const long long row = blockIdx.x;
  if (row >= rows) return;
  const TYPE* __restrict__ x = logits + row * V;
  const double temperature = __longlong_as_double(tbits);
  const bool greedy = !(temperature > 0.0);
  const float tf = (float)temperature;
  // 1. (arg)max of y = x / T (greedy: of x), ties to the lowest index
  float bv = 0.0f; long long bi = -1;
  for (long long i = tid; i < V; i += BLOCK) {
    const float v = greedy ? KNAME_x(x, i) : KNAME_x(x, i) / tf;
    if (bi < 0 || v > bv) { bv = v; bi = i; }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_down_sync(0xffffffffu, bv, o);
    const long long oi = __shfl_down_sync(0xffffffffu, bi, o);
    if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) { bv = ov; bi = oi; }
  }
  if ((tid & 31) == 0) { s_v[tid >> 5] = bv; s_i[tid >> 5] = bi; }
  __syncthreads();
  if (tid < 32) {
    bv = s_v[tid]; bi = s_i[tid];
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_down_sync(0xffffffffu, bv, o);
      const long long oi = __shfl_down_sync(0xffffffffu, bi, o);
      if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) { bv = ov; bi = oi; }
    }
    if (tid == 0) { s_v[0] = bv; s_i[0] = bi; }
  }
  __syncthreads();
  if (greedy) {
    if (tid == 0) out[2 + row] = s_i[0];
    return;
  }
  const float m = s_v[0];
  // 2. top-k: the k-th largest key, four 8-bit radix passes (exact counts)
  unsigned int tk = 0u;
  if (top_k > 0 && top_k < V) {
    unsigned int prefix = 0u, mask = 0u;
    unsigned long long rest = (unsigned long long)top_k;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = tid; b < 256; b += BLOCK) hist[b] = 0ull;
      __syncthreads();
      for (long long i = tid; i < V; i += BLOCK) {
        const unsigned int k = KNAME_key(KNAME_x(x, i) / tf);
        if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255u], 1ull);
      }
      __syncthreads();
      if (tid == 0) {
        int b = 255;
        for (; b > 0 && hist[b] < rest; --b) rest -= hist[b];
        s_prefix = prefix | ((unsigned int)b << shift);
        s_rest = rest;
      }
      __syncthreads();
      prefix = s_prefix; rest = s_rest; mask |= 255u << shift;
    }
    tk = prefix;
  }
  // 3. top-p: the key where the mass of larger keys < P <= the mass of keys >= it
  unsigned int tp = 0u;
  const double top_p = __longlong_as_double(pbits);
  if (top_p < 1.0) {
    unsigned long long part = 0ull;
    for (long long i = tid; i < V; i += BLOCK) {
      const float y = KNAME_x(x, i) / tf;
      if (KNAME_key(y) >= tk) part += (unsigned long long)(exp((double)(y - m)) * 4294967296.0);
    }
    const unsigned long long z = KNAME_sum(part, red);
    unsigned long long p = (unsigned long long)(top_p * (double)z);
    if (p < 1ull) p = 1ull;
    unsigned int prefix = 0u, mask = 0u;
    unsigned long long above = 0ull;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = tid; b < 256; b += BLOCK) hist[b] = 0ull;
      __syncthreads();
      for (long long i = tid; i < V; i += BLOCK) {
        const float y = KNAME_x(x, i) / tf;
        const unsigned int k = KNAME_key(y);
        if (k >= tk && (k & mask) == prefix)
          atomicAdd(&hist[(k >> shift) & 255u], (unsigned long long)(exp((double)(y - m)) * 4294967296.0));
      }
      __syncthreads();
      if (tid == 0) {
        int b = 255;
        for (; b > 0 && above + hist[b] < p; --b) above += hist[b];
        s_prefix = prefix | ((unsigned int)b << shift);
        s_rest = above;
      }
      __syncthreads();
      prefix = s_prefix; above = s_rest; mask |= 255u << shift;
    }
    tp = prefix;
  }
  const unsigned int t = tk > tp ? tk : tp;
  // 4. the draw: chunk sums in index order, a block scan, the chunk holding the target walks it
  const long long chunk = (V + BLOCK - 1) / BLOCK;
  const long long lo = tid * chunk, hi = lo + chunk < V ? lo + chunk : V;
  unsigned long long own = 0ull;
  for (long long i = lo; i < hi; ++i) {
    const float y = KNAME_x(x, i) / tf;
    if (KNAME_key(y) >= t) own += (unsigned long long)(exp((double)(y - m)) * 4294967296.0);
  }
  scan[tid] = own;
  __syncthreads();
  for (int o = 1; o < BLOCK; o <<= 1) {
    const unsigned long long add = tid >= o ? scan[tid - o] : 0ull;
    __syncthreads();
    scan[tid] += add;
    __syncthreads();
  }
  const unsigned long long total = scan[BLOCK - 1];
  const unsigned long long h = KNAME_mix((unsigned long long)seed ^
      KNAME_mix((unsigned long long)position * GOLDENull + (unsigned long long)row));
  const unsigned long long target = (unsigned long long)((double)(h >> 11) * 1.1102230246251565e-16 * (double)total);
  const unsigned long long before = scan[tid] - own;
  if (own > 0ull && before <= target && target < scan[tid]) {
    unsigned long long acc = before;
    for (long long i = lo; i < hi; ++i) {
      const float y = KNAME_x(x, i) / tf;
      if (KNAME_key(y) >= t) acc += (unsigned long long)(exp((double)(y - m)) * 4294967296.0);
      if (acc > target) { out[2 + row] = i; break; }
    }
  }
}
"""


# Greedy: numpy's argmax of the f32 logits (luminal/sampling.py): the first NaN if there is one, else
# the largest value, ties (and -0.0 == 0.0) to the lowest index. One u64 per candidate orders all of
# it: (key << 32) | (2^32 - 1 - index), key the order-preserving u32 of the value with -0 read as +0
# and every NaN above +inf; max over u64 = the answer, 0 = no candidate (no value has key 0).
# Block b of row r reduces its slice into part[r * SPLIT + b]; the block whose ticket is the row's
# last reduces the SPLIT partials, writes the id and resets the ticket (the next launch, or a replay
# of a graph holding this one, starts from 0). threadfence reduction (CUDA samples).
_ARGMAX = r"""
__device__ __forceinline__ unsigned long long KNAME_pack(const float v, const long long i) {
  unsigned int u = __float_as_uint(v);
  const unsigned int a = u & 0x7fffffffu;
  if (a == 0u) u = 0u;  // -0.0 == +0.0
  const unsigned int k = a > 0x7f800000u ? 0xffffffffu : (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return ((unsigned long long)k << 32) | (0xffffffffull - (unsigned long long)i);
}
__device__ __forceinline__ unsigned long long KNAME_max(unsigned long long v) {
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long w = __shfl_down_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}
extern "C" __global__ void __launch_bounds__(ABLOCK) KNAME(
    long long* __restrict__ out, const TYPE* __restrict__ x0, const long long* __restrict__ err,
    unsigned long long* __restrict__ part, unsigned int* __restrict__ ticket, long long rows, long long V) {
  __shared__ unsigned long long s_best[ABLOCK / 32];
  __shared__ int s_last;
  const int tid = threadIdx.x;
  const long long row = blockIdx.x / SPLIT;
  const int b = blockIdx.x % SPLIT;
  if (blockIdx.x == 0 && tid == 0) { out[0] = err ? err[0] : 0; out[1] = err ? err[1] : 0; }
  if (row >= rows) return;  // uniform per block
  const TYPE* __restrict__ x = x0 + row * V;
  const long long per = (V + SPLIT - 1) / SPLIT, lo = b * per, hi = lo + per < V ? lo + per : V;
  unsigned long long best = 0ull;
#pragma unroll 4
  for (long long i = lo + tid; i < hi; i += ABLOCK) {
    const unsigned long long c = KNAME_pack(LOAD, i);
    best = c > best ? c : best;
  }
  best = KNAME_max(best);
  if ((tid & 31) == 0) s_best[tid >> 5] = best;
  __syncthreads();
  if (tid < 32) {
    best = KNAME_max(tid < ABLOCK / 32 ? s_best[tid] : 0ull);
    if (tid == 0) {
      part[row * SPLIT + b] = best;
      __threadfence();  // the partial is visible before the ticket says so
      s_last = atomicAdd(&ticket[row], 1u) == SPLIT - 1;
    }
  }
  __syncthreads();
  if (!s_last || tid >= 32) return;
  __threadfence();
  best = KNAME_max(tid < SPLIT ? ((volatile unsigned long long*)part)[row * SPLIT + tid] : 0ull);
  if (tid == 0) {
    out[2 + row] = (long long)(0xffffffffull - (best & 0xffffffffull));
    ticket[row] = 0u;  // for the next launch
  }
}
"""


def argmax_kernel(dtype: DType) -> Kernel:
    """Greedy ids (grid = rows x SPLIT blocks of ARGMAX_BLOCK; scratch: SPLIT u64 partials and one
    zeroed u32 ticket per row)."""
    if not dtype.is_float:
        raise InputError(f"sampling needs float logits, got {dtype}")
    code = (_ARGMAX.replace("TYPE", dtype.cuda).replace("LOAD", load(dtype, "x[i]"))
            .replace("ABLOCK", str(ARGMAX_BLOCK)).replace("SPLIT", str(SPLIT)))  # fmt: skip
    name, code = name_code(f"argmax_{dtype.value}", code)
    return Kernel(code, (Launch(name, SPLIT, ARGMAX_BLOCK),), headers(dtype))


def kernel(dtype: DType) -> Kernel:
    """The sampling kernel for logits of `dtype` (one launch: grid = rows, BLOCK threads)."""
    if not dtype.is_float:
        raise InputError(f"sampling needs float logits, got {dtype}")
    code = (_CODE.replace("TYPE", dtype.cuda).replace("LOAD", load(dtype, "x[i]"))
            .replace("GOLDEN", hex(GOLDEN)).replace("BLOCK", str(BLOCK)))  # fmt: skip
    name, code = name_code(f"sample_{dtype.value}", code)
    return Kernel(code, (Launch(name, 1, BLOCK),), headers(dtype))


def _bits(v: float) -> int:
    return struct.unpack("<q", struct.pack("<d", float(v)))[0] & M64


class DeviceSampler:
    """Runs the sampling kernels of an executor's plan; `load` compiles kernels (runtime.load_kernels).
    Greedy rows take the multi-block argmax, the others the one-block sampling kernel."""

    def __init__(self, load_kernels, driver):
        self._load, self._drv = load_kernels, driver
        self._funcs: dict[tuple[bool, DType], object] = {}
        self._buf = None
        self._scratch = None  # argmax: per row SPLIT u64 partials, then the u32 tickets (zero between launches)
        self._params: dict[bool, object] = {}

    def _func(self, greedy: bool, dtype: DType):
        if (greedy, dtype) not in self._funcs:
            k = argmax_kernel(dtype) if greedy else kernel(dtype)
            self._funcs[greedy, dtype] = self._load([k])[k.code].function(k.launches[0].name)
        return self._funcs[greedy, dtype]

    def __call__(self, logits_ptr: int, dtype: DType, rows: int, cols: int, sampler: Sampler, position: int,
                 err_ptr: int, ex) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        func, greedy = self._func(sampler.greedy, dtype), sampler.greedy
        need = 8 * (2 + rows)
        if self._buf is None or self._buf.nbytes < need:
            self._buf = None
            self._buf = self._drv.DeviceBuffer(max(need, 8 * 66))
        if greedy:
            n = max(rows, 64)  # rows the scratch holds
            if self._scratch is None or self._scratch.nbytes < n * (8 * SPLIT + 4):
                self._scratch = None
                self._scratch = self._drv.DeviceBuffer(n * (8 * SPLIT + 4))
                self._drv.htod(self._scratch.ptr, np.zeros(self._scratch.nbytes, np.uint8), ex.dev.stream)
            tickets = self._scratch.ptr + 8 * SPLIT * (self._scratch.nbytes // (8 * SPLIT + 4))
            values = [self._buf.ptr, logits_ptr, err_ptr, self._scratch.ptr, tickets, rows, cols]
            grid, block = max(rows, 1) * SPLIT, ARGMAX_BLOCK
        else:
            values = [self._buf.ptr, logits_ptr, err_ptr, rows, cols, _bits(sampler.temperature), sampler.top_k,
                      _bits(sampler.top_p), sampler.seed & M64, position]  # fmt: skip
            grid, block = max(rows, 1), BLOCK
        if greedy not in self._params:
            self._params[greedy] = self._drv.Params(values)
        else:  # the argument block is reused: only its values change (the token's position, ...)
            self._params[greedy].values[:] = values
        self._drv.launch(func, grid, block, 0, self._params[greedy], ex.dev.stream)
        host = np.empty(2 + rows, np.int64)
        ex._d2h(host, self._buf.ptr)
        ex.dev.synchronize()
        return host[2:].astype(np.int32), host[:2]
