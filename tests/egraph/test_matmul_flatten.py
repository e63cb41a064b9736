"""matmul_flatten (luminal/hlir/matmul_flatten.egg): N-D Mul -> SumReduce matmuls gain lower-rank
twins in their e-class (merged contiguous batch dims, squeezed size-1 dims), only where the merge
is linear in both operands; every extraction, flattened or not, computes the oracle's values."""

from __future__ import annotations

import random

import numpy as np
import pytest

import luminal as lm
from luminal.backends.reference.backend import ReferenceBackend
from luminal.egraph.compile import build_egraph
from luminal.egraph.rulesets import MATMUL_FLATTEN, main_cycle
from luminal.shape.expr import num, var
from tests.egraph.util import oracle, run_llir
from tests.helpers import assert_matches


class FlattenBackend(ReferenceBackend):
    phases = main_cycle([MATMUL_FLATTEN, "matmul_backend"])


def sum_shapes(g: lm.Graph) -> set[tuple]:
    """Output shapes of the SumReduce nodes in the e-class the output reads."""
    view = build_egraph(g, FlattenBackend())
    (cls,) = {view.nodes[m].children[0] for c in view.classes for m in view.choices[c] if view.nodes[m].op == "Output"}
    out = set()
    for m in view.choices[cls]:
        n = view.nodes[m]
        if n.op == "Op":
            kind = view.nodes[view.members[n.children[0]][0]]
            if kind.op == "SumReduce":
                out.add(view.value(kind.children[0]))
    return out


def _graph(a_shape, b_shape, a_t=False, b_t=False):
    g = lm.Graph()
    a, b = g.tensor("a", a_shape), g.tensor("b", b_shape)
    ((a.transpose(-1, -2) if a_t else a) @ (b.transpose(-1, -2) if b_t else b)).output("y")
    return g


s = var("s")


def test_batched_input_times_weight_becomes_2d():
    assert (s * 2, num(4)) in sum_shapes(_graph((2, "s", 8), (8, 4)))


def test_two_batch_axes_merge_to_one_strided_batch():
    assert (num(6), num(5), num(4)) in sum_shapes(_graph((2, 3, 5, 8), (2, 3, 8, 4)))


def test_attention_batch_axes_merge_with_symbolic_strides():
    assert (num(8), s, s) in sum_shapes(_graph((2, 4, "s", 16), (2, 4, "s", 16), b_t=True))


def test_size_one_batch_is_squeezed():
    assert (num(5), num(4)) in sum_shapes(_graph((1, 5, 8), (1, 8, 4)))
    assert (num(2), num(5), num(4)) in sum_shapes(_graph((1, 2, 5, 8), (1, 2, 8, 4)))


def test_three_batch_axes_reach_rank_four():
    shapes = sum_shapes(_graph((2, 3, 2, 5, 8), (2, 3, 2, 8, 4)))
    assert (num(12), num(5), num(4)) in shapes, shapes


def test_transposed_batches_do_not_merge():
    g = lm.Graph()
    a, b = g.tensor("a", (3, 2, 5, 8)), g.tensor("b", (2, 3, 8, 4))
    (a.transpose(0, 1) @ b).output("y")  # a's batch axes are swapped: (2, 3) is not linear in a
    shapes = sum_shapes(g)
    assert all(len(sh) == 4 for sh in shapes), shapes


def test_per_batch_weight_does_not_merge_into_m():
    # b varies along the batch axis, so (batch, m) cannot become one 2-D row axis
    assert all(len(sh) == 3 for sh in sum_shapes(_graph((2, 5, 8), (2, 8, 4))))


