"""The device sampler's greedy argmax (luminal/backends/cuda/sample.py `argmax_kernel`): SPLIT blocks
a row, the last block to take its ticket reduces the partials and resets the ticket. Against numpy's
argmax of the f32 logits (luminal/sampling.py): the first NaN wins, else the largest value, ties and
-0.0 == 0.0 to the lowest index. CPU: NVRTC for sm_90; the CUDA C run by g++ (one std::thread per
CUDA thread, blocks one after another: the ticket order is the block order) twice in a row (the
ticket reset). GPU (`cuda`): the same rows, replayed, and the executor's greedy sampling path."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

from luminal.backends.cuda import nvrtc
from luminal.backends.cuda.kernel import PRELUDE, source
from luminal.backends.cuda.sample import SPLIT, argmax_kernel
from luminal.dtype import DType
from luminal.sampling import Sampler, sample

V = 1000  # not a multiple of SPLIT: the last block's slice is partial


def _rows(dt: DType) -> np.ndarray:
    """Rows where a sloppy argmax goes wrong: ties across blocks, NaNs (both signs) after and
    before the max, -0.0 vs +0.0 in either order, all -inf, a max in the last partial slice."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((9, V)).astype(np.float32)
    x[1, [40, 700]] = 9.0  # a tie in two blocks: the lower index
    x[2, [900, 300]] = np.nan
    x[2, 10] = np.inf  # NaN beats +inf: the first NaN, 300
    x[3] = -1.0
    x[3, [5, 10]] = (0.0, -0.0)  # +0 first
    x[4] = -1.0
    x[4, [3, 9]] = (-0.0, 0.0)  # -0 first: equal, so 3
    x[5] = -np.inf
    x[6, 999] = -np.float32(np.nan)  # a NaN with its sign bit set
    x[7, 997] = 50.0  # in the last, partial slice
    x[8, 0] = 50.0  # the very first element
    return x.astype(dt.np)


def _want(x: np.ndarray) -> np.ndarray:
    want = np.argmax(x.astype(np.float32), axis=1)
    assert (want == sample(x, Sampler(), 0)).all()  # the oracle's greedy is numpy's argmax
    assert list(want[1:7]) == [40, 300, 5, 3, 0, 999], want  # the rows test what they claim
    return want


def test_argmax_compiles_for_sm90():
    kernels = [argmax_kernel(dt) for dt in (DType.f32, DType.bf16, DType.f16)]
    assert nvrtc.compile_cubin(source(kernels), arch="sm_90")[:4] == b"\x7fELF"
    assert all(k.launches[0].grid == SPLIT and SPLIT <= 32 for k in kernels)


