"""Per-op costs for search (luminal/egraph/costs.py): each op measured once, memoized across
candidates, layers, compiles and (for device backends) processes; a failing op only skips candidates."""

from __future__ import annotations

import logging

import pytest

import luminal as lm
from luminal.backends.reference.backend import ReferenceBackend
from luminal.egraph import costs
from luminal.egraph.compile import CompileOptions, compile_plans
from luminal.hlir import Input, Output
from tests.egraph.test_equivalence import causal_attention, mlp
from tests.egraph.test_roll import decoder


class CountingBackend(ReferenceBackend):
    """The reference backend, counting the one-op plans it is asked to measure (like a device backend,
    its costs go to the on-disk cache)."""

    cost_cache = True

    def __init__(self, fail_op: str | None = None):
        self.measured: list[str] = []
        self.fail_op = fail_op

    @property
    def device(self) -> str:
        return "counting-cpu"

    def measure(self, plans, env):
        out = []
        for p in plans:
            (op,) = [type(n.op).__name__ for n in p.nodes if not isinstance(n.op, (Input, Output))]
            self.measured.append(op)
            out.append(f"BackendError: {op} failed to compile (test)" if op == self.fail_op else self.profile(p, env))
        return out


@pytest.fixture(autouse=True)
def _fresh_memo():
    costs.clear_memo()
    yield
    costs.clear_memo()


def _graph(build=causal_attention):
    g = lm.Graph()
    build(g)
    return g


def _compile(g, be, **kw):
    return compile_plans(g, be, CompileOptions(**({"cache": False} | kw)))


def test_each_op_is_measured_once_across_candidates_and_layers():
    be = CountingBackend()
    _, _, st = _compile(decoder(6), be, search_budget=24)
    prof = st["profiling"]
    assert prof["ops_measured"] == len(be.measured) > 0
    assert prof["op_hits"] > prof["ops_measured"]  # candidates share most of their ops
    assert prof["measure_calls"] <= 12  # batched: one call per batch of candidates, not per op


def test_costs_are_reused_across_compiles_in_process():
    be = CountingBackend()
    _compile(_graph(), be)
    n = len(be.measured)
    _, _, st = _compile(_graph(), be, seed=5)  # other search, same ops
    assert len(be.measured) == n and st["profiling"]["ops_measured"] == 0 and st["profiling"]["op_hits"] > 0


def test_costs_are_reused_across_processes_through_the_disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    be = CountingBackend()
    _compile(_graph(), be, cache=True)
    n = len(be.measured)
    costs.clear_memo()  # a new process: only the disk remembers
    _, _, st = _compile(_graph(), be, cache=True, seed=9)  # e-graph from the cache, a new search
    assert st["buckets"][0]["cache"] == "egraph"
    assert len(be.measured) == n and st["profiling"]["ops_measured"] == 0


def test_search_is_reproducible_for_a_seed():
    plans = [_compile(_graph(), CountingBackend(), seed=4, search_budget=12)[1][0].fingerprint() for _ in range(2)]
    costs.clear_memo()
    plans.append(_compile(_graph(), CountingBackend(), seed=4, search_budget=12)[1][0].fingerprint())
    assert len(set(plans)) == 1


def test_a_candidate_whose_op_fails_to_compile_is_skipped(caplog):
    be = CountingBackend(fail_op="NumpyMatmul")
    with caplog.at_level(logging.INFO, logger="luminal"):
        _, (llir,), st = _compile(_graph(mlp), be, search_budget=8)
    assert "NumpyMatmul" not in llir.op_counts()  # never chosen: the plan is built from ops that work
    assert st["profiling"]["ops_failed"] >= 1 and st["buckets"][0]["failed"] >= 1
    assert "NumpyMatmul failed to compile (test)" in caplog.text


def test_one_op_plan_isolates_a_node():
    _, (llir,), _ = _compile(_graph(mlp), ReferenceBackend())
    i = next(i for i, n in enumerate(llir.nodes) if n.inputs and not isinstance(n.op, Output))
    p = costs.one_op_plan(llir, i)
    assert [type(n.op).__name__ for n in p.nodes][-2:] == [type(llir.nodes[i].op).__name__, "Output"]
    assert len(p.nodes) == len(llir.nodes[i].inputs) + 2 and p.nodes[-2].dtype == llir.nodes[i].dtype


def test_prices_relative_to_the_common_part_rank_like_full_prices():
    """Ops every plan holds are never measured, and the relative prices order (and differ by) exactly
    what summing every op's measured cost gives."""
    from luminal.egraph.search import sample_genomes
    from tests.egraph.util import view_of

    g = _graph(causal_attention)
    plans = sample_genomes(view_of(g), 5, seed=2)
    assert len(plans) >= 3
    env = {"s": 16}
    be = CountingBackend()
    pricer = costs.OpCosts(be, env)
    pricer.price(plans[:1])  # one plan: everything is common, nothing is measured
    assert be.measured == [] and pricer.take_rebased() is False
    rel = pricer.price(plans)
    assert pricer.take_rebased() is True  # the common part shrank: held prices are stale
    rel = pricer.price(plans)  # re-priced: all memoized now
    assert pricer.take_rebased() is False and pricer.stats["ops_measured"] == len(be.measured)
    unmeasured = [k for k in pricer.common if k not in pricer.memo]
    assert unmeasured and pricer.stats["ops_unmeasured"] == len(unmeasured)  # shared ops: never measured
    ref = CountingBackend()
    want = [sum(ref.measure([costs.one_op_plan(p, i)], env)[0] for i, n in enumerate(p.nodes)
                if not isinstance(n.op, (Input, Output))) for p in plans]  # fmt: skip
    for i in range(len(plans)):
        for j in range(len(plans)):
            assert rel[i] - rel[j] == pytest.approx(want[i] - want[j], rel=1e-9, abs=1e-12)


