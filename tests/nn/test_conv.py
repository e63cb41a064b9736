from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal import nn


def _conv_numpy(x, w, b, stride, pad):
    x = np.pad(x, ((0, 0), (pad, pad)))
    c_out, _, k = w.shape
    t_out = (x.shape[1] - k) // stride + 1
    out = np.zeros((t_out, c_out))
    for t in range(t_out):
        out[t] = np.einsum("ck,ock->o", x[:, t * stride : t * stride + k], w) + b
    return out


@pytest.mark.parametrize(("stride", "pad", "t"), [(1, 1, 10), (2, 1, 10), (2, 1, 9), (1, 0, 7)])
def test_conv1d_matches_numpy(stride, pad, t):
    g = lm.Graph()
    x = g.tensor("x", (5, t))
    nn.Conv1d(g, "c", 5, 4, 3, stride=stride, padding=pad)(x).output("y")
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((5, t)).astype(np.float32)
    w = rng.standard_normal((4, 5, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    y = g.compile("reference").run({"x": xv, "c.weight": w, "c.bias": b})["y"]
    np.testing.assert_allclose(y, _conv_numpy(xv, w, b, stride, pad), rtol=1e-5, atol=1e-5)


def test_conv1d_rejects_a_batched_input():
    """A (b, c, t) input used to come back as a wrong-shaped (t_out, c_out) result without complaint."""
    g = lm.Graph()
    conv = nn.Conv1d(g, "enc.conv1", 5, 4, 3, padding=1)
    with pytest.raises(lm.ShapeError, match=r"Conv1d 'enc.conv1': expects an unbatched \(c_in=5, T\).*\[2, 5, 10\]"):
        conv(g.tensor("x", (2, 5, 10)))
    with pytest.raises(lm.ShapeError, match=r"c_in=5.*\[10, 5\]"):  # time-major instead of channels first
        conv(g.tensor("t", (10, 5)))
    with pytest.raises(lm.ShapeError, match="below the kernel 3"):
        nn.Conv1d(g, "c2", 5, 4, 3)(g.tensor("short", (5, 2)))


@pytest.mark.parametrize(("arg", "value"), [("stride", 0), ("kernel", 0), ("padding", -1), ("c_in", 2.5)])
def test_conv1d_rejects_bad_hyperparameters(arg, value):
    kw = {"c_in": 5, "c_out": 4, "kernel": 3} | {arg: value}
    with pytest.raises(lm.ShapeError, match=f"Conv1d 'c': {arg}="):
        nn.Conv1d(lm.Graph(), "c", **kw)


@pytest.mark.parametrize("stride", [1, 2, 3])
def test_conv1d_symbolic_input_shorter_than_the_kernel_is_empty(stride):
    """T < kernel at run time: an empty (0, c_out) output. C's truncating (T - k) // stride + 1 gave
    a length of 1 (stride 2, T = 2: an index past the input) or a negative length (T = 1)."""
    g = lm.Graph()
    nn.Conv1d(g, "c", 2, 4, 3, stride=stride)(g.tensor("x", (2, "t"))).output("y")
    m = g.compile("reference")
    rng = np.random.default_rng(stride)
    w, b = rng.standard_normal((4, 2, 3)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    for t in (0, 1, 2, 3, 4, 7, 8):
        xv = rng.standard_normal((2, t)).astype(np.float32)
        y = m.run({"x": xv, "c.weight": w, "c.bias": b})["y"]
        want = _conv_numpy(xv, w, b, stride, 0) if t >= 3 else np.zeros((0, 4))
        assert y.shape == want.shape, (t, y.shape)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
