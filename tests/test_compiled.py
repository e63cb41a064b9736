"""CompiledModel's engine surface: bind (persistent inputs once), fetch (outputs read back on demand),
sample (token ids drawn where the logits lie), and their errors."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.sampling import Sampler, sample


def _model():
    g = lm.Graph()
    w = g.tensor("w", (4, 6)).persist()
    x = g.tensor("x", ("r", 4))
    (x @ w).output("logits")
    (x.sum(axis=1)).output("s")
    return g.compile("reference", cache=False)


def test_bind_once_then_run_without_the_weights():
    m = _model()
    w = np.arange(24, dtype=np.float32).reshape(4, 6) / 10
    m.bind({"w": w})
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(m.run({"x": x})["logits"], x @ w, rtol=1e-6)
    w2 = w * 2
    m.bind({"w": w2})  # binding again replaces it
    np.testing.assert_allclose(m.run({"x": x})["logits"], x @ w2, rtol=1e-6)


def test_fetch_returns_only_what_is_asked_and_sample_reads_the_rest():
    m = _model()
    m.bind({"w": np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)})
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    assert m.run({"x": x}, fetch=()) == {}
    full = m.run({"x": x})["logits"]
    assert list(m.run({"x": x}, fetch=["s"])) == ["s"]
    s = Sampler(0.8, top_k=3, seed=2)
    np.testing.assert_array_equal(m.sample("logits", s, 7), sample(full, s, 7))
    np.testing.assert_array_equal(m.sample("logits", Sampler(), 0), full.argmax(1))


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda m: m.bind({"x": np.ones((1, 4), np.float32)}), "not persistent"),
        (lambda m: m.bind({"nope": np.ones(1, np.float32)}), "unknown input"),
        (lambda m: m.bind({"w": np.ones((4, 6), np.float64)}), "float64"),
        (lambda m: m.bind({"w": np.ones((4, 5), np.float32)}), "shape"),
        (lambda m: m.run({"x": np.ones((1, 4), np.float32)}), "missing input 'w'"),
        (lambda m: m.sample("logits", Sampler(), 0), "call run"),
        (
            lambda m: m.run({"x": np.ones((1, 4), np.float32), "w": np.ones((4, 6), np.float32)}, fetch="logits"),
            r"fetch takes a list of output names, like fetch=\['logits'\]",
        ),
    ],
)
def test_engine_surface_errors_are_clear(call, match):
    with pytest.raises(lm.InputError, match=match):
        call(_model())


def test_fetch_and_sample_name_real_outputs():
    m = _model()
    m.bind({"w": np.ones((4, 6), np.float32)})
    with pytest.raises(lm.InputError, match="unknown outputs"):
        m.run({"x": np.ones((1, 4), np.float32)}, fetch=["nope"])
    m.run({"x": np.ones((1, 4), np.float32)}, fetch=())
    with pytest.raises(lm.InputError, match="rows, vocab"):
        m.sample("s", Sampler(), 0)
