"""GPU: CUDA plans against the reference backend (every primitive, every dtype family), dims that
change between runs without recompiling or recapturing, zero-size tensors, persistent inputs,
device-resident state, eager vs graph replay, profiling. Without a GPU: a clear BackendError."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cuda import driver
from luminal.errors import BackendError
from tests.backends.cuda.graphs import build, cases, make_inputs
from tests.helpers import assert_matches

cuda = pytest.mark.cuda
_MODELS: dict = {}


def models(case: str):
    if case not in _MODELS:
        g, specs = build(case)
        _MODELS[case] = (g.compile("cuda", cache=False), g.compile("reference", cache=False), specs, g)
    return _MODELS[case]


def check(case: str, s: int, seed: int = 0) -> None:
    cm, rm, specs, g = models(case)
    feed = make_inputs(specs, s, seed)
    got, want = cm.run(feed), rm.run(feed)
    for name, arr in want.items():
        assert_matches(got[name], arr, g.nodes[g.outputs[name]].dtype, 1.0, f"{case}/{name} s={s}")


@cuda
@pytest.mark.parametrize("case", sorted(cases()))
def test_matches_reference_as_dims_change(case):
    # s = 0 only where no output takes a max over s (an empty max raises, docs/numerics.md)
    sizes = (17, 3, 1, 40, 17) if case.startswith(("index", "reduce", "ints")) else (17, 3, 1, 0, 40, 17)
    for k, s in enumerate(sizes):
        check(case, s, seed=k)
    ex = models(case)[0]._executor
    # one compiled plan; the graph is rebuilt only when a buffer outgrew its slot (pointers moved)
    assert ex.stats["kernels"] > 0 and ex.stats["graph_builds"] == ex.stats["pointer_moves"] <= 4, ex.stats


@cuda
def test_dims_change_patches_the_graph_instead_of_recapturing():
    g = lm.Graph()
    x = g.tensor("x", ("s", 1024))
    (x.exp() + 1).sum(axis=1).output("y")
    m = g.compile("cuda", cache=False)
    ex = m._executor
    for s in (64, 8, 33, 64, 1):
        xa = np.random.default_rng(s).standard_normal((s, 1024)).astype(np.float32)
        np.testing.assert_allclose(m.run({"x": xa})["y"], (np.exp(xa.astype(np.float64)) + 1).sum(1), rtol=1e-5)
    assert ex.stats["graph_builds"] == 1 and ex.stats["replans"] == 1 and ex.stats["graph_patches"] >= 4, ex.stats


@cuda
@pytest.mark.parametrize("dt", [lm.f32, lm.bf16], ids=str)
def test_large_reductions_and_elementwise(dt):
    g = lm.Graph()
    x = g.tensor("x", ("r", "c"), dt)
    x.sum(axis=1).output("rows")
    x.max(axis=0).output("cols")
    (x * 2 + 1).exp2().output("ew")
    cm, rm = g.compile("cuda", cache=False), g.compile("reference", cache=False)
    rng = np.random.default_rng(0)
    for r, c in ((3, 5000), (1000, 37), (257, 1025), (5, 4096)):
        xa = rng.standard_normal((r, c)).astype(dt.np)
        got, want = cm.run({"x": xa}), rm.run({"x": xa})
        for k in want:
            assert_matches(got[k], want[k], dt, 1.0, f"{k} {r}x{c}")


@cuda
def test_persistent_inputs_stay_on_gpu_and_state_is_updated_there():
    g = lm.Graph()
    w = g.tensor("w", (4,)).persist()
    st = g.tensor("state", (4,)).persist()
    x = g.tensor("x", (4,))
    (x * w).output("y")
    (st + x).output("state")  # named like the persistent input: its next value
    m = g.compile("cuda", cache=False)
    ex = m._executor
    w_np, x_np = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    m.bind({"w": w_np, "state": np.zeros(4, np.float32)})
    for step in range(3):
        out = m.run({"x": x_np * (step + 1)}, fetch=["y"])
        np.testing.assert_array_equal(out["y"], w_np * (step + 1))
        assert ex.stats["h2d_bytes"] == 16 + 16 and ex.stats["d2h_bytes"] == 16  # x and the dims; y
    # three runs made state 1 + 2 + 3 = 6; this run adds 1
    np.testing.assert_array_equal(m.run({"x": x_np}, fetch=["state"])["state"], np.full(4, 7, np.float32))


@cuda
def test_kv_cache_scatter_updates_in_place_on_the_gpu():
    from luminal import nn
    from luminal.shape.expr import dim

    g = lm.Graph()
    c = nn.KVCache("cache.0", 2, 2048, 64)  # big enough that copying it is clearly slower for search
    k = g.tensor("k", (2, "s", 64))
    ka, va = c.update(g, k, k * 2.0, dim("p"))
    (ka * 1.0 + va).output("y")
    m = g.compile("cuda", cache=False)
    inplace = {"KernelScatterInplace", "KernelScatterFused", "KernelScatterPair"}  # (k * 2.0 computed where written)
    assert inplace & set(m.stats["llir_ops"]), m.stats["llir_ops"]
    m.bind({"cache.0.k": np.zeros((2, 2048, 64), np.float32), "cache.0.v": np.zeros((2, 2048, 64), np.float32)})
    want = np.zeros((2, 2048, 64), np.float32)
    rng = np.random.default_rng(0)
    for p, s in ((0, 5), (5, 1), (6, 3)):
        kk = rng.standard_normal((2, s, 64)).astype(np.float32)
        out = m.run({"k": kk}, dims={"p": p})
        want[:, p : p + s] = kk
        np.testing.assert_array_equal(out["cache.0.k"], want)
        np.testing.assert_allclose(out["y"], 3 * want[:, : p + s], rtol=1e-6)
    assert m.stats["runtime"]["d2d_bytes"] == 0  # no copy: the outputs alias the bound caches


@cuda
def test_eager_equals_graph_replay_and_profile():
    from luminal.backends.cuda.backend import input_extents
    from luminal.backends.cuda.runtime import CudaExecutor

    g, specs = build("reduce_f32")
    m = g.compile("cuda", cache=False)
    llir = m.plans[0]
    eager = CudaExecutor(llir.nodes, use_graphs=False)
    feed = make_inputs(specs, 9)
    a, b = m.run(feed), eager.run(feed, {"s": 9})
    for k in a:
        np.testing.assert_array_equal(a[k].reshape(-1), b[k])
    t = m._executor.profile({"s": 64}, input_extents(llir.nodes, {"s": 64}))
    assert 0 < t < 0.1


@cuda
def test_gather_out_of_range_raises_like_the_reference():
    g = lm.Graph()
    x = g.tensor("x", (5,))
    i = g.tensor("i", (2,), lm.i32)
    x.gather(i).output("y")
    m = g.compile("cuda", cache=False)
    xa = np.arange(5, dtype=np.float32)
    with pytest.raises(BackendError, match="out of range"):
        m.run({"x": xa, "i": np.array([1, 9], np.int32)})
    np.testing.assert_array_equal(m.run({"x": xa, "i": np.array([4, -5], np.int32)})["y"], [4, 0])


def test_cuda_without_gpu_is_a_clear_error():
    if driver.device_available():
        pytest.skip("a GPU is usable here")
    g = lm.Graph()
    g.tensor("x", (2,)).exp().output("y")
    with pytest.raises(BackendError, match="GPU"):
        g.compile("cuda")
    assert g.compile("auto").backend == "reference"


@cuda
@pytest.mark.parametrize("dt", [lm.f32, lm.f16, lm.bf16, lm.i32, lm.i8, lm.u8, lm.bool, lm.i64, lm.f64])
def test_profiling_pool_fills_ones_on_the_device(dt):
    """runtime.OnesPool: cuMemsetD8/D16/D32 with the bit pattern of 1 (a host upload for 8-byte dtypes);
    a plan's second input of a dtype gets another buffer; a written buffer is filled again."""
    from luminal.backends.cuda.runtime import OnesPool

    pool = OnesPool()
    n = 1000
    p0, p1 = pool.get(dt, 0, n * dt.itemsize), pool.get(dt, 1, n * dt.itemsize)
    assert p0 != p1 and pool.get(dt, 0, 10 * dt.itemsize) == p0  # no regrowth for a smaller ask
    dev = driver.device()
    for ptr in (p0, p1):
        got = np.zeros(n, dt.np)
        driver.dtoh(got, ptr, dev.stream)
        dev.synchronize()
        np.testing.assert_array_equal(got, np.ones(n, dt.np))
    w = pool.get(dt, 0, n * dt.itemsize, written=True)
    driver.call("cuMemsetD8Async", w, 0, n * dt.itemsize, dev.stream)  # a plan wrote over it
    assert pool.get(dt, 0, n * dt.itemsize, written=True) == w
    got = np.zeros(n, dt.np)
    driver.dtoh(got, w, dev.stream)
    dev.synchronize()
    np.testing.assert_array_equal(got, np.ones(n, dt.np))


@cuda
def test_a_model_runs_on_its_own_inputs_after_profiling():
    from luminal.backends.cuda.backend import input_extents

    g, specs = build("binary_bf16")
    m, ref = g.compile("cuda", cache=False), g.compile("reference", cache=False)
    feed = make_inputs(specs, 7, seed=1)
    m.run(feed)
    m._executor.profile({"s": 64}, input_extents(m.plans[0].nodes, {"s": 64}))
    feed = make_inputs(specs, 7, seed=2)
    got, want = m.run(feed), ref.run(feed)
    for name, arr in want.items():
        assert_matches(got[name], arr, g.nodes[g.outputs[name]].dtype, 1.0, f"after profiling: {name}")
