"""Saturation: load the program into egglog, run the backend's phases, serialize the e-graph.

Uses egglog's low-level text API (`egglog.bindings.EGraph`: parse_program / run_program). Each
phase is one `(run-schedule ...)`, timed, with its iteration count and matches per rule taken
from egglog's RunReport. The result is egglog's serialized JSON (never egglog's own extract:
it unfolds the DAG).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING

from luminal.egraph.program import GraphProgram
from luminal.egraph.rulesets import Phase
from luminal.errors import CompileError

if TYPE_CHECKING:
    import egglog.bindings as eb

log = logging.getLogger(__name__)


@cache
def _eb():
    """egglog's bindings, imported on first saturation: importing egglog costs ~0.3-2 s (its Python
    layer loads with it), and a warm compile (plans from the cache) never needs it."""
    import egglog.bindings

    return egglog.bindings


@dataclass
class PhaseReport:
    name: str
    seconds: float
    iterations: int
    matches: dict[str, int] = field(default_factory=dict)  # rule name -> matches over the phase
    # ruleset -> seconds egglog spent on it over the phase (search and apply, merge, rebuild)
    ruleset_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def total_matches(self) -> int:
        return sum(self.matches.values())


@dataclass
class RunResult:
    egraph_json: dict
    phases: list[PhaseReport]
    time_load_s: float
    time_saturate_s: float
    time_serialize_s: float
    time_pool_s: float = 0.0  # taking the pooled prelude (push, or loading it) and giving it back (pop)


def _exec(eg: eb.EGraph, text: str, what: str) -> list:
    eb = _eb()
    try:
        return eg.run_program(*eg.parse_program(text))
    except eb.EggSmolError as e:
        raise CompileError(f"egglog rejected the {what}: {str(e)[:2000]}") from None


# Loaded preludes, reused across compiles in this process: the graph runs between (push) and (pop),
# so each compile sees exactly the prelude state. An e-graph is taken out of the pool while in use
# (concurrent compiles build their own) and only returned after a clean pop. egglog never hands back
# the ids a popped graph allocated: the cost of every later push and pop grows with all the e-nodes
# an e-graph has ever held (measured: 30 -> 144 ms per small compile after 1000 compiles). So a pooled
# e-graph is retired once it has absorbed POOL_RETIRE_NODES e-nodes (or POOL_RETIRE_USES compiles):
# compile time then stays flat over the life of the process, at the price of reloading the prelude
# (tens of ms) once every few dozen small compiles. Within one compile (`one_compile`) a spent e-graph
# goes on serving the compile's next regions and is retired when the compile ends: a rolled model's
# regions would otherwise reload the prelude mid-compile (gemma-3-1b: after body0, ~0.1-0.2 s).
@dataclass
class _Pooled:
    eg: eb.EGraph
    uses: int = 0
    absorbed: int = 0  # serialized e-nodes of every compile it served


_POOL: dict[str, _Pooled] = {}
_POOL_MAX = 4
POOL_RETIRE_NODES = 8_000
POOL_RETIRE_USES = 32
POOL_STATS = {"loads": 0, "reuses": 0, "retired": 0}
_COMPILES = [0]  # `one_compile` scopes open (any thread): retiring waits until none is


@contextmanager
def one_compile() -> Iterator[None]:
    """The saturations of one compile: a pooled e-graph that has absorbed its share serves the rest of
    the compile and is retired when the last open scope ends (module comment above)."""
    _COMPILES[0] += 1
    try:
        yield
    finally:
        _COMPILES[0] -= 1
        if _COMPILES[0] == 0:
            for key, p in list(_POOL.items()):
                if _spent(p):
                    del _POOL[key]
                    POOL_STATS["retired"] += 1


def _spent(p: _Pooled) -> bool:
    return p.absorbed >= POOL_RETIRE_NODES or p.uses >= POOL_RETIRE_USES


def _take(prelude: str) -> _Pooled:
    p = _POOL.pop(prelude, None)
    if p is None:
        p = _Pooled(_eb().EGraph())
        _exec(p.eg, prelude, "program prelude (sorts and rules)")
        POOL_STATS["loads"] += 1
    else:
        POOL_STATS["reuses"] += 1
    _exec(p.eg, "(push)", "push")
    return p


def _give_back(prelude: str, p: _Pooled, n_nodes: int) -> None:
    _exec(p.eg, "(pop)", "pop")
    p.uses += 1
    p.absorbed += n_nodes
    if _spent(p) and _COMPILES[0] == 0:
        POOL_STATS["retired"] += 1
        return
    if len(_POOL) >= _POOL_MAX:
        _POOL.pop(next(iter(_POOL)))
    _POOL[prelude] = p


def pool_absorbed() -> list[int]:
    """E-nodes absorbed by each pooled e-graph (what its push/pop cost grows with): for tests."""
    return [p.absorbed for p in _POOL.values()]


def saturate(prelude: str, graph: GraphProgram, phases: Sequence[Phase]) -> RunResult:
    """Run `prelude` + the graph program under `phases`; return the serialized e-graph."""
    return saturate_buckets(prelude, graph, [[]], phases, shared=0)[0]


def saturate_buckets(
    prelude: str, graph: GraphProgram, facts: Sequence[Sequence[str]], phases: Sequence[Phase], shared: int
) -> list[RunResult]:
    """The graph program saturated once under the first `shared` phases, then, per entry of `facts`
    (each bucket's bound facts), those facts added in a (push) and every phase run again, serialized,
    (pop) -- the last entry without a push of its own: the pooled graph's own (pop) discards it.
    Rules only add facts, so the re-run reaches the e-graph that saturating with the facts from
    the start reaches, at the cost of the matches the facts enable; the shared phases must not delete
    (cleanup is never shared). The first result carries the shared load and phases."""
    t0 = time.perf_counter()
    pooled = _take(prelude)
    eg = pooled.eg
    t_push = time.perf_counter() - t0
    for chunk in graph.chunks():
        _exec(eg, chunk, "graph program")
    t_load = time.perf_counter() - t0
    shared_reports = [_phase(eg, ph) for ph in phases[:shared]]
    out: list[RunResult] = []
    absorbed = 0
    for k, cmds in enumerate(facts):
        t1 = time.perf_counter()
        # every bucket but the last runs in a (push) of its own; the last runs on the shared state
        # directly: `_give_back`'s (pop) discards it with the graph (a push copies the e-graph)
        scoped = k < len(facts) - 1
        if scoped:
            _exec(eg, "(push)", "push")
        if cmds:
            _exec(eg, "\n".join(cmds) + "\n", "bound facts")
        reports = [_phase(eg, ph) for ph in phases]
        t2 = time.perf_counter()
        try:
            eb = _eb()
            root = eb.Var(eb.PanicSpan(), "$root")
            data = json.loads(eg.serialize([root]).to_json())
        except _eb().EggSmolError as e:
            raise CompileError(f"egglog could not serialize the e-graph: {e}") from None
        t3 = time.perf_counter()
        if scoped:
            _exec(eg, "(pop)", "pop")
        absorbed += len(data.get("nodes", ()))
        head = shared_reports if k == 0 else []
        out.append(RunResult(data, head + reports, t_load if k == 0 else 0.0,
                             (sum(r.seconds for r in head)) + t2 - t1, t3 - t2, 0.0))  # fmt: skip
    t4 = time.perf_counter()
    _give_back(prelude, pooled, absorbed)
    out[0].time_pool_s = t_push + time.perf_counter() - t4
    return out


def _phase(eg: eb.EGraph, ph: Phase) -> PhaseReport:
    ts = time.perf_counter()
    outs = _exec(eg, ph.text(), f"schedule phase {ph.name!r}")
    rep = next((o.report for o in outs if isinstance(o, _eb().RunScheduleOutput)), None)
    iters = len(rep.iterations) if rep is not None else 0
    matches = {_rule_name(k): int(v) for k, v in (rep.num_matches_per_rule.items() if rep else ())}
    per_set: dict[str, float] = {}
    if rep is not None:
        for times in (rep.search_and_apply_time_per_ruleset, rep.merge_time_per_ruleset, rep.rebuild_time_per_ruleset):
            for name, dt in times.items():
                per_set[name] = per_set.get(name, 0.0) + dt.total_seconds()
    return PhaseReport(ph.name, time.perf_counter() - ts, iters, matches, per_set)


def _rule_name(key: str) -> str:
    """egglog keys unnamed rules by their text; keep names short in reports."""
    return key if "\n" not in key and len(key) < 80 else " ".join(key.split())[:80]
