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
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path

from luminal import flags
from luminal.backends.base import Backend, Executor
from luminal.egraph import program as prog
from luminal.egraph.cache import CompileCache, cache_key
from luminal.egraph.extract import EGraphView
from luminal.egraph.llir import LLIRGraph
from luminal.egraph.registry import OpRegistry
from luminal.egraph.run import PhaseReport, saturate
from luminal.egraph.search import SearchOptions, search
from luminal.errors import CompileError, InputError
from luminal.graph import Graph
from luminal.hlir import HLIR_OPS

log = logging.getLogger("luminal.compile")
DEFAULT_DIM = 64  # representative size of an unbounded dim when profiling
Bounds = dict[str, tuple[int, int]]


@dataclass(frozen=True)
class CompileOptions:
    """Everything `g.compile(backend, **options)` accepts besides the backend."""

    seed: int = 0
    search_budget: int = 8
    search_time_s: float = 10.0
    population: int = 4
    # {dim: [(lo, hi), ..]} (plans = the cartesian product) or [{dim: (lo, hi)}, ..] (one plan each)
    buckets: Mapping[str, Sequence[tuple[int, int]]] | Sequence[Mapping[str, tuple[int, int]]] = field(
        default_factory=dict
    )
    profile_dims: Mapping[str, int] = field(default_factory=dict)  # dims used when ranking candidates
    cache: bool = True

    @staticmethod
    def from_kwargs(options: Mapping[str, object]) -> CompileOptions:
        known = set(CompileOptions.__dataclass_fields__)
        bad = set(options) - known
        if bad:
            raise CompileError(f"unknown compile option(s) {sorted(bad)}; known: {sorted(known)}")
        return CompileOptions(**options)  # type: ignore[arg-type]

    def search(self) -> SearchOptions:
        return SearchOptions(self.seed, self.search_budget, self.search_time_s, self.population)


def bucket_bounds(graph: Graph, buckets) -> list[Bounds]:
    """One bounds dict per plan: the cartesian product of `{dim: [ranges]}`, or an explicit list of
    plans `[{dim: (lo, hi)}, ...]` (when only some combinations occur, e.g. decode s = r = 1 and
    prefill s >= 2, r <= s)."""
    if not isinstance(buckets, Mapping):
        return [b for plan in buckets for b in bucket_bounds(graph, {d: [r] for d, r in plan.items()})]
    dims = graph.dims()
    for d, ranges in buckets.items():
        if d not in dims:
            raise CompileError(f"buckets name dim {d!r}, which the graph does not use (its dims: {sorted(dims)})")
        if not ranges:
            raise CompileError(f"buckets[{d!r}] is empty")
        for r in ranges:
            if len(r) != 2 or not (0 <= int(r[0]) <= int(r[1])):
                raise CompileError(f"buckets[{d!r}]: {r!r} is not a (low, high) range with 0 <= low <= high")
    names = sorted(buckets)
    combos = itertools.product(*[[(int(a), int(b)) for a, b in buckets[d]] for d in names])
    return [dict(zip(names, c, strict=True)) for c in combos] or [{}]


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
    """The state one `compile` shares across its buckets: backend, ops, prelude, cache, stats."""

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
                            "time_extract_s": 0.0, "time_search_s": 0.0, "cache_hit": True, "phases": [],
                            "buckets": []}  # fmt: skip
        t = time.perf_counter()
        self.head = prog.prelude(self.registry, backend.rulesets, backend.phases)
        self.phases_text = "\n".join(p.text() for p in backend.phases)
        self.search_key = cache_key(json.dumps(asdict(opts.search())), json.dumps(sorted(opts.profile_dims.items())))
        self.stats["time_serialize_s"] += time.perf_counter() - t

    def bucket(self, bounds: Bounds) -> LLIRGraph:
        """The plan of one bucket: from the cache, or saturate + extract + search (and store it)."""
        st = self.stats
        t = time.perf_counter()
        gp = prog.serialize_graph(self.graph, self.registry, bounds)
        be = self.backend
        key = cache_key(self.head + gp.text + self.phases_text, be.name, be.device, _version(be))
        skey = self.search_key[:16]
        st["time_serialize_s"] += time.perf_counter() - t
        st["live_hlir_nodes"] = gp.n_nodes
        self._dump(f"{key[:12]}.egg", lambda: self.head + gp.text)
        llir, meta = self.cache.load_plan(key, skey, self.op_classes)
        if llir is None:
            llir, meta = self._search(gp, key, bounds)
            self.cache.store_plan(key, skey, llir, meta)
        else:
            meta["cache"] = "plan"
        for k in ("egraph_nodes", "egraph_classes"):
            st[k] += int(meta.get(k, 0))
        st["buckets"].append({"bounds": bounds} | {k: v for k, v in meta.items() if not k.startswith("egraph")})
        self._dump(f"{key[:12]}-{skey}.html", llir.to_html)
        return llir

    def _search(self, gp: prog.GraphProgram, key: str, bounds: Bounds) -> tuple[LLIRGraph, dict]:
        st = self.stats
        meta: dict = {"cache": "miss"}
        data = self.cache.load_egraph(key)
        if data is None:
            st["cache_hit"] = False
            res = saturate(self.head, gp, self.backend.phases)
            data = res.egraph_json
            st["time_saturate_s"] += res.time_load_s + res.time_saturate_s
            st["time_extract_s"] += res.time_serialize_s
            st["phases"] += [_phase_row(p) for p in res.phases]
            self.cache.store_egraph(key, data)
        else:
            meta["cache"] = "egraph"
        t = time.perf_counter()
        view = EGraphView(data, self.registry, self.runnable)
        st["time_extract_s"] += time.perf_counter() - t
        env = _profile_env(self.graph, bounds, self.opts.profile_dims)
        t = time.perf_counter()
        found = search(view, lambda ll: self.backend.profile(ll, env), self.prefer, self.opts.search())
        st["time_search_s"] += time.perf_counter() - t
        missing = set(self.graph.outputs) - set(found.best.llir.outputs)
        if missing:
            raise CompileError(f"the extracted plan lacks outputs {sorted(missing)} (extractor bug)")
        meta |= {"egraph_nodes": view.n_nodes, "egraph_classes": view.n_classes, "choice_sets": found.n_choice_sets,
                 "profiled": found.n_profiled, "cost": found.best.cost}  # fmt: skip
        return found.best.llir, meta

    def _dump(self, name: str, content: Callable[[], str]) -> None:
        """LUMINAL_DUMP: write `content()` (computed only when dumping) as `name` in the dump dir."""
        if self.dump is not None:
            self.dump.mkdir(parents=True, exist_ok=True)
            Path(self.dump, name).write_text(content())