CASES = {
    "3d-x-2d": ((2, "s", 8), (8, 4), False, False),
    "4d": ((2, 3, "s", 8), (2, 3, 4, 8), False, True),
    "squeeze": ((1, 8, "s"), (1, 8, 4), True, False),
    "attention": ((2, 2, "s", 4), (2, 2, "s", 4), False, True),
    "5d": ((2, 1, 3, "s", 4), (2, 1, 3, 4, 2), False, False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_extraction_agrees(case):
    a_shape, b_shape, a_t, b_t = CASES[case]
    g = _graph(a_shape, b_shape, a_t, b_t)
    view = build_egraph(g, FlattenBackend())
    rng = np.random.default_rng(0)
    sv = 3
    dims = lambda sh: tuple(sv if d == "s" else d for d in sh)  # noqa: E731
    feed = {"a": rng.uniform(-2, 2, dims(a_shape)).astype(np.float32),
            "b": rng.uniform(-2, 2, dims(b_shape)).astype(np.float32)}  # fmt: skip
    want = oracle(g, feed, {"s": sv})["y"]
    r = random.Random(0)
    genomes = [view.grounded_genome()] + [view.random_genome(r) for _ in range(24)]
    for gen in genomes:
        llir = view.extract(view.repair(gen))
        got = run_llir(llir, feed, {"s": sv})["y"]
        assert_matches(got.reshape(want.shape), want, lm.f32, 1.0, f"{case}: {llir.op_counts()}")


# Every SumReduce shape the rules reach, per case, as recorded from the single-join rules before they
# were staged (FlatMM / FlatList / FL3..FL6 / FLSplit: same matches, a fraction of the cost); covers
# the merges and the squeezes at ranks 4, 5 and 6 (size-1 axes first, second, repeated).
REACHED = [
    (((1, 5, 8), (1, 8, 4), False, False), ["(1, 5, 4)", "(5, 4)"]),
    (((1, 2, 5, 8), (1, 2, 8, 4), False, False), ["(1, 2, 5, 4)", "(2, 5, 4)"]),
    (((2, 1, 5, 8), (2, 1, 8, 4), False, False), ["(2, 1, 5, 4)", "(2, 5, 4)"]),
    (((1, 1, 2, 5, 8), (1, 1, 2, 8, 4), False, False), ["(1, 1, 2, 5, 4)", "(1, 2, 5, 4)", "(2, 5, 4)"]),
    (((1, 2, 3, 5, 8), (1, 2, 3, 8, 4), False, False), ["(1, 2, 3, 5, 4)", "(2, 3, 5, 4)", "(6, 5, 4)"]),
    (((2, 3, 2, 5, 8), (2, 3, 2, 8, 4), False, False), ["(12, 5, 4)", "(2, 3, 2, 5, 4)", "(6, 2, 5, 4)"]),
    (((2, 1, 3, "s", 4), (2, 1, 3, 4, 2), False, False), ["(2, 1, 3, s, 2)", "(2, 3, s, 2)", "(6, s, 2)"]),
    (((2, 2, "s", 4), (2, 2, "s", 4), False, True), ["(2, 2, s, s)", "(4, s, s)"]),
    (((2, "s", 8), (8, 4), False, False), ["(2*s, 4)", "(2, s, 4)"]),
    (((2, 3, "s", 8), (8, 4), False, False), ["(2, 3*s, 4)", "(2, 3, s, 4)", "(6*s, 4)", "(6, s, 4)"]),
    (
        ((1, 2, 3, "s", 8), (8, 4), False, False),
        ["(1, 2, 3, s, 4)", "(2, 3*s, 4)", "(2, 3, s, 4)", "(6*s, 4)", "(6, s, 4)"],
    ),
    (((2, 5, 8), (2, 8, 4), False, False), ["(2, 5, 4)"]),
    (((2, 3, 4, 5, 8), (2, 3, 4, 8, 4), False, False), ["(2, 3, 4, 5, 4)", "(24, 5, 4)", "(6, 4, 5, 4)"]),
]


@pytest.mark.parametrize("case, shapes", REACHED, ids=[str(i) for i in range(len(REACHED))])
def test_staged_rules_reach_every_shape_the_single_join_rules_reached(case, shapes):
    assert sorted(map(str, sum_shapes(_graph(*case)))) == shapes
