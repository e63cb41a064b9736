"""Sampling semantics (luminal/sampling.py, the oracle of the device sampler): greedy is argmax, seeded
draws are reproducible and independent of history, top-k / top-p keep the documented sets, and the
draws follow the filtered softmax (chi-square on a small vocabulary)."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.sampling import Sampler, keys, sample, sample_row, uniform


def test_greedy_is_argmax_with_ties_to_the_lowest_index():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 300)).astype(np.float32)
    x[2, [7, 100]] = 9.0
    np.testing.assert_array_equal(sample(x, Sampler(), 0), np.argmax(x, axis=1))
    assert sample(x, Sampler(), 0)[2] == 7


def test_degenerate_filters_pick_the_argmax():
    x = np.array([0.1, 2.0, -1.0, 1.9], np.float32)
    for pos in range(20):
        assert sample_row(x, Sampler(temperature=1.0, top_k=1), pos) == 1
        assert sample_row(x, Sampler(temperature=1.0, top_p=1e-6), pos) == 1


def test_keys_preserve_float_order():
    v = np.array([-np.inf, -3.5, -1e-30, -0.0, 0.0, 1e-30, 2.0, np.inf], np.float32)
    k = keys(v)
    assert (np.diff(k.astype(np.int64)) >= 0).all() and k[3] < k[4]


def test_uniform_is_a_counter_based_stream():
    u = [uniform(7, p, 0) for p in range(2000)]
    assert all(0.0 <= x < 1.0 for x in u) and len(set(u)) == 2000
    assert abs(np.mean(u) - 0.5) < 0.02 and uniform(7, 3, 0) == u[3]
    assert uniform(8, 3, 0) != u[3] and uniform(7, 3, 1) != u[3]


def test_seeded_draws_are_reproducible_and_depend_on_seed_and_position():
    x = np.zeros(50, np.float32)
    s = Sampler(1.0, seed=3)
    a = [sample_row(x, s, p) for p in range(40)]
    assert a == [sample_row(x, s, p) for p in range(40)] and len(set(a)) > 10
    assert a != [sample_row(x, Sampler(1.0, seed=4), p) for p in range(40)]
    b = Sampler(0.7, top_k=20, top_p=0.9, seed=11)
    y = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    assert [sample_row(y, b, p) for p in range(30)] == [sample_row(y, b, p) for p in range(30)]


def test_top_k_and_top_p_keep_the_documented_sets():
    x = np.arange(10, dtype=np.float32)
    assert {sample_row(x, Sampler(5.0, top_k=3), p) for p in range(300)} == {7, 8, 9}
    tie = np.array([0, 5, 5, 5, 1], np.float32)  # ties at the k-th value all stay
    assert {sample_row(tie, Sampler(1.0, top_k=2), p) for p in range(300)} == {1, 2, 3}
    probs = np.log(np.array([0.5, 0.3, 0.15, 0.05], np.float32))
    assert {sample_row(probs, Sampler(1.0, top_p=0.7), p) for p in range(400)} == {0, 1}
    assert {sample_row(probs, Sampler(1.0, top_p=0.5), p) for p in range(200)} == {0}  # 0.5 reached by one


SAMPLERS = [Sampler(1.0, seed=1), Sampler(0.5, top_k=5, seed=2), Sampler(1.3, top_p=0.8, seed=3)]


@pytest.mark.parametrize("sampler", SAMPLERS, ids=["plain", "top_k", "top_p"])
def test_draws_follow_the_filtered_softmax(sampler):
    x = np.array([1.0, 0.5, 0.0, -0.5, -1.0, 2.0, 0.25, -2.0], np.float32)
    n = 6000
    counts = np.bincount([sample_row(x, sampler, p) for p in range(n)], minlength=x.size)
    p = np.exp((x - x.max()) / sampler.temperature)
    order = np.argsort(-x, kind="stable")
    if sampler.top_k:
        p[order[sampler.top_k :]] = 0
    p /= p.sum()
    if sampler.top_p < 1:
        before = np.cumsum(p[order]) - p[order]
        p[order[before >= sampler.top_p]] = 0
        p /= p.sum()
    assert (counts[p == 0] == 0).all()
    keep = p > 0
    chi2 = float((((counts - n * p) ** 2)[keep] / (n * p[keep])).sum())
    assert chi2 < 25.0, (chi2, counts, n * p)  # dof <= 7: p(chi2 > 25) < 1e-3


def test_bad_sampler_settings_and_logits_are_clear_errors():
    with pytest.raises(lm.InputError, match="top_p"):
        Sampler(1.0, top_p=0.0)
    with pytest.raises(lm.InputError, match="rows, vocab"):
        sample(np.zeros(4, np.float32), Sampler(), 0)


def test_bf16_logits_sample_like_their_f32_values():
    x = np.random.default_rng(2).standard_normal((3, 64)).astype(lm.bf16.np)
    s = Sampler(0.9, top_k=10, seed=9)
    np.testing.assert_array_equal(sample(x, s, 5), sample(x.astype(np.float32), s, 5))
