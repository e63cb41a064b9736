"""Saturation's pooled preludes: compile time must not grow with the number of earlier compiles
(issue 10 item 15: egglog keeps every id a popped graph allocated, so a long-lived pooled e-graph's
push/pop grew from ~1 ms to tens of ms over a thousand compiles)."""

from __future__ import annotations

import statistics

import luminal as lm
from luminal.backends.reference.backend import ReferenceBackend
from luminal.egraph import run
from luminal.egraph.compile import CompileOptions, compile_plans


def _small(i: int) -> lm.Graph:
    g = lm.Graph()
    x, w = g.tensor("x", ("s", 8)), g.tensor("w", (8, 4))
    ((x @ w).relu().sum(axis=1) * float(1 + i % 5)).output("y")
    return g


def test_pooled_prelude_is_retired_and_push_pop_stays_flat(monkeypatch):
    monkeypatch.setattr(run, "_POOL", {})
    monkeypatch.setattr(run, "POOL_RETIRE_USES", 20)
    retired0 = run.POOL_STATS["retired"]
    pool_s, sizes = [], []
    for i in range(80):
        _, _, st = compile_plans(_small(i), ReferenceBackend(), CompileOptions(cache=False, search_budget=2))
        pool_s.append(st["time_pool_s"])
        sizes.append(st["egraph_nodes"])
        # deterministic: what a pooled e-graph's push/pop cost grows with stays bounded (before the fix it
        # grew by every compile's e-graph: ~12k e-nodes here)
        assert max(run.pool_absorbed(), default=0) <= 2 * 20 * max(sizes)  # x2: serialized nodes incl. literals
    assert run.POOL_STATS["retired"] - retired0 >= 3
    first, last = statistics.median(pool_s[2:22]), statistics.median(pool_s[-20:])
    assert last <= 3 * first + 0.005, (first, last)  # generous: timing on a shared machine
