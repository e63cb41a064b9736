"""CPU: the pieces of a warm compile made cheaper (docs/perf.md, warm7) give what the slow ones gave."""

from __future__ import annotations

import random

import pytest

from luminal.backends.cuda import kernel, rendered
from luminal.backends.cuda.kernels import emit
from luminal.egraph.llir import LLIRGraph, LNode
from luminal.errors import BackendError, CompileError
from tests.backends.cuda.graphs import build
from tests.backends.cuda.test_runtime_cpu import plan


def _close_per_char(code: str, i: int) -> int:
    """The per-character brace walk kernel._close replaced: the oracle."""
    depth, n = 0, len(code)
    while i < n:
        c = code[i]
        if code.startswith("//", i):
            i = code.find("\n", i)
            i = n if i < 0 else i
        elif code.startswith("/*", i):
            i = code.find("*/", i + 2)
            i = n if i < 0 else i + 1
        elif c in "\"'":
            i += 1
            while i < n and code[i] != c:
                i += 2 if code[i] == "\\" else 1
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise BackendError("no closing brace")


def _either(fn, code: str, i: int):
    try:
        return fn(code, i)
    except BackendError:
        return "raise"


def test_close_agrees_with_the_per_character_walk_on_random_text():
    rng = random.Random(0)
    alphabet = ["{", "}", "/", "*", '"', "'", "\\", "\n", "a", " ", "//", "/*", "*/"]
    for _ in range(20000):
        code = "{" + "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 24)))
        assert _either(kernel._close, code, 0) == _either(_close_per_char, code, 0), repr(code)


def test_close_skips_braces_in_comments_and_literals():
    code = '{ // }\n /* } */ char c = \'}\'; const char* s = "\\"}"; { } }tail'
    assert kernel._close(code, 0) == code.index("}tail") == _close_per_char(code, 0)
    with pytest.raises(BackendError):
        kernel._close("{ /* }", 0)


def test_with_pdl_of_real_kernels_is_unchanged():
    g, _ = build("reduce_f32")
    llir = plan(g)
    slots = rendered.plan_slots(llir.nodes)
    for n in llir.nodes:
        if isinstance(n.op, kernel.KernelOp):
            code = n.op.render(slots).code
            spans = kernel.entry_bodies(code)
            assert spans and all(close == _close_per_char(code, open_) for open_, close in spans)


def test_plan_slots_of_repeated_op_objects_equal_the_per_node_ones():
    """plan_slots visits each distinct op object once: a plan repeating its ops (as an unrolled one
    does) gets the slots of the plan whose nodes each hold their own copy."""
    g, _ = build("index_f32")
    llir = plan(g)
    nodes = list(llir.nodes)
    shared = nodes + [LNode(n.op, n.inputs, n.dtype) for n in nodes]  # the same op objects again
    copies = nodes + [LNode(type(n.op)(*n.op.fields()), n.inputs, n.dtype) for n in nodes]
    assert rendered.plan_slots(shared, ("x",)) == rendered.plan_slots(copies, ("x",))
    assert rendered.plan_slots(shared) == rendered.plan_slots(nodes)


def test_validate_checks_every_node_of_a_repeated_op():
    """LLIRGraph.validate counts each op object's inputs once: a later node holding the same op with
    the wrong number of inputs is still an error."""
    g, _ = build("reduce_f32")
    llir = plan(g)
    k = next(i for i, n in enumerate(llir.nodes) if isinstance(n.op, kernel.KernelOp))
    n = llir.nodes[k]
    ok = LLIRGraph([*llir.nodes, LNode(n.op, n.inputs, n.dtype)], dict(llir.outputs))
    ok.validate()
    bad = LLIRGraph([*llir.nodes, LNode(n.op, (*n.inputs, 0), n.dtype)], dict(llir.outputs))
    with pytest.raises(CompileError, match="inputs, needs"):
        bad.validate()


def _invariant_full_set(em, pos):
    """The check `Emitter.invariant` replaced (every value of the loop, then one distinct position): the oracle."""
    coords = pos if isinstance(pos, tuple) else (pos,)
    for v in sorted(set().union(*(c.vars() for c in coords))):
        n = em.extent.get(v)
        if n is None or n > emit.INVARIANCE_MAX:
            continue
        at = {tuple(c.substitute(v, k) for c in coords) for k in range(n)}
        if len(at) == 1:
            (coords,) = at
    return coords if isinstance(pos, tuple) else coords[0]


def test_invariant_stops_at_the_first_differing_value_with_the_same_answers():
    """Emitter.invariant ends a loop's check at the first value where a coordinate differs (most coordinates
    do at 1: cold-compile rendering spent most of its time substituting all 256 values); fuzzed against
    the full-set check on positions like the rotate-half views it is for, with loops of 0..300 trips."""
    from luminal.shape.expr import var

    em = emit.Emitter((), 256, True)
    rng = random.Random(0)
    y, t, k = var("y"), var("t"), var("k")
    terms = [y, t, k, t + 128, k * 2, y * 256]
    for _ in range(400):
        em.extent = {"t": rng.choice([0, 1, 2, 64, 256, 300]), "k": rng.choice([1, 4, 8]), "y": rng.choice([3, 2048])}
        coords = []
        for _ in range(rng.choice([1, 2, 3])):
            e = rng.choice(terms) * rng.choice([1, 2, 256]) + rng.choice(terms)
            e = e % rng.choice([256, 128, 7]) if rng.random() < 0.5 else e
            e = e // rng.choice([256, 2, 1]) if rng.random() < 0.5 else e
            coords.append(e)
        pos = tuple(coords) if len(coords) > 1 else coords[0]
        assert em.invariant(pos) == _invariant_full_set(em, pos), pos
