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


def test_the_last_bucket_runs_without_a_push_of_its_own_and_the_pool_is_clean_after(monkeypatch):
    """saturate_buckets runs every bucket but the last in a (push) of its own (a push copies the e-graph);
    the last runs on the shared state, which the pooled graph's (pop) then discards: the next compile in
    the same pooled e-graph gives what a fresh e-graph gives."""
    from luminal.egraph import program as prog
    from luminal.egraph.registry import OpRegistry
    from luminal.hlir import HLIR_OPS

    be = ReferenceBackend()
    reg = OpRegistry((*HLIR_OPS, *be.ops))
    head = prog.prelude(reg, be.rulesets, be.phases)
    gp = prog.serialize_graph(_small(0), reg, {})
    monkeypatch.setattr(run, "_POOL", {})
    fresh = run.saturate(head, gp, be.phases).egraph_json
    texts: list[str] = []
    real = run._exec
    monkeypatch.setattr(run, "_exec", lambda eg, text, what: (texts.append(text.strip()), real(eg, text, what))[1])
    facts = [[], [], []]
    outs = run.saturate_buckets(head, gp, facts, be.phases, shared=0)
    assert texts.count("(push)") == 1 + len(facts) - 1 and texts.count("(pop)") == texts.count("(push)")
    assert all(o.egraph_json == fresh for o in outs)
    assert run.saturate(head, gp, be.phases).egraph_json == fresh  # the pooled graph is back at the prelude


def test_a_spent_pooled_prelude_serves_the_rest_of_its_compile_and_is_retired_at_its_end(monkeypatch):
    """A rolled model's regions saturate one after another in the pooled prelude: one that has absorbed
    its share mid-compile still serves the compile's next regions (before, each next region reloaded the
    prelude: gemma-3-1b's body1 after body0), and is retired when the compile ends."""
    from tests.egraph.test_roll import decoder

    monkeypatch.setattr(run, "_POOL", {})
    monkeypatch.setattr(run, "POOL_RETIRE_NODES", 1)  # spent after its first region
    loads, retired = run.POOL_STATS["loads"], run.POOL_STATS["retired"]
    opts = CompileOptions(cache=False, search_budget=2, buckets={"s": [(1, 1), (2, 8)]})
    _, _, st = compile_plans(decoder(2), ReferenceBackend(), opts)
    assert len(st["rolled"]["saturations"]) >= 2  # outer and body0: two regions
    assert run.POOL_STATS["loads"] - loads == 1  # 2 without one_compile
    assert run.POOL_STATS["retired"] - retired == 1 and run._POOL == {}
