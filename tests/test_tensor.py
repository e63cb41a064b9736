"""GraphTensor's Python protocol: `==`, `!=` and truth testing raise (they cannot be answered while
the graph is lazy, and identity would be a silent wrong answer); hashing stays identity."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm


def test_eq_ne_raise_and_point_to_methods():
    g = lm.Graph()
    x, y = g.tensor("x", (3,)), g.tensor("y", (3,))
    for other in (y, x, 0, 1.5, True, np.float32(2.0), np.zeros(3)):
        with pytest.raises(lm.DTypeError, match=r"a\.eq\(b\)"):
            _ = x == other
        with pytest.raises(lm.DTypeError, match=r"a\.ne\(b\)"):
            _ = x != other
    with pytest.raises(lm.DTypeError, match=r"a\.eq\(b\)"):
        _ = 0 == x  # reflected: int.__eq__ gives NotImplemented, then x.__eq__ runs


def test_eq_with_non_numbers_is_identity():
    """None, Ellipsis, strings: no elementwise meaning, so Python's identity answer (False) stands."""
    g = lm.Graph()
    x = g.tensor("x", (3,))
    assert (x == None) is False and (x != None) is True  # noqa: E711
    assert Ellipsis not in (x, 1) and (x == "x") is False


def test_truth_value_raises():
    g = lm.Graph()
    x = g.tensor("x", (3,))
    with pytest.raises(lm.DTypeError, match="where"):
        bool(x)
    with pytest.raises(lm.DTypeError):
        if x > 0:
            pass


def test_identity_hash_keeps_containers_working():
    g = lm.Graph()
    x, y = g.tensor("x", (3,)), g.tensor("y", (3,))
    z = x + 1
    d = {x: "x", y: "y", z: "z"}
    assert d[x] == "x" and d[y] == "y" and d[z] == "z"
    assert x in {x, y} and z not in {x, y}
    assert x in [x] and [y, x].index(y) == 0  # identity is checked before __eq__
    assert x is not None and x is x
