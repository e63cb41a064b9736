from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal import nn
from luminal.nn.rope import RopeConfig, inv_freq, rope_config
from luminal.shape.expr import dim


def test_llama3_inv_freq_matches_transformers():
    # transformers 5.24 ROPE_INIT_FUNCTIONS["llama3"] for Llama 3.2 1B (head_dim 64), indices 0, 10, 16, 20, 24, 31
    rc = RopeConfig(500000.0, "llama3", 32.0, 1.0, 4.0, 8192)
    f = inv_freq(rc, 64)
    want = [1.0, 0.016560440883040428, 0.000429556705057621, 8.570255886297673e-06, 1.6619674170215148e-06,
            9.418306490260875e-08]  # fmt: skip
    np.testing.assert_allclose(f[[0, 10, 16, 20, 24, 31]], want, rtol=1e-6)


def test_rope_config_forms():
    assert rope_config({"rope_theta": 1e6}) == RopeConfig(1e6)
    assert (
        rope_config({"rope_theta": None, "rope_parameters": {"rope_theta": 5e5, "rope_type": "default"}}).theta == 5e5
    )
    per_layer = {"rope_parameters": {"full_attention": {"rope_theta": 1e6, "rope_type": "linear", "factor": 8.0},
                                     "sliding_attention": {"rope_theta": 1e4, "rope_type": "default"}}}  # fmt: skip
    assert rope_config(per_layer, "full_attention") == RopeConfig(1e6, "linear", 8.0)
    assert rope_config(per_layer, "sliding_attention").theta == 1e4
    assert rope_config({}) == RopeConfig(10000.0)
    with pytest.raises(lm.LuminalError, match="yarn"):
        rope_config({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}})


def test_rope_rotates_half_pairs_at_absolute_positions():
    g = lm.Graph()
    s, p = dim("s"), dim("p")
    x = g.tensor("x", ("s", 2, 8))
    nn.RoPE(g, "rope", 8, p, s)(x).output("y")
    m = g.compile("reference")
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((3, 2, 8)).astype(np.float32)
    f = inv_freq(RopeConfig(10000.0), 8)
    y = m.run({"x": xv, "rope.inv_freq": f}, dims={"p": 5})["y"]
    ang = np.arange(5, 8)[:, None, None] * f  # (s, 1, 4)
    a, b = xv[..., :4], xv[..., 4:]
    ref = np.concatenate([a * np.cos(ang) - b * np.sin(ang), b * np.cos(ang) + a * np.sin(ang)], -1)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dt", [lm.bf16, lm.f16])
def test_rope_of_16bit_input_rotates_in_f32_and_rounds_once(dt):
    g = lm.Graph()
    x = g.tensor("x", ("s", 2, 8), dt)
    nn.RoPE(g, "rope", 8, dim("p"), dim("s"))(x).output("y")
    rng = np.random.default_rng(1)
    xv = rng.standard_normal((3, 2, 8)).astype(dt.np)
    f = inv_freq(RopeConfig(10000.0), 8)
    y = g.compile("reference").run({"x": xv, "rope.inv_freq": f}, dims={"p": 300})["y"]
    ang = (np.arange(300, 303)[:, None, None] * f.astype(np.float64)).astype(np.float32)  # f32 angles, like HF
    a, b = xv[..., :4].astype(np.float64), xv[..., 4:].astype(np.float64)
    c, s = np.cos(ang.astype(np.float64)), np.sin(ang.astype(np.float64))
    ref = np.concatenate([a * c - b * s, b * c + a * s], -1)
    assert y.dtype == dt.np
    u = 2.0**-8 if dt == lm.bf16 else 2.0**-11  # unit roundoff: 8 / 11 significant bits
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=u + 1e-5, atol=1e-5)  # one rounding
