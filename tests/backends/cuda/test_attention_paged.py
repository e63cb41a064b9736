"""KernelPagedAttention (kernels/attention_paged.py): the page-table decode kernel on the CPU (g++
emulation) and the GPU against numpy for B = 1..8 sequences of different lengths; the rule
(the paged rules of attention.egg) fuse nn.attend_paged over a paged KVCache and the fused plan equals the oracle."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from luminal.backends.cuda import nvrtc
from luminal.backends.cuda.kernel import source
from luminal.backends.cuda.kernels.attention_decode import DecodeVariant
from luminal.backends.cuda.kernels.attention_paged import KernelPagedAttention
from luminal.dtype import DType
from luminal.shape.expr import num, var, z
from tests.helpers import assert_matches

SLOTS = {"s": 0, "pages": 1, "!error": 2}
POOL = 96
TC = DecodeVariant(tc=8, stages=2)  # the tensor-core split kernel, few splits: chunks of several tiles per warp


def make_op(n_kv=2, groups=2, hd=64, dt=DType.bf16, window=0, softcap=0.0) -> KernelPagedAttention:
    h = n_kv * groups
    q_st = (z * (groups * hd), z * hd, z * (h * hd), z)  # q from a (s, heads, hd) projection
    return KernelPagedAttention(num(n_kv), num(groups), var("s"), var("pages"), num(hd), num(POOL), q_st, window,
                                hd**-0.5, softcap, dt)  # fmt: skip


def batch(op: KernelPagedAttention, lens: list[int], seed: int, prefill: int = 0):
    """Sequences of `lens` tokens scattered over the pool; one query per sequence at its last
    position (or, with `prefill`, the last `prefill` positions of sequence 0)."""
    rng = np.random.default_rng(seed)
    n_kv, g, hd = op.n_kv.value, op.groups.value, op.head_dim.value
    pages = max(lens)
    table = np.zeros((len(lens), pages), np.int32)
    table[np.arange(pages) < np.array(lens)[:, None]] = rng.permutation(POOL)[: sum(lens)]
    if prefill:
        seq, pos = np.zeros(prefill, np.int32), np.arange(lens[0] - prefill, lens[0], dtype=np.int32)
    else:
        seq, pos = np.arange(len(lens), dtype=np.int32), np.array(lens, np.int32) - 1
    rows = table[seq]  # (s, pages)
    s = len(seq)
    q = rng.uniform(-1, 1, s * n_kv * g * hd).astype(op.dtype.np)
    kp, vp = (rng.uniform(-1, 1, n_kv * POOL * hd).astype(op.dtype.np) for _ in "kv")
    env = {"s": s, "pages": pages}
    return [q, kp, vp, np.ascontiguousarray(rows).reshape(-1), pos], env


def numpy_paged(op: KernelPagedAttention, ins, env) -> np.ndarray:
    q, kp, vp, rows, pos = ins
    n_kv, g, hd = op.n_kv.value, op.groups.value, op.head_dim.value
    s = env["s"]
    rows = rows.reshape(s, env["pages"])
    qq = q.astype(np.float64).reshape(s, n_kv, g, hd)
    kk, vv = (a.astype(np.float64).reshape(n_kv, POOL, hd) for a in (kp, vp))
    out = np.zeros((n_kv, g, s, hd))
    for i in range(s):
        lo = max(0, pos[i] - op.window + 1) if op.window else 0
        sl = rows[i, lo : pos[i] + 1]
        for h in range(n_kv):
            for gg in range(g):
                x = kk[h, sl] @ qq[i, h, gg] * op.scale
                if op.softcap:
                    x = op.softcap * np.tanh(x / op.softcap)
                p = np.exp(x - x.max())
                out[h, gg, i] = (p / p.sum()) @ vv[h, sl]
    return out.reshape(-1)


CASES = {  # (op kwargs, sequence lengths, prefill rows)
    "b1": (dict(), [5], 0),
    "b3-window": (dict(window=4), [1, 9, 70], 0),
    "b8": (dict(), [3, 1, 8, 2, 11, 4, 6, 9], 0),
    "b5-f32-hd128-g3": (dict(dt=DType.f32, hd=128, groups=3, n_kv=1), [7, 2, 12, 1, 5], 0),
    "b2-f16-softcap": (dict(dt=DType.f16, softcap=0.6), [13, 4], 0),
    "rows-prefill-s12": (dict(window=6), [20], 12),
}


def test_reference_is_paged_attention():
    for name, (kw, lens, pre) in CASES.items():
        op = make_op(**kw)
        ins, env = batch(op, lens, seed=3, prefill=pre)
        got = op.reference(ins, (op.dtype,) * 3 + (DType.i32,) * 2, env)
        np.testing.assert_allclose(
            got.astype(np.float64), numpy_paged(op, ins, env), rtol=1e-2, atol=1e-2, err_msg=name
        )


def test_every_paged_variant_compiles_for_sm90(no_cache):
    ops = [make_op(hd=hd, dt=dt) for hd, dt in ((64, DType.bf16), (128, DType.f16), (256, DType.f32))]
    ops.append(make_op(window=512, softcap=30.0))
    assert nvrtc.compile_cubin(source([op.render(SLOTS) for op in ops]), arch="sm_90")[:4] == b"\x7fELF"


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20) to run CUDA C on the CPU")
@pytest.mark.parametrize("variant", [DecodeVariant(), TC], ids=["cuda-core", "tc"])
def test_paged_kernels_on_cpu(variant, tmp_path):
    from tests.backends.cuda.attention_emu import Emulated

    ops = {name: make_op(**kw) for name, (kw, _, _) in CASES.items()}
    emu = Emulated(list(dict.fromkeys(ops.values())), SLOTS, tmp_path, variant)
    for name, (_, lens, pre) in CASES.items():
        op = ops[name]
        ins, env = batch(op, lens, seed=len(name), prefill=pre)
        got = emu.run(op, *ins, env=env)
        assert_matches(got, numpy_paged(op, ins, env), op.dtype, 1.0, name)


@pytest.mark.cuda
@pytest.mark.parametrize("variant", [DecodeVariant(), TC], ids=["cuda-core", "tc"])
@pytest.mark.parametrize("dt", [DType.f32, DType.f16, DType.bf16], ids=str)
def test_paged_kernels_on_the_gpu(dt, variant):
    from luminal.backends.cuda import driver

    dev = driver.device()
    rng = np.random.default_rng(0)
    for b in range(1, 9):
        for kw in (dict(), dict(window=5)):
            op = make_op(n_kv=2, groups=4, hd=128, dt=dt, **kw)
            lens = [int(x) for x in rng.integers(1, POOL // b + 1, b)]  # the pool holds every sequence's slots
            ins, env = batch(op, lens, seed=b)
            kern = op.render(SLOTS, variant)
            mod = driver.Module(nvrtc.compile_cubin(source([kern])))
            n = int(op.out_size().evaluate(env))
            host = [np.full(n + 8, np.nan, dt.np), *ins, np.array([env["s"], env["pages"], 0, 0], np.int64)]
            bufs = [driver.DeviceBuffer(max(16, a.nbytes)) for a in host]
            for buf, a in zip(bufs, host, strict=True):
                driver.htod(buf.ptr, a, dev.stream)
            scratch = driver.DeviceBuffer(max(256, int(op.scratch_bytes(variant).evaluate(env))))
            zeroed = driver.DeviceBuffer(max(256, op.zeroed_bytes(variant)))
            driver.memset8(zeroed.ptr, 0, zeroed.nbytes, dev.stream)
            params = driver.Params([*(buf.ptr for buf in bufs), scratch.ptr, zeroed.ptr])
            for ln in kern.launches:
                grid = max(1, int(ln.grid.evaluate(env)))
                driver.launch(mod.function(ln.name, ln.shared), grid, ln.block, ln.shared, params, dev.stream)
            out = np.empty(n + 8, dt.np)
            driver.dtoh(out, bufs[0].ptr, dev.stream)
            dev.synchronize()
            assert np.isnan(out[n:].astype(np.float32)).all()
            assert_matches(out[:n], numpy_paged(op, ins, env), dt, 1.0, f"B={b} {kw}")


# -- the rule -------------------------------------------------------------------------------------------
def _paged_block(dt, window=None, hd=64):
    import luminal as lm
    from luminal.nn.attention import PagedKV, attend_paged, paged_read

    g = lm.Graph()
    s = var("s")
    kv = PagedKV.inputs(g)
    q = g.tensor("q", ("s", 4, hd), dt).reshape(s, 2, 2, hd).permute(1, 2, 0, 3)  # (n_kv, groups, s, hd)
    k, v = (g.tensor(n, ("s", 2, hd), dt).permute(1, 0, 2) for n in "kv")
    pools = [g.tensor(f"cache.0.{n}", (2, POOL, hd), dt).persist() for n in "kv"]
    rows = kv.rows()
    slot = rows.take_along_axis(kv.pos.unsqueeze(1), 1).squeeze(1)
    k_all, v_all = (
        p.scatter(slot, x, axis=1).output(p_name)
        for p, x, p_name in zip(pools, (k, v), ("cache.0.k", "cache.0.v"), strict=True)
    )
    attend_paged(q, paged_read(k_all, rows), paged_read(v_all, rows), kv.mask(window), hd**-0.5).output("y")
    return g


def _paged_feed(g, lens, dt, seed):
    rng = np.random.default_rng(seed)
    b = len(lens)
    table = np.zeros((b, max(lens)), np.int32)
    table[np.arange(max(lens)) < np.array(lens)[:, None]] = rng.permutation(POOL)[: sum(lens)]
    hd = int(g.input_shapes["q"][2])
    feed = {n: rng.uniform(-1, 1, (b, sh, hd)).astype(dt.np) for n, sh in (("q", 4), ("k", 2), ("v", 2))}
    feed |= {f"cache.0.{n}": rng.uniform(-1, 1, (2, POOL, hd)).astype(dt.np) for n in "kv"}
    feed |= {"kv.table": table, "kv.seq": np.arange(b, dtype=np.int32), "kv.pos": np.array(lens, np.int32) - 1}
    return feed, {"s": b, "b": b, "pages": max(lens)}


@pytest.mark.parametrize("window", [None, 3])
def test_rule_fuses_paged_attention_and_the_plan_equals_the_oracle(window):
    from luminal.egraph.compile import CompileOptions, compile_plans
    from tests.backends.cuda.test_lowering import CpuCudaBackend
    from tests.egraph.util import oracle

    g = _paged_block(DType.f32, window)
    _, (llir,), _ = compile_plans(g, CpuCudaBackend(), CompileOptions(cache=False, search_budget=1))
    fused = [n.op for n in llir.nodes if isinstance(n.op, KernelPagedAttention)]
    assert len(fused) == 1 and fused[0].window == (window or 0), llir.op_counts()
    for lens in ([4], [2, 7, 1], [5, 3, 9, 1, 2, 8, 6, 4]):
        feed, env = _paged_feed(g, lens, DType.f32, seed=len(lens))
        got = CpuCudaBackend().load(llir).run(feed, env)
        want = oracle(g, feed, env)
        for name, arr in want.items():
            assert_matches(np.asarray(got[name]).reshape(arr.shape), arr, DType.f32, 1.0, f"{name} B={len(lens)}")


def test_paged_model_layer_fuses():
    import luminal as lm
    from luminal import nn
    from luminal.egraph.compile import CompileOptions, compile_plans
    from luminal.nn.attention import PagedKV
    from tests.backends.cuda.test_lowering import CpuCudaBackend

    g = lm.Graph()
    x = g.tensor("x", ("s", 96))
    att = nn.Attention(g, "a", 96, 4, 2, 64, nn.KVCache("cache.0", 2, POOL, 64, paged=True), window=16)
    att(x, None, paged=PagedKV.inputs(g)).output("y")
    _, (llir,), _ = compile_plans(g, CpuCudaBackend(), CompileOptions(cache=False, search_budget=1))
    assert [type(n.op).__name__ for n in llir.nodes].count("KernelPagedAttention") == 1, llir.op_counts()


def test_every_sampled_extraction_of_paged_attention_agrees():
    import random

    from luminal.egraph.compile import build_egraph, preference
    from tests.backends.cuda.test_lowering import CpuCudaBackend
    from tests.egraph.util import oracle

    g = _paged_block(DType.f32, 4)
    view = build_egraph(g, CpuCudaBackend())
    feed, env = _paged_feed(g, [3, 9, 5], DType.f32, seed=11)
    want = oracle(g, feed, env)
    rng = random.Random(2)
    seen, fused = set(), 0
    for gen in [view.preferred_genome(preference(CpuCudaBackend()))] + [view.random_genome(rng) for _ in range(10)]:
        llir = view.extract(view.repair(gen))
        if llir.fingerprint() in seen:
            continue
        seen.add(llir.fingerprint())
        fused += any(isinstance(n.op, KernelPagedAttention) for n in llir.nodes)
        got = CpuCudaBackend().load(llir).run(feed, env)
        for name, arr in want.items():
            assert_matches(np.asarray(got[name]).reshape(arr.shape), arr, DType.f32, 1.0, f"{name} {llir.op_counts()}")
    assert fused >= 1 and len(seen) > fused, (fused, len(seen))
