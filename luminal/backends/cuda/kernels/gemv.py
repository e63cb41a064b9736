"""KernelGemv: the decode matmul y[1, n] = x[1, k] @ W^T with W stored (n, k) row-major (the HF
Linear layout), a second alternative to cuBLASLt when m = 1 (gemv.egg, ruleset matmul_backend).

Fields: n (rows of W = outputs, may be a dim), k and ld (W's row stride) as literals, dtype.
Inputs: (x, W) -- x the contiguous length-k row, W rows of ld elements. The rule guarantees k and
ld are multiples of one 16-byte vector (8 bf16 / 8 f16 / 4 f32), so every load is whole and
aligned (buffers are 256-aligned); f32 accumulation, rounded once at the store.

One generator, one schedule knob: `GemvVariant` (named presets in VARIANTS; `render` uses
DEFAULT[dtype]; bench/gemv_variants.py times every preset on the GPU). A block computes tiles of
`rows_per_block` rows blockIdx.x, + gridDim.x, ...: one per block, or, with `waves`, a grid capped
at one wave of resident blocks that stage x once and walk many tiles (`looped`: KernelGemvFused's
schedule, whose x prologue is worth computing once per block; docs/perf.md has the reasoning). A block holds `warps`
warps; `split` warps share a group of `rows` rows, lanes stride their slice of the row in 16-byte
vectors (a warp load is 512 contiguous bytes), and each lane loads a batch of `unroll` W vectors
per row before it consumes any. x is read once per batch for all `rows` rows, through __ldg or from
a per-block copy in shared memory (`x_smem`, when k fits in 48 KB). `stream` loads W with
ld.global.nc.L1::no_allocate.L2::256B so the weight stream does not evict x from L1. `occupancy`
is the min-blocks-per-SM of __launch_bounds__. Warp shuffles reduce a lane's sums; split-k partials
meet in shared memory.

Prediction (H200; the bench decides): a decode GEMV is a pure stream, so what counts is W bytes in
flight per SM. Little's law at 4.25 TB/s and ~0.8-1 us loaded latency asks ~26-32 KB per SM (more,
to hold the average rather than the peak there). Without an occupancy promise ptxas schedules for
32-38 registers by interleaving each load with its multiply-adds (read off the SASS), whatever the
unroll: the old kernel (`w8r1s1u4`) keeps ~1-2 vectors per lane in flight, 0.5-1 KB per warp; at
n = 2048 (15.5 warps per SM) that is ~12 KB per SM -- the 57-72% measured. With the promise ptxas
keeps the batch: u4 = 2 KB per warp at 56 registers (4 blocks of 256 per SM), u8 = 4 KB at 80
(3 blocks). Split-k doubles the warps of the small-n shape at no register cost, so
`w8r1s2u4-na-o4` (~62 KB per SM on every shape; at n = 2048 its 512 blocks fit in one wave) should
pass 80% for f32 and for bf16 (same bytes per warp); u8-o2 close behind; rows = 2 and x in shared
memory within noise. The old bf16 figure (bench/matmul.py) re-read one 32 MB W that mostly stays
in the 50 MB L2, so expect the bf16 baseline lower here too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from luminal.backends.cuda.kernel import (
    PDL_SYNC,
    Kernel,
    KernelOp,
    Launch,
    c_expr,
    dim_decls,
    headers,
    name_code,
    store,
)
from luminal.dtype import DType
from luminal.errors import BackendError
from luminal.hlir.op import compute_dtype
from luminal.shape.expr import Expression, ceil_div, maximum, num, z

VECTOR_BYTES = 16
X_SMEM_MAX = 48 << 10  # static shared memory per block: x is staged only when it fits
MAX_BATCH_REGS = 128  # 32-bit registers the W and x batches of one lane may hold
SMS = 132  # streaming multiprocessors of the H200: a capped grid is sized in waves of them (elsewhere: more waves)

# per dtype: elements per 16-byte vector, and C that folds vector pair (wv, xv) into `acc`
_DOT = {
    DType.bf16: (8, "const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&wv);\n"
                    "  const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&xv);\n"
                    "#pragma unroll\n  for (int q = 0; q < 4; ++q) {\n"
                    "    const float2 a = __bfloat1622float2(wp[q]), b = __bfloat1622float2(xp[q]);\n"
                    "    acc = fmaf(a.x, b.x, acc); acc = fmaf(a.y, b.y, acc);\n  }"),
    DType.f16: (8, "const __half2* wp = reinterpret_cast<const __half2*>(&wv);\n"
                   "  const __half2* xp = reinterpret_cast<const __half2*>(&xv);\n"
                   "#pragma unroll\n  for (int q = 0; q < 4; ++q) {\n"
                   "    const float2 a = __half22float2(wp[q]), b = __half22float2(xp[q]);\n"
                   "    acc = fmaf(a.x, b.x, acc); acc = fmaf(a.y, b.y, acc);\n  }"),
    DType.f32: (4, "const float4 a = *reinterpret_cast<const float4*>(&wv);\n"
                   "  const float4 b = *reinterpret_cast<const float4*>(&xv);\n"
                   "  acc = fmaf(a.x, b.x, acc); acc = fmaf(a.y, b.y, acc); acc = fmaf(a.z, b.z, acc);"
                   " acc = fmaf(a.w, b.w, acc);"),
}  # fmt: skip

# W through the non-coherent path without allocating in L1, with a 256-byte L2 prefetch (sm_80+)
_STREAM_LOAD = """__device__ __forceinline__ uint4 KNAME_ldw(const uint4* p) {
#if __CUDA_ARCH__ >= 800
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
#else
  return __ldg(p);
#endif
}
"""


# the first bytes of a row into L2 (sm_90 bulk prefetch: one instruction, no registers, no wait)
_PREFETCH = """__device__ __forceinline__ void KNAME_prefetch(const void* p, const unsigned bytes) {
#if __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p), "r"(bytes) : "memory");
#endif
}
"""


@dataclass(frozen=True)
class GemvVariant:
    """A schedule of the GEMV generator: block shape, work per warp, loads in flight, load paths."""

    warps: int = 8  # warps per block
    rows: int = 1  # rows per warp group (each x vector is loaded once for all of them)
    split: int = 1  # warps per row group (split-k: lane slices interleave, partials meet in smem)
    unroll: int = 4  # W vectors per lane per row loaded before any is consumed (if ptxas keeps it)
    stream: bool = False  # W via ld.global.nc.L1::no_allocate.L2::256B instead of __ldg
    x_smem: bool = False  # x staged per block in shared memory (when k fits in X_SMEM_MAX)
    occupancy: int = 0  # blocks per SM promised to ptxas (__launch_bounds__); 0 = ptxas's choice
    waves: int = 0  # grid capped at waves x SMS x occupancy blocks looping over tiles; 0 = a block per tile
    prefetch: int = 0  # batches of each row of the block's first tile prefetched into L2 before x is staged
    ahead: bool = False  # each tile prefetches the next tile into L2 (AHEAD_BYTES a block); the first, its rest
    early: bool = False  # the first tile's first batch loaded into registers before x is staged (the prologue)
    depth: int = 1  # batches of W in flight per lane: 2 = the next batch loaded before this one is consumed

    def __post_init__(self):
        if min(self.warps, self.rows, self.split, self.unroll) < 1 or self.warps * 32 > 1024:
            raise BackendError(f"GemvVariant {self}: counts must be >= 1 and a block at most 1024 threads")
        if min(self.waves, self.prefetch, self.occupancy) < 0 or (self.waves and not self.occupancy):
            raise BackendError(f"GemvVariant {self}: a capped grid (waves) needs an occupancy promise")
        if self.warps % self.split:
            raise BackendError(f"GemvVariant {self}: split = {self.split} must divide warps = {self.warps}")
        if self.depth not in (1, 2) or (self.ahead and not self.waves):
            raise BackendError(f"GemvVariant {self}: depth is 1 or 2; `ahead` walks tiles (needs waves)")
        if 4 * self.unroll * (self.rows * self.depth + 1) > MAX_BATCH_REGS:
            raise BackendError(f"GemvVariant {self}: a batch of {self.unroll} x {self.rows + 1} vectors spills")

    @property
    def block(self) -> int:
        return 32 * self.warps

    @property
    def rows_per_block(self) -> int:
        return self.warps // self.split * self.rows

    @property
    def name(self) -> str:
        tags = ("-na" if self.stream else "") + ("-xs" if self.x_smem else "")
        tags += f"-o{self.occupancy}" if self.occupancy else ""
        tags += f"-g{self.waves}" if self.waves else ""
        tags += f"-p{self.prefetch}" if self.prefetch else ""
        tags += (
            ("-a" if self.ahead else "") + ("-e" if self.early else "") + (f"-d{self.depth}" if self.depth > 1 else "")
        )
        return f"w{self.warps}r{self.rows}s{self.split}u{self.unroll}{tags}"


# The old schedule first (one warp per row, 8 rows per block, ptxas free to interleave loads and
# multiply-adds); then the knobs one or two at a time. The occupancy promise is what makes ptxas
# keep a batch in flight: without it, it schedules for 32 registers and ~1-2 W loads per lane.
VARIANTS: dict[str, GemvVariant] = {
    v.name: v
    for v in (
        GemvVariant(),
        GemvVariant(occupancy=4),
        GemvVariant(unroll=8, occupancy=2),
        GemvVariant(split=2, occupancy=4),
        GemvVariant(split=2, stream=True, occupancy=4),
        GemvVariant(split=4, stream=True, occupancy=4),
        GemvVariant(split=2, unroll=8, stream=True, occupancy=2),
        GemvVariant(rows=2, stream=True, occupancy=3),
        GemvVariant(split=2, stream=True, x_smem=True, occupancy=4),
        GemvVariant(warps=4, split=2, stream=True, occupancy=8),
        # a grid of one wave walking the rows (x staged once per block); gemv.looped picks among these
        GemvVariant(unroll=8, stream=True, x_smem=True, occupancy=4, waves=1),
        GemvVariant(split=2, stream=True, x_smem=True, occupancy=4, waves=1),
        GemvVariant(split=4, stream=True, x_smem=True, occupancy=4, waves=1),
        GemvVariant(unroll=8, stream=True, x_smem=True, occupancy=4, waves=1, prefetch=2),
        # session 6's knobs (looped's AHEAD / EARLY / PIPE / WIDE): L2 a tile ahead, the first batch before x
        # is staged, the next batch in flight while one is consumed (depth 2); early at depth 1 with split-k
        GemvVariant(unroll=8, stream=True, x_smem=True, occupancy=4, waves=1, prefetch=2, ahead=True),
        GemvVariant(unroll=4, stream=True, x_smem=True, occupancy=4, waves=1, prefetch=2, depth=2),
        GemvVariant(unroll=4, stream=True, x_smem=True, occupancy=4, waves=1, prefetch=2, early=True, depth=2),
        GemvVariant(unroll=8, stream=True, x_smem=True, occupancy=2, waves=1, prefetch=2, depth=2),
        GemvVariant(split=4, unroll=1, stream=True, x_smem=True, occupancy=4, waves=1, prefetch=2, early=True),
        GemvVariant(split=2, unroll=2, stream=True, x_smem=True, occupancy=4, waves=1, ahead=True, early=True, depth=2),
    )
}
BASELINE = VARIANTS["w8r1s1u4"]
# the switch: the H200 sweep (docs/perf.md, 2026-12-02) ranked w8r1s4u4-na-o4 first for f32 and bf16 by
# its worst shape (92.9% / 82.6% of copy; the baseline 65.4% / 56.3%); f16 shares the bf16 layout
_BEST = VARIANTS["w8r1s4u4-na-o4"]
DEFAULT: dict[DType, GemvVariant] = {DType.f32: _BEST, DType.f16: _BEST, DType.bf16: _BEST}


@dataclass(frozen=True)
class KernelGemv(KernelOp):
    n: Expression
    k: Expression
    ld: Expression
    dtype: DType
    n_inputs: ClassVar[int] = 2  # (x, W)
    prefix: ClassVar[str] = "gemv"

    def out_dtype(self, in_dtypes):
        return self.dtype

    def out_size(self) -> Expression:
        return self.n

    def input_views(self):
        return (((self.k,), (z,)), ((self.n, self.k), (self.ld * z, z)))

    def reference(self, ins, in_dtypes, env):
        n, k, ld = (int(e.evaluate(env)) for e in (self.n, self.k, self.ld))
        acc = compute_dtype(self.dtype)
        x = ins[0][:k].astype(acc)
        w = (
            np.lib.stride_tricks.as_strided(ins[1], (n, k), (ld * ins[1].itemsize, ins[1].itemsize))
            if n
            else np.zeros((0, k))
        )
        return (w.astype(acc) @ x).astype(self.dtype.np)

    def render(self, slots, variant: GemvVariant | None = None) -> Kernel:
        dt = self.dtype
        check_gemv(type(self).__name__, dt, self.k, (self.ld,))
        v = variant or DEFAULT[dt]
        src = GemvSource(dtype=dt, kv=self.k.value // _DOT[dt][0], weights=(("in1", self.ld.value),),
                         n=c_expr(self.n), zip=True, x="in0", params=(dt, dt),
                         store=f"out[row] = {store(dt, 'acc0')};", out=dt)  # fmt: skip
        name, code = name_code(self.prefix, gemv_code(v, src, dim_decls(self.dim_names(), slots)))
        return Kernel(code, (Launch(name, gemv_grid(v, self.n), v.block),), headers(dt))


PREFETCH_BYTES = 32 << 10  # L2 prefetch per block before x is staged: ~17 MB over a 528-block wave, a third of L2
AHEAD_BYTES = 64 << 10  # `ahead`: L2 prefetch per block per tile (a prefix of each row of the next tile)
FILL = 0.6  # split-k until the blocks fill this fraction of a wave (SMS x occupancy)
# KernelGemvFused's schedule knobs (`looped`), each OFF until the H200 says it wins (bench/gemv_fused.py
# --schedules looped,ahead,early,early-ahead,wide,pipe times each; docs/perf.md, session 6):
AHEAD = False  # GemvVariant.ahead: every tile prefetches the block's next tile into L2
EARLY = True  # GemvVariant.early: the first batch of W in flight while the prologue computes x (with PIPE's stream),
# where it won on the H200 (session 6): 16-bit ops (f32 spills) with a prologue or rows of >= EARLY_ROW_BYTES
# (o_proj-sized rows lost 15%)
EARLY_ROW_BYTES = 16 << 10
PIPE = False  # depth 2 at half the unroll (64 registers, 4 blocks per SM): never a lane without a batch in flight
WIDE = False  # depth 2 at the whole unroll, 2 blocks per SM (128 registers): twice the bytes in flight per lane


def looped(n: Expression, kv: int, m: int, unroll: int = 4, occupancy: int = 4, early: bool = False) -> GemvVariant:
    """The looping schedule for n rows of kv vectors, m weights per output row (gemvfused.py):
    8 warps, a warp per row unless that leaves the wave under FILL (then 2, 4 or 8 warps per row,
    while every lane keeps a whole batch), a grid of one wave walking the tiles, the first tile's
    first batches prefetched into L2 while the block stages x. The module knobs above change it; `early`
    (the caller's EARLY verdict for its op) issues the first batch before x is ready."""
    depth = 2 if PIPE or WIDE or early else 1  # (early at depth 1 spills 24-36 bytes at 64 registers: ptxas)
    if WIDE:
        occupancy = max(1, occupancy // 2)
    elif PIPE or early:  # (a whole batch held across the prologue spills at 64 and at 80 registers)
        unroll = max(1, unroll // 2)
    split, cap = 1, SMS * occupancy
    while split < 8 and kv >= 32 * unroll * 2 * split and (not n.is_num or n.value * split < 8 * FILL * cap):
        split *= 2
    per_batch = (8 // split) * m * unroll * 32 * split * VECTOR_BYTES  # the tile's first batch, every row
    prefetch = max(1, PREFETCH_BYTES // per_batch)
    return GemvVariant(8, 1, split, unroll, True, True, occupancy, 1, prefetch, AHEAD, early, depth)


def gemv_grid(v: GemvVariant, n: Expression) -> Expression:
    """Blocks of variant v over n rows: one per tile, or, when capped (`waves`), as few as spread the
    tiles evenly (every block walks the same number of tiles, give or take one)."""
    tiles = ceil_div(n, num(v.rows_per_block))
    if not v.waves:
        return tiles
    return ceil_div(tiles, maximum(ceil_div(tiles, num(SMS * v.occupancy * v.waves)), num(1)))


def check_gemv(op: str, dt: DType, k: Expression, lds: tuple[Expression, ...]) -> None:
    """What every generated GEMV needs (the rules guard it): a vectorized dtype, k and each row
    stride literal multiples of one 16-byte vector, rows no shorter than k."""
    if dt not in _DOT:
        raise BackendError(f"{op} on {dt}: only f32, f16 and bf16 have a vectorized GEMV")
    per = _DOT[dt][0]
    for name, e in (("k", k), *(("ld", ld) for ld in lds)):
        if not e.is_num or e.value % per:
            raise BackendError(f"{op}: {name} = {e} must be a literal multiple of {per} (the rule guards this)")
    for ld in lds:
        if ld.value < k.value:
            raise BackendError(f"{op}: row stride ld = {ld} is shorter than the row k = {k}")


@dataclass(frozen=True)
class GemvSource:
    """What one generated GEMV computes (the variant says how): dot products of x (kv 16-byte
    vectors) with rows of the `weights` (C pointer name, row stride in elements).

    `zip`: every output row `row` < n takes the dot product of x with row `row` of each weight,
    as acc0 .. acc{m-1} (one weight: the plain GEMV); otherwise the weights' rows are stacked
    (concatenated output, n = sum of `ns`): output row `row` is one dot product, acc0, with the
    row of the weight it falls in. `x`: the C pointer x is read from, or None when `prologue`
    fills the shared array `xs` (kv vectors) before the main loop. `store`: C statements writing
    output row `row` from acc0..; `params`: the dtypes of in0, in1, ..."""

    dtype: DType
    kv: int
    weights: tuple[tuple[str, int], ...]
    n: str
    zip: bool
    x: str | None
    params: tuple[DType, ...]
    store: str
    out: DType
    ns: tuple[str, ...] = ()
    prologue: str = ""


def gemv_code(v: GemvVariant, src: GemvSource, decls: str) -> str:
    """CUDA C of one variant computing `src`. Per-row state lives in arrays indexed by unrolled
    constants (registers): R = rows x (weights per output row) dot products per warp group. The
    block walks its tiles (rows_per_block rows each) blockIdx.x, + gridDim.x, ...: one tile per
    block when the grid covers every row (`waves` = 0), several when it is capped (`gemv_grid`).
    Under PDL the first tile's L2 prefetch runs before the entry waits for the kernel before it
    (PDL_SYNC): it reads only dims and weight addresses, and a prefetch into L2 (the coherence point)
    cannot hand a later load stale bytes, so it overlaps the previous kernel's tail."""
    dt, kv = src.dtype, src.kv
    m = len(src.weights) if src.zip else 1
    rows, unroll, R, rpb = v.rows, v.unroll, v.rows * m, v.rows_per_block
    if 4 * unroll * (R * v.depth + 1) > MAX_BATCH_REGS:
        raise BackendError(f"GEMV {v.name}: a batch of {unroll} x {R + 1} vectors spills (fewer weights or rows)")
    step, batch = 32 * v.split, v.unroll * 32 * v.split  # lane stride, vectors per batch of a row
    full, tail = kv // batch, kv % batch  # whole batches (every lane in range), then a guarded one
    x_smem = src.x is None or (v.x_smem and kv * VECTOR_BYTES <= X_SMEM_MAX)
    ldw = "KNAME_ldw" if v.stream else "__ldg"
    ldx = "xs[i]" if x_smem else "__ldg(x + i)"
    bounds = f"{v.block}, {v.occupancy}" if v.occupancy else f"{v.block}"
    xdecl = f"  __shared__ uint4 xs[{kv}];\n"
    if src.x is None:  # x computed by the whole block into xs
        stage = f"{xdecl}  {{\n{src.prologue}  }}\n  __syncthreads();\n"
    else:
        stage = f"  const uint4* __restrict__ x = reinterpret_cast<const uint4*>({src.x});\n"
        if x_smem:
            stage = (f"{xdecl}{stage}  for (int i = threadIdx.x; i < {kv}; i += {v.block}) xs[i] = __ldg(x + i);\n"
                     "  __syncthreads();\n")  # fmt: skip
    loop = f"#pragma unroll 1\n      for (int c = 0; c < {full}; ++c) batch(c * {batch} + v0, false);\n" if full else ""
    loop += f"      batch({full * batch} + v0, true);\n" if tail else ""
    if src.zip:  # row r of the group, weight q: dot product r * m + q
        ptr = [f"{p} + rr * {ld}LL" for p, ld in src.weights]
    else:  # the weight whose stacked rows hold row rr
        sel, off = [], "0LL"
        for (p, ld), nq in zip(src.weights, src.ns, strict=True):
            sel.append((f"rr < {off} + ({nq})", f"{p} + (rr - ({off})) * {ld}LL"))
            off = f"{off} + ({nq})"
        pick = sel[-1][1]
        for cond, p in reversed(sel[:-1]):
            pick = f"{cond} ? {p} : {pick}"
        ptr = [pick]
    ptrs = "".join(f"        w[r * {m} + {q}] = reinterpret_cast<const uint4*>({p});\n" for q, p in enumerate(ptr))
    prefetch = ""
    pbytes = min(kv, v.prefetch * batch) * VECTOR_BYTES  # a prefix of each row: the first batches
    if v.prefetch and v.waves:  # lane d < R of the group's first warp: the first tile's dot product d
        pick = pick_of(ptr, m)
        prefetch = f"""  if (warp % {v.split} == 0 && lane < {R}) {{  // the first tile into L2 while x is staged
    const int r = lane / {m}, q = lane % {m};
    const long long row = (long long)blockIdx.x * {rpb} + (warp / {v.split}) * {rows} + r;
    if (row < n) {{
      const long long rr = row;
      KNAME_prefetch({pick}, {pbytes});
    }}
  }}
"""
    if v.split == 1:
        combine = f"""    if (lane == 0)
#pragma unroll
      for (int r = 0; r < {rows}; ++r) {{
        const long long row = row0 + r;
        if (row < n) {{ {"".join(f"const float acc{q} = acc[r * {m} + {q}]; " for q in range(m))}{src.store} }}
      }}
"""
        part = ""
    else:  # two buffers: a tile's partials are written while the previous tile's may still be read
        part = f"  __shared__ float part[2][{v.warps * R}];\n"
        combine = f"""    float* const pt = part[it & 1];
    if (lane == 0)
#pragma unroll
      for (int r = 0; r < {R}; ++r) pt[warp * {R} + r] = acc[r];
    __syncthreads();
    if (threadIdx.x < {rpb}) {{  // row r of row group g
      const int g = threadIdx.x / {rows}, r = threadIdx.x % {rows};
      const long long row = tile * {rpb} + threadIdx.x;
      float sum[{m}] = {{}};
#pragma unroll
      for (int q = 0; q < {m}; ++q)
#pragma unroll
        for (int s = 0; s < {v.split}; ++s) sum[q] += pt[(g * {v.split} + s) * {R} + r * {m} + q];
      if (row < n) {{ {"".join(f"const float acc{q} = sum[{q}]; " for q in range(m))}{src.store} }}
    }}
"""
    it = (", it = 0", ", ++it") if v.split > 1 else ("", "")  # it: the tile's partials buffer
    ahead = _ahead(v, R, m, rows, rpb, kv, pbytes, pick_of(ptr, m)) if v.ahead else ""
    head = (_STREAM_LOAD if v.stream else "") + (_PREFETCH if prefetch or ahead else "")
    params = "".join(f", const {d.cuda}* __restrict__ in{j}" for j, d in enumerate(src.params))
    point = f"""      const uint4* __restrict__ w[{R}];
#pragma unroll
      for (int r = 0; r < {rows}; ++r) {{
        const long long rr = row0 + r < n ? row0 + r : n - 1;
{ptrs}      }}
"""
    stream = f"""      // one batch from vector `base`: every W load of every row, then x, then the multiply-adds
      auto batch = [&](const int base, const bool guard) {{
        uint4 xv[{unroll}], wv[{R}][{unroll}];
#pragma unroll
        for (int j = 0; j < {unroll}; ++j)
#pragma unroll
          for (int r = 0; r < {R}; ++r) {{
            const int i = base + j * {step};
            wv[r][j] = !guard || i < {kv} ? {ldw}(w[r] + i) : make_uint4(0u, 0u, 0u, 0u);
          }}
#pragma unroll
        for (int j = 0; j < {unroll}; ++j) {{
          const int i = base + j * {step};
          xv[j] = !guard || i < {kv} ? {ldx} : make_uint4(0u, 0u, 0u, 0u);
        }}
#pragma unroll
        for (int j = 0; j < {unroll}; ++j)
#pragma unroll
          for (int r = 0; r < {R}; ++r) acc[r] = KNAME_dot(wv[r][j], xv[j], acc[r]);
      }};
{loop}"""

    def body(pre: bool) -> str:  # one tile; `pre`: the first, whose first batch `early` loaded
        return f"""    const long long row0 = tile * {rpb} + (warp / {v.split}) * {rows};
{ahead}    float acc[{R}] = {{}};
    if (row0 < n) {{  // uniform per warp; rows past n re-read row n - 1 and are not stored
{point}{_pipelined(v, R, kv, full, tail, step, batch, ldw, ldx, pre) if v.early or v.depth > 1 else stream}    }}
#pragma unroll
    for (int r = 0; r < {R}; ++r)
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
{combine}"""

    early = first = ""
    start = ("blockIdx.x", it[0])
    if v.early:  # after the PDL sync: W may be written by the kernel before (only an L2 prefetch may precede it)
        early = f"""  uint4 we[{R}][{unroll}];  // the first tile's first batch, in flight while x is staged
  {{
    const long long row0 = (long long)blockIdx.x * {rpb} + (warp / {v.split}) * {rows};
    if (row0 < n) {{
{point}#pragma unroll
      for (int j = 0; j < {unroll}; ++j)
#pragma unroll
        for (int r = 0; r < {R}; ++r) {{
          const int i = v0 + j * {step};
          we[r][j] = {"" if full else f"i >= {kv} ? make_uint4(0u, 0u, 0u, 0u) : "}{ldw}(w[r] + i);
        }}
    }}
  }}
"""
        # the first tile peeled (its registers `we` die with it), then the loop over the others
        first = f"""  {{
    const long long tile = blockIdx.x;{" const long long it = 0;" if v.split > 1 else ""}
    if (tile * {rpb} < n) {{
{body(True)}    }}
  }}
"""
        start = ("blockIdx.x + gridDim.x", ", it = 1" if v.split > 1 else "")
    return f"""{head}__device__ __forceinline__ float KNAME_dot(const uint4 wv, const uint4 xv, float acc) {{
  {_DOT[dt][1]}
  return acc;
}}
extern "C" __global__ void __launch_bounds__({bounds})
KNAME({src.out.cuda}* __restrict__ out{params}, const long long* __restrict__ dims) {{
{decls}  const long long n = {src.n};
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int v0 = (warp % {v.split}) * 32 + lane;  // this lane's first vector in its slice
{prefetch}  {PDL_SYNC}  // PDL: x and the outputs only after the kernel before has completed (kernel.py)
{early}{stage}{part}{first}#pragma unroll 1
  for (long long tile = {start[0]}{start[1]}; tile * {rpb} < n; tile += gridDim.x{it[1]}) {{  // uniform per block
{body(False)}  }}
}}
"""


def pick_of(ptr: list[str], m: int) -> str:
    """C of dot product q's weight row rr (q, rr in scope): the one pointer, or a choice among m."""
    return ptr[0] if m == 1 else " : ".join(f"q == {q} ? {p}" for q, p in enumerate(ptr[:-1])) + f" : {ptr[-1]}"


def _ahead(v: GemvVariant, R: int, m: int, rows: int, rpb: int, kv: int, pbytes: int, pick: str) -> str:
    """`ahead`: lane d < R of the group's first warp prefetches dot product d's row of the block's
    next tile into L2, and in the first tile the rest of its own row (past the prefix the entry
    prefetched), so DRAM holds requests that no lane's load-to-use chain waits on. At most
    AHEAD_BYTES a block each time (a prefix of every row): ~34 MB over a 528-block wave, inside L2."""
    cap = max(VECTOR_BYTES, AHEAD_BYTES // (rpb * m) // VECTOR_BYTES * VECTOR_BYTES)
    row_bytes = kv * VECTOR_BYTES
    nxt, rest = min(row_bytes, cap), min(row_bytes - pbytes, cap)
    own = f"""      if (tile == blockIdx.x && row0 + r < n) {{  // the first tile: past the prefix prefetched at entry
        const long long rr = row0 + r;
        KNAME_prefetch(reinterpret_cast<const char*>({pick}) + {pbytes}, {rest});
      }}
""" if rest > 0 else ""  # fmt: skip
    return f"""    if (warp % {v.split} == 0 && lane < {R}) {{  // L2 a tile ahead
      const int r = lane / {m}, q = lane % {m};
      const long long next = row0 + (long long)gridDim.x * {rpb} + r;
      if (next < n) {{
        const long long rr = next;
        KNAME_prefetch({pick}, {nxt});
      }}
{own}    }}
"""


def _pipelined(v: GemvVariant, R: int, kv: int, full: int, tail: int, step: int, batch: int, ldw: str,
               ldx: str, pre: bool) -> str:  # fmt: skip
    """The W stream of one tile as batches b = 0 .. nb - 1 (`load` into registers, `use`: x and the
    multiply-adds; the last one guarded past k when partial). depth 1: load, use, load, use ...;
    depth 2: batch b + 1 is loaded before batch b is used (two register buffers), so a lane always
    has a batch in flight. `pre`: the first tile of an `early` schedule, whose batch 0 is in `we`."""
    u, nb = v.unroll, full + (1 if tail else 0)
    inside = f"b < {full} || i < {kv}" if tail else "true"
    zero = "make_uint4(0u, 0u, 0u, 0u)"
    code = f"""      // batch b: every W load of every row (load), then x and the multiply-adds (use)
      auto load = [&](uint4 (&wv)[{R}][{u}], const int b) {{
#pragma unroll
        for (int j = 0; j < {u}; ++j)
#pragma unroll
          for (int r = 0; r < {R}; ++r) {{
            const int i = b * {batch} + v0 + j * {step};
            wv[r][j] = {inside} ? {ldw}(w[r] + i) : {zero};
          }}
      }};
      auto use = [&](const uint4 (&wv)[{R}][{u}], const int b) {{
        uint4 xv[{u}];
#pragma unroll
        for (int j = 0; j < {u}; ++j) {{
          const int i = b * {batch} + v0 + j * {step};
          xv[j] = {inside} ? {ldx} : {zero};
        }}
#pragma unroll
        for (int j = 0; j < {u}; ++j)
#pragma unroll
          for (int r = 0; r < {R}; ++r) acc[r] = KNAME_dot(wv[r][j], xv[j], acc[r]);
      }};
      uint4 wa[{R}][{u}]{f", wb[{R}][{u}]" if v.depth > 1 else ""};
"""
    if v.depth == 1:  # batch 0 already in `we` (the first tile of an `early` schedule) or loaded now
        return (
            code
            + f"""      {"use(we, 0);" if pre else "load(wa, 0); use(wa, 0);"}
#pragma unroll 1
      for (int b = 1; b < {nb}; ++b) {{ load(wa, b); use(wa, b); }}
"""
        )
    first = f"""#pragma unroll
      for (int j = 0; j < {u}; ++j)
#pragma unroll
        for (int r = 0; r < {R}; ++r) wa[r][j] = we[r][j];
""" if pre else "      load(wa, 0);\n"  # fmt: skip
    last = f"      use(wa, {nb - 1});\n" if nb % 2 else ""
    return (
        code
        + first
        + f"""#pragma unroll 1
      for (int b = 0; b + 1 < {nb}; b += 2) {{
        load(wb, b + 1);
        use(wa, b);
        if (b + 2 < {nb}) load(wa, b + 2);
        use(wb, b + 1);
      }}
{last}"""
    )


GEMV_KERNELS = (KernelGemv,)
