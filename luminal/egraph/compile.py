"""The compile pipeline: HLIR graph -> egglog program -> saturation -> extraction -> search -> plan.

One plan per dim bucket (the cartesian product of each bucketed dim's ranges); a warm compile
cache hit skips egglog (and search, when the plan for these search settings is stored). Returns
an executor (bucket dispatch when there are several plans) and the stats dict of `model.stats`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import resource
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import cache
from pathlib import Path

import numpy as np

from luminal import flags
from luminal.backends.base import Backend, Executor
from luminal.egraph import program as prog
from luminal.egraph import roll
from luminal.egraph.cache import CompileCache, cache_key
from luminal.egraph.costs import OpCosts
from luminal.egraph.extract import EGraphView
from luminal.egraph.llir import LLIRGraph
from luminal.egraph.registry import OpRegistry
from luminal.egraph.rulesets import CLEANUP
from luminal.egraph.run import PhaseReport, RunResult, one_compile, saturate, saturate_buckets
from luminal.egraph.search import SearchOptions, search
from luminal.errors import CompileError, InputError, LuminalError
from luminal.graph import Graph
from luminal.hlir import HLIR_OPS

log = logging.getLogger("luminal.compile")
DEFAULT_DIM = 64  # representative size of an unbounded dim when profiling
Bounds = dict[str, tuple[int, int]]


@dataclass(frozen=True)
class CompileOptions:
    """Everything `g.compile(backend, **options)` accepts besides the backend."""

    seed: int = 0
    search_budget: int = 16  # distinct candidates priced per region (ops memoized: mostly cheap)
    search_confirm: int = 3  # best-priced candidates timed as whole plans (backends that measure ops)
    search_time_s: float = 10.0
    population: int = 4
    # {dim: [(lo, hi), ..]} (plans = the cartesian product) or [{dim: (lo, hi)}, ..] (one plan each)
    buckets: Mapping[str, Sequence[tuple[int, int]]] | Sequence[Mapping[str, tuple[int, int]]] = field(
        default_factory=dict
    )
    profile_dims: Mapping[str, int] = field(default_factory=dict)  # dims used when ranking candidates
    cache: bool = True
    roll: bool = True  # compile repeated layers once per kind (luminal/egraph/roll.py)
    # buckets differing only in bound facts share one saturation (phases marked needs_bounds excepted;
    # the e-graph may keep alternatives made while a dim was free: extract.preferred_genome's tie-break)
    share_saturation: bool = True

    @staticmethod
    def from_kwargs(options: Mapping[str, object]) -> CompileOptions:
        """Check every option's type and range (CompileError naming the option); `None` for buckets
        or profile_dims means none. Bucket ranges are checked against the graph in `bucket_bounds`."""
        known = set(CompileOptions.__dataclass_fields__)
        bad = set(options) - known
        if bad:
            raise CompileError(f"unknown compile option(s) {sorted(bad)}; known: {sorted(known)}")
        opts = dict(options)
        for name, lo in (("seed", None), ("search_budget", 1), ("search_confirm", 0), ("population", 1)):
            if name in opts:
                v = opts[name]
                if not _is_int(v) or (lo is not None and v < lo):
                    need = "an int" if lo is None else f"an int >= {lo}"
                    raise CompileError(f"compile option {name}={v!r}: {name} must be {need}")
                opts[name] = int(v)
        if "search_time_s" in opts:
            v = opts["search_time_s"]
            if not (_is_int(v) or isinstance(v, float)) or not v >= 0:  # `not >=` also rejects NaN
                raise CompileError(f"compile option search_time_s={v!r}: give a number of seconds >= 0")
            opts["search_time_s"] = float(v)
        for name in ("cache", "roll", "share_saturation"):
            if name in opts and not isinstance(opts[name], bool):
                raise CompileError(f"compile option {name}={opts[name]!r}: give True or False")
        for name in ("buckets", "profile_dims"):
            if name in opts and opts[name] is None:
                opts[name] = {}
            elif (
                name == "buckets"
                and name in opts
                and isinstance(opts[name], (list, tuple))
                and opts[name]
                and all(isinstance(plan, Mapping) for plan in opts[name])
            ):
                opts[name] = tuple(opts[name])  # an explicit list of {dim: (low, high)} plans
            elif name in opts and not isinstance(opts[name], Mapping):
                example = "{'s': [(1, 1), (2, 512)]}" if name == "buckets" else "{'s': 128}"
                raise CompileError(
                    f"compile option {name}={opts[name]!r}: give a dict keyed by dim name, like {name}={example}"
                )
        for d, v in opts.get("profile_dims", {}).items():
            if not isinstance(d, str) or not _is_int(v) or v < 0:
                raise CompileError(f"compile option profile_dims[{d!r}] = {v!r}: give dim name -> int >= 0")
        return CompileOptions(**opts)  # type: ignore[arg-type]

    def search(self) -> SearchOptions:
        return SearchOptions(self.seed, self.search_budget, self.search_time_s, self.population,
                             confirm=self.search_confirm)  # fmt: skip


def bucket_bounds(graph: Graph, buckets) -> list[Bounds]:
    """One bounds dict per plan: the cartesian product of `{dim: [ranges]}`, or an explicit list of
    plans `[{dim: (lo, hi)}, ...]` (when only some combinations occur, e.g. decode s = r = 1 and
    prefill s >= 2, r <= s). CompileError for a malformed spec."""
    if isinstance(buckets, (list, tuple)) and buckets and all(isinstance(p, Mapping) for p in buckets):
        return [b for plan in buckets for b in bucket_bounds(graph, {d: [r] for d, r in plan.items()})]
    if not isinstance(buckets, Mapping):
        raise CompileError(
            f"buckets={buckets!r}: give a dict of dim name -> list of (low, high) ranges, "
            "or a list of {dim: (low, high)} plans"
        )
    dims = graph.dims()
    for d, ranges in buckets.items():
        if not isinstance(d, str) or d not in dims:
            raise CompileError(f"buckets name dim {d!r}, which the graph does not use (its dims: {sorted(dims)})")
        if not isinstance(ranges, (list, tuple)):
            raise CompileError(f"buckets[{d!r}] = {ranges!r}: give a list of (low, high) ranges: [(1, 1), (2, 512)]")
        if not ranges:
            raise CompileError(f"buckets[{d!r}] is empty")
        for r in ranges:
            if not (isinstance(r, (list, tuple)) and len(r) == 2 and all(_is_int(x) for x in r) and 0 <= r[0] <= r[1]):
                raise CompileError(f"buckets[{d!r}]: {r!r} is not a (low, high) range of ints with 0 <= low <= high")
    names = sorted(buckets)
    combos = itertools.product(*[[(int(a), int(b)) for a, b in buckets[d]] for d in names])
    return [dict(zip(names, c, strict=True)) for c in combos] or [{}]


def _is_int(v: object) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


class BucketExecutor:
    """Dispatch each run to the plan whose dim ranges contain the run's dims."""

    def __init__(self, plans: list[tuple[Bounds, Executor]]):
        self.plans = plans

    def run(self, feed, env, **kw):
        return self.select(env).run(feed, env, **kw)

    def select(self, env) -> Executor:
        """The plan whose bucket holds the dims `env` (InputError when none does)."""
        for bounds, ex in self.plans:
            if all(lo <= env[d] <= hi for d, (lo, hi) in bounds.items()):
                return ex
        have = "; ".join(", ".join(f"{d} in [{lo}, {hi}]" for d, (lo, hi) in b.items()) for b, _ in self.plans)
        now = ", ".join(f"{d}={env[d]}" for d in sorted({d for b, _ in self.plans for d in b}))
        raise InputError(f"no compiled bucket covers {now}; compiled buckets: {have}")


