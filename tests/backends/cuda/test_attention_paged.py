"""KernelPagedAttention (kernels/attention_paged.py): the page-table decode kernel on the CPU (g++
emulation) and the GPU against numpy for B = 1..8 sequences of different lengths; the rule
(attention_paged.egg) fuses nn.attend_paged over a paged KVCache and the fused plan equals the oracle."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from luminal.backends.cuda import nvrtc
from luminal.backends.cuda.kernel import source
from luminal.backends.cuda.kernels.attention_paged import KernelPagedAttention
from luminal.dtype import DType
from luminal.shape.expr import num, var, z
from tests.helpers import assert_matches

SLOTS = {"s": 0, "pages": 1, "!error": 2}
POOL = 96


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
def test_paged_kernels_on_cpu(tmp_path):
    from tests.backends.cuda.attention_emu import Emulated

    ops = {name: make_op(**kw) for name, (kw, _, _) in CASES.items()}
    emu = Emulated(list(dict.fromkeys(ops.values())), SLOTS, tmp_path)
    for name, (_, lens, pre) in CASES.items():
        op = ops[name]
        ins, env = batch(op, lens, seed=len(name), prefill=pre)
        got = emu.run(op, *ins, env=env)
        assert_matches(got, numpy_paged(op, ins, env), op.dtype, 1.0, name)


@pytest.mark.cuda
@pytest.mark.parametrize("dt", [DType.f32, DType.f16, DType.bf16], ids=str)
def test_paged_kernels_on_the_gpu(dt):
    from luminal.backends.cuda import driver

    dev = driver.device()
    rng = np.random.default_rng(0)
    for b in range(1, 9):
        for kw in (dict(), dict(window=5)):
            op = make_op(n_kv=2, groups=4, hd=128, dt=dt, **kw)
            lens = [int(x) for x in rng.integers(1, 90, b)]
            ins, env = batch(op, lens, seed=b)
            kern = op.render(SLOTS)
            mod = driver.Module(nvrtc.compile_cubin(source([kern])))
            n = int(op.out_size().evaluate(env))
            host = [np.full(n + 8, np.nan, dt.np), *ins, np.array([env["s"], env["pages"], 0, 0], np.int64)]
            bufs = [driver.DeviceBuffer(max(16, a.nbytes)) for a in host]
            for buf, a in zip(bufs, host, strict=True):
                driver.htod(buf.ptr, a, dev.stream)
            scratch = driver.DeviceBuffer(max(256, int(op.scratch_bytes().evaluate(env))))
            params = driver.Params([*(buf.ptr for buf in bufs), scratch.ptr])
            for ln in kern.launches:
                grid = max(1, int(ln.grid.evaluate(env)))
                driver.launch(mod.function(ln.name), grid, ln.block, ln.shared, params, dev.stream)
            out = np.empty(n + 8, dt.np)
            driver.dtoh(out, bufs[0].ptr, dev.stream)
            dev.synchronize()
            assert np.isnan(out[n:].astype(np.float32)).all()
            assert_matches(out[:n], numpy_paged(op, ins, env), dt, 1.0, f"B={b} {kw}")