def compile_plans(graph: Graph, backend: Backend, opts: CompileOptions) -> tuple[Executor, list[LLIRGraph], dict]:
    """Plans for every bucket, their executor (bucket dispatch if several) and the stats dict."""
    t_start = time.perf_counter()
    comp = _Compilation(graph, backend, opts)
    plans = [(b, comp.bucket(b)) for b in bucket_bounds(graph, opts.buckets)]
    executors = [(b, backend.load(ll)) for b, ll in plans]
    executor = executors[0][1] if len(executors) == 1 and not executors[0][0] else BucketExecutor(executors)
    llirs = [ll for _, ll in plans]
    stats = comp.stats
    stats["llir_nodes"] = sum(len(ll) for ll in llirs)
    stats["llir_ops"] = llirs[0].op_counts() if len(llirs) == 1 else [ll.op_counts() for ll in llirs]
    stats["time_total_s"] = time.perf_counter() - t_start
    if flags.debug():
        log.info("%s", format_stats(stats))
    return executor, llirs, stats


def build_egraph(graph: Graph, backend: Backend, bounds: Bounds | None = None) -> EGraphView:
    """Saturate `graph` under `backend` (no cache, no search) and return the filtered e-graph view:
    what tests and tools use to ask which rewrites fired and to sample extractions."""
    registry = OpRegistry((*HLIR_OPS, *backend.ops))
    runnable = {c.__name__ for c in (*backend.hlir_ops, *backend.ops)}
    head = prog.prelude(registry, backend.rulesets, backend.phases)
    res = saturate(head, prog.serialize_graph(graph, registry, bounds or {}), backend.phases)
    return EGraphView(res.egraph_json, registry, runnable)


def _phase_row(p: PhaseReport) -> dict:
    rules = dict(sorted(((k, v) for k, v in p.matches.items() if v), key=lambda kv: (-kv[1], kv[0])))
    return {"phase": p.name, "seconds": p.seconds, "iterations": p.iterations, "matches": p.total_matches,
            "rules": rules}  # fmt: skip


def _profile_env(graph: Graph, bounds: Bounds, dims: Mapping[str, int]) -> dict[str, int]:
    env = {}
    for d in graph.dims():
        if d in bounds:
            lo, hi = bounds[d]
            env[d] = lo if lo == hi else min(hi, max(lo, dims.get(d, DEFAULT_DIM)))
        else:
            env[d] = int(dims.get(d, DEFAULT_DIM))
    return env


def format_stats(stats: Mapping) -> str:
    """The per-phase table LUMINAL_DEBUG logs."""
    rows = [f"compile [{stats['backend']}] hlir={stats['hlir_nodes']} egraph={stats['egraph_nodes']} nodes / "
            f"{stats['egraph_classes']} classes, llir={stats['llir_nodes']}, cache_hit={stats['cache_hit']}",
            f"  {'phase':<12}{'seconds':>9}{'iters':>7}{'matches':>9}  top rules"]  # fmt: skip
    for p in stats["phases"]:
        top = ", ".join(f"{k}={v}" for k, v in list(p["rules"].items())[:8])
        rows.append(f"  {p['phase']:<12}{p['seconds']:>9.4f}{p['iterations']:>7}{p['matches']:>9}  {top}")
    for k in ("time_serialize_s", "time_saturate_s", "time_extract_s", "time_search_s", "time_total_s"):
        rows.append(f"  {k:<18}{stats[k]:>9.4f}")
    return "\n".join(rows)


def _version(backend: Backend) -> str:
    """luminal's version plus a digest of the compiler and backend sources: during development the
    version string stays put while the extractor or a backend changes, and a plan cached by older
    code must not be trusted."""
    import luminal

    mod = sys.modules.get(type(backend).__module__)
    pkg = Path(mod.__file__).parent if mod is not None and getattr(mod, "__file__", None) else None
    return f"{getattr(luminal, '__version__', '0')}+{_source_digest(pkg)}"


@cache
def _source_digest(backend_dir: Path | None) -> str:
    root = Path(__file__).parents[1]
    dirs = [root / "egraph", root / "hlir", root / "shape", *([backend_dir] if backend_dir else [])]
    h = hashlib.sha256()
    for d in dirs:
        for f in sorted(p for p in d.rglob("*") if p.suffix in (".py", ".egg")):
            h.update(f.read_bytes())
    return h.hexdigest()[:16]
