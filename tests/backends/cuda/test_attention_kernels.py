"""KernelAttention's kernels (kernels/attention*.py): every variant compiles for sm_90 with NVRTC;
on the CPU (g++ emulation, attention_emu.py) the split decode kernel (the last split to arrive
merges the others), the f32-rows and the tensor-core prefill kernels compute attention over odd
sizes, masks and dtypes, equal to the f64 reference, and leave their tickets at zero; `render`
and `spec` refuse what the kernels do not cover. GPU (`cuda`): the same launches on the device."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

from luminal.backends.cuda import nvrtc
from luminal.backends.cuda.kernel import source
from luminal.backends.cuda.kernels import attention_decode_tc, attention_prefill
from luminal.backends.cuda.kernels.attention import DECODE_ROWS, DTYPES, HEAD_DIMS, KernelAttention, KernelAttentionRope
from luminal.backends.cuda.kernels.attention_decode import DECODE, THREADS, VARIANTS, DecodeVariant, tc
from luminal.backends.cuda.kernels.attention_decode_tc import register_budget
from luminal.dtype import DType
from luminal.errors import BackendError
from luminal.shape.expr import minimum, num, var, z
from tests.helpers import assert_matches

SLOTS = {"p": 0, "s": 1, "!error": 2}
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20) to run CUDA C on the CPU")


def make_op(n_kv=2, groups=2, hd=64, dt=DType.bf16, cap=None, causal=True, window=0, scale=None, softcap=0.0,
            t=None) -> KernelAttention:  # fmt: skip
    """q read from a (s, n_kv * groups, hd) projection; k, v from an (n_kv, cap, hd) cache whose first
    t = min(p + s, cap) rows are live (or, with `t` given, a (n_kv, t, hd) tensor: cross-attention)."""
    s, p = var("s"), var("p")
    h = n_kv * groups
    q_st = (z * (groups * hd), z * hd, z * (h * hd), z)
    if t is None:
        cap = cap or 512
        tt, kv_st = minimum(p + s, num(cap)), (z * (cap * hd), z * hd, z)
    else:
        tt, kv_st = num(t), (z * (t * hd), z * hd, z)
    scale = hd**-0.5 if scale is None else scale
    return KernelAttention(num(n_kv), num(groups), s, tt, num(hd), q_st, kv_st, kv_st, causal, p if causal else num(0),
                           window, scale, softcap, dt)  # fmt: skip


def inputs(op: KernelAttention, env: dict, seed: int):
    rng = np.random.default_rng(seed)
    (qs, _), (ks, kst), _ = KernelAttention.input_views(op)[:3]
    nq = int(np.prod([int(d.evaluate(env)) for d in qs]))
    rows = int(kst[0].substitute("z", 1).evaluate(env)) * int(ks[0].evaluate(env))
    q = rng.uniform(-1, 1, nq).astype(op.dtype.np)
    k = rng.uniform(-1, 1, rows).astype(op.dtype.np)
    v = rng.uniform(-1, 1, rows).astype(op.dtype.np)
    return q, k, v


def expected(op: KernelAttention, q, k, v, env) -> np.ndarray:
    return op.reference([q, k, v], (op.dtype,) * 3, env)


# -- NVRTC: every variant compiles ---------------------------------------------------------------------
def test_every_variant_compiles_for_sm90(no_cache):
    # every (head_dim, dtype); masks, soft-capping, GQA shapes and cross-attention spread over them
    shapes = [dict(n_kv=8, groups=4), dict(n_kv=1, groups=8, window=512, softcap=50.0), dict(n_kv=6, groups=1,
              causal=False, t=1500), dict(n_kv=2, groups=3)]  # fmt: skip
    dts = (DType.f32, DType.f16, DType.bf16)
    ops = [make_op(hd=hd, dt=dt, **shapes[(a + b) % len(shapes)])
           for a, hd in enumerate(HEAD_DIMS) for b, dt in enumerate(dts)]  # fmt: skip
    kernels = [op.render(SLOTS) for op in ops]
    llama = make_op(n_kv=8, groups=4, hd=128)  # and the decode schedules the bench sweeps (by their code shape)
    kernels += [llama.render(SLOTS, v) for v in {v.max_rows: v for v in VARIANTS.values()}.values()]
    assert nvrtc.compile_cubin(source(kernels), arch="sm_90")[:4] == b"\x7fELF"


def test_decode_kernels_keep_their_register_budget():
    """ptxas (through NVRTC): the decode and f32 rows kernels at every head_dim and dtype, and
    every schedule the bench sweeps, fit the `__launch_bounds__` promise of their variant (<= 65536 /
    (THREADS * min_blocks) registers: 128 for the default's 4 blocks per SM) without spilling; the
    default prefill kernel does not spill at one m-tile per warp (at head_dim 256: was 228 bytes, then 8)."""
    from tests.backends.cuda.test_gemv import ptxas_usage

    cases = [(make_op(n_kv=8, groups=4, hd=hd, dt=dt), DECODE) for hd in HEAD_DIMS for dt in DTYPES]
    cases += [(make_op(n_kv=8, groups=4, hd=128), v) for v in VARIANTS.values() if v != DECODE]
    kernels = [op.render(SLOTS, v) for op, v in cases]
    usage = ptxas_usage(kernels)
    for (op, v), kern in zip(cases, kernels, strict=True):
        for ln in kern.launches:
            regs, spill = usage[ln.name]
            if ln.name.endswith("_pre"):  # the tensor-core prefill kernel: no promise (test_attention_prefill.py)
                if v == DECODE:  # one m-tile per warp: no spill; two: a few running sums
                    tiles = attention_prefill.tiling(op.spec(v)).tiles
                    assert regs <= 255 and spill <= (0 if tiles == 1 else 192), (ln.name, regs, spill)
                continue
            what = f"{ln.name} (head_dim {op.head_dim}, {op.dtype}, {v.name}): {regs} registers, {spill} B spilled"
            sp = op.spec(v)  # the tensor-core split kernel promises the blocks its shared memory allows
            blocks = attention_decode_tc.blocks_per_sm(sp) if ln.name.endswith("_dec") and tc(sp) else v.min_blocks
            assert regs <= 65536 // (THREADS * blocks) and spill == 0, what


def test_launches_gate_on_s_and_decode_grid_ignores_the_context():
    op = make_op(n_kv=8, groups=4, hd=128)
    dec, pre = op.render(SLOTS).launches  # one launch per path: the decode kernel merges its own splits
    for p in (0, 1000, 30000):  # the decode step's graph never changes as the context grows
        assert dec.grid.evaluate({"s": 1, "p": p}) == dec.grid.evaluate({"s": 1, "p": 0}) > 0
    assert pre.grid.evaluate({"s": 1, "p": 5}) == 0
    assert dec.grid.evaluate({"s": DECODE_ROWS + 1, "p": 0}) == 0 < pre.grid.evaluate({"s": DECODE_ROWS + 1, "p": 0})
    tl = attention_prefill.tiling(op.spec())
    assert dec.block == 128 and pre.block == tl.threads and pre.shared == attention_prefill.dynamic_shared(op.spec())


@pytest.mark.parametrize("dt", [DType.f32, DType.bf16], ids=str)
def test_a_literal_s_renders_only_the_path_that_runs(dt, no_cache):
    """A plan whose s is a literal (the decode bucket's s = 1) launches one path's kernels only:
    the other path's grid is a literal 0, so its code and launch are left out."""
    op = make_op(n_kv=8, groups=4, hd=64, dt=dt)
    head = [getattr(op, f) for f in ("n_kv", "groups")]
    tail = [getattr(op, f) for f in ("t", "head_dim", "q_strides", "k_strides", "v_strides", "causal", "past",
                                     "window", "scale", "softcap", "dtype")]  # fmt: skip
    other = "_rows" if dt == DType.f32 else "_pre"
    kernels = []
    for s, want in ((1, ("_dec",)), (DECODE_ROWS, ("_dec",)), (DECODE_ROWS + 1, (other,))):
        kern = KernelAttention(*head, num(s), *tail).render(SLOTS)
        names = [ln.name for ln in kern.launches]
        assert [n[n.rindex("_") :] for n in names] == list(want), names
        assert all(f"{n}(" in kern.code for n in names) and kern.code.count("__global__") == len(names), names
        kernels.append(kern)
    assert len(op.render(SLOTS).launches) == 2  # a symbolic s keeps both paths, each gated on s
    assert nvrtc.compile_cubin(source(kernels), arch="sm_90")[:4] == b"\x7fELF"


@pytest.mark.parametrize(
    "kw",
    [dict(hd=96), dict(dt=DType.f64), dict(window=4, causal=False)],
    ids=["head-dim-96", "f64", "window-without-causal"],
)
def test_render_refuses(kw):
    with pytest.raises(BackendError):
        make_op(**kw).render(SLOTS)


def test_render_refuses_strided_head_dim():
    op = make_op()
    head = [getattr(op, f) for f in ("n_kv", "groups", "s", "t", "head_dim", "q_strides")]
    bad = KernelAttention(*head, (z * 1024, z * 64, z * 2), op.v_strides, True, op.past, 0, 0.125, 0.0, DType.bf16)
    with pytest.raises(BackendError, match="unit stride"):
        bad.render(SLOTS)


# -- the kernels on the CPU ----------------------------------------------------------------------------
# (op kwargs, s, p): decode (s <= DECODE_ROWS) and prefill, odd sizes, every mask, GQA chunking
CASES = {
    "dec-bf16-s1": (dict(), 1, 0),
    "dec-bf16-s1-t200-window": (dict(window=37), 1, 199),
    "dec-bf16-s3-softcap": (dict(softcap=0.7, scale=2.0), 3, 150),
    "dec-f32-hd128-g3": (dict(dt=DType.f32, hd=128, groups=3, n_kv=1), 2, 70),
    "dec-f16-hd256-g8": (dict(dt=DType.f16, hd=256, groups=8, n_kv=1), 1, 16),
    "dec-bf16-cross": (dict(causal=False, t=131), 1, 0),
    "dec-bf16-capped": (dict(cap=40), 2, 60),
    "pre-bf16-s9": (dict(), 9, 0),
    "pre-bf16-s70-past-window": (dict(window=21), 70, 13),
    "pre-f16-hd128-s17-cross": (dict(dt=DType.f16, hd=128, causal=False, t=77), 17, 0),
    "pre-bf16-hd256-s33-softcap": (dict(hd=256, n_kv=1, groups=1, softcap=0.5, scale=3.0), 33, 40),
    "rows-f32-s12-window": (dict(dt=DType.f32, window=5), 12, 3),
}


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    from tests.backends.cuda.attention_emu import Emulated

    return Emulated([make_op(**kw) for kw, _, _ in CASES.values()], SLOTS, tmp_path_factory.mktemp("emu"))


@needs_gxx
@pytest.mark.parametrize("case", sorted(CASES))
def test_kernels_compute_attention_on_cpu(case, emulated):
    kw, s, p = CASES[case]
    op = make_op(**kw)
    env = {"s": s, "p": p}
    q, k, v = inputs(op, env, seed=len(case))
    got = emulated.run(op, q, k, v, env=env)
    assert_matches(got, expected(op, q, k, v, env), op.dtype, 1.0, case)


@needs_gxx
@pytest.mark.parametrize("case", ["dec-bf16-s3-softcap", "pre-bf16-s9", "rows-f32-s12-window"])
def test_grids_pinned_at_bucket_bounds_are_safe(case, emulated):
    """Launched with max(live, upper-bound) grids and scratch sized at the bucket bounds (s = 64, p = 400), the
    kernels compute the live sizes and exit past them (runtime.py pins grids of bounded plans)."""
    kw, s, p = CASES[case]
    op = make_op(**kw)
    env, upper = {"s": s, "p": p}, {"s": 64, "p": 400}
    assert op.scratch_bytes().evaluate(upper) >= op.scratch_bytes().evaluate(env)  # sized at the bounds: enough
    q, k, v = inputs(op, env, seed=5)
    got = emulated.run(op, q, k, v, env=env, grid_env=upper)
    assert_matches(got, expected(op, q, k, v, env), op.dtype, 1.0, case)


# other decode schedules on the CPU: fewer rows per block and keys per step, short chunks, and a
# split count small enough that chunks outgrow min_chunk (rounded up to whole steps)
ODD_SCHEDULE = DecodeVariant(max_rows=2, target_blocks=6, min_chunk=32, unroll=2)
SCHEDULE_CASES = {
    "bf16-hd64-g4-s1": (dict(groups=4), 1, 300),
    "f16-hd128-s3-window": (dict(dt=DType.f16, hd=128, window=50), 3, 130),
    "f32-hd256-s2": (dict(dt=DType.f32, hd=256, n_kv=1), 2, 40),
    "bf16-cross-t1": (dict(causal=False, t=1), 1, 0),
}


@needs_gxx
def test_other_decode_schedules_compute_attention_on_cpu(tmp_path):
    from tests.backends.cuda.attention_emu import Emulated

    ops = {name: make_op(**kw) for name, (kw, _, _) in SCHEDULE_CASES.items()}
    emu = Emulated(list(ops.values()), SLOTS, tmp_path, ODD_SCHEDULE)
    for name, (_, s, p) in SCHEDULE_CASES.items():
        env = {"s": s, "p": p}
        q, k, v = inputs(ops[name], env, seed=len(name))
        got = emu.run(ops[name], q, k, v, env=env)
        assert_matches(got, expected(ops[name], q, k, v, env), ops[name].dtype, 1.0, f"{name} {ODD_SCHEDULE.name}")


@needs_gxx
@pytest.mark.parametrize("variant", [DecodeVariant(tc=8, stages=2), DecodeVariant(tc=4, stages=3)], ids=str)
def test_tensor_core_decode_schedules_compute_attention_on_cpu(variant, tmp_path):
    """The tensor-core split kernel with few splits: chunks of several tiles per warp (the rings wrap),
    warps past the chunk's end, and (f32) the CUDA-core fallback."""
    from tests.backends.cuda.attention_emu import Emulated

    cases = {
        **SCHEDULE_CASES,
        "f16-hd256-g8-softcap": (dict(dt=DType.f16, hd=256, n_kv=1, groups=8, softcap=0.7), 2, 200),
    }
    ops = {name: make_op(**kw) for name, (kw, _, _) in cases.items()}
    emu = Emulated(list(ops.values()), SLOTS, tmp_path, variant)
    for name, (_, s, p) in cases.items():
        env = {"s": s, "p": p}
        q, k, v = inputs(ops[name], env, seed=len(name) + 1)
        got = emu.run(ops[name], q, k, v, env=env)
        assert_matches(got, expected(ops[name], q, k, v, env), ops[name].dtype, 1.0, f"{name} {variant.name}")


def test_reference_is_attention_over_the_views():
    op = make_op(n_kv=2, groups=2, hd=64, dt=DType.f32, window=3)
    env = {"s": 4, "p": 2}
    q, k, v = inputs(op, env, seed=0)
    got = op.reference([q, k, v], (DType.f32,) * 3, env).reshape(2, 2, 4, 64)
    qq = q.reshape(4, 4, 64).astype(np.float64)  # (s, heads, hd)
    kk = k.reshape(2, 512, 64)[:, :6].astype(np.float64)
    vv = v.reshape(2, 512, 64)[:, :6].astype(np.float64)
    for h in range(4):
        sc = qq[:, h] @ kk[h // 2].T / 8.0
        i, j = np.arange(4)[:, None], np.arange(6)[None, :]
        sc = np.where((j <= 2 + i) & (j > 2 + i - 3), sc, -np.inf)
        pr = np.exp(sc - sc.max(-1, keepdims=True))
        want = (pr / pr.sum(-1, keepdims=True)) @ vv[h // 2]
        np.testing.assert_allclose(got[h // 2, h % 2], want, rtol=1e-6, atol=1e-7)


# -- GPU: every launch of the op through the driver -----------------------------------------------------
def run_on_gpu(op: KernelAttention, q, k, v, env: dict, variant=None) -> np.ndarray:
    """Launch every kernel of the op in order (a gated-off launch as one block, as in a CUDA graph);
    `variant`: the decode schedule (default DECODE)."""
    from luminal.backends.cuda import driver

    dev = driver.device()
    kern = op.render(SLOTS, variant)
    mod = driver.Module(nvrtc.compile_cubin(source([kern])))
    dims = np.array([env["p"], env["s"], 0, 0], np.int64)
    n = int(op.out_size().evaluate(env))
    host = (np.full(n + 8, np.nan, op.dtype.np), q, k, v, dims)
    bufs = [driver.DeviceBuffer(max(a.nbytes, 16)) for a in host]
    for b, a in zip(bufs, host, strict=True):
        driver.htod(b.ptr, a, dev.stream)
    scratch = driver.DeviceBuffer(max(256, int(op.scratch_bytes(variant).evaluate(env))))
    zeroed = np.zeros(op.zeroed_bytes(variant) // 4, np.uint32)
    zbuf = driver.DeviceBuffer(max(256, zeroed.nbytes))
    driver.htod(zbuf.ptr, zeroed, dev.stream)
    params = driver.Params([*(b.ptr for b in bufs), scratch.ptr, zbuf.ptr])
    for ln in kern.launches:
        grid = max(1, int(ln.grid.evaluate(env)))
        driver.launch(mod.function(ln.name, ln.shared), grid, ln.block, ln.shared, params, dev.stream)
    out = np.empty(n + 8, op.dtype.np)
    driver.dtoh(out, bufs[0].ptr, dev.stream)
    driver.dtoh(zeroed, zbuf.ptr, dev.stream)
    dev.synchronize()
    assert np.isnan(out[n:].astype(np.float32)).all(), "the kernel wrote past its output"
    assert not zeroed.any(), "the decode kernel's tickets did not reset to zero"
    return out[:n]


# (s, t) odd sizes: causal at past t - s where t >= s, cross-attention (non-causal) otherwise
GPU_SIZES = [(1, 1), (1, 17), (1, 4097), (3, 17), (3, 4097), (127, 127), (127, 4097), (3, 1), (127, 17)]


@pytest.mark.cuda
@pytest.mark.parametrize("dt", [DType.f32, DType.f16, DType.bf16], ids=str)
@pytest.mark.parametrize("hd", HEAD_DIMS)
def test_kernels_against_f64_on_the_gpu(dt, hd):
    for s, t in GPU_SIZES:
        causal = t >= s
        variants = (dict(), dict(window=9), dict(softcap=0.8, scale=1.7)) if hd == 128 else (dict(),)
        for kw in variants if causal else (dict(),):
            op = make_op(n_kv=2, groups=4, hd=hd, dt=dt, causal=causal, t=None if causal else t, cap=4100, **kw)
            env = {"s": s, "p": t - s if causal else 0}
            q, k, v = inputs(op, env, seed=s * 7 + t)
            got = run_on_gpu(op, q, k, v, env)
            assert_matches(got, expected(op, q, k, v, env), dt, 1.0, f"s={s} t={t} {kw}")


@pytest.mark.cuda
@pytest.mark.parametrize("case", ["dec-bf16-s1", "pre-bf16-s70-past-window"])
def test_one_decode_and_one_prefill_on_the_gpu(case):
    """The memcheck subset (scripts/gpu_attention.sh runs it under compute-sanitizer)."""
    kw, s, p = CASES[case]
    op = make_op(**kw)
    env = {"s": s, "p": p}
    q, k, v = inputs(op, env, seed=1)
    assert_matches(run_on_gpu(op, q, k, v, env), expected(op, q, k, v, env), op.dtype, 1.0, case)


# split counts 1, 4, 12 and MAX_SPLITS (target_blocks over the 2 row blocks of make_op(n_kv=2, groups=4)
# at R = 4) and the sweep's schedules, over contexts that leave partial steps and splits
SPLIT_SCHEDULES = [DecodeVariant(target_blocks=b, min_chunk=c) for b, c in ((1, 64), (8, 64), (24, 32), (4096, 64))]


@pytest.mark.cuda
@pytest.mark.parametrize("variant", [*VARIANTS.values(), *SPLIT_SCHEDULES], ids=lambda v: v.name)
def test_decode_schedules_on_the_gpu(variant):
    # bf16 at d = 128 (the llama shape), f32 at d = 256 (two vectors per lane and key, unroll halved)
    shapes = ((DType.bf16, 128), (DType.f32, 256)) if variant in VARIANTS.values() else ((DType.bf16, 128),)
    for dt, hd in shapes:
        for s, t in ((1, 1), (1, 17), (1, 4097), (3, 127), (3, 4097), (DECODE_ROWS, 1000)):
            op = make_op(n_kv=2, groups=4, hd=hd, dt=dt, cap=4100, softcap=0.9 if s == 3 else 0.0)
            env = {"s": s, "p": t - s}
            q, k, v = inputs(op, env, seed=s + t)
            got = run_on_gpu(op, q, k, v, env, variant)
            assert_matches(got, expected(op, q, k, v, env), dt, 1.0, f"{variant.name} {dt} hd={hd} s={s} t={t}")


@pytest.mark.cuda
@pytest.mark.parametrize("variant", [v for v in VARIANTS.values() if v.prefill != DECODE.prefill], ids=lambda v: v.name)
def test_prefill_schedules_on_the_gpu(variant):
    for dt, hd in ((DType.bf16, 128), (DType.f16, 64)):
        for s, t in ((DECODE_ROWS + 1, DECODE_ROWS + 1), (127, 127), (127, 4097), (64, 1000)):
            for kw in (dict(), dict(window=33, softcap=0.9)):
                op = make_op(n_kv=2, groups=4, hd=hd, dt=dt, cap=4100, **kw)
                env = {"s": s, "p": t - s}
                q, k, v = inputs(op, env, seed=s + t)
                got = run_on_gpu(op, q, k, v, env, variant)
                assert_matches(
                    got, expected(op, q, k, v, env), dt, 1.0, f"{variant.name} {dt} hd={hd} s={s} t={t} {kw}"
                )


# -- q rotated at its load (KernelAttentionRope) ----------------------------------------------------------
def make_rope_op(**kw) -> KernelAttentionRope:
    """make_op's attention with q = rotate(x) as nn/rope.py spells it: x a slice of a wider
    (s, heads * hd + 64) row (the stacked q/k/v GEMV's), cos read from an (s, hd/2) table, sin from
    an (s, 1, hd) one, rot(z) the halves-swapping index."""
    base = make_op(**kw)
    groups, n_kv, hd = base.groups.value, base.n_kv.value, base.head_dim.value
    heads, h, s = n_kv * groups, hd // 2, var("s")
    shape = (s, num(heads), num(hd))
    xst = (z * (heads * hd + 64), z * hd, z)
    rot = (z // hd) * hd + (z % hd + h) % hd
    fields = [getattr(base, f.name) for f in dataclasses.fields(KernelAttention)]
    return KernelAttentionRope(*fields, shape, xst, (z * h, num(0), z % h), rot, (z * hd, num(0), z))


def rope_inputs(op: KernelAttentionRope, env: dict, seed: int):
    rng = np.random.default_rng(seed)
    s, heads, hd = (int(d.evaluate(env)) for d in op.shape)
    _, k, v = inputs(op, env, seed)
    x = rng.uniform(-1, 1, (s, heads * hd + 64)).astype(op.dtype.np)
    ang = rng.uniform(0, 6.3, (s, hd // 2))
    cos = np.cos(ang).astype(np.float32)
    sin = (np.concatenate([-np.sin(ang), np.sin(ang)], 1)).astype(np.float32)  # rotate_half's signs folded in
    return x.reshape(-1), k, v, cos.reshape(-1), sin.reshape(-1)


def test_rope_reference_is_attention_of_the_rotated_q():
    op = make_rope_op(n_kv=2, groups=2, hd=64, dt=DType.f32)
    env = {"s": 3, "p": 5}
    x, k, v, cos, sin = rope_inputs(op, env, seed=1)
    xq = x.reshape(3, -1)[:, : 4 * 64].reshape(3, 4, 64).astype(np.float32)
    c = np.concatenate([cos.reshape(3, 32)] * 2, 1)[:, None, :]
    half = np.concatenate([-xq[..., 32:], xq[..., :32]], -1)  # transformers' rotate_half
    sn = np.concatenate([sin.reshape(3, 64)[:, 32:]] * 2, 1)[:, None, :]  # +sin on both halves
    q = (xq * c + half * sn).astype(np.float32).reshape(-1)
    want = KernelAttention(*(getattr(op, f.name) for f in dataclasses.fields(KernelAttention))).reference(
        [q, k, v], (DType.f32,) * 3, env
    )
    np.testing.assert_allclose(op.reference([x, k, v, cos, sin], (DType.f32,) * 5, env), want, rtol=1e-5, atol=1e-6)


ROPE_CASES = {  # decode with several splits, f32 rows, bf16 tensor-core prefill, f16 at d = 128
    "dec-bf16-s1": (dict(), 1, 300),
    "dec-f16-hd128-s2": (dict(dt=DType.f16, hd=128), 2, 90),
    "rows-f32-s12": (dict(dt=DType.f32), 12, 3),
    "pre-bf16-s17": (dict(), 17, 20),
}


@needs_gxx
@pytest.mark.parametrize("variant", [DecodeVariant(), DecodeVariant(tc=8, stages=2)], ids=["cuda-core", "tc"])
def test_rope_kernels_compute_attention_on_cpu(variant, tmp_path):
    from tests.backends.cuda.attention_emu import Emulated

    ops = {name: make_rope_op(**kw) for name, (kw, _, _) in ROPE_CASES.items()}
    emu = Emulated(list(ops.values()), SLOTS, tmp_path, variant)
    for name, (_, s, p) in ROPE_CASES.items():
        op, env = ops[name], {"s": s, "p": p}
        ins = rope_inputs(op, env, seed=len(name))
        want = op.reference(list(ins), (op.dtype,) * 3 + (DType.f32,) * 2, env)
        assert_matches(emu.run(op, *ins, env=env), want, op.dtype, 1.0, name)


def test_rope_kernels_compile_for_sm90_without_spills(no_cache):
    """The rotating kernels compile; the decode / rows kernels keep the 128-register promise without
    spilling (rotating in the unrolled q load spilled ~150 bytes: q is rotated into shared memory);
    the prefill kernel spills nothing at one m-tile per warp (two: a few running sums)."""
    from tests.backends.cuda.test_gemv import ptxas_usage

    shapes = ((64, DType.bf16), (128, DType.f16), (128, DType.bf16), (256, DType.f32))
    ops = [make_rope_op(n_kv=8, groups=4, hd=hd, dt=dt) for hd, dt in shapes]
    kernels = [op.render(SLOTS) for op in ops]
    assert nvrtc.compile_cubin(source(kernels), arch="sm_90")[:4] == b"\x7fELF"
    usage = ptxas_usage(kernels)
    for op, kern in zip(ops, kernels, strict=True):
        for ln in kern.launches:
            regs, spill = usage[ln.name]
            pre = ln.name.endswith("_pre")
            most = 192 if pre and attention_prefill.tiling(op.spec()).tiles > 1 else 0
            budget = 255 if pre else register_budget(ln.shared)
            assert ln.name.startswith("attnr_") and spill <= most and regs <= budget, (ln, regs, spill)
