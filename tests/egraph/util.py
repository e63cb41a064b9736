"""Helpers of the e-graph tests: the raw-HLIR oracle and e-graph inspection."""

from __future__ import annotations

import numpy as np

import luminal as lm
from luminal.backends.reference import ReferenceExecutor
from luminal.backends.reference.backend import ReferenceBackend
from luminal.egraph.compile import build_egraph
from luminal.egraph.extract import EGraphView


def oracle(g: lm.Graph, feed: dict, env: dict) -> dict[str, np.ndarray]:
    """The foundation reference interpreter run on the raw HLIR nodes (no egglog)."""
    return ReferenceExecutor(g.nodes, g.outputs).run(feed, env)


def view_of(g: lm.Graph, bounds: dict | None = None) -> EGraphView:
    return build_egraph(g, ReferenceBackend(), bounds)


def ops_in(view: EGraphView) -> set[str]:
    """Every op name present in the runnable e-graph."""
    return {view.nodes[m].op for c in view.classes for m in view.choices[c]}


def run_llir(llir, feed: dict, env: dict) -> dict[str, np.ndarray]:
    return ReferenceBackend().load(llir).run(feed, env)