_SHIM = r"""
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline void __threadfence() {}
static inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
"""
_RUN = r"""
extern "C" void run(void* out, const void* x, void* part, void* ticket, long long rows, long long V, int block) {{
  gridDim.x = rows * {split};
  for (int b = 0; b < (int)gridDim.x; ++b) {{
    std::barrier<> bar(block); block_bar = &bar;
    for (int i = 0; i < block / 32; ++i) warp_bar[i] = new std::barrier<>(32);
    std::vector<std::thread> ts;
    for (int t = 0; t < block; ++t)
      ts.emplace_back([=] {{ threadIdx.x = t; blockIdx.x = b;
        {name}((long long*)out, ({T}*)x, nullptr, (unsigned long long*)part, (unsigned*)ticket, rows, V); }});
    for (auto& t : ts) t.join();
    for (int i = 0; i < block / 32; ++i) delete warp_bar[i];
  }}
}}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20) to run the CUDA C on the CPU")
@pytest.mark.parametrize("dt", [DType.f32, DType.bf16], ids=str)
def test_argmax_kernel_on_cpu_matches_numpy_twice(tmp_path, monkeypatch, dt):
    from luminal.backends.cuda import sample as dev_sample
    from tests.backends.cuda.test_gemv import _SHIM as GEMV_SHIM

    monkeypatch.setattr(dev_sample, "ARGMAX_BLOCK", 64)  # two warps a block: 8x fewer CPU threads, same slices
    k = argmax_kernel(dt)
    (ln,) = k.launches
    ctype = {DType.f32: "float", DType.bf16: "__nv_bfloat16"}[dt]
    src, lib = tmp_path / "argmax.cpp", tmp_path / "argmax.so"
    src.write_text(GEMV_SHIM + _SHIM + PRELUDE + k.code + _RUN.format(split=SPLIT, name=ln.name, T=ctype))
    done = subprocess.run(["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w", "-o", str(lib), str(src)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    run = ctypes.CDLL(str(lib)).run
    run.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_longlong, ctypes.c_longlong, ctypes.c_int]
    x = _rows(dt)
    want = _want(x)
    rows = x.shape[0]
    part, ticket = np.zeros(rows * SPLIT, np.uint64), np.zeros(rows, np.uint32)
    for _ in range(2):  # the second launch starts from the tickets the first one reset
        out = np.full(2 + rows, -7, np.int64)
        run(out.ctypes.data, x.ctypes.data, part.ctypes.data, ticket.ctypes.data, rows, V, ln.block)
        assert (out[2:] == want).all(), (out[2:], want)
        assert (ticket == 0).all() and list(out[:2]) == [0, 0]


@pytest.mark.cuda
@pytest.mark.parametrize("dt", [DType.f32, DType.bf16], ids=str)
def test_argmax_kernel_on_the_gpu(dt):
    """The rows above and a 128256-wide row of random logits, launched three times on one scratch."""
    from luminal.backends.cuda import driver

    dev = driver.device()
    k = argmax_kernel(dt)
    (ln,) = k.launches
    fn = driver.Module(nvrtc.compile_cubin(source([k]))).function(ln.name)
    wide = np.random.default_rng(1).standard_normal((2, 128256)).astype(dt.np)
    for x in (_rows(dt), wide):
        rows, cols = x.shape
        want = np.argmax(x.astype(np.float32), axis=1) if x is wide else _want(x)
        xb, out = driver.DeviceBuffer(x.nbytes), driver.DeviceBuffer(8 * (2 + rows))
        scratch = driver.DeviceBuffer(rows * (8 * SPLIT + 4))
        driver.htod(xb.ptr, np.ascontiguousarray(x), dev.stream)
        driver.htod(scratch.ptr, np.zeros(scratch.nbytes, np.uint8), dev.stream)
        params = driver.Params([out.ptr, xb.ptr, 0, scratch.ptr, scratch.ptr + 8 * SPLIT * rows, rows, cols])
        for _ in range(3):
            driver.launch(fn, rows * SPLIT, ln.block, 0, params, dev.stream)
            got = np.empty(2 + rows, np.int64)
            driver.dtoh(got, out.ptr, dev.stream)
            dev.synchronize()
            assert (got[2:] == want).all(), (got[2:], want)


@pytest.mark.cuda
def test_compiled_sample_greedy_and_seeded_on_the_gpu():
    """Compiled.sample on a plan's logits: greedy through the argmax kernel, temperature / top-k /
    top-p through the one-block kernel, each equal to the numpy sampler."""
    import luminal as lm

    g = lm.Graph()
    (g.tensor("x", (9, V), lm.f32) * 1.0).output("logits")
    m = g.compile("cuda", cache=False)
    x = _rows(DType.f32)
    x[[2, 5, 6]] = np.random.default_rng(5).standard_normal((3, V))  # finite rows: the weights of NaN / inf
    x[2, [3, 8]] = 4.0  # logits have no defined value (the oracle's exp(nan) -> u64 is numpy's, not a rule)
    logits = np.asarray(m.run({"x": x})["logits"])
    for s in (Sampler(), Sampler(0.8, 20, 0.9, seed=3), Sampler(1.0, 0, 0.5, seed=4)):
        for pos in (0, 17):
            got, want = m.sample("logits", s, pos), sample(logits, s, pos)
            assert (got == want).all(), (s, pos, got, want)
    nonfinite = np.asarray(m.run({"x": _rows(DType.f32)})["logits"])  # greedy is defined on every row
    assert (m.sample("logits", Sampler(), 3) == _want(nonfinite)).all()
