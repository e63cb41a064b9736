"""Backend protocol: what a runtime hands the e-graph compiler, and the registry of backends.

A backend is plain data plus three calls:
  name       "reference" | "cuda" | ...
  device     a string naming the concrete device (part of the compile-cache key)
  ops        LLIR op classes beyond HLIR (frozen dataclasses; rules in RULES / a same-stem .egg), in
             preference order: the search's first candidate takes the earliest wherever it can
  hlir_ops   HLIR op classes it runs as they are (reference: all; cuda: Input, Output, ...)
  rulesets   the names of its rulesets (declared before any rule; core never names them)
  phases     its schedule: named phases of luminal.egraph.rulesets terms
  load(llir)            -> an executor with `.run(feed, env) -> {output label: flat array}`
  profile(llir, env)    -> a cost (seconds or any monotone proxy); search keeps the lowest
Optional, for a search that scales (luminal/egraph/costs.py):
  measure(plans, env)   -> per one-op plan (Inputs -> op -> Output), its cost in profile's unit net
                           of the fixed cost of timing a plan but including one launch, or a str
                           saying why it cannot be built or run (the candidates holding it are
                           skipped); all plans of a call are prepared together (one NVRTC program).
                           A backend with `measure` has candidates priced as the sum of memoized op
                           costs and only the best few timed whole by `profile`.
  cost_cache            True: keep measured op costs in the on-disk compile cache (they cost
                           device time); the reference backend's analytic costs are not stored
The compiler (luminal/egraph/compile.py) does the rest; see docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from luminal.errors import BackendError

if TYPE_CHECKING:
    from luminal.egraph.llir import LLIRGraph
    from luminal.egraph.rulesets import Phase
    from luminal.hlir.op import Op


@runtime_checkable
class Executor(Protocol):
    def run(self, feed: Mapping[str, np.ndarray], env: Mapping[str, int]) -> dict[str, np.ndarray]: ...


@runtime_checkable
class Backend(Protocol):
    name: str
    ops: Sequence[type[Op]]
    hlir_ops: Sequence[type[Op]]
    rulesets: Sequence[str]
    phases: Sequence[Phase]

    @property
    def device(self) -> str: ...

    def load(self, llir: LLIRGraph) -> Executor: ...

    def profile(self, llir: LLIRGraph, env: Mapping[str, int]) -> float: ...


_FACTORIES: dict[str, Callable[[], Backend]] = {}


def register_backend(name: str, factory: Callable[[], Backend]) -> None:
    """Make `compile(backend=name)` build its backend with `factory()` (called once per compile)."""
    _FACTORIES[name] = factory


def get_backend(name: str) -> Backend:
    if name not in _FACTORIES:
        _load_builtin(name)
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise BackendError(
            f"unknown backend {name!r}: use one of {sorted({*_FACTORIES, 'reference', 'cuda'})}"
        ) from None
    be = factory()
    if not isinstance(be, Backend):
        raise BackendError(f"backend {name!r} does not implement luminal.backends.base.Backend")
    return be


def _load_builtin(name: str) -> None:
    if name == "reference":
        from luminal.backends.reference.backend import ReferenceBackend

        register_backend("reference", ReferenceBackend)
    elif name == "cuda":
        try:
            from luminal.backends.cuda.backend import CudaBackend  # type: ignore[import-not-found]
        except ImportError as e:
            raise BackendError(f"the cuda backend is not available: {e}") from None
        register_backend("cuda", CudaBackend)
