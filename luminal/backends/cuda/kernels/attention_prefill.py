"""Tensor-core flash attention (prefill) for KernelAttention (attention.py) on bf16 / f16: CUDA C.

One block of 4 warps per (kv head, group, BM = 64 query rows); warp w owns rows 16w .. 16w+15 and
keeps its Q fragments, its running max / sum and its (16 x head_dim) f32 output accumulator in
registers for the whole key range. Key tiles of BN keys (64, or 32 for head_dim 256) are staged in
shared memory by cp.async (16-byte copies, zero-filled past the last key): K of tile j+1 loads
while tile j's softmax and P @ V run, V of tile j+1 while tile j+1's Q K^T runs. Q K^T and P @ V
are `mma.sync.m16n8k16` (f32 accumulators); the K operand is read from shared memory as 32-bit
pairs, V through `ldmatrix.trans`, P goes from the score accumulators to A fragments in registers
(rounded to the input dtype). Rows of a pitch of head_dim + 8 elements keep both conflict-free.
Static shared memory stays within 48 KB (no opt-in attribute needed): 2 * BN * (head_dim + 8) * 2.

Fragment layouts (PTX ISA, mma.m16n8k16 with 16-bit inputs; g = lane / 4, c = lane % 4):
A (16 x 16, row-major): a0 = A[g][2c, 2c+1], a1 = A[g+8][2c, 2c+1], a2 = A[g][2c+8, 2c+9],
a3 = A[g+8][2c+8, 2c+9]; B (16 x 8): b0 = B[2c, 2c+1][g], b1 = B[2c+8, 2c+9][g];
C (16 x 8, f32): c0, c1 = C[g][2c, 2c+1], c2, c3 = C[g+8][2c, 2c+1]. The lower column (or row)
index of a pair sits in the lower 16 bits. tests/backends/cuda/test_attention_kernels.py runs the
kernel on the CPU with these maps emulated.
"""

from __future__ import annotations

from luminal.backends.cuda.kernel import c_expr, store
from luminal.backends.cuda.kernels.attention_decode import LOG2E, Spec, _params, q_index, q_value
from luminal.dtype import DType

THREADS = 128
BM = 64
PAD = 8  # elements of padding per shared-memory row


def block_rows(sp: Spec) -> int:
    return BM


def block_keys(sp: Spec) -> int:
    return 64 if sp.head_dim <= 128 else 32


def shared_bytes(sp: Spec) -> int:
    return 2 * block_keys(sp) * (sp.head_dim + PAD) * 2


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
__device__ __forceinline__ void KNAME_ldsm4t(unsigned* r, const unsigned short* p) {{
  const unsigned s = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{%0, %1, %2, %3}}, [%4];\\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s) : "memory");
}}
__device__ __forceinline__ void KNAME_ldsm4(unsigned* r, const unsigned short* p) {{
  const unsigned s = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%0, %1, %2, %3}}, [%4];\\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s) : "memory");
}}
__device__ __forceinline__ void KNAME_cp16(unsigned short* dst, const void* src, const bool valid) {{
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\\n" :: "r"(s), "l"(src), "r"(valid ? 16 : 0) : "memory");
}}
__device__ __forceinline__ void KNAME_cp_commit() {{ asm volatile("cp.async.commit_group;\\n" ::: "memory"); }}
__device__ __forceinline__ void KNAME_cp_wait1() {{ asm volatile("cp.async.wait_group 1;\\n" ::: "memory"); }}
__device__ __forceinline__ void KNAME_cp_wait0() {{ asm volatile("cp.async.wait_group 0;\\n" ::: "memory"); }}
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


def _q_bits(sp: Spec, d: str) -> str:
    """C of q's 16-bit pattern at (h, g, r, d): read, or (sp.rope) rotated and rounded to the dtype."""
    if sp.rope is None:
        return f"qb[{q_index(sp, 'h', 'g', 'r', d)}]"
    bits = "__bfloat16_as_ushort" if sp.dtype == DType.bf16 else "__half_as_ushort"
    return f"(unsigned){bits}({store(sp.dtype, q_value(sp, 'h', 'g', 'r', d))})"


