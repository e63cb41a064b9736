"""Op.dim_names is memoized per op object (luminal/hlir/op.py `_memo_dim_names`): computed once, never
shared between objects or between a subclass's override and the method it extends, invisible to equality,
hashing and `dataclasses.replace`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from luminal.hlir.elementwise import Add, Binary
from luminal.shape.expr import num, var


def _add(*dims):
    shape = tuple(var(d) for d in dims) + (num(4),)
    return Add(shape, shape, shape)


def test_dim_names_are_computed_once_per_op_object():
    calls = []

    @dataclass(frozen=True)
    class Counted(Binary):
        def dim_names(self):
            calls.append(self)
            return frozenset({"q"})

    op = Counted((num(2),), (num(1),), (num(1),))
    assert op.dim_names() == op.dim_names() == frozenset({"q"})
    assert len(calls) == 1  # twice without the memo
    other = Counted((num(2),), (num(1),), (num(1),))  # equal, another object: its own answer
    assert other == op and other.dim_names() == frozenset({"q"}) and len(calls) == 2


def test_an_override_calling_super_gets_the_base_answer():
    @dataclass(frozen=True)
    class Extra(Binary):
        def dim_names(self):
            return super().dim_names() | {"extra"}

    shape = (var("s"), num(4))
    op = Extra(shape, shape, shape)
    assert op.dim_names() == frozenset({"s", "extra"})
    assert Binary.dim_names(op) == frozenset({"s"})  # not the override's memoized answer
    assert op.dim_names() == frozenset({"s", "extra"})


def test_memo_is_invisible_to_equality_hashing_and_replace():
    a, b = _add("s"), _add("s")
    a.dim_names()
    assert a == b and hash(a) == hash(b)
    c = dataclasses.replace(a, shape=(var("p"), num(4)))
    assert c.dim_names() == frozenset({"p", "s"}) and a.dim_names() == frozenset({"s"})
    assert "_dim_names_memo" not in dataclasses.asdict(a)
