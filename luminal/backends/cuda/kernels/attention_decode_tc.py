"""The tensor-core split-KV decode kernel (a DecodeVariant with `tc` > 0; attention_decode.py
dispatches to it for bf16 / f16 on the split path): CUDA C.

Same grid, splits, scratch partials and ticket merge as the CUDA-core decode kernel (one block of
THREADS = 128 threads per (kv head, group chunk of R query heads, query row i, KV split); see
attention_decode.py), a different block body. Each of the 4 warps streams its own 16-key tiles of the
block's chunk (warp w: keys kb + (4 t + w) * 16 ..) through a private ring of `stages` shared-memory
buffers (K and V, rows of a pitch of head_dim + 8 elements: conflict-free ldmatrix), filled by 16-byte
cp.async copies (no registers held by loads in flight; zero-filled past the chunk) with stages - 1
tiles in flight while one is computed; only __syncwarp orders a warp's ring, no block barrier in the
loop. A tile is two MMAs per 16 dims for the scores and one per 16 dims for P @ V
(mma.sync.m16n8k16, f32 accumulators; the prefill kernel's intrinsics and fragment layouts,
attention_prefill.py):
  S (16 x 8 keys) = Q K^T: A = Q, rows the block's R query heads (rows past R are 0: its a1 / a3 are
  0), raw q bits in registers; B = K^T by ldmatrix from the K rows. The scale (and soft-cap) apply
  to the f32 scores, as the CUDA-core kernel's (scores in log2 units, exponentials ex2.approx).
  O^T (16 dims x 8 heads) += V^T P^T: A = V^T by ldmatrix.trans from the V rows, B = P^T: the
  score accumulators of two 8-key tiles rounded to the dtype are exactly its fragment (c0, c1 of
  tile 0 and of tile 1: head g, keys 2c.. and 8 + 2c..), so P never leaves registers.
Heads past R are padding columns (computed, never stored). The online softmax is per warp (running
max per head from the 4 lanes of a head, rescale factors fetched from the lanes of each column's
head); at the end the 4 warps' (m, l, O) merge in shared memory (the ring, once every copy has
landed) into the block's (m, l, acc), written as the CUDA-core kernel's partials (or the output when
one split is used), and the last split's block merges (attention_decode.merge_code).
"""

from __future__ import annotations

from luminal.backends.cuda.kernel import c_expr, store
from luminal.backends.cuda.kernels import attention_decode as dec
from luminal.dtype import DType

WARPS = dec.THREADS // 32
TILE = 16  # keys per warp tile
PAD = 8  # elements of padding per shared-memory row
SMEM_PER_SM = 227 << 10  # shared memory one H100 / H200 SM gives its blocks (less 1 KB each)


def applies(sp: dec.Spec) -> bool:
    """Whether the split decode path of this op runs the tensor-core kernel: a tc variant, 16-bit
    dtypes (the MMAs take bf16 / f16), at most 8 query heads per block (the MMA's 8 columns)."""
    return sp.variant.tc > 0 and sp.dtype in (DType.bf16, DType.f16) and dec.rows_per_block(sp) <= 8


def stages(sp: dec.Spec) -> int:
    """Ring buffers per warp: the variant's (2 at head_dim 256: a stage is twice the bytes)."""
    return max(2, sp.variant.stages if sp.head_dim <= 128 else 2)


def shared_bytes(sp: dec.Spec) -> int:
    """Dynamic shared memory of a block: every warp's ring of K and V tiles."""
    return WARPS * stages(sp) * 2 * TILE * (sp.head_dim + PAD) * 2


def blocks_per_sm(sp: dec.Spec) -> int:
    """Resident blocks per SM the kernel promises (`__launch_bounds__`): what its shared memory allows."""
    return _blocks(shared_bytes(sp))