def test_search_measures_only_around_the_preferred_plan():
    """With a pricer, no whole-genome seeds: the search measures far fewer ops than the e-graph holds."""
    be = CountingBackend()
    _, _, st = _compile(decoder(3), be, search_budget=16)
    assert st["profiling"]["ops_measured"] == len(be.measured)
    assert 0 < st["profiling"]["ops_measured"] < 40  # 81 with the grounded and random seeds (measured)
    assert st["profiling"]["ops_unmeasured"] > 0  # ops every candidate holds


class PrefetchingBackend(CountingBackend):
    """Records the candidate plans handed to `prefetch` (the CUDA backend compiles their kernels)."""

    def __init__(self, fail: bool = False):
        super().__init__()
        self.prefetched: list[str] = []
        self.fail = fail

    def prefetch(self, plans, env):
        if self.fail:
            raise RuntimeError("prefetch broke (test)")
        self.prefetched += [p.fingerprint() for p in plans]


@pytest.mark.parametrize("fail", [False, True], ids=["prefetch", "prefetch-fails"])
def test_prefetch_sees_every_priced_plan_first_and_changes_no_choice(fail):
    """`prefetch` gets every batch of candidates the search prices (the chosen plan among them); the plans
    chosen are those of a backend without it, and a failing prefetch is only logged."""
    g = _graph(mlp)
    plain = _compile(g, CountingBackend(), search_budget=6)[1]
    costs.clear_memo()
    be = PrefetchingBackend(fail)
    _, llirs, stats = _compile(g, be, search_budget=6)
    assert [p.fingerprint() for p in llirs] == [p.fingerprint() for p in plain]
    if not fail:
        assert llirs[0].fingerprint() in be.prefetched
        assert len(set(be.prefetched)) >= stats["profiling"]["measure_calls"]


def test_every_buckets_preferred_plan_is_prefetched_before_any_search():
    """With buckets saturated together, the compiler hands the backend the preferred plan of every region
    of every bucket before the first measurement (the prefill bucket's kernels start compiling while the
    decode bucket is searched); the plans chosen do not change."""
    events: list[tuple] = []

    class Ordered(PrefetchingBackend):
        def prefetch(self, plans, env):
            events.append(("prefetch", env["s"], len(plans)))

        def measure(self, plans, env):
            events.append(("measure", env["s"]))
            return super().measure(plans, env)

    buckets = {"s": [(1, 1), (2, 8)]}
    plain = _compile(decoder(2), CountingBackend(), buckets=buckets)[1]
    costs.clear_memo()
    _, llirs, stats = _compile(decoder(2), Ordered(), buckets=buckets)
    assert [p.fingerprint() for p in llirs] == [p.fingerprint() for p in plain]
    first = next(k for k, e in enumerate(events) if e[0] == "measure")
    regions = 1 + len(stats["rolled"]["bodies"])
    ahead = events[: 2 * regions]  # one preferred plan per region and bucket, decode's and prefill's
    assert first >= 2 * regions and all(e[0] == "prefetch" and e[2] == 1 for e in ahead)
    assert {e[1] for e in ahead} == {1, 8}


def test_each_region_is_prefetched_before_the_next_one_saturates(monkeypatch):
    """A region's preferred plans go to the backend's `prefetch` as soon as that region is saturated, not
    after every region is: the first region's kernels (the long attention ones live in a rolled body)
    compile while the others saturate. The plans chosen do not change."""
    from luminal.egraph import compile as comp_mod

    events: list[tuple] = []
    real = comp_mod.saturate_buckets

    def saturate_buckets(*a, **kw):
        events.append(("saturate",))
        return real(*a, **kw)

    class Ordered(PrefetchingBackend):
        def prefetch(self, plans, env):
            events.append(("prefetch", env["s"]))

    buckets = {"s": [(1, 1), (2, 8)]}
    plain = _compile(decoder(2), CountingBackend(), buckets=buckets)[1]
    costs.clear_memo()
    monkeypatch.setattr(comp_mod, "saturate_buckets", saturate_buckets)
    _, llirs, stats = _compile(decoder(2), Ordered(), buckets=buckets)
    assert [p.fingerprint() for p in llirs] == [p.fingerprint() for p in plain]
    regions = 1 + len(stats["rolled"]["bodies"])
    kinds = [e[0] for e in events]
    assert kinds.count("saturate") == regions >= 2
    # saturate, prefetch decode + prefill, saturate, ...: each region's two plans before the next saturates
    assert kinds[: 3 * regions] == ["saturate", "prefetch", "prefetch"] * regions
