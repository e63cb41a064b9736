"""roll._best_run skips the periods that cannot reach MIN_WINDOWS windows or beat the best run so far
(counted equal positions bound a run's cover): the same answers as trying every period in full."""

from __future__ import annotations

import numpy as np

from luminal.egraph import roll


def _best_run_full(sig: np.ndarray, lo: int, hi: int):
    """Every period tried in full (the loop before the bound): the oracle."""
    s = sig[lo:hi]
    n = len(s)
    best = None
    for p in range(roll.MIN_BODY, n // roll.MIN_WINDOWS + 1):
        eq = s[:-p] == s[p:]
        if not eq.any():
            continue
        d = np.diff(np.concatenate(([0], eq.astype(np.int8), [0])))
        starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
        j = int(np.argmax(ends - starts))
        length = int(ends[j] - starts[j]) + p
        cover = (length // p) * p
        if length // p >= roll.MIN_WINDOWS and (best is None or cover > best[0]):
            best = (cover, lo + int(starts[j]), length, p)
    return None if best is None else best[1:]


def test_best_run_with_the_bound_equals_the_full_search():
    rng = np.random.default_rng(0)
    for trial in range(300):
        parts = []
        for _ in range(rng.integers(1, 4)):
            body = rng.integers(0, rng.integers(2, 40), size=rng.integers(8, 60))
            parts.append(np.tile(body, rng.integers(1, 6)))  # repeated layers
            parts.append(rng.integers(0, 50, size=rng.integers(0, 30)))  # glue
        sig = np.concatenate(parts).astype(np.int64)
        if trial % 3 == 0:  # noise inside the repeats
            flip = rng.random(len(sig)) < 0.02
            sig[flip] = rng.integers(0, 50, size=int(flip.sum()))
        lo = int(rng.integers(0, max(1, len(sig) // 4)))
        hi = int(rng.integers(lo, len(sig) + 1))
        assert roll._best_run(sig, lo, hi) == _best_run_full(sig, lo, hi), (trial, lo, hi)
