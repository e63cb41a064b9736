"""Split-KV flash-decoding for KernelAttention (attention.py) in one launch: CUDA C of the decode
kernel (its last split to arrive merges the others), and the C pieces the prefill kernel shares
(dtype conversions, the q index).

Decode kernel: one block of THREADS threads per (kv head, group chunk of R query heads, query row
i, KV split). The block reads its slice of the visible key range [lo, hi) of row i once and uses
every K and V load for all R query heads of the chunk (GQA sharing). A key's head_dim values are
spread over LPK consecutive lanes, one 16-byte vector each (two for f32 at head_dim 256), so a
warp load covers 32 / LPK whole keys; the block's NS = THREADS / LPK lane groups ("slots") take
keys slot, slot + NS, ..., U per loop step: every lane issues its 2U K and V loads before any
arithmetic (U = 4: 128 bytes in flight per lane, 64 KB per SM at 4 blocks), then the dot
products (a butterfly of shuffles over the LPK lanes), the online softmax (running max m, sum l
and accumulator in f32 registers, per slot: no barrier in the loop) and the V sums. A step past
the split's end rereads its last key and masks it. The slots merge in shared memory at the end.
Registers: q and the accumulator take 2 R * head_dim / LPK floats (64 at R = 4), the loads 8U;
`__launch_bounds__(THREADS, 4)` holds the kernel to 128 (ptxas: 128 for 16-bit dtypes, 111-125
for f32, no spills; test_attention_kernels.py checks).
The grid is fixed for the plan (NSPLIT splits per row, sized for target_blocks blocks at one query
row: one wave of 4 blocks per SM); the live length comes from the dims buffer and fixes how many
splits are used (chunks of at least min_chunk keys, whole loop steps), so the grid never changes
with p. With one used split (always at NSPLIT = 1, the f32 prefill path) the block writes the
output; otherwise it writes (acc, m, l) partials to scratch, fences, and takes a ticket of its row
block (atomicAdd on a word of the op's zeroed buffer, KernelOp.zeroed_bytes); the block that draws
the last ticket resets the word to 0 (so a CUDA graph replays from zeros) and merges the used
splits (`merge_code`: one warp per query head weighs the splits, then each thread sums the
weighted partials of 4 consecutive outputs, 16-byte loads through L2, 8 in flight). This replaced
a second, combine launch (3.7-3.9 us per layer on the H200, session 5). Scores are in log2 units
(q is pre-multiplied by scale * log2 e), so the exponentials are exp2f. KernelAttentionRope's q is
rotated as it is loaded (`q_value`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from luminal.backends.cuda.kernel import c_expr, index_c, load, store
from luminal.dtype import DType
from luminal.errors import BackendError
from luminal.shape.expr import Expression

THREADS = 128
MAX_SPLITS = 128
LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class PrefillSchedule:
    """The tensor-core prefill kernel's tiling (attention_prefill.py). The field defaults are session
    6's tiling: 4 warps of 16 query rows of one head, Q fragments in registers, blocks longest-first per
    head; `PREFILL` below is the one the plans use."""

    warps: int = 4  # warps per block
    tiles: int = 1  # 16-row MMA tiles per warp (2: each K / V fragment feeds 32 rows; Q then in shared memory)
    pack: int = 1  # query heads of a GQA group per block (a power of 2): their rows share every K / V tile
    lpt: bool = False  # blocks longest-first over all heads (else longest-first within each head)
    min_blocks: int = 0  # __launch_bounds__ promise at head_dim <= 128 (0: none)
    # barriers per key tile: 4 (K and V each freed and refilled in a phase of its own), 2 (FA2's order)
    # or 1 (K and V double-buffered: tile j+1 loads during all of tile j)
    syncs: int = 4

    @property
    def name(self) -> str:
        name = "pre" + (str(self.min_blocks) if self.min_blocks else "")
        if (self.warps, self.tiles, self.pack, self.lpt, self.syncs) != (4, 1, 1, False, 4):
            name += f"w{self.warps}t{self.tiles}g{self.pack}s{self.syncs}" + ("l" if self.lpt else "")
        return name


# the prefill tiling the plans use (the sweep's `PREFILL_SCHEDULES` are the candidates: measure with
# `bench/attention.py --only prefill --sweep`, then set it here);
# measured on the H200 (session 7, bench/attention.py --only prefill --sweep, 8b heads): FA2's two tiles a
# warp, 4 GQA heads a block, longest-first, 2 barriers a key tile: 1.12 / 1.66 / 1.36x session 6's
# tiling at 512 / 2k / 8k = 1.01 / 1.54 / 1.10x torch's flash backend (docs/perf.md)
PREFILL = PrefillSchedule(tiles=2, pack=4, lpt=True, syncs=2)


@dataclass(frozen=True)
class DecodeVariant:
    """A schedule of KernelAttention's kernels, mostly the decode kernel's (bench/attention.py --sweep
    times them; DECODE is the default)."""

    max_rows: int = 4  # query heads of a GQA group one block serves (fewer: fewer registers, more blocks)
    target_blocks: int = 528  # blocks per query row at one kv split each: 4 per SM on the H200's 132 SMs
    min_chunk: int = 64  # keys per split at least: below that a split's fixed cost dominates
    unroll: int = 4  # keys per lane and loop step: 2 * unroll 16-byte loads (K and V) in flight per lane
    min_blocks: int = 4  # __launch_bounds__ promise: resident blocks per SM (4: <= 128 registers)
    # loop steps of K / V rows bulk-prefetched into L2 ahead of the loads (0: none; measured on the
    # H200, session 5: the prefetch a step ahead made the kernel 1.10-1.20x slower at 1k-32k keys)
    prefetch: int = 0
    prefill: PrefillSchedule = PREFILL  # the prefill kernel's tiling
    # the tensor-core split kernel (attention_decode_tc.py) for bf16 / f16: its blocks per query row at
    # one kv split each (0: the CUDA-core kernel above), and its shared-memory buffers per warp
    tc: int = 0
    stages: int = 3

    @property
    def name(self) -> str:
        tag = f"r{self.max_rows}b{self.target_blocks}c{self.min_chunk}u{self.unroll}m{self.min_blocks}p{self.prefetch}"
        if self.tc:
            tag = f"tc{self.tc}s{self.stages}"
        return tag + (f"-{self.prefill.name}" if self.prefill != PREFILL else "")


# prefill tilings the bench sweeps (session 7; the one equal to PREFILL is the default's): session
# 6's; FA2's (128 rows of one head, 32 per warp); the same over the 4 heads of a GQA group (32 rows
# each: half the keys wasted on the diagonal) with 4, 2 and 1 barriers per key tile; session 6's
# warps over 4 packed heads; 8 warps of 16 rows; session 6's tiling longest-first over all heads
# with 4, 2 and 1 barriers
PREFILL_SCHEDULES = (PrefillSchedule(), PrefillSchedule(tiles=2, lpt=True), PrefillSchedule(tiles=2, pack=4, lpt=True),
                     PrefillSchedule(tiles=2, pack=4, lpt=True, syncs=2),
                     PrefillSchedule(tiles=2, pack=4, lpt=True, syncs=1), PrefillSchedule(pack=4, lpt=True),
                     PrefillSchedule(warps=8, lpt=True), PrefillSchedule(lpt=True),
                     PrefillSchedule(lpt=True, syncs=2), PrefillSchedule(lpt=True, syncs=1))  # fmt: skip
# the decode schedule the plans use: the tensor-core split kernel, 264 blocks per query row (2 per SM),
# 3 ring stages; measured on the H100 (session 10, bench/attention.py --only decode --sweep, 8b heads):
# 1.33 / 1.20 / 1.10 / 1.04x the CUDA-core kernel (DecodeVariant(tc=0)) at 1k / 4k / 16k / 32k keys,
# the only schedule ahead at every context (tc132s4: 1.43 / 1.29x at 1k / 4k but 0.85x at 32k)
DECODE = DecodeVariant(tc=264, stages=3)
VARIANTS = {
    v.name: v
    for v in (DECODE, DecodeVariant(), DecodeVariant(prefetch=1), DecodeVariant(prefetch=2),
              DecodeVariant(unroll=2),
              DecodeVariant(min_chunk=32), DecodeVariant(target_blocks=1056),
              DecodeVariant(max_rows=2, target_blocks=1056, min_blocks=5),
              DecodeVariant(target_blocks=264, min_blocks=2),
              DecodeVariant(prefill=PrefillSchedule(min_blocks=3)),  # 3 blocks per SM: ptxas spills ~60 B at d = 128
              DecodeVariant(tc=132, stages=4), DecodeVariant(tc=132, stages=6), DecodeVariant(tc=396, stages=2),
              DecodeVariant(tc=264, stages=2), DecodeVariant(tc=528, stages=2),
              *(DecodeVariant(prefill=p) for p in PREFILL_SCHEDULES))
}  # fmt: skip


@dataclass(frozen=True)
class Rope:
    """q rotated as the kernel loads it (KernelAttentionRope, attention_rope.py): element e of the
    (s, heads, head_dim) q is dt(xf(e) * cos[ca(e)] + xf(rot(e)) * sin[sb(e)]) with xf(e) = f32(x[xst(e)]),
    views over `shape`; rot the flat index (a z-expression) of e's partner."""

    shape: tuple[Expression, ...]
    xst: tuple[Expression, ...]
    ca: tuple[Expression, ...]
    rot: Expression
    sb: tuple[Expression, ...]
    norm: object = None  # attention_norm.QNorm: x is RMS-normed per head first (KernelAttentionNormRope)


