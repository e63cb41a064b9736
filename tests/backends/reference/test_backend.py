"""ReferenceBackend: protocol data, the analytical profile, and zero-copy strided views."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.backends.reference.backend import ReferenceBackend
from luminal.hlir.op import view
from luminal.shape.expr import expr, z
from luminal.shape.tracker import ShapeTracker
from tests.egraph.util import view_of


def test_profile_ranks_the_matmul_plan_first():
    g = lm.Graph()
    (g.tensor("a", ("s", 64)) @ g.tensor("b", (64, 32))).output("y")
    v = view_of(g)
    plain = v.extract(v.preferred_genome({"SumReduce"}))
    fast = v.extract(v.preferred_genome({"NumpyMatmul"}))
    be = ReferenceBackend()
    assert "NumpyMatmul" in fast.op_counts() and "NumpyMatmul" not in plain.op_counts()
    for s in (1, 64, 1024):
        assert 0 < be.profile(fast, {"s": s}) < be.profile(plain, {"s": s})
    assert be.profile(fast, {"s": 8}) < be.profile(fast, {"s": 80})  # grows with the work


def test_backend_data():
    be = ReferenceBackend()
    assert be.name == "reference" and be.rulesets == ("matmul_backend", "buffer_reuse")
    assert [p.name for p in be.phases] == ["main", "buffer_reuse", "cleanup"]
    assert "matmul_backend" in be.phases[0].text() and be.device.startswith("cpu-")


CASES = {
    "contiguous": ((3, 4), (4 * z, z)),
    "transposed": ((4, 3), (z, 4 * z)),
    "broadcast": ((2, 3, 4), (0, 4 * z, z)),
    "symbolic stride": ((3, "n"), (z * expr("n"), z)),
    "non-linear stride": ((2, 6), (12 * z, (z % 3) * 2 + z // 3)),
    "repeat": ((3, 8), (4 * z, z % 4)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_view_equals_the_index_grid_gather(name):
    dims, strides = CASES[name]
    dims = tuple(expr(d) for d in dims)
    strides = tuple(expr(s) for s in strides)
    env = {"n": 4}
    buf = np.arange(64, dtype=np.float32)
    got = view(buf, dims, strides, env)
    np.testing.assert_array_equal(got, buf[ShapeTracker(dims, strides).physical_indices(env)])
    if name in ("transposed", "broadcast", "symbolic stride"):
        assert np.shares_memory(got, buf)  # zero-copy for linear strides


@pytest.mark.parametrize("capacity", [4, 300])  # copying Scatter chosen (small) / InplaceScatter (large)
def test_bound_state_is_updated_by_either_plan_and_the_callers_array_is_kept(capacity):
    from luminal import nn
    from luminal.shape.expr import dim

    g = lm.Graph()
    k = g.tensor("k", (2, "s", 3))
    ka, va = nn.KVCache("c", 2, capacity, 3).update(g, k, k * 2.0, dim("p"))
    (ka + va).output("y")
    m = g.compile("reference", cache=False)
    assert ("InplaceScatter" in m.stats["llir_ops"]) == (capacity > 4), m.stats["llir_ops"]
    zeros = np.zeros((2, capacity, 3), np.float32)
    m.bind({"c.k": zeros, "c.v": zeros})
    want = zeros.copy()
    rng = np.random.default_rng(0)
    for p, s in ((0, 2), (2, 1), (3, 1)):
        kk = rng.standard_normal((2, s, 3)).astype(np.float32)
        out = m.run({"k": kk}, dims={"p": p})
        want[:, p : p + s] = kk
        np.testing.assert_array_equal(out["c.k"], want)
        np.testing.assert_allclose(out["y"], 3 * want[:, : p + s], rtol=1e-6)
        out["c.k"][:] = 7  # outputs are the caller's: writing them does not touch the state
    assert not zeros.any()
    got = m.run({"k": np.zeros((2, 0, 3), np.float32)}, dims={"p": 4}, fetch=["c.v"])
    assert list(got) == ["c.v"] and np.array_equal(got["c.v"], 2 * want)
