"""Search: a seeded genetic search over choice sets, ranked by the backend's `profile`.

There is no cost model in the compiler: a candidate is a genome (one e-node per searchable
e-class), extracted to LLIR, deduplicated by LLIR fingerprint and ranked by `backend.profile`.
The first generation holds the backend-preferred genome (its own ops wherever they exist), the
grounded genome (each class's first runnable term found bottom-up: the shallowest plan) and
random genomes; each later generation mutates the best
parents, re-choosing 1..`mutations` classes among those reachable from the parent's plan. The
budget is a count of distinct profiled candidates and a wall-clock limit; with a fixed `seed`
the result is reproducible whenever the count, not the clock, ends the search.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from luminal.egraph.extract import EGraphView, Genome
from luminal.egraph.llir import LLIRGraph
from luminal.errors import CompileError, LuminalError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SearchOptions:
    seed: int = 0
    budget: int = 8  # distinct candidates profiled at most
    time_limit_s: float = 10.0
    population: int = 4
    mutations: int = 3


@dataclass
class Candidate:
    genome: Genome
    llir: LLIRGraph
    cost: float
    fingerprint: str


@dataclass
class SearchResult:
    best: Candidate
    ranked: list[Candidate] = field(default_factory=list)
    n_choice_sets: int = 1
    n_profiled: int = 0
    n_duplicates: int = 0
    n_failed: int = 0
    seconds: float = 0.0


def search(
    view: EGraphView,
    profile: Callable[[LLIRGraph], float],
    prefer: Sequence[str],
    opts: SearchOptions = SearchOptions(),
) -> SearchResult:
    t0 = time.perf_counter()
    n_sets = view.n_choice_sets()
    seen: dict[str, Candidate] = {}
    stats = {"dup": 0, "fail": 0}
    errors: list[str] = []

    def consider(g: Genome) -> Candidate | None:
        """Extract, deduplicate and profile one genome; a failing candidate is counted, not fatal."""
        try:
            g = view.repair(g)
            llir = view.extract(g)
            fp = llir.fingerprint()
            if fp in seen:
                stats["dup"] += 1
                return None
            cand = Candidate(g, llir, float(profile(llir)) if n_sets > 1 else 0.0, fp)
        except LuminalError as e:
            stats["fail"] += 1
            errors.append(f"{type(e).__name__}: {e}")
            return None
        seen[fp] = cand
        return cand

    consider(view.preferred_genome(prefer))
    if n_sets > 1 or not seen:
        rng = random.Random(opts.seed)
        consider(view.grounded_genome())
        attempts = 0
        max_attempts = 8 * max(1, opts.budget)

        def out_of_budget() -> bool:
            if n_sets == 1:
                return True
            return (len(seen) >= min(opts.budget, n_sets) or attempts >= max_attempts
                    or time.perf_counter() - t0 > opts.time_limit_s)  # fmt: skip

        while len(seen) < min(opts.population, opts.budget) and not out_of_budget():
            attempts += 1
            consider(view.random_genome(rng))
        while not out_of_budget():
            ranked = sorted(seen.values(), key=lambda c: c.cost)
            parents = ranked[: max(1, opts.population // 2)]
            for parent in parents:
                if out_of_budget():
                    break
                attempts += 1
                consider(_mutate(view, parent.genome, rng, opts.mutations))
    if not seen:
        raise CompileError(f"search found no usable candidate ({stats['fail']} failed); first error: {errors[0]}")
    ranked = sorted(seen.values(), key=lambda c: c.cost)  # stable: ties keep discovery order
    res = SearchResult(ranked[0], ranked, n_sets, len(seen), stats["dup"], stats["fail"], time.perf_counter() - t0)
    log.debug("search: %d choice sets, %d profiled, %d duplicates, %d failed, best cost %.4g",
              n_sets, res.n_profiled, res.n_duplicates, res.n_failed, res.best.cost)  # fmt: skip
    return res


def _mutate(view: EGraphView, g: Genome, rng: random.Random, mutations: int) -> Genome:
    g = list(g)
    pool = [c for c in view.reachable(g) if len(view.choices[c]) > 1]
    if not pool:
        pool = [c for c in view.classes if len(view.choices[c]) > 1]
    for c in rng.sample(pool, min(len(pool), rng.randint(1, max(1, mutations)))):
        k = view.index[c]
        n = len(view.choices[c])
        g[k] = (g[k] + rng.randrange(1, n)) % n  # a different choice
    return g


def sample_genomes(view: EGraphView, n: int, seed: int) -> list[LLIRGraph]:
    """Up to `n` distinct extractable plans (random genomes, repaired): for equivalence testing."""
    rng = random.Random(seed)
    out: dict[str, LLIRGraph] = {}
    for g in (view.grounded_genome(), *(view.random_genome(rng) for _ in range(4 * n))):
        llir = view.extract(view.repair(g))
        out.setdefault(llir.fingerprint(), llir)
        if len(out) >= n:
            break
    return list(out.values())