@dataclass(frozen=True)
class Spec:
    """KernelAttention's parameters as the generators use them (literals where the code needs them)."""

    n_kv: int
    groups: int
    head_dim: int
    dtype: DType
    s: Expression
    t: Expression
    q_strides: tuple[Expression, ...]  # per axis of (n_kv, groups, s, head_dim), z-expressions
    k_steps: tuple[Expression, Expression]  # (kv-head, key) element steps; head_dim is unit-stride
    v_steps: tuple[Expression, Expression]
    causal: bool
    past: Expression
    window: int
    scale: float
    softcap: float
    variant: DecodeVariant = DECODE
    paged: bool = False  # keys through a page table: inputs (.., rows (s, t) slots, pos (s,) positions)
    rope: Rope | None = None  # q rotated at its load: inputs (x, k, v, cos, sin)


def rows_per_block(sp: Spec) -> int:
    """Query heads of a GQA group one decode block serves: the largest of 4, 3, 2, 1 (at most
    max_rows) dividing groups."""
    return next(r for r in (4, 3, 2, 1) if r <= sp.variant.max_rows and sp.groups % r == 0)


def group_chunks(sp: Spec) -> int:
    return sp.groups // rows_per_block(sp)


def tc(sp: Spec) -> bool:
    """Whether the split path runs the tensor-core kernel (attention_decode_tc.applies)."""
    from luminal.backends.cuda.kernels.attention_decode_tc import applies  # (it imports this module)

    return applies(sp)


