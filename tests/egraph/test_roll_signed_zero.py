"""Loop rolling must not take layers that differ only in the sign of a zero constant for repeats of
one body: its layer signatures come from the canonical op text, memoized by op, and Constant(-0.0) ==
Constant(0.0) under the dataclass's field equality made the first zero's text stand for both (four
layers rolled into one body: every layer computed 1 / +0.0, a silent wrong answer)."""

from __future__ import annotations

import numpy as np

import luminal as lm
from luminal.egraph import roll


def test_layers_differing_in_a_zero_sign_are_not_one_body():
    g = lm.Graph()
    x, w = g.tensor("x", (4,)), g.tensor("w", (4,))
    for c in (0.0, -0.0, 0.0, -0.0):  # 1 / (c * (x^2 + 1)) clipped: +1 for 0.0, -1 for -0.0
        x = (x * w + 0.5) * 0.5 + ((x * x + 1.0) * g.constant(c)).reciprocal().clip(-1.0, 1.0)
    x.output("y")
    bodies = roll.detect(g).summary()
    assert len(bodies) == 2 and all(b["layers"] == 2 for b in bodies)
    feed = {"x": np.array([0.0, -0.0, 1.0, 2.0], np.float32), "w": np.ones(4, np.float32)}
    rolled = g.compile("reference", cache=False).run(feed)["y"]
    unrolled = g.compile("reference", cache=False, roll=False).run(feed)["y"]
    want = feed["x"]
    for c in (0.0, -0.0, 0.0, -0.0):
        want = (want * 1 + np.float32(0.5)) * np.float32(0.5) + np.float32(np.copysign(1.0, c))
    np.testing.assert_array_equal(unrolled, want)
    np.testing.assert_array_equal(rolled, unrolled)