def preference(backend: Backend) -> tuple[str, ...]:
    """The nodes the search's first candidate takes wherever the e-graph has them, earlier ones
    first: a backend lists its ops in preference order; fused bodies compute inline (FOp) where they can."""
    return ("FOp", *(c.__name__ for c in backend.ops))


class _Compilation:
    """The state one `compile` shares across its buckets: backend, ops, prelude, cache, stats, and the
    rolled regions (luminal/egraph/roll.py) every bucket compiles."""

    def __init__(self, graph: Graph, backend: Backend, opts: CompileOptions):
        self.graph, self.backend, self.opts = graph, backend, opts
        self.registry = OpRegistry((*HLIR_OPS, *backend.ops))
        self.op_classes = {n: sp.cls for n, sp in self.registry.specs.items()}
        self.runnable = {c.__name__ for c in (*backend.hlir_ops, *backend.ops)}
        self.prefer = preference(backend)
        self.cache = CompileCache(flags.cache_dir() if opts.cache else None)
        self.dump = flags.dump_dir()
        self.stats: dict = {"backend": backend.name, "hlir_nodes": len(graph.nodes), "egraph_nodes": 0,
                            "egraph_classes": 0, "time_serialize_s": 0.0, "time_saturate_s": 0.0,
                            "time_extract_s": 0.0, "time_search_s": 0.0, "time_pool_s": 0.0, "time_roll_s": 0.0,
                            "time_cache_s": 0.0, "cache_hit": True, "phases": [], "buckets": []}  # fmt: skip
        t = time.perf_counter()
        self.head = prog.prelude(self.registry, backend.rulesets, backend.phases)
        self.phases_text = "\n".join(p.text() for p in backend.phases)
        self.search_key = cache_key(json.dumps(asdict(opts.search())), json.dumps(sorted(opts.profile_dims.items())))
        self.stats["time_serialize_s"] += time.perf_counter() - t
        t = time.perf_counter()
        self.rolling = roll.detect(graph) if opts.roll else None
        self.regions = self.rolling.regions() if self.rolling is not None else [("graph", graph)]
        self.saturations: dict[str, int] = {name: 0 for name, _ in self.regions}
        self.memo: dict[str, tuple[LLIRGraph, dict]] = {}  # region key -> plan (buckets sharing a region)
        self.programs: dict[tuple, tuple[prog.GraphProgram, str]] = {}
        self.bases: dict[str, prog.GraphProgram] = {}  # region -> its program without bounds (`_base`)
        self.pre: dict[str, RunResult] = {}  # region key -> e-graph saturated together with other buckets
        self.views: dict[str, EGraphView] = {}  # region key -> its e-graph view, built early by `prefetch`
        self.stats["time_roll_s"] += time.perf_counter() - t
        # per-op costs measured by earlier compiles on this device (costs.py), and the ones this one adds
        self.cost_key = cache_key("op-costs", backend.name, backend.device, _version(backend))
        self.disk_costs = self.cache.load_costs(self.cost_key) if getattr(backend, "cost_cache", False) else None
        self.new_costs: dict = {}
        if self.rolling is not None:
            self.stats["rolled"] = {"bodies": self.rolling.summary(), "saturations": self.saturations}

    def bucket(self, bounds: Bounds) -> LLIRGraph:
        """The plan of one bucket: each region's plan (cache, or saturate + extract + search), unrolled."""
        plans, metas = {}, []
        for name, g in self.regions:
            plans[name], meta = self.region(name, g, bounds)
            metas.append({"region": name} | meta)
        if self.rolling is None:
            llir, row = plans["graph"], {k: v for k, v in metas[0].items() if k != "region"}
            llir.dims = tuple(sorted(self.graph.dims()))
        else:
            t = time.perf_counter()
            llir = self.rolling.unroll(plans)
            self.stats["time_roll_s"] += time.perf_counter() - t
            caches = {m["cache"] for m in metas}
            llir.dims = tuple(sorted(self.graph.dims()))
            row = {"cache": caches.pop() if len(caches) == 1 else "partial",
                   "profiled": sum(m.get("profiled", 0) for m in metas), "regions": metas}  # fmt: skip
        self.stats["buckets"].append({"bounds": bounds} | row)
        return llir

    def region(self, name: str, graph: Graph, bounds: Bounds) -> tuple[LLIRGraph, dict]:
        """The plan of one region (the whole graph when nothing rolled) in one bucket."""
        st = self.stats
        gp, key = self._program(name, graph, bounds)
        skey = self.search_key[:16]
        if key in self.memo:
            llir, meta = self.memo[key]
            return llir, meta | {"cache": "shared"}
        st["live_hlir_nodes"] = st.get("live_hlir_nodes", 0) + gp.n_nodes
        self._dump(f"{key[:12]}.egg", lambda: self.head + gp.text)
        t = time.perf_counter()
        llir, meta = self.cache.load_plan(key, skey, self.op_classes)
        st["time_cache_s"] += time.perf_counter() - t  # reading, decoding and checking a stored plan
        if llir is None:
            llir, meta = self._search(name, graph, gp, key, bounds)
            self.cache.store_plan(key, skey, llir, meta)
        else:
            meta["cache"] = "plan"
        for k in ("egraph_nodes", "egraph_classes"):
            st[k] += int(meta.get(k, 0))
        meta = {"hlir": gp.n_nodes} | {k: v for k, v in meta.items() if not k.startswith("egraph")}
        self.memo[key] = (llir, meta)
        self._dump(f"{key[:12]}-{skey}.html", llir.to_html)
        return llir, meta

    def _search(
        self, name: str, graph: Graph, gp: prog.GraphProgram, key: str, bounds: Bounds
    ) -> tuple[LLIRGraph, dict]:
        st = self.stats
        meta: dict = {"cache": "miss"}
        data = self.cache.load_egraph(key)
        if data is None:
            st["cache_hit"] = False
            res = self.pre.pop(key, None)
            if res is None:
                res = saturate(self.head, gp, self.backend.phases)
                self.saturations[name] += 1
                st["egglog_commands"] = st.get("egglog_commands", 0) + len(gp.commands)
            data = res.egraph_json
            st["time_saturate_s"] += res.time_load_s + res.time_saturate_s
            st["time_pool_s"] += res.time_pool_s
            st["time_extract_s"] += res.time_serialize_s
            st["phases"] += [_phase_row(p) | {"region": name} for p in res.phases]
            self.cache.store_egraph(key, data)
        else:
            meta["cache"] = "egraph"
        t = time.perf_counter()
        view = self.views.pop(key, None) or EGraphView(data, self.registry, self.runnable)
        st["time_extract_s"] += time.perf_counter() - t
        env = _profile_env(self.graph, bounds, self.opts.profile_dims)  # all dims: a region may use one in a field only
        t = time.perf_counter()
        pricer = None
        if callable(getattr(self.backend, "measure", None)):
            pricer = OpCosts(self.backend, env, self.disk_costs)
        found = search(view, lambda ll: self.backend.profile(ll, env), self.prefer, self.opts.search(),
                       pricer)  # fmt: skip
        st["time_search_s"] += time.perf_counter() - t
        if pricer is not None:
            prof = st.setdefault("profiling", {})
            for k, v in pricer.stats.items():
                prof[k] = prof.get(k, 0) + v
            self.new_costs.update(pricer.new)
        missing = set(graph.outputs) - set(found.best.llir.outputs)
        if missing:
            raise CompileError(f"the extracted plan lacks outputs {sorted(missing)} (extractor bug)")
        meta |= {"egraph_nodes": view.n_nodes, "egraph_classes": view.n_classes, "choice_sets": found.n_choice_sets,
                 "profiled": found.n_profiled, "confirmed": found.n_confirmed, "failed": found.n_failed,
                 "cost": found.best.cost}  # fmt: skip
        return found.best.llir, meta

    def _program(self, name: str, graph: Graph, bounds: Bounds) -> tuple[prog.GraphProgram, str]:
        """A region's program in one bucket and its cache key (memoized per region and bucket)."""
        k = (name, tuple(sorted(bounds.items())))
        if k not in self.programs:
            t = time.perf_counter()
            gp = prog.with_bounds(self._base(name, graph), bounds)
            be = self.backend
            key = cache_key(self.head + gp.text + self.phases_text, be.name, be.device, _version(be))
            self.programs[k] = (gp, key)
            self.stats["time_serialize_s"] += time.perf_counter() - t
        return self.programs[k]

    def _base(self, name: str, graph: Graph) -> prog.GraphProgram:
        """A region's program without bounds, serialized once: each bucket's adds its bound facts."""
        if name not in self.bases:
            self.bases[name] = prog.serialize_graph(graph, self.registry, {})
        return self.bases[name]

    def prefetch(self, buckets: Sequence[Bounds], regions: Sequence[tuple[str, Graph]] | None = None) -> None:
        """For a backend with `prefetch` (CUDA: compile kernels in the background): hand it the preferred
        plan of every region (of `regions`: default all) and bucket saturated by `prepare`, before any
        search, so the longest kernels (prefill attention: ~5 s of NVRTC) compile while the other regions
        saturate and the first buckets are searched."""
        fn = getattr(self.backend, "prefetch", None)
        if fn is None or not self.pre:
            return
        for bounds in buckets:
            env = _profile_env(self.graph, bounds, self.opts.profile_dims)
            for name, graph in self.regions if regions is None else regions:
                key = self._program(name, graph, bounds)[1]
                res = self.pre.get(key)
                if res is None or key in self.views:
                    continue
                try:
                    t = time.perf_counter()
                    view = self.views[key] = EGraphView(res.egraph_json, self.registry, self.runnable)
                    llir = view.extract(view.repair(view.preferred_genome(self.prefer)))
                    self.stats["time_extract_s"] += time.perf_counter() - t
                    fn([llir], env)
                except Exception as e:  # noqa: BLE001 - only a head start: the search compiles what it needs
                    log.info("prefetching the preferred plan of %s failed: %s", name, e)

    def prepare(self, buckets: Sequence[Bounds]) -> None:
        """Buckets whose region programs differ only in their bound facts (and are not cached) share
        one saturation: the phases before the first that runs `cleanup` (which deletes) or needs the
        bucket's bounds (Phase.needs_bounds: a choice the facts would reverse) run once, then
        each bucket's facts are added and every phase re-run from there (run.saturate_buckets), which
        costs only the matches the facts enable. The e-graphs equal the separately saturated ones
        (tests/egraph/test_roll.py). Each region's preferred plans are prefetched (`prefetch`) as soon as
        it is saturated: its kernels compile while the next region saturates."""
        phases = self.backend.phases
        shared = next((k for k, ph in enumerate(phases) if CLEANUP in ph.schedule.rulesets() or ph.needs_bounds),
                      len(phases))  # fmt: skip
        if len(buckets) < 2 or shared == 0:
            return
        for name, graph in self.regions:
            todo = {key: gp for gp, key in (self._program(name, graph, b) for b in buckets)}
            todo = {key: gp for key, gp in todo.items() if not self.cache.has_egraph(key)}
            if len(todo) < 2:
                continue
            base = self._base(name, graph)
            n = len(base.commands)
            pending = {key: list(gp.commands[n:]) for key, gp in todo.items() if gp.commands[:n] == base.commands}
            if len(pending) < 2:
                continue
            self.stats["cache_hit"] = False
            for key, res in zip(pending, saturate_buckets(self.head, base, list(pending.values()), phases,
                                                          shared=shared), strict=True):  # fmt: skip
                self.pre[key] = res
            self.saturations[name] += 1
            self.stats["egglog_commands"] = (self.stats.get("egglog_commands", 0) + len(base.commands)
                                             + sum(len(f) for f in pending.values()))  # fmt: skip
            self.prefetch(buckets, [(name, graph)])

    def _dump(self, name: str, content: Callable[[], str]) -> None:
        """LUMINAL_DUMP: write `content()` (computed only when dumping) as `name` in the dump dir."""
        if self.dump is not None:
            self.dump.mkdir(parents=True, exist_ok=True)
            Path(self.dump, name).write_text(content())