def splits(sp: Spec) -> int:
    """KV splits per query row: enough blocks for the variant's target at one query row."""
    target = sp.variant.tc if tc(sp) else sp.variant.target_blocks
    return max(1, min(MAX_SPLITS, math.ceil(target / (sp.n_kv * group_chunks(sp)))))


def split_shared(sp: Spec) -> int:
    """Dynamic shared bytes of the split decode launch (the tensor-core kernel's rings; else 0)."""
    from luminal.backends.cuda.kernels.attention_decode_tc import shared_bytes

    return shared_bytes(sp) if tc(sp) else 0


def decode_lib(sp: Spec) -> str:
    """C the split decode kernel needs once per module beside cvt_code: the tensor-core kernel's
    intrinsics (shared with the prefill kernel, which then leaves them out) or nothing."""
    from luminal.backends.cuda.kernels.attention_prefill import _bits, intrinsics

    return intrinsics(sp.dtype) + _bits(sp.dtype) if tc(sp) else ""


def lane_layout(sp: Spec) -> tuple[int, int, int, int, int]:
    """(vec, nv, dl, lpk, ns): values per 16-byte vector, vectors per lane and key (1, or 2 where
    one vector per lane would need more than a warp: f32 at head_dim 256), head_dim values per lane,
    lanes per key (a power of 2 dividing 32) and key slots per block (keys one load covers)."""
    vec = 16 // sp.dtype.itemsize
    nv = max(1, sp.head_dim // (32 * vec))
    lpk = sp.head_dim // (nv * vec)
    return vec, nv, nv * vec, lpk, THREADS // lpk


def unroll(sp: Spec) -> int:
    """Keys per lane and loop step: the variant's, halved where a key takes two vectors per lane
    (the same loads in flight, and registers for them)."""
    return max(1, sp.variant.unroll // lane_layout(sp)[1])


def cvt_code(dt: DType) -> str:
    """`KNAME_cvt(v, f)`: the values of one 16-byte vector as floats (8 for 16-bit dtypes, 4 for f32);
    `KNAME_prefetch(p, bytes)`: an sm_90 bulk L2 prefetch (one instruction, no register, no wait)."""
    if dt == DType.bf16:
        body = "".join(
            f"  f[{2 * i}] = __uint_as_float(a.{c} << 16); f[{2 * i + 1}] = __uint_as_float(a.{c} & 0xffff0000u);\n"
            for i, c in enumerate("xyzw")
        )
    elif dt == DType.f16:
        body = "".join(
            f"  {{ const float2 h = __half22float2(*reinterpret_cast<const __half2*>(&a.{c})); "
            f"f[{2 * i}] = h.x; f[{2 * i + 1}] = h.y; }}\n"
            for i, c in enumerate("xyzw")
        )
    else:
        body = "".join(f"  f[{i}] = __uint_as_float(a.{c});\n" for i, c in enumerate("xyzw"))
    return f"__device__ __forceinline__ void KNAME_cvt(const uint4 a, float* f) {{\n{body}}}\n" + _PREFETCH


_PREFETCH = """__device__ __forceinline__ void KNAME_prefetch(const void* p, const unsigned bytes) {
#if __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p), "r"(bytes) : "memory");
#endif
}
"""


def q_index(sp: Spec, h: str, g: str, i: str, d: str) -> str:
    """C of q's element index for (kv head, group, row, dim) spelled by the C names given."""
    return " + ".join(f"({c_expr(st, v)})" for st, v in zip(sp.q_strides, (h, g, i, d), strict=True))


def q_value(sp: Spec, h: str, g: str, i: str, d: str) -> str:
    """C float of q's element (kv head, group, row, dim): the stored value, or (sp.rope) x rotated in
    f32 (no FMA contraction: the unfused plan's two products and sum) and rounded to the dtype, as
    the unfused plan stores it."""
    dt = sp.dtype
    if sp.rope is None:
        return load(dt, f"q[{q_index(sp, h, g, i, d)}]")
    if sp.rope.norm is not None:  # a row's statistic first: only _rope_stage computes it
        raise BackendError("a q-norm's q is computed by the decode kernel's q staging, not element by element")
    r, e = sp.rope, f"({q_index(sp, h, g, i, d)})"
    rot = f"({c_expr(r.rot, e)})"
    xa, xb = (load(dt, f"q[{index_c(r.shape, r.xst, z)}]") for z in (e, rot))
    c, sn = index_c(r.shape, r.ca, e), index_c(r.shape, r.sb, e)
    v = f"__fadd_rn(__fmul_rn({xa}, cosv[{c}]), __fmul_rn({xb}, sinv[{sn}]))"
    return load(dt, store(dt, v))


def score_code(sp: Spec, x: str) -> str:
    """C turning a raw dot product `x` (q pre-multiplied by q_scale(sp)) into the log2-unit score."""
    if not sp.softcap:
        return x
    return f"({sp.softcap!r}f * tanhf({x} * {1.0 / sp.softcap!r}f) * {LOG2E!r}f)"


def q_scale(sp: Spec) -> float:
    return sp.scale if sp.softcap else sp.scale * LOG2E


def range_code(sp: Spec, nsplit: int, tag: str) -> str:
    """`KNAME_range_{tag}(T, past, i, &lo, &hi, &chunk)`: the visible keys [lo, hi) of query row i,
    the chunk a split covers (nsplit splits at most), and (returned) the number of splits used."""
    hi = "T"
    if sp.causal:
        hi = "(past + i + 1 < T ? past + i + 1 : T)"
    lo = f"(past + i - {sp.window} + 1 > 0 ? past + i - {sp.window} + 1 : 0LL)" if sp.window else "0LL"
    step, least = lane_layout(sp)[4] * unroll(sp), sp.variant.min_chunk
    if tag == "dec" and tc(sp):  # whole tiles of every warp
        step = THREADS // 32 * 16  # (attention_decode_tc: 4 warps of 16-key tiles)
        least = max(least, step)
    return f"""__device__ __forceinline__ int KNAME_range_{tag}(const long long T, const long long past,
    const long long i, long long* lo, long long* hi, long long* chunk) {{
  *lo = {lo};
  *hi = {hi};
  const long long n = *hi > *lo ? *hi - *lo : 0LL;
  long long c = (n + {nsplit - 1}) / {nsplit};
  if (c < {least}) c = {least};
  c = (c + {step - 1}) / {step} * {step};  // whole block steps
  *chunk = c;
  return (int)((n + c - 1) / c);
}}
"""


def _params(t: str, paged: bool = False, rope: bool = False, norm: bool = False) -> str:
    """Every entry's parameters: (out, q, k, v[, rows, pos][, cos, sin][, q-norm weight], dims, scratch, zeroed) --
    `zeroed` the op's persistent zero-initialised words (KernelOp.zeroed_bytes: the decode kernel's
    tickets)."""
    table = "const int* __restrict__ rows, const int* __restrict__ pos, " if paged else ""
    table += "const float* __restrict__ cosv, const float* __restrict__ sinv, " if rope else ""
    table += f"const {t}* __restrict__ qw, " if norm else ""
    return (f"({t}* __restrict__ out, const {t}* __restrict__ q, const {t}* __restrict__ k, "
            f"const {t}* __restrict__ v, {table}const long long* __restrict__ dims, float* __restrict__ scratch, "
            "unsigned* __restrict__ zeroed)")  # fmt: skip


def ticket_words(sp: Spec, rows: int) -> int:
    """Ticket counters the split decode kernel needs: one per (kv head, group chunk, query row) for
    up to `rows` query rows."""
    return sp.n_kv * group_chunks(sp) * rows


def _past(sp: Spec) -> str:
    """C declaring `past` for query row `i`: the op's past, or pos[i] - i through a page table."""
    if sp.paged:
        return "  const long long past = (long long)pos[i] - i;\n"
    return f"  const long long past = {c_expr(sp.past)};\n"


def _key(sp: Spec, j: str) -> str:
    """C of key j's row index in the k / v buffers: j, or its slot through the page table."""
    return f"(long long)rr[{j}]" if sp.paged else j


def _rope_stage(sp: Spec) -> str:
    """C: the block's R rotated q rows computed once into shared memory (a plain loop: rotating in the
    unrolled register load of q made ptxas spill ~150 bytes)."""
    if sp.rope is None:
        return ""
    if sp.rope.norm is not None:
        from luminal.backends.cuda.kernels.attention_norm import norm_stage  # (it imports this module)

        return norm_stage(sp)
    r_, hd = rows_per_block(sp), sp.head_dim
    return f"""  __shared__ float sm_q[{r_ * hd}];
  for (int o = threadIdx.x; o < {r_ * hd}; o += {THREADS}) {{
    const long long qg = (long long)gc * {r_} + o / {hd}, qd = o % {hd};
    sm_q[o] = {q_value(sp, "h", "qg", "i", "qd")};
  }}
  __syncthreads();
"""


def split_entry(sp: Spec, nsplit: int, tag: str, bounds: str, decls: str, skip: str, table: str) -> str:
    """C: a split decode kernel's range function, entry KNAME_<tag> and prologue, through its key range
    [kb, ke): the block's (split, query row i, group chunk gc, kv head h), the visible keys [lo, hi)
    split `nsplit` ways, and a block past the used splits returns (split 0 writing the rows of a
    query that sees no key). Shared by the CUDA-core and the tensor-core kernels."""
    r_, gc, hd, dt = rows_per_block(sp), group_chunks(sp), sp.head_dim, sp.dtype
    empty = "(T == 0 ? 0.0f : __int_as_float(0x7fffffff))"  # no visible key: 0 for t = 0, else NaN
    return f"""{range_code(sp, nsplit, tag)}extern "C" __global__ void {bounds}
KNAME_{tag}{_params(sp.dtype.cuda, sp.paged, sp.rope is not None, sp.rope is not None and sp.rope.norm is not None)} {{
{decls}  const long long S = {c_expr(sp.s)};
  if (S == 0 || {skip}) return;
  const long long T = {c_expr(sp.t)};
  long long b = blockIdx.x;
  const int split = (int)(b % {nsplit}); b /= {nsplit};
  const long long i = b % S; b /= S;
  const int gc = (int)(b % {gc});
  const long long h = b / {gc};
  if (h >= {sp.n_kv}) return;
{_past(sp)}{table}  long long lo, hi, chunk;
  const int nsplit = KNAME_range_{tag}(T, past, i, &lo, &hi, &chunk);
  if (split >= nsplit) {{  // nsplit is 0 (no visible key): split 0 writes the rows
    if (split == 0)
      for (int o = threadIdx.x; o < {r_ * hd}; o += {THREADS})
        out[((h * {sp.groups} + (long long)gc * {r_} + o / {hd}) * S + i) * {hd} + o % {hd}] = {store(dt, empty)};
    return;
  }}
  const long long kb = lo + (long long)split * chunk;
  const long long ke = kb + chunk < hi ? kb + chunk : hi;  // kb < ke: split < nsplit
"""


def decode_code(sp: Spec, decls: str, nsplit: int, skip: str, direct: bool) -> str:
    """The decode kernel (see the module docstring): `direct` writes the output (entry KNAME_rows,
    one split), else partials (entry KNAME_dec); returns at once when `skip` (C over S) holds."""
    if not direct and tc(sp):
        from luminal.backends.cuda.kernels.attention_decode_tc import decode_tc_code

        return decode_tc_code(sp, decls, nsplit, skip)
    t, hd, dt = sp.dtype.cuda, sp.head_dim, sp.dtype
    r_ = rows_per_block(sp)
    vec, nv, dl, lpk, ns = lane_layout(sp)
    u_ = unroll(sp)
    ksh, ksk = (c_expr(e) for e in sp.k_steps)
    vsh, vsk = (c_expr(e) for e in sp.v_steps)
    tag = "rows" if direct else "dec"
    table = "  const int* rr = rows + i * T;  // this query's slots, in token order\n" if sp.paged else ""
    shfl = "".join(
        f"#pragma unroll\n    for (int u = 0; u < {u_}; ++u)\n#pragma unroll\n"
        f"      for (int r = 0; r < {r_}; ++r) x[u][r] += __shfl_xor_sync(0xffffffffu, x[u][r], {o});\n"
        for o in (lpk >> b for b in range(1, lpk.bit_length()))
    )
    loads = "".join(f"      kr[u][{w}] = pk[{w}]; vr[u][{w}] = pv[{w}];\n" for w in range(nv))
    cvt_k = "".join(f"      KNAME_cvt(kr[u][{w}], f + {w * vec});\n" for w in range(nv))
    cvt_v = cvt_k.replace("kr[", "vr[")
    pf = 0 if sp.paged else sp.variant.prefetch  # (paged: the address would wait for the slot's load)

    def prefetch(base: str, steps, ind: str = "  ") -> str:
        """C: the first lane of each key's lane group bulk-prefetches the K and V rows its slot reads in
        the given loop steps (counted from `base`) into L2."""
        keys = [f"{base} + {st * ns * u_ + u * ns}" for st in steps for u in range(u_)]
        one = "".join(
            f"{ind}  if ({j} < ke) {{ KNAME_prefetch(kp + ({j}) * ({ksk}), {hd * dt.itemsize}u); "
            f"KNAME_prefetch(vp + ({j}) * ({vsk}), {hd * dt.itemsize}u); }}\n"
            for j in keys
        )
        return f"{ind}if (threadIdx.x % {lpk} == 0) {{  // L2 prefetch\n{one}{ind}}}\n" if keys else ""

    result = f"      out[row * {hd} + d] = {store(dt, 'A / L')};\n"
    if not direct:  # one used split writes the output itself; more write partials, the last one merges
        result = (f"      if (nsplit == 1) {{\n  {result}      }} else {{\n"
                  f"        scratch[(row * {nsplit} + split) * {hd} + d] = A;\n"
                  f"        if (d == 0) {{ float* ml = {_ml(sp, nsplit, 'row')} + split * 2; ml[0] = M; ml[1] = L; }}\n"
                  "      }\n")  # fmt: skip
    bounds = f"__launch_bounds__({THREADS}, {sp.variant.min_blocks})"
    entry = split_entry(sp, nsplit, tag, bounds, decls, skip, table)
    return f"""{entry}  const int slot = threadIdx.x / {lpk}, d0 = (threadIdx.x % {lpk}) * {dl};
  const {t}* kp = k + h * ({ksh}) + d0;
  const {t}* vp = v + h * ({vsh}) + d0;
{prefetch("kb + slot", range(pf))}{_rope_stage(sp)}  float qr[{r_}][{dl}], m[{r_}], l[{r_}], acc[{r_}][{dl}];
#pragma unroll
  for (int r = 0; r < {r_}; ++r) {{
    const long long qg = (long long)gc * {r_} + r;
#pragma unroll
    for (int e = 0; e < {dl}; ++e) {{
      const long long qd = d0 + e;
      qr[r][e] = {q_value(sp, "h", "qg", "i", "qd") if sp.rope is None else f"sm_q[r * {hd} + qd]"} * {q_scale(sp)!r}f;
      acc[r][e] = 0.0f;
    }}
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }}
  for (long long base = kb + slot; base < ke + slot; base += {ns * u_}) {{  // same trip count: shuffles see all lanes
{prefetch("base", [pf] if pf else [], "    ")}    uint4 kr[{u_}][{nv}], vr[{u_}][{nv}];
#pragma unroll
    for (int u = 0; u < {u_}; ++u) {{  // all loads first: {u_ * 2 * nv} vectors of 16 bytes in flight per lane
      const long long j = base + u * {ns} < ke ? base + u * {ns} : ke - 1;  // past the chunk: reread, masked
      const uint4* pk = reinterpret_cast<const uint4*>(kp + {_key(sp, "j")} * ({ksk}));
      const uint4* pv = reinterpret_cast<const uint4*>(vp + {_key(sp, "j")} * ({vsk}));
{loads}    }}
    float x[{u_}][{r_}], f[{dl}];
#pragma unroll
    for (int u = 0; u < {u_}; ++u) {{
{cvt_k}#pragma unroll
      for (int r = 0; r < {r_}; ++r) {{
        float a = 0.0f;
#pragma unroll
        for (int e = 0; e < {dl}; ++e) a = fmaf(qr[r][e], f[e], a);
        x[u][r] = a;
      }}
    }}
{shfl}#pragma unroll
    for (int r = 0; r < {r_}; ++r) {{
      float mx = -INFINITY;
#pragma unroll
      for (int u = 0; u < {u_}; ++u) {{
        x[u][r] = base + u * {ns} < ke ? {score_code(sp, "x[u][r]")} : -INFINITY;
        mx = fmaxf(mx, x[u][r]);
      }}
      if (mx > m[r]) {{
        const float c = exp2f(m[r] - mx);
        l[r] *= c;
#pragma unroll
        for (int e = 0; e < {dl}; ++e) acc[r][e] *= c;
        m[r] = mx;
      }}
#pragma unroll
      for (int u = 0; u < {u_}; ++u) {{
        x[u][r] = x[u][r] == -INFINITY ? 0.0f : exp2f(x[u][r] - m[r]);
        l[r] += x[u][r];
      }}
    }}
#pragma unroll
    for (int u = 0; u < {u_}; ++u) {{
{cvt_v}#pragma unroll
      for (int r = 0; r < {r_}; ++r)
#pragma unroll
        for (int e = 0; e < {dl}; ++e) acc[r][e] = fmaf(x[u][r], f[e], acc[r][e]);
    }}
  }}
  // merge the slots: each scales its state to the block max
  __shared__ float sm_ml[{ns}][{r_}][2];
  __shared__ float sm_acc[{r_ * ns * hd}];
  if (threadIdx.x % {lpk} == 0)
    for (int r = 0; r < {r_}; ++r) {{ sm_ml[slot][r][0] = m[r]; sm_ml[slot][r][1] = l[r]; }}
#pragma unroll
  for (int r = 0; r < {r_}; ++r)
#pragma unroll
    for (int e = 0; e < {dl}; ++e) sm_acc[(r * {ns} + slot) * {hd} + d0 + e] = acc[r][e];
  __syncthreads();
  for (int o = threadIdx.x; o < {r_ * hd}; o += {THREADS}) {{
    const int r = o / {hd}, d = o % {hd};
    float M = -INFINITY, L = 0.0f, A = 0.0f;
    for (int sl = 0; sl < {ns}; ++sl) M = fmaxf(M, sm_ml[sl][r][0]);
    for (int sl = 0; sl < {ns}; ++sl) {{
      const float ms = sm_ml[sl][r][0];
      const float c = ms == -INFINITY ? 0.0f : exp2f(ms - M);
      L = fmaf(sm_ml[sl][r][1], c, L);
      A = fmaf(sm_acc[(r * {ns} + sl) * {hd} + d], c, A);
    }}
    {{
      const long long row = (h * {sp.groups} + (long long)gc * {r_} + r) * S + i;
{result}    }}
  }}
{"" if direct else merge_code(sp, nsplit)}}}
"""


def _ml(sp: Spec, nsplit: int, row: str) -> str:
    """C of the address of row `row`'s (m, l) pairs in scratch (after every row's accumulators)."""
    return f"(scratch + {sp.n_kv * sp.groups}LL * S * {nsplit * sp.head_dim} + {row} * {2 * nsplit})"


def merge_code(sp: Spec, nsplit: int, unroll: int = 8) -> str:
    """The tail of the split decode kernel: a block that wrote partials takes a ticket of its row
    block (h, gc, i) after a fence; the last of the nsplit used splits to arrive resets the ticket
    to 0 (the next launch -- a CUDA graph replay -- starts from zero again) and merges every split's
    (acc, m, l): warp r (r < R) weighs row r's splits, then all threads sum the weighted partials.
    Partials are read through L2 (__ldcg): other SMs wrote them during this kernel."""
    t_, hd, dt = THREADS, sp.head_dim, sp.dtype
    r_, gc = rows_per_block(sp), group_chunks(sp)
    offs = (16, 8, 4, 2, 1)
    red = "".join(f"    M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, {o}));\n" for o in offs)
    red_l = "".join(f"    L += __shfl_xor_sync(0xffffffffu, L, {o});\n" for o in offs)
    return f"""  if (nsplit == 1) return;
  __shared__ int sm_last;
  __threadfence();  // this block's partials are visible device-wide before its ticket
  __syncthreads();
  if (threadIdx.x == 0) {{
    unsigned* ticket = zeroed + ((h * {gc} + gc) * S + i);
    sm_last = atomicAdd(ticket, 1u) == (unsigned)(nsplit - 1);
    if (sm_last) atomicExch(ticket, 0u);  // every split has arrived: ready for the next launch
  }}
  __syncthreads();
  if (!sm_last) return;
  __threadfence();
  __shared__ float sm_w[{r_}][{nsplit}], sm_l[{r_}];
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (w < {r_}) {{  // warp w: row w's split weights exp2(m - M) and its sum L
    const float* ml = {_ml(sp, nsplit, f"((h * {sp.groups} + (long long)gc * {r_} + w) * S + i)")};
    float M = -INFINITY, L = 0.0f;
    for (int sp = lane; sp < nsplit; sp += 32) M = fmaxf(M, __ldcg(ml + 2 * sp));
{red}    for (int sp = lane; sp < nsplit; sp += 32) {{
      const float ms = __ldcg(ml + 2 * sp);
      const float c = ms == -INFINITY ? 0.0f : exp2f(ms - M);
      sm_w[w][sp] = c;
      L = fmaf(__ldcg(ml + 2 * sp + 1), c, L);
    }}
{red_l}    if (lane == 0) sm_l[w] = L;
  }}
  __syncthreads();
  for (int o = threadIdx.x; o < {r_ * hd // 4}; o += {t_}) {{  // 4 consecutive outputs per thread and pass
    const int r = o / {hd // 4}, d = o % {hd // 4} * 4;
    const long long row = (h * {sp.groups} + (long long)gc * {r_} + r) * S + i;
    const float4* acc = reinterpret_cast<const float4*>(scratch + row * {nsplit * hd} + d);
    float4 A = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll {unroll}
    for (int sp = 0; sp < nsplit; ++sp) {{  // `unroll` loads of 16 bytes in flight (16: the p1 schedule spills)
      const float4 a = __ldcg(acc + sp * {hd // 4});
      const float c = sm_w[r][sp];
      A.x = fmaf(a.x, c, A.x); A.y = fmaf(a.y, c, A.y); A.z = fmaf(a.z, c, A.z); A.w = fmaf(a.w, c, A.w);
    }}
    const float L = sm_l[r];
    out[row * {hd} + d] = {store(dt, "A.x / L")};
    out[row * {hd} + d + 1] = {store(dt, "A.y / L")};
    out[row * {hd} + d + 2] = {store(dt, "A.z / L")};
    out[row * {hd} + d + 3] = {store(dt, "A.w / L")};
  }}
"""
