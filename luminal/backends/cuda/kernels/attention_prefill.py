"""Tensor-core flash attention (prefill) for KernelAttention (attention.py) on bf16 / f16: CUDA C.

Tiled by the variant's PrefillSchedule (attention_decode.py; `tiling` resolves it per op). Default:
one block of 4 warps per (kv head, group, BM = 64 query rows); warp w owns rows 16w .. 16w+15 and
keeps its Q fragments, its running max / sum and its (16 x head_dim) f32 output accumulator in
registers for the whole key range. With `tiles` = 2 a warp owns 32 rows (two m-tiles: each K / V
fragment feeds two MMAs, the block's K / V tiles serve 128 rows) and reads its Q fragments from
shared memory every key tile; `pack` heads of a GQA group share a block (rows / pack each). Key
tiles of BN keys (64, or 32 for head_dim 256) are staged in shared memory by cp.async (16-byte
copies, zero-filled past the last key), K and V one buffer each, refilled as `_stages` orders it.
Q K^T and P @ V are `mma.sync.m16n8k16` (f32 accumulators); Q and K fragments come by ldmatrix,
V by `ldmatrix.trans`, P goes from the score accumulators to A fragments in registers (rounded to
the input dtype). Rows of a pitch of head_dim + 8 elements keep them conflict-free. Shared memory
past 48 KB (Q of 128 rows at head_dim 128) is dynamic: the launch declares it (Launch.shared).

Fragment layouts (PTX ISA, mma.m16n8k16 with 16-bit inputs; g = lane / 4, c = lane % 4):
A (16 x 16, row-major): a0 = A[g][2c, 2c+1], a1 = A[g+8][2c, 2c+1], a2 = A[g][2c+8, 2c+9],
a3 = A[g+8][2c+8, 2c+9]; B (16 x 8): b0 = B[2c, 2c+1][g], b1 = B[2c+8, 2c+9][g];
C (16 x 8, f32): c0, c1 = C[g][2c, 2c+1], c2, c3 = C[g+8][2c, 2c+1]. The lower column (or row)
index of a pair sits in the lower 16 bits. tests/backends/cuda/test_attention_kernels.py runs the
kernel on the CPU with these maps emulated.
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal.backends.cuda.kernel import c_expr, store
from luminal.backends.cuda.kernels.attention_decode import LOG2E, Spec, _params, q_index, q_value
from luminal.dtype import DType
from luminal.errors import BackendError
from luminal.shape.expr import Expression, ceil_div, num
from luminal.shape.tracker import linear_step

PAD = 8  # elements of padding per shared-memory row
STATIC_SHARED = 48 << 10  # above this the block's shared memory is dynamic (opt-in: Launch.shared)


@dataclass(frozen=True)
class Tiling:
    """The prefill kernel's tiling for one op: the variant's PrefillSchedule where the op allows it."""

    warps: int
    tiles: int  # 16-row MMA tiles per warp
    pack: int  # query heads of a GQA group per block
    bn: int  # keys per tile
    lpt: bool
    min_blocks: int
    syncs: int  # barriers per key tile (_stages)

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def bm(self) -> int:
        """Query rows per block, over its `pack` heads."""
        return 16 * self.tiles * self.warps

    @property
    def rows(self) -> int:
        """Query rows of each head per block."""
        return self.bm // self.pack

    @property
    def stages(self) -> int:
        """K / V buffers (2: tile j+1 loads into the other while tile j is computed, one barrier a tile)."""
        return 2 if self.syncs == 1 else 1

    @property
    def q_shared(self) -> bool:
        """Q fragments read from shared memory each key tile (two tiles of Q in registers would not fit)."""
        return self.tiles > 1


def tiling(sp: Spec) -> Tiling:
    ps = sp.variant.prefill
    # head_dim 256: one tile's (16 x 256) f32 accumulator is already 128 registers per thread
    tiles = ps.tiles if sp.head_dim <= 128 else 1
    pack = ps.pack
    while pack > 1 and (sp.groups % pack or ps.warps % pack):
        pack //= 2
    mb = ps.min_blocks if sp.head_dim <= 128 else 0  # (d = 256 needs every register it can get)
    return Tiling(ps.warps, tiles, pack, 64 if sp.head_dim <= 128 else 32, ps.lpt, mb, ps.syncs)


def shared_bytes(sp: Spec) -> int:
    """The block's shared memory: K and V tiles (and Q where its fragments are read from there)."""
    tl = tiling(sp)
    return ((tl.bm if tl.q_shared else 0) + 2 * tl.bn * tl.stages) * (sp.head_dim + PAD) * 2