def compile_plans(
    graph: Graph, backend: Backend, opts: CompileOptions, backend_s: float = 0.0
) -> tuple[Executor, list[LLIRGraph], dict]:
    """Plans for every bucket, their executor (bucket dispatch if several) and the stats dict
    (`backend_s`: what creating the backend took before, reported as time_backend_s)."""
    t_start = time.perf_counter()
    counters = _counters(backend)
    buckets = bucket_bounds(graph, opts.buckets)
    comp = _Compilation(graph, backend, opts)
    with one_compile():  # a pooled prelude serves every region of this compile (run.py)
        try:
            plans = _plans(comp, buckets)
        except LuminalError:
            raise
        except Exception as e:  # noqa: BLE001 - a rolling bug must never cost a compile: compile unrolled
            if comp.rolling is None:
                raise
            log.warning("loop rolling failed (%s: %s); compiling without it", type(e).__name__, e)
            comp = _Compilation(graph, backend, replace(opts, roll=False))
            comp.stats["roll_failed"] = f"{type(e).__name__}: {e}"
            plans = _plans(comp, buckets)
    if comp.new_costs and comp.disk_costs is not None:
        comp.cache.store_costs(comp.cost_key, {**comp.disk_costs, **comp.new_costs})
    t = time.perf_counter()
    executors = [(b, backend.load(ll)) for b, ll in plans]
    executor = executors[0][1] if len(executors) == 1 and not executors[0][0] else BucketExecutor(executors)
    llirs = [ll for _, ll in plans]
    stats = comp.stats
    stats["time_load_s"] = time.perf_counter() - t
    after = _counters(backend)
    if after:  # e.g. NVRTC compiles, cache hits and seconds (kernels of the search and of the plans)
        stats["backend_counters"] = {k: round(v - counters.get(k, 0), 6) for k, v in after.items()}
        lines = getattr(backend, "counter_lines", None)  # e.g. CUDA's `nvrtc:` line
        if callable(lines):
            stats["backend_lines"] = list(lines(stats["backend_counters"]))
    stats["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    stats["llir_nodes"] = sum(len(ll) for ll in llirs)
    stats["llir_ops"] = llirs[0].op_counts() if len(llirs) == 1 else [ll.op_counts() for ll in llirs]
    stats["time_total_s"] = time.perf_counter() - t_start  # from here: without time_backend_s
    stats["time_backend_s"] = backend_s
    if flags.debug():
        log.info("%s", format_stats(stats))
    return executor, llirs, stats


def _plans(comp: _Compilation, buckets: list[Bounds]) -> list[tuple[Bounds, LLIRGraph]]:
    if comp.opts.share_saturation:
        comp.prepare(buckets)  # prefetches each region's preferred plans once it is saturated
    return [(b, comp.bucket(b)) for b in buckets]


def build_egraph(graph: Graph, backend: Backend, bounds: Bounds | None = None) -> EGraphView:
    """Saturate `graph` under `backend` (no cache, no search) and return the filtered e-graph view:
    what tests and tools use to ask which rewrites fired and to sample extractions."""
    registry = OpRegistry((*HLIR_OPS, *backend.ops))
    runnable = {c.__name__ for c in (*backend.hlir_ops, *backend.ops)}
    head = prog.prelude(registry, backend.rulesets, backend.phases)
    res = saturate(head, prog.serialize_graph(graph, registry, bounds or {}), backend.phases)
    return EGraphView(res.egraph_json, registry, runnable)


def build_rolled(
    graph: Graph, backend: Backend, bounds: Bounds | None = None
) -> tuple[roll.Rolling | None, dict[str, EGraphView]]:
    """The rolled regions of `graph` and each one's saturated e-graph view (no cache, no search): what
    tests use to sample extractions of every region and unroll them (`rolling.unroll(plans)`)."""
    rolling = roll.detect(graph)
    regions = rolling.regions() if rolling is not None else [("graph", graph)]
    return rolling, {name: build_egraph(g, backend, bounds) for name, g in regions}


def _phase_row(p: PhaseReport) -> dict:
    rules = dict(sorted(((k, v) for k, v in p.matches.items() if v), key=lambda kv: (-kv[1], kv[0])))
    sets = dict(sorted(((k, round(v, 6)) for k, v in p.ruleset_seconds.items() if v), key=lambda kv: -kv[1]))
    return {"phase": p.name, "seconds": p.seconds, "iterations": p.iterations, "matches": p.total_matches,
            "rules": rules, "rulesets": sets}  # fmt: skip


def _profile_env(graph: Graph, bounds: Bounds, dims: Mapping[str, int]) -> dict[str, int]:
    env = {}
    for d in graph.dims():
        if d in bounds:
            lo, hi = bounds[d]
            env[d] = lo if lo == hi else min(hi, max(lo, dims.get(d, DEFAULT_DIM)))
        else:
            env[d] = int(dims.get(d, DEFAULT_DIM))
    return env


def _counters(backend: Backend) -> dict[str, float]:
    fn = getattr(backend, "counters", None)
    return dict(fn()) if callable(fn) else {}


def format_stats(stats: Mapping) -> str:
    """What LUMINAL_DEBUG logs: where the compile time went (phases per region, rolled bodies,
    profiling, backend counters such as NVRTC, peak memory)."""
    rows = [
        f"compile [{stats['backend']}] hlir={stats['hlir_nodes']} egraph={stats['egraph_nodes']} nodes / "
        f"{stats['egraph_classes']} classes, llir={stats['llir_nodes']}, cache_hit={stats['cache_hit']}"
    ]
    rolled = stats.get("rolled")
    if rolled:
        bodies = ", ".join(f"{b['body']}: {b['layers']} layers x {b['nodes']} nodes, saturated "
                           f"{rolled['saturations'].get(b['body'], 0)}x" for b in rolled["bodies"])  # fmt: skip
        rows.append(f"  rolled: {bodies}")
    rows.append(f"  {'region':<10}{'phase':<10}{'seconds':>9}{'iters':>7}{'matches':>9}  top rules")
    for p in stats["phases"]:
        top = ", ".join(f"{k}={v}" for k, v in list(p["rules"].items())[:6])
        sets = ", ".join(f"{k} {v:.3f}s" for k, v in list(p.get("rulesets", {}).items())[:4])
        rows.append(f"  {p.get('region', ''):<10}{p['phase']:<10}{p['seconds']:>9.4f}{p['iterations']:>7}"
                    f"{p['matches']:>9}  [{sets}] {top}")  # fmt: skip
    for b in stats["buckets"]:
        for r in b.get("regions", [b]):
            rows.append(f"  bucket {b['bounds']} {r.get('region', 'graph')}: cache={r.get('cache')} "
                        f"hlir={r.get('hlir')} priced={r.get('profiled', 0)} confirmed={r.get('confirmed', 0)} "
                        f"failed={r.get('failed', 0)}")  # fmt: skip
    if "profiling" in stats:
        rows.append("  profiling: " + ", ".join(f"{k}={v}" for k, v in stats["profiling"].items()))
    if "backend_counters" in stats:
        rows.append("  backend: " + ", ".join(f"{k}={v}" for k, v in stats["backend_counters"].items()))
    rows += [f"  {line}" for line in stats.get("backend_lines", ())]
    for k in ("time_backend_s", "time_serialize_s", "time_roll_s", "time_cache_s", "time_saturate_s", "time_pool_s",
              "time_extract_s", "time_search_s", "time_load_s", "time_total_s"):  # fmt: skip
        rows.append(f"  {k:<18}{stats.get(k, 0.0):>9.4f}")
    rows.append(f"  peak_rss_mb       {stats.get('peak_rss_mb', 0.0):>9.1f}")
    return "\n".join(rows)


def _version(backend: Backend) -> str:
    """luminal's version plus a digest of the compiler and backend sources: during development the
    version string stays put while the extractor or a backend changes, and a plan cached by older
    code must not be trusted."""
    import luminal

    mod = sys.modules.get(type(backend).__module__)
    pkg = Path(mod.__file__).parent if mod is not None and getattr(mod, "__file__", None) else None
    return f"{getattr(luminal, '__version__', '0')}+{source_digest(pkg)}"


@cache
def source_digest(backend_dir: Path | None) -> str:
    root = Path(__file__).parents[1]
    dirs = [root / "egraph", root / "hlir", root / "shape", *([backend_dir] if backend_dir else [])]
    h = hashlib.sha256()
    for d in dirs:
        for f in sorted(p for p in d.rglob("*") if p.suffix in (".py", ".egg")):
            h.update(f.read_bytes())
    return h.hexdigest()[:16]
