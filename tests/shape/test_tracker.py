"""ShapeTracker against numpy views: random chains of permute / expand / broadcast / merge / split /
repeat / remove on symbolic dims must address the same elements as the same chain on a numpy array
of physical indices (np.arange of the buffer), through both `physical_indices` and the flat
`index_expression`; linear-stride views also agree with np.lib.stride_tricks.as_strided."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from luminal.errors import ShapeError
from luminal.shape.expr import num, var, z
from luminal.shape.tracker import ShapeTracker

SYMS = ("s", "t")


@st.composite
def chains(draw):
    env = {s: draw(st.integers(1, 4)) for s in SYMS}
    pool = [var("s"), var("t") * 2, num(3), num(1), var("s") * var("t"), num(2)]
    rank = draw(st.integers(1, 3))
    dims = tuple(draw(st.sampled_from(pool)) for _ in range(rank))
    steps = draw(st.lists(st.tuples(st.sampled_from(("permute", "expand", "bcast", "merge", "split", "repeat",
                                                       "remove")), st.integers(0, 99)), max_size=6))  # fmt: skip
    return env, dims, steps


def _apply(tr: ShapeTracker, arr: np.ndarray, step, env):
    op, r = step
    n = tr.ndim
    if op == "permute" and n:
        axes = list(range(n))
        np.random.default_rng(r).shuffle(axes)
        return tr.permute(tuple(axes)), arr.transpose(axes)
    if op == "expand" and n < 6:
        axis, size = r % (n + 1), 1 + r % 3
        return tr.expand_dim(axis, size), np.broadcast_to(
            np.expand_dims(arr, axis), arr.shape[:axis] + (size,) + arr.shape[axis:]
        )
    if op == "bcast":
        ones = [k for k in range(n) if tr.dims[k] == 1]
        if ones:
            k, size = ones[r % len(ones)], 2 + r % 2
            return tr.broadcast_axis(k, size), np.broadcast_to(arr, arr.shape[:k] + (size,) + arr.shape[k + 1 :])
    if op == "merge" and n >= 2:
        k = r % (n - 1)
        return tr.merge_dims(k), arr.reshape(arr.shape[:k] + (arr.shape[k] * arr.shape[k + 1],) + arr.shape[k + 2 :])
    if op == "split" and n:
        k = r % n
        for inner in (2, 3):
            d = tr.dims[k]
            if (d // inner) * inner is d:  # symbolically divisible
                out = tr.split_dim(k, inner)
                if out is not None:
                    return out, arr.reshape(arr.shape[:k] + (arr.shape[k] // inner, inner) + arr.shape[k + 1 :])
    if op == "repeat" and n:
        k, times = r % n, 1 + r % 3
        return tr.repeat_axis(k, times), np.concatenate([arr] * times, axis=k)
    if op == "remove":
        ones = [k for k in range(n) if tr.dims[k] == 1]
        if ones:
            k = ones[r % len(ones)]
            return tr.remove_dim(k), arr.squeeze(k)
    return tr, arr


@given(chains())
def test_view_chains_match_numpy(chain):
    env, dims, steps = chain
    tr = ShapeTracker.new(dims)
    shape = tuple(int(d.evaluate(env)) for d in dims)
    arr = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    assert tr.is_contiguous()
    for step in steps:
        tr, arr = _apply(tr, arr, step, env)
        assert tuple(int(d.evaluate(env)) for d in tr.dims) == arr.shape, (step, tr)
        np.testing.assert_array_equal(tr.physical_indices(env), arr, err_msg=f"after {step}: {tr}")
        n = arr.size
        flat = np.broadcast_to(np.asarray(tr.index_expression().evaluate({**env, "z": np.arange(n)})), (n,))
        np.testing.assert_array_equal(flat, arr.reshape(-1), err_msg=f"index_expression of {tr}")
        if tr.is_contiguous():
            np.testing.assert_array_equal(arr.reshape(-1), np.arange(n), err_msg=f"{tr} claims contiguity")
        _check_as_strided(tr, arr, env)


def _check_as_strided(tr: ShapeTracker, arr: np.ndarray, env) -> None:
    """A view whose strides are all c*z is numpy's strided view with element strides c."""
    coeffs = []
    for st_, n in zip(tr.strides, arr.shape, strict=True):
        c1 = int(st_.substitute("z", num(1)).evaluate(env))
        lin = all(int(st_.evaluate({**env, "z": k})) == k * c1 for k in range(n))
        if not lin:
            return
        coeffs.append(c1)
    base = np.arange(max(1, int(arr.max()) + 1 if arr.size else 1), dtype=np.int64)
    view = np.lib.stride_tricks.as_strided(base, arr.shape, tuple(c * base.itemsize for c in coeffs))
    np.testing.assert_array_equal(view, arr, err_msg=f"as_strided of {tr}")


def test_contiguous_strides_and_queries():
    s = var("s")
    tr = ShapeTracker.new((s, 4, 3))
    assert tr.strides == (z * 12, z * 3, z) and tr.is_contiguous()
    assert tr.n_elements() is s * 12
    p = tr.permute((1, 0, 2))
    assert not p.is_contiguous() and p.permute((1, 0, 2)) == tr
    e = tr.expand_dim(0, 5)
    assert e.is_broadcast(0) and not e.is_contiguous() and e.dims[0] == 5
    m = tr.merge_dims(1)
    assert m.dims == (s, num(12)) and m.strides == (z * 12, z) and m.is_contiguous()


def test_merge_of_non_contiguous_pair():
    tr = ShapeTracker.new((2, 3)).permute((1, 0)).merge_dims(0)  # (6,) reading the transpose
    np.testing.assert_array_equal(tr.physical_indices({}), np.arange(6).reshape(2, 3).T.reshape(-1))


def test_split_refuses_non_linear_strides():
    tr = ShapeTracker.new((2, 3)).permute((1, 0)).merge_dims(0)
    assert tr.split_dim(0, 2) is None  # stride is (z // 2) + 3 * (z % 2): not c*z


def test_bad_shapes():
    with pytest.raises(ShapeError, match="negative dimension"):
        ShapeTracker.new((3, -1))
    with pytest.raises(ShapeError, match="maximum"):
        ShapeTracker.new((1,) * 11)
