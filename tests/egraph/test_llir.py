"""LLIR: executors take it like Graph.nodes; fingerprint, JSON round trip and rendering are stable."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import luminal as lm
from luminal.backends.reference.backend import ReferenceBackend
from luminal.egraph.llir import LLIRGraph
from luminal.egraph.registry import OpRegistry
from luminal.errors import CompileError
from luminal.hlir import HLIR_OPS
from tests.egraph.test_equivalence import causal_attention


def _model():
    g = lm.Graph()
    causal_attention(g)
    return g.compile("reference", cache=False)


def _ops():
    return {n: s.cls for n, s in OpRegistry((*HLIR_OPS, *ReferenceBackend.ops)).specs.items()}


def test_json_round_trip_is_exact():
    llir = _model().plans[0]
    back = LLIRGraph.from_json(json.loads(json.dumps(llir.to_json())), _ops())
    assert back.canonical() == llir.canonical() and back.fingerprint() == llir.fingerprint()
    assert [repr(n.op) for n in back.nodes] == [repr(n.op) for n in llir.nodes]  # repr: NaN constants


def test_fingerprint_is_stable_across_processes():
    code = ("import luminal as lm; from tests.egraph.test_equivalence import causal_attention; g = lm.Graph(); "
            "causal_attention(g); print(g.compile('reference', cache=False).plans[0].fingerprint())")  # fmt: skip
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
            for _ in range(2)}  # fmt: skip
    assert outs == {_model().plans[0].fingerprint()}


def test_viz_writes_html_dot_and_json(tmp_path):
    m = _model()
    html = m.viz(tmp_path / "plan.html").read_text()
    assert "NumpyMatmul" in html and m.plans[0].fingerprint() in html
    dot = m.viz(tmp_path / "plan.dot").read_text()
    assert dot.startswith("digraph") and dot.count("->") == sum(len(n.inputs) for n in m.plans[0].nodes)
    assert json.loads(m.viz(tmp_path / "plan.json").read_text())["outputs"] == {"y": len(m.plans[0]) - 1}
    with pytest.raises(CompileError, match="cannot render"):
        m.viz(tmp_path / "plan.png")


def test_validate_rejects_a_bad_graph():
    llir = _model().plans[0]
    bad = LLIRGraph(list(reversed(llir.nodes)), llir.outputs)
    with pytest.raises(CompileError):
        bad.validate()


def test_executor_takes_llir_like_hlir():
    m = _model()
    rng = np.random.default_rng(0)
    feed = {"x": rng.standard_normal((3, 8)).astype(np.float32)}
    feed |= {n: rng.standard_normal((8, 8)).astype(np.float32) for n in ("wq", "wk", "wv")}
    out = ReferenceBackend().load(m.plans[0]).run(feed, {"s": 3})
    np.testing.assert_allclose(out["y"].reshape(3, 8), m.run(feed)["y"])
