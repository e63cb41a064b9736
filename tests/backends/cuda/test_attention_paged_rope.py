"""KernelPagedAttentionRope (kernels/attention_paged.py): the paged decode kernel whose q is rotated
as it is loaded (rule `paged-rope`, attention.egg: a Hugging Face decode step's q rotary, translated
by luminal/torch/ops/rotary.py). Its rendered CUDA C compiles for sm_90 (NVRTC), and runs on the CPU
(g++ emulation) equal to its reference semantics (the rotation in f32, rounded once, then paged
attention), at one query row (the decode plan: the decode path only) and at a free row count."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from luminal.backends.cuda import nvrtc
from luminal.backends.cuda.kernel import source
from luminal.backends.cuda.kernels.attention_decode import DecodeVariant
from luminal.backends.cuda.kernels.attention_paged import KernelPagedAttentionRope
from luminal.dtype import DType
from luminal.shape.expr import num, var, z
from tests.backends.cuda.test_attention_paged import POOL, SLOTS, batch
from tests.helpers import assert_matches


def make_rope_op(s, n_kv=2, groups=4, hd=64, dt=DType.bf16) -> KernelPagedAttentionRope:
    """x (s, heads, hd) contiguous; cos / sin f32 tables (s, hd) broadcast over the heads; the partner
    of element e is e with its half of head_dim swapped."""
    h, half = n_kv * groups, hd // 2
    q_st = (z * (groups * hd), z * hd, z * (h * hd), z)  # the rotated q, contiguous over (s, heads, hd)
    shape, xst, tab = (s, num(h), num(hd)), (z * (h * hd), z * hd, z), (z * hd, num(0) * z, z)
    rot = (z // hd) * hd + (z % hd + half) % hd
    return KernelPagedAttentionRope(num(n_kv), num(groups), s, var("pages"), num(hd), num(POOL), q_st, 0,
                                    hd**-0.5, 0.0, dt, shape, xst, tab, rot, tab)  # fmt: skip


def _inputs(op, lens, seed):
    ins, env = batch(op, lens, seed)
    rng = np.random.default_rng(seed + 1)
    s, hd = env["s"], op.head_dim.value
    cos, sin = (rng.uniform(-1, 1, s * hd).astype(np.float32) for _ in "cs")
    return [*ins, cos, sin], env


def test_paged_rope_compiles_for_sm90(no_cache):
    ops = [make_rope_op(num(1)), make_rope_op(var("s"), hd=128, dt=DType.f16)]
    kernels = [op.render(SLOTS) for op in ops]
    assert len(kernels[0].launches) == 1 and len(kernels[1].launches) == 2  # s = 1: the decode path only
    assert nvrtc.compile_cubin(source(kernels), arch="sm_90")[:4] == b"\x7fELF"


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20) to run CUDA C on the CPU")
@pytest.mark.parametrize("variant", [DecodeVariant(), DecodeVariant(tc=8, stages=2)], ids=["cuda-core", "tc"])
def test_paged_rope_kernel_on_cpu_equals_its_reference(variant, tmp_path):
    from tests.backends.cuda.attention_emu import Emulated

    cases = {"decode": (make_rope_op(num(1)), [37]), "rows": (make_rope_op(var("s")), [5, 60, 23])}
    emu = Emulated([op for op, _ in cases.values()], SLOTS, tmp_path, variant)
    for name, (op, lens) in cases.items():
        ins, env = _inputs(op, lens, seed=len(name))
        env = {**env, "s": len(lens)}
        got = emu.run(op, *ins, env=env)
        want = op.reference(ins, (op.dtype,) * 3 + (DType.i32,) * 2 + (DType.f32,) * 2, env)
        assert_matches(got, want.astype(np.float64), op.dtype, 1.0, name)


@pytest.mark.cuda
@pytest.mark.parametrize("dt", [DType.f16, DType.bf16], ids=str)
def test_paged_rope_kernel_on_the_gpu(dt):
    from luminal.backends.cuda import driver

    dev = driver.device()
    for name, op, lens in (("decode", make_rope_op(num(1), dt=dt), [37]),
                           ("rows", make_rope_op(var("s"), hd=128, dt=dt), [5, 60, 23])):  # fmt: skip
        ins, env = _inputs(op, lens, seed=len(name))
        env = {**env, "s": len(lens)}
        kern = op.render(SLOTS)
        mod = driver.Module(nvrtc.compile_cubin(source([kern])))
        n = int(op.out_size().evaluate(env))
        host = [np.full(n + 8, np.nan, dt.np), *ins, np.array([env["s"], env["pages"], 0, 0], np.int64)]
        bufs = [driver.DeviceBuffer(max(16, a.nbytes)) for a in host]
        for buf, a in zip(bufs, host, strict=True):
            driver.htod(buf.ptr, a, dev.stream)
        scratch = driver.DeviceBuffer(max(256, int(op.scratch_bytes().evaluate(env))))
        zeroed = driver.DeviceBuffer(max(256, op.zeroed_bytes()))
        driver.memset8(zeroed.ptr, 0, zeroed.nbytes, dev.stream)
        params = driver.Params([*(buf.ptr for buf in bufs), scratch.ptr, zeroed.ptr])
        for ln in kern.launches:
            grid = max(1, int(ln.grid.evaluate(env)))
            driver.launch(mod.function(ln.name, ln.shared), grid, ln.block, ln.shared, params, dev.stream)
        out = np.empty(n + 8, dt.np)
        driver.dtoh(out, bufs[0].ptr, dev.stream)
        dev.synchronize()
        assert np.isnan(out[n:].astype(np.float32)).all()
        want = op.reference(ins, (dt,) * 3 + (DType.i32,) * 2 + (DType.f32,) * 2, env)
        assert_matches(out[:n], want.astype(np.float64), dt, 1.0, name)