def dynamic_shared(sp: Spec) -> int:
    """Bytes of dynamic shared memory the launch needs (0: static, within 48 KB)."""
    n = shared_bytes(sp)
    return n if n > STATIC_SHARED else 0


def grid(sp: Spec, s: Expression) -> Expression:
    tl = tiling(sp)
    return num(sp.n_kv * sp.groups // tl.pack) * ceil_div(s, num(tl.rows))


# The inline-asm intrinsics, between markers the CPU emulation test replaces.
INTRINSICS_BEGIN, INTRINSICS_END = "// <intrinsics>\n", "// </intrinsics>\n"


def intrinsics(dt: DType) -> str:
    ab = "bf16" if dt == DType.bf16 else "f16"
    return f"""{INTRINSICS_BEGIN}__device__ __forceinline__ void KNAME_mma(float* d, const unsigned* a,
                                          const unsigned b0, const unsigned b1) {{
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{ab}.{ab}.f32 "
               "{{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};\\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}}
typedef unsigned KNAME_sa;  // a shared-memory address: offsets in bytes (an immediate of the instruction)
__device__ __forceinline__ KNAME_sa KNAME_saddr(const unsigned short* p) {{
  return (unsigned)__cvta_generic_to_shared(p);
}}
__device__ __forceinline__ void KNAME_ldsm4t(unsigned* r, const KNAME_sa s) {{
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{%0, %1, %2, %3}}, [%4];\\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s) : "memory");
}}
__device__ __forceinline__ void KNAME_ldsm4(unsigned* r, const KNAME_sa s) {{
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%0, %1, %2, %3}}, [%4];\\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s) : "memory");
}}
__device__ __forceinline__ void KNAME_cp16(const KNAME_sa s, const void* src, const bool valid) {{
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\\n" :: "r"(s), "l"(src), "r"(valid ? 16 : 0) : "memory");
}}
__device__ __forceinline__ float KNAME_exp2(const float x) {{  // one MUFU.EX2 (exp2f: 4 instructions), 0 below 2^-126
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}}
__device__ __forceinline__ unsigned short* KNAME_smem() {{
  extern __shared__ __align__(16) unsigned short KNAME_dyn[];
  return KNAME_dyn;
}}
__device__ __forceinline__ void KNAME_cp_commit() {{ asm volatile("cp.async.commit_group;\\n" ::: "memory"); }}
__device__ __forceinline__ void KNAME_cp_wait1() {{ asm volatile("cp.async.wait_group 1;\\n" ::: "memory"); }}
__device__ __forceinline__ void KNAME_cp_wait0() {{ asm volatile("cp.async.wait_group 0;\\n" ::: "memory"); }}
template <int N> __device__ __forceinline__ void KNAME_cp_wait() {{
  asm volatile("cp.async.wait_group %0;\\n" :: "n"(N) : "memory");
}}
{INTRINSICS_END}"""


def _bits(dt: DType) -> str:
    """C packing two floats into one 32-bit register of two 16-bit values (lo in the low half)."""
    if dt == DType.bf16:
        one = "__bfloat16_as_ushort(__float2bfloat16_rn({}))"
    else:
        one = "__half_as_ushort(__float2half_rn({}))"
    return (f"__device__ __forceinline__ unsigned KNAME_pack(const float lo, const float hi) {{\n"
            f"  return (unsigned){one.format('lo')} | ((unsigned){one.format('hi')} << 16);\n}}\n")  # fmt: skip


def _mask(sp: Spec, row: str) -> str:
    """C condition: key j is hidden from query row `row`."""
    cond = ["j >= T"]
    if sp.causal:
        cond.append(f"j > past + {row}")
    if sp.window:
        cond.append(f"j <= past + {row} - {sp.window}")
    return " || ".join(cond)


def _q_bits(sp: Spec, g: str, r: str, d: str) -> str:
    """C of q's 16-bit pattern at (h, g, r, d): read, or (sp.rope) rotated and rounded to the dtype."""
    if sp.rope is None:
        return f"qb[{q_index(sp, 'h', g, r, d)}]"
    bits = "__bfloat16_as_ushort" if sp.dtype == DType.bf16 else "__half_as_ushort"
    return f"(unsigned){bits}({store(sp.dtype, q_value(sp, 'h', g, r, d))})"


def _q_vectors(sp: Spec) -> bool:
    """Whether 8 consecutive head_dim values of q are one aligned 16-byte vector (cp.async): q read
    as stored (no rope), unit stride along head_dim, every other step and the offset literal
    multiples of 8 elements."""
    if sp.rope is not None:
        return False
    steps = [linear_step(st) for st in sp.q_strides]
    if any(st is None or not st.is_num for st in steps) or steps[3].value != 1:
        return False
    off = [st.substitute("z", num(0)) for st in sp.q_strides]
    return all(o.is_num and o.value % 8 == 0 for o in off) and all(st.value % 8 == 0 for st in steps[:3])


def _q_to_shared(sp: Spec, tl: Tiling) -> str:
    """C: the block's Q rows (row br of the block: head gbase + br / rows, query row m0 + br % rows;
    rows past S are 0) into Qs, 8 head_dim values per step."""
    per = sp.head_dim // 8
    head = f"""  for (int c = threadIdx.x; c < {tl.bm * per}; c += {tl.threads}) {{
    const int br = c / {per}, col = (c % {per}) * 8;
    const long long gq = gbase + br / {tl.rows}, rq = m0 + br % {tl.rows};
    unsigned short* dst = Qs + br * P + col;
"""
    if _q_vectors(sp):
        body = f"""    const bool ok = rq < S;
    KNAME_cp16(KNAME_saddr(dst), ok ? (const void*)(q + ({q_index(sp, "h", "gq", "rq", "col")})) : (const void*)q, ok);
  }}
"""
    else:
        body = f"""#pragma unroll
    for (int u = 0; u < 8; ++u) dst[u] = rq < S ? (unsigned short)({_q_bits(sp, "gq", "rq", "(col + u)")}) : 0;
  }}
"""
    return head + body


def _q_registers(sp: Spec) -> str:
    """C: the warp's Q fragments (one 16-row tile) into registers; rows past S are 0."""
    hd = sp.head_dim
    return f"""  // Q fragments (rows past S are 0)
  unsigned qf[{hd // 16}][4];
#pragma unroll
  for (int kk = 0; kk < {hd // 16}; ++kk) {{
#pragma unroll
    for (int u = 0; u < 4; ++u) {{
      const long long r = m0 + wr + (u & 1) * 8;
      const long long qd = kk * 16 + (u >> 1) * 8 + tig * 2;
      unsigned lo = 0u, hi = 0u;
      if (r < S) {{
        lo = {_q_bits(sp, "g", "r", "qd")};
        hi = {_q_bits(sp, "g", "r", "(qd + 1)")};
      }}
      qf[kk][u] = lo | (hi << 16);
    }}
  }}
"""


def _scores(sp: Spec, tl: Tiling) -> str:
    """C: the warp's scores sc += Q K^T over the K tile. Q in registers (one m-tile): one ldmatrix
    per key n-tile and two k-steps; Q in shared memory: per k-step the warp's A fragments (one
    ldmatrix each tile), then one ldmatrix per two key n-tiles, feeding every m-tile."""
    hd, mt = sp.head_dim, tl.tiles
    if not tl.q_shared:
        return f"""#pragma unroll
    for (int kk = 0; kk < {hd // 16}; kk += 2)
#pragma unroll
      for (int n = 0; n < BN / 8; ++n) {{  // B fragments of keys n*8.., dims kk*16.. and (kk+1)*16..: one ldmatrix
        unsigned b[4];
        KNAME_ldsm4(b, ka + (n * 8 * P + kk * 16) * 2);
        KNAME_mma(sc[0][n], qf[kk], b[0], b[1]);
        KNAME_mma(sc[0][n], qf[kk + 1], b[2], b[3]);
      }}
"""
    return f"""#pragma unroll
    for (int kk = 0; kk < {hd // 16}; ++kk) {{
      unsigned qa[{mt}][4];
#pragma unroll
      for (int m = 0; m < {mt}; ++m)  // A fragments of rows wrow + m*16.., dims kk*16..
        KNAME_ldsm4(qa[m], qa0 + (m * 16 * P + kk * 16) * 2);
#pragma unroll
      for (int n = 0; n < BN / 8; n += 2) {{  // B fragments of keys n*8.. and (n+1)*8.., dims kk*16..
        unsigned b[4];
        KNAME_ldsm4(b, ka + (n * 8 * P + kk * 16) * 2);
#pragma unroll
        for (int m = 0; m < {mt}; ++m) {{
          KNAME_mma(sc[m][n], qa[m], b[0], b[1]);
          KNAME_mma(sc[m][n + 1], qa[m], b[2], b[3]);
        }}
      }}
    }}
"""


def _lane_bases(tl: Tiling) -> str:
    """C: each lane's ldmatrix row addresses in Qs, Ks and Vs (matrix lane >> 3, row lane & 7), every
    fragment an immediate byte offset from them. Opaque to the compiler each key tile (an empty asm),
    so it folds the offsets into the instructions instead of keeping every address live across the
    loop (which spilled)."""
    if tl.q_shared:  # K: matrices (keys n*8.., dims lo), (n*8.., hi), ((n+1)*8.., lo), ((n+1)*8.., hi)
        k = "Kt + (((lane >> 4) & 1) * 8 + (lane & 7)) * P + ((lane >> 3) & 1) * 8"
    else:  # K: matrices (keys n*8.., dims kk*16 + 0 / 8, (kk+1)*16 + 0 / 8)
        k = "Kt + (lane & 7) * P + (lane >> 4) * 16 + ((lane >> 3) & 1) * 8"
    q = "    KNAME_sa qa0 = KNAME_saddr(Qs + (wrow + (lane & 15)) * P + (lane >> 4) * 8);\n" if tl.q_shared else ""
    launder = (
        '    asm volatile("" : "+r"(qa0), "+r"(ka), "+r"(va));\n'
        if tl.q_shared
        else '    asm volatile("" : "+r"(ka), "+r"(va));\n'
    )
    return (
        f"{q}    KNAME_sa ka = KNAME_saddr({k});\n"
        "    KNAME_sa va = KNAME_saddr(Vt + (((lane >> 3) & 1) * 8 + (lane & 7)) * P + (lane >> 4) * 8);\n" + launder
    )


def _stages(syncs: int, ksk: str, vsk: str) -> dict[str, str]:
    """C of the K / V tile pipeline at its places in the key loop: the prologue,
    the loop top, after Q K^T, before and after P @ V. 4 barriers a tile: K of tile j+1 loads during
    tile j's softmax and P @ V, V of tile j+1 during tile j+1's Q K^T and softmax. 2 (FA2's order):
    V of tile j loads during its Q K^T, K of tile j+1 during tile j's softmax and P @ V. 1: two
    buffers each (Tiling.stages), K and V of tile j+1 load during all of tile j."""
    k_next = f"    if (more) {{ load_tile(Ks, kh, {ksk}, j0 + BN); }}\n    KNAME_cp_commit();\n"
    v0 = f"  if (jstart < kend) {{ load_tile(Vs, vh, {vsk}, jstart); }}\n  KNAME_cp_commit();\n"
    one = "    unsigned short* const Kt = Ks;\n    unsigned short* const Vt = Vs;\n"  # the tile's buffers
    if syncs == 1:
        return {
            "pro": v0,
            "top": "    KNAME_cp_wait0();  // K and V of this tile have landed\n"
            "    __syncthreads();  // ... and every warp is done with the other buffers (tile j-1)\n"
            "    const int stage = (int)((j0 - jstart) / BN) & 1;\n"
            "    unsigned short* const Kt = Ks + stage * 2 * BN * P;\n"
            "    unsigned short* const Vt = Vs + stage * 2 * BN * P;\n"
            "    if (more) {\n"
            f"      load_tile(Ks + (stage ^ 1) * 2 * BN * P, kh, {ksk}, j0 + BN);\n"
            f"      load_tile(Vs + (stage ^ 1) * 2 * BN * P, vh, {vsk}, j0 + BN);\n"
            "    }\n    KNAME_cp_commit();\n",
            "mid": "",
            "pv": "",
            "end": "",
        }
    if syncs == 4:
        return {
            "pro": v0,
            "top": "    KNAME_cp_wait1();  // K of this tile (and Q) has landed (its V may still be in flight)\n"
            "    __syncthreads();\n" + one,
            "mid": "    __syncthreads();  // every warp is done with Ks\n" + k_next,
            "pv": "    KNAME_cp_wait1();  // V of this tile has landed (the next K may still be in flight)\n"
            "    __syncthreads();\n",
            "end": "    __syncthreads();  // every warp is done with Vs\n"
            f"    if (more) {{ load_tile(Vs, vh, {vsk}, j0 + BN); }}\n    KNAME_cp_commit();\n",
        }
    if syncs != 2:
        raise BackendError(f"prefill schedule: syncs = {syncs}, expected 1, 2 or 4")
    return {
        "pro": "",
        "top": "    KNAME_cp_wait0();  // K of this tile (and Q) has landed\n"
        "    __syncthreads();  // ... and every warp is done with Vs\n"
        f"    load_tile(Vs, vh, {vsk}, j0);\n    KNAME_cp_commit();\n" + one,
        "mid": "    KNAME_cp_wait0();  // V of this tile has landed\n"
        "    __syncthreads();  // ... and every warp is done with Ks\n" + k_next,
        "pv": "",
        "end": "",
    }


def prefill_code(sp: Spec, decls: str, skip: str, lib: bool = True) -> str:
    """The prefill kernel; `lib`: with the intrinsics (False: the module has them already, from
    attention_decode.decode_lib)."""
    tl = tiling(sp)
    t, hd, g_ = sp.dtype.cuda, sp.head_dim, sp.groups
    bn, mt, nt = tl.bn, tl.tiles, tl.threads
    pitch = hd + PAD
    ksh, ksk = (c_expr(e) for e in sp.k_steps)
    vsh, vsk = (c_expr(e) for e in sp.v_steps)
    chunks = bn * hd // 8  # 16-byte copies per tile
    rstep = nt * 8 // hd  # tile rows one pass of the block's threads copies
    # without soft-capping (and scale > 0: the max commutes with it) the scores stay raw and the
    # scale folds into the exponent, one FFMA per score: exp2(x * sl - max * sl)
    fold = not sp.softcap and sp.scale > 0
    sl = sp.scale * LOG2E if fold else 1.0
    if fold:
        score = "x"
    elif sp.softcap:
        score = f"{sp.softcap!r}f * tanhf(x * {sp.scale / sp.softcap!r}f) * {LOG2E!r}f"
    else:
        score = f"x * {sp.scale * LOG2E!r}f"
    # (past 128 threads ptxas otherwise holds the kernel to 128 registers: 8 warps at head_dim 64 spilled)
    mb = tl.min_blocks or (1 if nt > 128 else 0)
    bounds = f"__launch_bounds__({nt}, {mb})" if mb else f"__launch_bounds__({nt})"
    kend = "(past + rlast + 1 < T ? past + rlast + 1 : T)" if sp.causal else "T"
    kbeg = f"(past + m0 - {sp.window} + 1 > 0 ? past + m0 - {sp.window} + 1 : 0LL)" if sp.window else "0LL"
    # a tile needs per-element masks unless every row of the block sees every key of it
    full = ["j0 + BN <= T"]
    if sp.causal:
        full.append("j0 + BN - 1 <= past + m0")
    if sp.window:
        full.append(f"j0 > past + rlast - {sp.window}")
    nhb = sp.n_kv * g_ // tl.pack  # (kv head, group of `pack` heads) pairs
    gpb = g_ // tl.pack
    if tl.lpt:  # block b: row block b / nhb from the bottom, so the longest blocks of every head run first
        where = f"""  const long long mb = blockIdx.x / {nhb}, hb = blockIdx.x % {nhb};
  if (mb >= nmb) return;
  const long long m0 = (nmb - 1 - mb) * {tl.rows};"""
    else:  # block b: head b / nmb, its row blocks longest-first
        where = f"""  const long long hb = blockIdx.x / nmb;
  if (hb >= {nhb}) return;
  const long long m0 = (nmb - 1 - blockIdx.x % nmb) * {tl.rows};  // the longest (causal) row blocks first"""
    q_rows = tl.bm if tl.q_shared else 0
    if shared_bytes(sp) > STATIC_SHARED:
        smem = "unsigned short* const sm = KNAME_smem();"
    else:
        smem = f"__shared__ __align__(16) unsigned short sm[{(q_rows + 2 * bn * tl.stages) * pitch}];"
    wph = tl.warps // tl.pack  # warps per head
    q_load = _q_to_shared(sp, tl) if tl.q_shared else ""
    q_regs = "" if tl.q_shared else _q_registers(sp)
    stage = _stages(tl.syncs, ksk, vsk)
    return f"""{intrinsics(sp.dtype) + _bits(sp.dtype) if lib else ""}
extern "C" __global__ void {bounds} KNAME_pre{_params(t, False, sp.rope is not None)} {{
{decls}  const long long S = {c_expr(sp.s)};
  if (S == 0 || {skip}) return;
  const long long T = {c_expr(sp.t)}, past = {c_expr(sp.past)};
  constexpr int BN = {bn}, P = {pitch};
  constexpr float SL = {sl!r}f;  // scores to log2 units in the exponent (1: they are already)
  {smem}
  unsigned short* const Qs = sm;
  unsigned short* const Ks = sm + {q_rows * pitch};
  unsigned short* const Vs = Ks + BN * P;  // (stage 2: Ks + 2 * BN * P, Vs + 2 * BN * P)
  const long long nmb = (S + {tl.rows - 1}) / {tl.rows};
{where}
  const long long h = hb / {gpb}, gbase = hb % {gpb} * {tl.pack};
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
  const int wrow = warp * {16 * mt};  // the warp's first row in the block (and in Qs)
  const long long g = gbase + warp / {wph}, hg = h * {g_} + g;
  // the query row of the warp's accumulators of m-tile m, upper (e = 0) / lower (e = 1) 8: m0 + wr + m * 16 + e * 8
  const int wr = (warp % {wph}) * {16 * mt} + gid;
  const long long rlast = (m0 + {tl.rows} < S ? m0 + {tl.rows} : S) - 1;
  const long long kend = {kend}, kbeg = {kbeg};
  const long long jstart = kbeg / BN * BN;
  const {t}* kh = k + h * ({ksh});
  const {t}* vh = v + h * ({vsh});
  auto load_tile = [&](unsigned short* dst, const {t}* src, const long long step, const long long j0) {{
    // thread: rows r0, r0 + {rstep}, .. of the tile, 8 values from col
    const int r0 = threadIdx.x / {hd // 8}, col = (threadIdx.x % {hd // 8}) * 8;
    const {t}* p = src + (j0 + r0) * step + col;
    const KNAME_sa d = KNAME_saddr(dst + r0 * P + col);
#pragma unroll
    for (int i = 0; i < {chunks // nt}; ++i) {{
      const bool ok = j0 + r0 + i * {rstep} < T;
      KNAME_cp16(d + i * {rstep * 2} * P, ok ? (const void*)(p + i * {rstep} * step) : (const void*)src, ok);
    }}
  }};
  const unsigned short* qb = reinterpret_cast<const unsigned short*>(q);
{q_load}  if (jstart < kend) {{ load_tile(Ks, kh, {ksk}, jstart); }}
  KNAME_cp_commit();
{stage["pro"]}{q_regs}  float o[{mt}][{hd // 8}][4], mx[{mt}][2], l[{mt}][2];
#pragma unroll
  for (int m = 0; m < {mt}; ++m) {{
    mx[m][0] = mx[m][1] = -INFINITY;
    l[m][0] = l[m][1] = 0.0f;
#pragma unroll
    for (int n = 0; n < {hd // 8}; ++n) o[m][n][0] = o[m][n][1] = o[m][n][2] = o[m][n][3] = 0.0f;
  }}
  for (long long j0 = jstart; j0 < kend; j0 += BN) {{
    const bool more = j0 + BN < kend;
{stage["top"]}{_lane_bases(tl)}    float sc[{mt}][BN / 8][4];
#pragma unroll
    for (int m = 0; m < {mt}; ++m)
#pragma unroll
      for (int n = 0; n < BN / 8; ++n) sc[m][n][0] = sc[m][n][1] = sc[m][n][2] = sc[m][n][3] = 0.0f;
{_scores(sp, tl)}{stage["mid"]}    const bool masked = !({" && ".join(full)});
    unsigned pa[{mt}][BN / 16][4];
#pragma unroll
    for (int m = 0; m < {mt}; ++m) {{
      float tmax[2] = {{-INFINITY, -INFINITY}};
#pragma unroll
      for (int n = 0; n < BN / 8; ++n)
#pragma unroll
        for (int u = 0; u < 4; ++u) {{
          const float x = sc[m][n][u];
          float y = {score};
          if (masked) {{
            const long long j = j0 + n * 8 + tig * 2 + (u & 1);
            const long long rr = m0 + wr + m * 16 + (u >> 1) * 8;
            if ({_mask(sp, "rr")}) y = -INFINITY;
          }}
          sc[m][n][u] = y;
          tmax[u >> 1] = fmaxf(tmax[u >> 1], y);
        }}
      float alpha[2], mus[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {{
        tmax[e] = fmaxf(tmax[e], __shfl_xor_sync(0xffffffffu, tmax[e], 1));
        tmax[e] = fmaxf(tmax[e], __shfl_xor_sync(0xffffffffu, tmax[e], 2));
        const float mn = fmaxf(mx[m][e], tmax[e]);
        const float mu = mn == -INFINITY ? 0.0f : mn;  // a row with nothing visible yet: exp2(-inf - 0) = 0
        alpha[e] = KNAME_exp2((mx[m][e] - mu) * SL);
        mus[e] = mu * SL;
        mx[m][e] = mn;
        l[m][e] *= alpha[e];
      }}
#pragma unroll
      for (int n = 0; n < {hd // 8}; ++n) {{
        o[m][n][0] *= alpha[0]; o[m][n][1] *= alpha[0];
        o[m][n][2] *= alpha[1]; o[m][n][3] *= alpha[1];
      }}
#pragma unroll
      for (int n = 0; n < BN / 8; ++n) {{
        const float p0 = KNAME_exp2(fmaf(sc[m][n][0], SL, -mus[0])), p1 = KNAME_exp2(fmaf(sc[m][n][1], SL, -mus[0]));
        const float p2 = KNAME_exp2(fmaf(sc[m][n][2], SL, -mus[1])), p3 = KNAME_exp2(fmaf(sc[m][n][3], SL, -mus[1]));
        l[m][0] += p0 + p1;
        l[m][1] += p2 + p3;
        pa[m][n >> 1][(n & 1) * 2] = KNAME_pack(p0, p1);
        pa[m][n >> 1][(n & 1) * 2 + 1] = KNAME_pack(p2, p3);
      }}
    }}
{stage["pv"]}#pragma unroll
    for (int kc = 0; kc < BN / 16; ++kc)
#pragma unroll
      for (int n = 0; n < {hd // 8}; n += 2) {{
        unsigned b[4];
        KNAME_ldsm4t(b, va + (kc * 16 * P + n * 8) * 2);
#pragma unroll
        for (int m = 0; m < {mt}; ++m) {{
          KNAME_mma(o[m][n], pa[m][kc], b[0], b[1]);
          KNAME_mma(o[m][n + 1], pa[m][kc], b[2], b[3]);
        }}
      }}
{stage["end"]}  }}
  KNAME_cp_wait0();
  const float empty = T == 0 ? 0.0f : __int_as_float(0x7fffffff);  // no visible key: 0 for t = 0, else NaN
  unsigned* ob = reinterpret_cast<unsigned*>(out);
#pragma unroll
  for (int m = 0; m < {mt}; ++m)
#pragma unroll
    for (int e = 0; e < 2; ++e) {{
      float le = l[m][e];
      le += __shfl_xor_sync(0xffffffffu, le, 1);
      le += __shfl_xor_sync(0xffffffffu, le, 2);
      const long long r = m0 + wr + m * 16 + e * 8;
      if (r >= S) continue;
      const float inv = le == 0.0f ? 0.0f : 1.0f / le;
      const long long base = ((hg * S + r) * {hd}) >> 1;
#pragma unroll
      for (int n = 0; n < {hd // 8}; ++n) {{
        const float y0 = le == 0.0f ? empty : o[m][n][2 * e] * inv, y1 = le == 0.0f ? empty : o[m][n][2 * e + 1] * inv;
        ob[base + n * 4 + tig] = KNAME_pack(y0, y1);
      }}
    }}
}}
"""
