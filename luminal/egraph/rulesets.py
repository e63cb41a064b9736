"""Rulesets and schedules as data: what a backend hands the compiler to drive saturation.

The core owns four rulesets (`expr`, `interval`, `dtype_prop`, `cleanup`); a backend declares the
rest by name and supplies its schedule, a list of named phases. Each phase becomes one egglog
`(run-schedule ...)` so it is timed and reported on its own. The core never names a backend
ruleset: `main_cycle` takes the backend's names as arguments.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from luminal.errors import CompileError

EXPR = "expr"  # symbolic-dim algebra (expr.egg)
INTERVAL = "interval"  # bound propagation from dim buckets (interval.egg)
DTYPE_PROP = "dtype_prop"  # dtype of new IR nodes (the ops' .egg files)
CLEANUP = "cleanup"  # drop helper facts before serialization (cleanup.egg)
# N-D matmul = lower-rank matmul (luminal/hlir/matmul_flatten.egg); declared by the core, scheduled
# by backends whose library rules want 2-D / strided-batch patterns (the CUDA backend)
MATMUL_FLATTEN = "matmul_flatten"
CORE_RULESETS = (EXPR, INTERVAL, DTYPE_PROP, CLEANUP, MATMUL_FLATTEN)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*\Z")


# -- schedule terms (mirror egglog's schedule language) ----------------------------------------------
@dataclass(frozen=True)
class Run:
    """One application of every rule in `ruleset`."""

    ruleset: str

    def text(self) -> str:
        return f"(run {self.ruleset})"

    def rulesets(self) -> set[str]:
        return {self.ruleset}


@dataclass(frozen=True)
class Seq:
    steps: tuple[Schedule, ...]

    def text(self) -> str:
        return "(seq " + " ".join(s.text() for s in self.steps) + ")"

    def rulesets(self) -> set[str]:
        return set().union(*(s.rulesets() for s in self.steps))


@dataclass(frozen=True)
class Saturate:
    """Repeat `body` until it changes nothing."""

    body: Schedule

    def text(self) -> str:
        return f"(saturate {self.body.text()})"

    def rulesets(self) -> set[str]:
        return self.body.rulesets()


@dataclass(frozen=True)
class Repeat:
    """Repeat `body` `times` times (a bound for rule families that grow without end)."""

    times: int
    body: Schedule

    def text(self) -> str:
        return f"(repeat {self.times} {self.body.text()})"

    def rulesets(self) -> set[str]:
        return self.body.rulesets()


Schedule = Run | Seq | Saturate | Repeat


def seq(*steps: Schedule | str) -> Seq:
    return Seq(tuple(Run(s) if isinstance(s, str) else s for s in steps))


def saturate(*steps: Schedule | str) -> Saturate:
    return Saturate(steps[0] if len(steps) == 1 and not isinstance(steps[0], str) else seq(*steps))


@dataclass(frozen=True)
class Phase:
    """A named, separately timed `(run-schedule ...)`. `needs_bounds`: its rules make a choice that
    a bucket's bound facts can reverse (a test that an upper bound is *above* a limit, which holds
    before the facts tighten it), so buckets sharing a saturation (run.saturate_buckets) must not
    share it: it runs only after each bucket's facts are in."""

    name: str
    schedule: Schedule
    needs_bounds: bool = False

    def text(self) -> str:
        return f"(run-schedule {self.schedule.text()})"


def analysis() -> Saturate:
    """The core analyses every cycle re-establishes: expression algebra, bounds, dtypes."""
    return saturate(EXPR, INTERVAL, DTYPE_PROP)


def main_cycle(lowering: Sequence[str], growth: Sequence[str] = ()) -> tuple[Phase, ...]:
    """The producer cycle of the Rust original, over a backend's own ruleset names.

    main: saturate( saturate(analysis; each lowering ruleset once); saturate(analysis; growth) )
    then cleanup. With no growth rulesets the second half is omitted.
    """
    first = saturate(analysis(), *lowering)
    body = first if not growth else saturate(first, saturate(analysis(), *growth))
    return (Phase("main", body), Phase("cleanup", saturate(CLEANUP)))


def with_buffer_reuse(phases: Sequence[Phase], ruleset: str) -> tuple[Phase, ...]:
    """`phases` with a phase running the backend's `ruleset` of in-place rewrites (state updated in
    its own buffer) to saturation just before the final cleanup, which drops the facts it reads. It
    needs the bucket's bounds: its launch shape (one block or the whole grid) is chosen by an upper
    bound on the index count, exactly one shape per bucket (inplace.egg)."""
    *body, last = phases
    return (*body, Phase(ruleset, saturate(ruleset), needs_bounds=True), last)


# -- validation --------------------------------------------------------------------------------------
_RULESET_REF = re.compile(r":ruleset\s+([^\s()]+)")


def rulesets_used(text: str) -> set[str]:
    """Every ruleset named by a `:ruleset` keyword in rule text (comments ignored)."""
    body = "\n".join(line.split(";", 1)[0] for line in text.splitlines())
    return set(_RULESET_REF.findall(body))


def check_rulesets(declared: Iterable[str], sources: Iterable[tuple[str, str]], phases: Sequence[Phase]) -> None:
    """Raise CompileError if a rule or the schedule names a ruleset nobody declared."""
    known = set(declared)
    for name in known:
        if not _NAME.match(name):
            raise CompileError(f"bad ruleset name {name!r}")
    for origin, text in sources:
        bad = rulesets_used(text) - known
        if bad:
            raise CompileError(
                f"{origin} uses undeclared ruleset(s) {sorted(bad)}; declared: {sorted(known)} "
                f"(add them to the backend's `rulesets`)"
            )
    for ph in phases:
        bad = ph.schedule.rulesets() - known
        if bad:
            raise CompileError(f"schedule phase {ph.name!r} runs undeclared ruleset(s) {sorted(bad)}")
