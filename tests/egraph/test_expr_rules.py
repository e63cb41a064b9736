"""The `expr` ruleset: the algebra it proves, and that it saturates (terminates) on hard inputs."""

from __future__ import annotations

import time

import egglog.bindings as eb
import pytest

from luminal.backends.reference.backend import ReferenceBackend
from luminal.egraph import program as prog
from luminal.egraph.registry import OpRegistry
from luminal.hlir import HLIR_OPS


@pytest.fixture(scope="module")
def prelude():
    be = ReferenceBackend()
    return prog.prelude(OpRegistry((*HLIR_OPS, *be.ops)), be.rulesets, be.phases)


def _egraph(prelude, lets: str):
    eg = eb.EGraph()
    eg.run_program(*eg.parse_program(prelude + lets))
    return eg


def _run(eg, text):
    return eg.run_program(*eg.parse_program(text))


X, Y, S = '(MVar "x")', '(MVar "y")', '(MVar "s")'
EQUAL = {
    "merge-dims": (f"(MAdd (MMul (MDiv (MIter) {X}) {X}) (MMod (MIter) {X}))", "(MIter)"),
    "merge-dims-commuted": (f"(MAdd (MMod (MIter) {X}) (MMul {X} (MDiv (MIter) {X})))", "(MIter)"),
    "fold-add": ("(MAdd (MNum 2) (MNum 3))", "(MNum 5)"),
    "fold-mul-assoc": (f"(MMul (MMul {S} (MNum 4)) (MNum 8))", f"(MMul (MNum 32) {S})"),
    "add-assoc-lit": (f"(MAdd (MAdd {S} (MNum 1)) (MNum 2))", f"(MAdd (MNum 3) {S})"),
    "div-truncates": ("(MDiv (MNum -7) (MNum 2))", "(MNum -3)"),
    "mod-truncates": ("(MMod (MNum -7) (MNum 2))", "(MNum -1)"),
    "ceildiv": ("(MCeilDiv (MNum 7) (MNum 2))", "(MNum 4)"),
    "div-div": (f"(MDiv (MDiv {S} (MNum 4)) (MNum 8))", f"(MDiv {S} (MNum 32))"),
    "mod-mod": (f"(MMod (MMod {S} (MNum 12)) (MNum 4))", f"(MMod {S} (MNum 4))"),
    "div-mul-cancel": (f"(MDiv (MMul (MNum 6) {S}) (MNum 6))", S),
    "identities": (f"(MAdd (MMul {S} (MNum 1)) (MNum 0))", S),
    "min-self": (f"(MMin {S} {S})", S),
    "lt": ("(MLt (MNum 2) (MNum 3))", "(MNum 1)"),
    "and": ("(MAnd (MNum 2) (MNum 0))", "(MNum 0)"),
}
NOT_EQUAL = {
    "no-div-by-zero-fold": ("(MDiv (MNum 1) (MNum 0))", "(MNum 0)"),
    "div-is-not-exact": (f"(MMul (MDiv {S} (MNum 4)) (MNum 4))", S),
    "mod-of-non-multiple": (f"(MMod (MMod {S} (MNum 6)) (MNum 4))", f"(MMod {S} (MNum 4))"),
    "no-overflow-fold": ("(MMul (MNum 4611686018427387904) (MNum 4))", "(MNum 0)"),
}


@pytest.mark.parametrize("name", sorted(EQUAL))
def test_expr_proves(prelude, name):
    lhs, rhs = EQUAL[name]
    eg = _egraph(prelude, f"(let $l {lhs})\n(let $r {rhs})\n")
    _run(eg, "(run-schedule (saturate (run expr)))")
    _run(eg, "(check (= $l $r))")


@pytest.mark.parametrize("name", sorted(NOT_EQUAL))
def test_expr_does_not_prove(prelude, name):
    lhs, rhs = NOT_EQUAL[name]
    eg = _egraph(prelude, f"(let $l {lhs})\n(let $r {rhs})\n")
    _run(eg, "(run-schedule (saturate (run expr)))")
    with pytest.raises(eb.EggSmolError):
        _run(eg, "(check (= $l $r))")


def test_expr_saturates_on_long_sums_and_products(prelude):
    """A 24-term sum and product would explode under general associativity; expr stays bounded."""
    terms = [f'(MMul (MVar "d{i}") (MIter))' for i in range(24)]
    total = terms[0]
    for t in terms[1:]:
        total = f"(MAdd {total} {t})"
    prod = '(MVar "d0")'
    for i in range(1, 24):
        prod = f'(MMul {prod} (MVar "d{i}"))'
    eg = _egraph(prelude, f"(let $a {total})\n(let $b {prod})\n")
    t0 = time.perf_counter()
    out = _run(eg, "(run-schedule (saturate (run expr)))")
    assert time.perf_counter() - t0 < 2.0
    rep = out[0].report
    assert not rep.updated or len(rep.iterations) < 50