def prefill_code(sp: Spec, decls: str, skip: str) -> str:
    t, hd, g_ = sp.dtype.cuda, sp.head_dim, sp.groups
    bn = block_keys(sp)
    pitch = hd + PAD
    ksh, ksk = (c_expr(e) for e in sp.k_steps)
    vsh, vsk = (c_expr(e) for e in sp.v_steps)
    chunks = bn * hd // 8  # 16-byte copies per tile
    scale = sp.scale if sp.softcap else sp.scale * LOG2E
    if sp.softcap:
        score = f"{sp.softcap!r}f * tanhf(x * {scale / sp.softcap!r}f) * {LOG2E!r}f"
    else:
        score = f"x * {scale!r}f"
    mb = sp.variant.prefill_blocks if hd <= 128 else 0  # (d = 256 needs every register it can get)
    bounds = f"__launch_bounds__({THREADS}, {mb})" if mb else f"__launch_bounds__({THREADS})"
    kend = "(past + rlast + 1 < T ? past + rlast + 1 : T)" if sp.causal else "T"
    kbeg = f"(past + m0 - {sp.window} + 1 > 0 ? past + m0 - {sp.window} + 1 : 0LL)" if sp.window else "0LL"
    # a tile needs per-element masks unless every row of the block sees every key of it
    full = ["j0 + BN <= T"]
    if sp.causal:
        full.append("j0 + BN - 1 <= past + m0")
    if sp.window:
        full.append(f"j0 > past + rlast - {sp.window}")
    return f"""{intrinsics(sp.dtype)}{_bits(sp.dtype)}
extern "C" __global__ void {bounds} KNAME_pre{_params(t, False, sp.rope is not None)} {{
{decls}  const long long S = {c_expr(sp.s)};
  if (S == 0 || {skip}) return;
  const long long T = {c_expr(sp.t)}, past = {c_expr(sp.past)};
  constexpr int BN = {bn}, P = {pitch};
  __shared__ __align__(16) unsigned short Ks[BN * P];
  __shared__ __align__(16) unsigned short Vs[BN * P];
  const long long nmb = (S + {BM - 1}) / {BM};
  const long long hg = blockIdx.x / nmb;
  if (hg >= {sp.n_kv * g_}) return;
  const long long m0 = (nmb - 1 - blockIdx.x % nmb) * {BM};  // the longest (causal) row blocks first
  const long long h = hg / {g_}, g = hg % {g_};
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
  const long long r0 = m0 + warp * 16 + gid, r1 = r0 + 8;
  const long long rlast = (m0 + {BM} < S ? m0 + {BM} : S) - 1;
  const long long kend = {kend}, kbeg = {kbeg};
  const long long jstart = kbeg / BN * BN;
  const {t}* kh = k + h * ({ksh});
  const {t}* vh = v + h * ({vsh});
  auto load_tile = [&](unsigned short* dst, const {t}* src, const long long step, const long long j0) {{
    for (int c = threadIdx.x; c < {chunks}; c += {THREADS}) {{
      const int row = c / {hd // 8}, col = (c % {hd // 8}) * 8;
      const bool ok = j0 + row < T;
      KNAME_cp16(dst + row * P + col, ok ? (const void*)(src + (j0 + row) * step + col) : (const void*)src, ok);
    }}
  }};
  if (jstart < kend) {{ load_tile(Ks, kh, {ksk}, jstart); }}
  KNAME_cp_commit();
  if (jstart < kend) {{ load_tile(Vs, vh, {vsk}, jstart); }}
  KNAME_cp_commit();
  // Q fragments (rows past S are 0)
  const unsigned short* qb = reinterpret_cast<const unsigned short*>(q);
  unsigned qf[{hd // 16}][4];
#pragma unroll
  for (int kk = 0; kk < {hd // 16}; ++kk) {{
#pragma unroll
    for (int u = 0; u < 4; ++u) {{
      const long long r = (u & 1) ? r1 : r0;
      const long long qd = kk * 16 + (u >> 1) * 8 + tig * 2;
      unsigned lo = 0u, hi = 0u;
      if (r < S) {{
        lo = {_q_bits(sp, "qd")};
        hi = {_q_bits(sp, "(qd + 1)")};
      }}
      qf[kk][u] = lo | (hi << 16);
    }}
  }}
  float o[{hd // 8}][4], mx[2] = {{-INFINITY, -INFINITY}}, l[2] = {{0.0f, 0.0f}};
#pragma unroll
  for (int n = 0; n < {hd // 8}; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  for (long long j0 = jstart; j0 < kend; j0 += BN) {{
    const bool more = j0 + BN < kend;
    KNAME_cp_wait1();  // K of this tile has landed (its V may still be in flight)
    __syncthreads();
    float sc[BN / 8][4];
#pragma unroll
    for (int n = 0; n < BN / 8; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < {hd // 16}; kk += 2)
#pragma unroll
      for (int n = 0; n < BN / 8; ++n) {{  // B fragments of keys n*8.., dims kk*16.. and (kk+1)*16..: one ldmatrix
        unsigned b[4];
        const int mi = lane >> 3;
        KNAME_ldsm4(b, Ks + (n * 8 + (lane & 7)) * P + (kk + (mi >> 1)) * 16 + (mi & 1) * 8);
        KNAME_mma(sc[n], qf[kk], b[0], b[1]);
        KNAME_mma(sc[n], qf[kk + 1], b[2], b[3]);
      }}
    __syncthreads();  // every warp is done with Ks
    if (more) {{ load_tile(Ks, kh, {ksk}, j0 + BN); }}
    KNAME_cp_commit();
    const bool masked = !({" && ".join(full)});
    float tmax[2] = {{-INFINITY, -INFINITY}};
#pragma unroll
    for (int n = 0; n < BN / 8; ++n)
#pragma unroll
      for (int u = 0; u < 4; ++u) {{
        const float x = sc[n][u];
        float y = {score};
        if (masked) {{
          const long long j = j0 + n * 8 + tig * 2 + (u & 1);
          const long long rr = (u >> 1) ? r1 : r0;
          if ({_mask(sp, "rr")}) y = -INFINITY;
        }}
        sc[n][u] = y;
        tmax[u >> 1] = fmaxf(tmax[u >> 1], y);
      }}
    float alpha[2], mu[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {{
      tmax[e] = fmaxf(tmax[e], __shfl_xor_sync(0xffffffffu, tmax[e], 1));
      tmax[e] = fmaxf(tmax[e], __shfl_xor_sync(0xffffffffu, tmax[e], 2));
      const float mn = fmaxf(mx[e], tmax[e]);
      mu[e] = mn == -INFINITY ? 0.0f : mn;  // a row with nothing visible yet: exp2(-inf - 0) = 0
      alpha[e] = exp2f(mx[e] - mu[e]);
      mx[e] = mn;
      l[e] *= alpha[e];
    }}
#pragma unroll
    for (int n = 0; n < {hd // 8}; ++n) {{
      o[n][0] *= alpha[0]; o[n][1] *= alpha[0];
      o[n][2] *= alpha[1]; o[n][3] *= alpha[1];
    }}
    unsigned pa[BN / 16][4];
#pragma unroll
    for (int n = 0; n < BN / 8; ++n) {{
      const float p0 = exp2f(sc[n][0] - mu[0]), p1 = exp2f(sc[n][1] - mu[0]);
      const float p2 = exp2f(sc[n][2] - mu[1]), p3 = exp2f(sc[n][3] - mu[1]);
      l[0] += p0 + p1;
      l[1] += p2 + p3;
      pa[n >> 1][(n & 1) * 2] = KNAME_pack(p0, p1);
      pa[n >> 1][(n & 1) * 2 + 1] = KNAME_pack(p2, p3);
    }}
    KNAME_cp_wait1();  // V of this tile has landed (the next K may still be in flight)
    __syncthreads();
#pragma unroll
    for (int kc = 0; kc < BN / 16; ++kc)
#pragma unroll
      for (int n = 0; n < {hd // 8}; n += 2) {{
        unsigned b[4];
        const int mi = lane >> 3;
        KNAME_ldsm4t(b, Vs + (kc * 16 + (mi & 1) * 8 + (lane & 7)) * P + (n + (mi >> 1)) * 8);
        KNAME_mma(o[n], pa[kc], b[0], b[1]);
        KNAME_mma(o[n + 1], pa[kc], b[2], b[3]);
      }}
    __syncthreads();  // every warp is done with Vs
    if (more) {{ load_tile(Vs, vh, {vsk}, j0 + BN); }}
    KNAME_cp_commit();
  }}
  KNAME_cp_wait0();
#pragma unroll
  for (int e = 0; e < 2; ++e) {{
    l[e] += __shfl_xor_sync(0xffffffffu, l[e], 1);
    l[e] += __shfl_xor_sync(0xffffffffu, l[e], 2);
  }}
  const float empty = T == 0 ? 0.0f : __int_as_float(0x7fffffff);  // no visible key: 0 for t = 0, else NaN
  unsigned* ob = reinterpret_cast<unsigned*>(out);
#pragma unroll
  for (int e = 0; e < 2; ++e) {{
    const long long r = e ? r1 : r0;
    if (r >= S) continue;
    const float inv = l[e] == 0.0f ? 0.0f : 1.0f / l[e];
    const long long base = ((hg * S + r) * {hd}) >> 1;
#pragma unroll
    for (int n = 0; n < {hd // 8}; ++n) {{
      const float y0 = l[e] == 0.0f ? empty : o[n][2 * e] * inv, y1 = l[e] == 0.0f ? empty : o[n][2 * e + 1] * inv;
      ob[base + n * 4 + tig] = KNAME_pack(y0, y1);
    }}
  }}
}}
"""
