"""Per-op costs for search: each distinct op is measured once, in isolation, and memoized.

A candidate plan's cost is the sum of its ops' costs. An op's cost is what the backend's `measure`
returns for a one-op plan (Inputs -> op -> Output) at the bucket's profile dims: its time net of
the fixed cost of timing a plan, including one launch. The memo key is the op's canonical text, its
input and output dtypes and the values of the dims the op mentions, so the same op in another
candidate, another layer, another bucket with the same dims, or another compile is never measured
twice: in process (per backend device) and, for backends whose measurements cost device time
(`backend.cost_cache`), in the on-disk compile cache. All ops a batch of candidates lacks are
handed to the backend in one `measure` call (the CUDA backend compiles their kernels in one NVRTC
program). An op the backend cannot build or run is recorded as failed: every candidate holding it is
skipped, with the reason logged.

Only ops whose choice matters are measured: an op every candidate priced so far holds (as often) adds
the same cost to each, so it cannot change their order and is left unmeasured. Prices are relative to
that common part; when a new candidate lacks one of its ops, the common part shrinks, the ops leaving
it are measured, and `take_rebased()` tells the search to re-price the candidates it holds (sums of
memoized costs: no new measurement). The chosen plan is the one full pricing would choose; the
measurements saved are every op forced on all candidates (slices, gathers, attention, state updates, the
parts of the graph with one implementation). A backend with `prefetch(plans, env)` is handed every batch of
candidate plans first, to start preparing their ops in the background (the CUDA backend compiles their
kernels while the search goes on: the first batch is the preferred plan, whose attention kernels are
the longest NVRTC compiles and would otherwise wait for the final whole-plan timing).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence

from luminal.egraph.llir import LLIRGraph, LNode, _op_text
from luminal.errors import LuminalError
from luminal.hlir import Input, Output

log = logging.getLogger(__name__)
Failed = str  # the reason an op could not be measured
_MEMO: dict[str, dict[str, float | Failed]] = {}  # backend class + device -> part key -> cost (or failure)


def one_op_plan(llir: LLIRGraph, i: int) -> LLIRGraph:
    """Node i of `llir` alone: an Input per operand (its producer's dtype), the op, one Output."""
    n = llir.nodes[i]
    nodes = [LNode(Input(f"in{k}", llir.nodes[s].dtype), (), llir.nodes[s].dtype) for k, s in enumerate(n.inputs)]
    nodes.append(LNode(n.op, tuple(range(len(n.inputs))), n.dtype))
    nodes.append(LNode(Output("out"), (len(nodes) - 1,), n.dtype))
    return LLIRGraph(nodes, {"out": len(nodes) - 1})


class OpCosts:
    """Prices candidate plans for one backend at one set of profile dims (module docstring)."""

    def __init__(self, backend, env: Mapping[str, int], disk: Mapping[str, float | Failed] | None = None):
        self.backend, self.env = backend, dict(env)
        cls = type(backend)
        self.memo = _MEMO.setdefault(f"{cls.__module__}.{cls.__qualname__}|{backend.device}", {})
        for k, v in (disk or {}).items():
            self.memo.setdefault(k, v)
        self.stats = {"ops_measured": 0, "op_hits": 0, "ops_failed": 0, "measure_calls": 0, "ops_unmeasured": 0}
        self.new: dict[str, float | Failed] = {}  # measured by this pricer (what the disk cache lacks)
        self.common: Counter[str] | None = None  # op keys (with multiplicity) every plan priced so far holds
        self._rebased = False

    def key(self, llir: LLIRGraph, i: int) -> str:
        n = llir.nodes[i]
        dims = ",".join(f"{d}={self.env[d]}" for d in sorted(n.op.dim_names()) if d in self.env)
        ins = ",".join(llir.nodes[s].dtype.value for s in n.inputs)
        return f"{_op_text(n.op)}|{ins}->{n.dtype.value}|{dims}"

    def price(self, llirs: Sequence[LLIRGraph]) -> list[float | Failed]:
        """Each plan's summed cost of the ops it holds beyond the common part (module docstring), or the
        reason one of them failed."""
        prefetch = getattr(self.backend, "prefetch", None)
        if prefetch is not None:  # e.g. CUDA: compile the candidates' kernels in the background now
            try:
                prefetch(llirs, self.env)
            except Exception as e:  # noqa: BLE001 - only a head start: measuring compiles what it needs
                log.info("prefetching the kernels of %d plans failed: %s", len(llirs), e)
        parts: list[Counter[str]] = []
        where: dict[str, tuple[LLIRGraph, int]] = {}
        for ll in llirs:
            keys: Counter[str] = Counter()
            for i, n in enumerate(ll.nodes):
                if not isinstance(n.op, (Input, Output)):
                    k = self.key(ll, i)
                    keys[k] += 1
                    where.setdefault(k, (ll, i))
            parts.append(keys)
        common = Counter(parts[0]) if self.common is None and parts else Counter(self.common or {})
        for keys in parts:
            common &= keys
        if self.common is not None and common != self.common:
            self._rebased = True  # earlier prices counted ops that are no longer common
        self.common = common
        todo: dict[str, tuple[LLIRGraph, int]] = {}
        for keys in parts:
            for k, cnt in keys.items():
                if cnt <= common[k]:
                    continue
                if k in self.memo:
                    self.stats["op_hits"] += 1
                elif k not in todo:
                    todo[k] = where[k]
        if todo:
            self._measure(todo)
        self.stats["ops_unmeasured"] = sum(1 for k in common if k not in self.memo)
        out: list[float | Failed] = []
        for keys in parts:
            extra = [(k, cnt - common[k]) for k, cnt in keys.items() if cnt > common[k]]
            bad = next((self.memo[k] for k, _ in extra if isinstance(self.memo[k], str)), None)
            out.append(bad if bad is not None else float(sum(self.memo[k] * c for k, c in extra)))  # type: ignore[operator]
        return out

    __call__ = price

    def take_rebased(self) -> bool:
        """True once after a price call shrank the common part: the prices handed out before are stale
        (re-price those plans: their ops are all memoized by now)."""
        r, self._rebased = self._rebased, False
        return r

    def _measure(self, todo: dict[str, tuple[LLIRGraph, int]]) -> None:
        plans = [one_op_plan(ll, i) for ll, i in todo.values()]
        self.stats["measure_calls"] += 1
        try:
            vals = list(self.backend.measure(plans, self.env))
        except LuminalError as e:  # the whole batch failed: measure one at a time to find the culprit
            log.info("measuring %d ops together failed (%s); measuring them one by one", len(plans), e)
            vals = []
            for p in plans:
                try:
                    vals.extend(self.backend.measure([p], self.env))
                except LuminalError as e1:
                    vals.append(f"{type(e1).__name__}: {e1}")
        for (k, (ll, i)), v in zip(todo.items(), vals, strict=True):
            if isinstance(v, str):
                self.stats["ops_failed"] += 1
                log.info("search: skipping candidates with %s: %s", type(ll.nodes[i].op).__name__, v)
            else:
                self.stats["ops_measured"] += 1
                v = float(v)
            self.memo[k] = v
            self.new[k] = v


def clear_memo() -> None:
    """Forget every in-process measurement (tests)."""
    _MEMO.clear()