def _blocks(shared: int) -> int:
    return max(1, min(4, SMEM_PER_SM // (shared + (8 << 10))))  # (8 KB: static shared, reserve)


def register_budget(shared: int) -> int:
    """Registers per thread a decode launch with `shared` dynamic bytes promises to fit: 128 (4 blocks
    per SM) for the CUDA-core kernel (0 bytes), else the tensor-core kernel's `blocks_per_sm`."""
    return 65536 // (dec.THREADS * (_blocks(shared) if shared else 4))


def decode_tc_code(sp: dec.Spec, decls: str, nsplit: int, skip: str) -> str:
    """The split decode kernel (entry KNAME_dec; module docstring); returns at once when `skip` holds."""
    from luminal.backends.cuda.kernels.attention_prefill import _bits, intrinsics  # noqa: F401 (imports dec)

    t, hd, dt = sp.dtype.cuda, sp.head_dim, sp.dtype
    r_ = dec.rows_per_block(sp)
    ks_, ns = hd // 16, stages(sp)
    pitch, per = hd + PAD, hd // 8  # row pitch (elements), 16-byte chunks per row
    cpl = TILE * per // 32  # copies per lane and tile, of K (and of V)
    tile = TILE * pitch  # elements of one K (or V) tile
    ksh, ksk = (c_expr(e) for e in sp.k_steps)
    vsh, vsk = (c_expr(e) for e in sp.v_steps)
    table = "  const int* rr = rows + i * T;  // this query's slots, in token order\n" if sp.paged else ""
    key = "(long long)rr[jj]" if sp.paged else "jj"
    if sp.rope is None:
        q_bits = (f"(unsigned)qb[{dec.q_index(sp, 'h', 'qg', 'i', 'qd')}] | "
                  f"((unsigned)qb[{dec.q_index(sp, 'h', 'qg', 'i', '(qd + 1)')}] << 16)")  # fmt: skip
    else:  # staged rows, already rounded to the dtype: exact in 16 bits
        q_bits = f"KNAME_pack(sm_q[g * {hd} + qd], sm_q[g * {hd} + qd + 1])"
    score = dec.score_code(sp, f"(x * {dec.q_scale(sp)!r}f)")
    wtile = WARPS * TILE
    bounds = f"__launch_bounds__({dec.THREADS}, {blocks_per_sm(sp)})"
    entry = dec.split_entry(sp, nsplit, "dec", bounds, decls, skip, table)
    return f"""{entry}  const int warp = threadIdx.x >> 5, lid = threadIdx.x & 31, g = lid >> 2, c = lid & 3;
  unsigned short* const ring = KNAME_smem() + warp * {ns * 2 * tile};
  const {t}* kh = k + h * ({ksh});
  const {t}* vh = v + h * ({vsh});
  const int nt = (int)((ke - kb + {wtile - 1}) / {wtile});  // tiles per warp (the last ones may be partly past ke)
  auto load = [&](const int it, const int st) {{  // warp tile `it` into ring buffer `st`
    unsigned short* const dst = ring + st * {2 * tile};
    const long long j0 = kb + ((long long)it * {WARPS} + warp) * {TILE};
#pragma unroll
    for (int u = 0; u < {cpl}; ++u) {{
      const int o = lid + 32 * u, r = o / {per}, col = o % {per} * 8;
      const long long j = j0 + r;
      const bool ok = j < ke;
      const long long jj = ok ? j : kb;
      const long long row = {key};
      const void* const ks = ok ? (const void*)(kh + row * ({ksk}) + col) : (const void*)kh;
      const void* const vs = ok ? (const void*)(vh + row * ({vsk}) + col) : (const void*)vh;
      KNAME_cp16(KNAME_saddr(dst + r * {pitch} + col), ks, ok);
      KNAME_cp16(KNAME_saddr(dst + {tile} + r * {pitch} + col), vs, ok);
    }}
  }};
#pragma unroll
  for (int st = 0; st < {ns - 1}; ++st) {{
    if (st < nt) load(st, st);
    KNAME_cp_commit();
  }}
{dec._rope_stage(sp)}  const unsigned short* qb = reinterpret_cast<const unsigned short*>(q);
  unsigned qa[{ks_}][2];  // A fragments of Q: row g (query head gc * {r_} + g; 0 past {r_}), dims 16 kk + 2c.. and + 8
#pragma unroll
  for (int kk = 0; kk < {ks_}; ++kk)
#pragma unroll
    for (int u = 0; u < 2; ++u) {{
      const long long qd = kk * 16 + u * 8 + 2 * c, qg = (long long)gc * {r_} + g;
      qa[kk][u] = g < {r_} ? {q_bits} : 0u;
    }}
  float o[{ks_}][4];  // O^T accumulators: dims 16 mt + g (+ 8: o[mt][2..3]), heads 2c, 2c + 1
#pragma unroll
  for (int mt = 0; mt < {ks_}; ++mt) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.0f;
  float m = -INFINITY, l = 0.0f;  // head g's running max (log2 units) and this lane's part of its sum
  const unsigned zero = 0u;
  int st = 0, sl = {ns - 1};  // the buffer of tile it, the buffer tile it + {ns - 1} loads into
  for (int it = 0; it < nt; ++it) {{
    __syncwarp();  // every lane is done with tile it - 1, whose buffer is refilled now
    if (it + {ns - 1} < nt) load(it + {ns - 1}, sl);
    KNAME_cp_commit();
    KNAME_cp_wait<{ns - 1}>();  // this lane's copies of tile it have landed
    __syncwarp();  // ... and every lane's
    const unsigned short* const kt = ring + st * {2 * tile};
    const unsigned short* const vt = kt + {tile};
    float s[2][4];
#pragma unroll
    for (int n = 0; n < 2; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < {ks_}; kk += 2)
#pragma unroll
      for (int n = 0; n < 2; ++n) {{  // B fragments of keys 8n.., dims 16 kk.. and 16 (kk + 1)..: one ldmatrix
        unsigned bf[4];
        KNAME_ldsm4(bf, KNAME_saddr(kt + (n * 8 + (lid & 7)) * {pitch} + kk * 16 + (lid >> 3) * 8));
        const unsigned a0[4] = {{qa[kk][0], zero, qa[kk][1], zero}};
        const unsigned a1[4] = {{qa[kk + 1][0], zero, qa[kk + 1][1], zero}};
        KNAME_mma(s[n], a0, bf[0], bf[1]);
        KNAME_mma(s[n], a1, bf[2], bf[3]);
      }}
    const long long j0 = kb + ((long long)it * {WARPS} + warp) * {TILE};
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {{
        const float x = s[n][e];
        const float y = j0 + n * 8 + 2 * c + e < ke ? {score} : -INFINITY;
        s[n][e] = y;
        mx = fmaxf(mx, y);
      }}
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mn = fmaxf(m, mx);
    const float mu = mn == -INFINITY ? 0.0f : mn;  // nothing visible yet: exp2(-inf - 0) = 0
    const float alpha = KNAME_exp2(m - mu);
    m = mn;
    const float p00 = KNAME_exp2(s[0][0] - mu), p01 = KNAME_exp2(s[0][1] - mu);
    const float p10 = KNAME_exp2(s[1][0] - mu), p11 = KNAME_exp2(s[1][1] - mu);
    l = fmaf(l, alpha, (p00 + p01) + (p10 + p11));
    const unsigned pb0 = KNAME_pack(p00, p01), pb1 = KNAME_pack(p10, p11);  // B fragment of P^T
    const float a0 = __shfl_sync(0xffffffffu, alpha, 8 * c), a1 = __shfl_sync(0xffffffffu, alpha, 8 * c + 4);
#pragma unroll
    for (int mt = 0; mt < {ks_}; ++mt) {{
      o[mt][0] *= a0; o[mt][1] *= a1; o[mt][2] *= a0; o[mt][3] *= a1;
      unsigned af[4];  // A fragment of V^T: dims 16 mt.., keys 0..15
      KNAME_ldsm4t(af, KNAME_saddr(vt + ((lid & 7) + (lid >> 4) * 8) * {pitch} + mt * 16 + ((lid >> 3) & 1) * 8));
      KNAME_mma(o[mt], af, pb0, pb1);
    }}
    st = st == {ns - 1} ? 0 : st + 1;
    sl = sl == {ns - 1} ? 0 : sl + 1;
  }}
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  KNAME_cp_wait<0>();
  __syncthreads();  // every warp is done with its ring: it holds the warps' states now
  float* const wm = reinterpret_cast<float*>(KNAME_smem());  // [{WARPS}][{r_}] maxima, then sums, then O
  float* const wl = wm + {WARPS * r_};
  float* const wo = wl + {WARPS * r_};  // [{WARPS}][{r_}][{hd}]
  if (c == 0 && g < {r_}) {{ wm[warp * {r_} + g] = m; wl[warp * {r_} + g] = l; }}
#pragma unroll
  for (int mt = 0; mt < {ks_}; ++mt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {{
      const int hq = 2 * c + (e & 1), d = mt * 16 + g + (e >> 1) * 8;
      if (hq < {r_}) wo[(warp * {r_} + hq) * {hd} + d] = o[mt][e];
    }}
  __syncthreads();
  for (int oo = threadIdx.x; oo < {r_ * hd}; oo += {dec.THREADS}) {{
    const int r = oo / {hd}, d = oo % {hd};
    float M = -INFINITY, L = 0.0f, A = 0.0f;
#pragma unroll
    for (int w = 0; w < {WARPS}; ++w) M = fmaxf(M, wm[w * {r_} + r]);
#pragma unroll
    for (int w = 0; w < {WARPS}; ++w) {{
      const float ms = wm[w * {r_} + r];
      const float cw = ms == -INFINITY ? 0.0f : KNAME_exp2(ms - M);
      L = fmaf(wl[w * {r_} + r], cw, L);
      A = fmaf(wo[(w * {r_} + r) * {hd} + d], cw, A);
    }}
    const long long row = (h * {sp.groups} + (long long)gc * {r_} + r) * S + i;
    if (nsplit == 1) {{
      out[row * {hd} + d] = {store(dt, "A / L")};
    }} else {{
      scratch[(row * {nsplit} + split) * {hd} + d] = A;
      if (d == 0) {{ float* ml = {dec._ml(sp, nsplit, "row")} + split * 2; ml[0] = M; ml[1] = L; }}
    }}
  }}
{dec.merge_code(sp, nsplit, 16)}}}
"""
