"""Extraction: runnable-op filtering with cascade, cycle repair, metadata decoding, validation."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.backends.reference.backend import ReferenceBackend
from luminal.egraph import program as prog
from luminal.egraph.extract import EGraphView
from luminal.egraph.program import GraphProgram
from luminal.egraph.registry import OpRegistry
from luminal.egraph.run import saturate
from luminal.errors import CompileError
from luminal.hlir import HLIR_OPS, Mul
from tests.egraph.util import oracle, run_llir


def _view(g: lm.Graph, extra: tuple[str, ...] = (), runnable=None) -> EGraphView:
    be = ReferenceBackend()
    reg = OpRegistry((*HLIR_OPS, *be.ops))
    gp = prog.serialize_graph(g, reg)
    gp = GraphProgram(gp.commands[:-1] + extra + gp.commands[-1:], gp.node_of, gp.n_nodes)
    res = saturate(prog.prelude(reg, be.rulesets, be.phases), gp, be.phases)
    return EGraphView(res.egraph_json, reg, runnable or {c.__name__ for c in (*HLIR_OPS, *be.ops)})


def _sqrt_graph():
    g = lm.Graph()
    g.tensor("x", (4,)).sqrt().output("y")
    return g


# x = x * 1.0 (true in f32): the Input's class gains a node that reads the class itself
CYCLE = ("(let $one (Op (Constant 1.0 (F32) 0) (INil)))",
         "(union $t0 (Op (Mul $e0 $e1 (ECons (MNum 0) (ENil))) (ICons $t0 (ICons $one (INil)))))")  # fmt: skip


def test_cycle_is_repaired_in_every_genome():
    g = _sqrt_graph()
    view = _view(g, CYCLE)
    assert view.n_choice_sets() >= 2
    x = np.array([1.0, 4.0, 9.0, 2.0], np.float32)
    for k in range(len(view.classes)):
        for j in range(len(view.choices[view.classes[k]])):
            genome = view.grounded_genome()
            genome[k] = j
            llir = view.extract(view.repair(genome))
            assert "Mul" not in llir.op_counts()  # the cyclic choice was switched back
            np.testing.assert_array_equal(run_llir(llir, {"x": x}, {})["y"], np.sqrt(x))


def test_unrunnable_ops_are_dropped_where_an_alternative_exists():
    g = lm.Graph()
    (g.tensor("a", (3, 5)) @ g.tensor("b", (5, 2))).output("y")
    runnable = {c.__name__ for c in HLIR_OPS if c is not Mul} | {"NumpyMatmul"}
    view = _view(g, runnable=runnable)
    assert view.n_choice_sets() == 1
    llir = view.extract(view.grounded_genome())
    assert llir.op_counts() == {"Input": 2, "NumpyMatmul": 1, "Output": 1}
    feed = {"a": np.ones((3, 5), np.float32), "b": np.ones((5, 2), np.float32)}
    np.testing.assert_array_equal(run_llir(llir, feed, {})["y"], oracle(g, feed, {})["y"])


def test_no_runnable_plan_is_a_compile_error():
    g = lm.Graph()
    (g.tensor("a", (3,)) * g.tensor("b", (3,))).output("y")
    runnable = {c.__name__ for c in HLIR_OPS if c is not Mul}
    with pytest.raises(CompileError, match="no runnable plan"):
        _view(g, runnable=runnable)


def test_metadata_decodes_back_to_the_graph_fields():
    g = lm.Graph()
    x = g.tensor("x", ("s", 6))
    (x.reshape(2, x.shape[0] * 3).sum(-1) + 1.5).output("y")
    view = _view(g)
    llir = view.extract(view.grounded_genome())
    hlir_ops = [n.op for n in g.nodes]
    for n in llir.nodes:
        assert n.op in hlir_ops, n.op  # same op objects' fields, decoded from egglog


def test_dtype_is_checked_against_egglog():
    g = lm.Graph()
    g.tensor("x", (3,), lm.f16).cast(lm.i32).output("y")
    view = _view(g)
    llir = view.extract(view.grounded_genome())
    assert [n.dtype for n in llir.nodes] == [lm.f16, lm.i32, lm.i32]
