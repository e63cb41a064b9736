"""Dim buckets: one plan per bucket, run-time dispatch, and bounds visible to rules as facts."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.errors import CompileError, InputError
from tests.egraph.util import oracle


def _graph():
    g = lm.Graph()
    x = g.tensor("x", ("s", 4))
    w = g.tensor("w", (4, 3))
    (x @ w).softmax(-1).output("y")
    return g


def test_one_plan_per_bucket_and_dispatch():
    g = _graph()
    model = g.compile("reference", buckets={"s": [(1, 1), (2, 64)]})
    assert len(model.plans) == 2 and len(model.stats["buckets"]) == 2
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    for s in (1, 2, 17, 64):
        x = rng.standard_normal((s, 4)).astype(np.float32)
        got = model.run({"x": x, "w": w})["y"].reshape(-1)
        np.testing.assert_allclose(got, oracle(g, {"x": x, "w": w}, {"s": s})["y"], rtol=2e-5, atol=2e-6)
    with pytest.raises(InputError, match="no compiled bucket covers s=65"):
        model.run({"x": np.zeros((65, 4), np.float32), "w": w})


def test_pinned_bucket_specializes_the_dim():
    """Bounds lower = upper = 1 make `s` the literal 1 inside that bucket's plan."""
    g = _graph()
    model = g.compile("reference", buckets={"s": [(1, 1), (2, 8)]})
    text_1, text_n = model.plans[0].canonical(), model.plans[1].canonical()
    assert '"s"' not in text_1 and '"s"' in text_n


def test_bounds_are_facts_rules_can_test():
    """x[:5] has length min(5, s); in a bucket s <= 4 the interval rules decide the min to s."""
    g = lm.Graph()
    x = g.tensor("x", ("s",))
    (x[:5] * 2.0).output("y")
    plain = g.compile("reference")
    small = g.compile("reference", buckets={"s": [(0, 4)]})
    assert '"min"' in plain.plans[0].canonical()
    assert '"min"' not in small.plans[0].canonical()
    x4 = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(small.run({"x": x4})["y"], x4 * 2)
    assert plain.plans[0].fingerprint() != small.plans[0].fingerprint()


def test_bad_buckets_are_rejected():
    g = _graph()
    with pytest.raises(CompileError, match="does not use"):
        g.compile("reference", buckets={"t": [(1, 2)]})
    with pytest.raises(CompileError, match="low, high"):
        g.compile("reference", buckets={"s": [(5, 2)]})
