"""Search-equivalence fuzz: every extraction of a block's e-graph computes what the raw HLIR does.

For each block, many choice sets are sampled with fixed seeds (the grounded plan, the backend's
preferred plan and random genomes, deduplicated by LLIR fingerprint); each one runs on the
reference backend and must equal the foundation interpreter run on the unrewritten HLIR nodes.
"""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.backends.reference.backend import ReferenceBackend
from luminal.egraph.search import sample_genomes
from tests.backends.reference.test_matmul import LAYOUTS
from tests.egraph.util import oracle, run_llir, view_of

D = 8


def _w(g, name, shape):
    return g.tensor(name, shape).persist()


def mlp(g):
    x = g.tensor("x", ("s", D))
    h = (x @ _w(g, "w1", (D, 16)) + _w(g, "b1", (16,))).gelu()
    (h @ _w(g, "w2", (16, 4)) + (x @ _w(g, "w3", (D, 4)))).output("y")


def softmax(g):
    g.tensor("x", ("s", 6)).softmax(-1).output("y")


def layer_norm(g):
    x = g.tensor("x", ("s", D))
    (x.layer_norm() * _w(g, "gamma", (D,)) + _w(g, "beta", (D,))).output("y")


def causal_attention(g):
    x = g.tensor("x", ("s", D))
    q, k, v = (x @ _w(g, n, (D, D)) for n in ("wq", "wk", "wv"))
    scores = (q @ k.T) * (1.0 / np.sqrt(D))
    s = x.shape[0]
    scores = lm.where(g.ones((s, s), lm.bool).tril(), scores, -1e9)
    (scores.softmax(-1) @ v).output("y")


def embedding(g):
    tok = g.tensor("tok", ("s",), lm.i32)
    e = _w(g, "emb", (11, D)).gather(tok, axis=0)
    (e @ _w(g, "proj", (D, 3))).output("y")


BLOCKS = {"mlp": mlp, "softmax": softmax, "layer_norm": layer_norm, "causal_attention": causal_attention,
          "embedding": embedding}  # fmt: skip
for _name, (_sa, _sb, _f) in LAYOUTS.items():
    BLOCKS[f"matmul-{_name}"] = (lambda sa, sb, f: lambda g: f(g.tensor("a", sa), g.tensor("b", sb)).output("y"))(
        _sa, _sb, _f
    )


def _feed(g: lm.Graph, s: int, rng) -> tuple[dict, dict]:
    env = {d: s for d in g.dims()}
    feed = {}
    for name, nid in g.inputs.items():
        shape = tuple(int(d.evaluate(env)) for d in g.input_shapes[name])
        dt = g.nodes[nid].dtype
        feed[name] = (
            rng.integers(0, 11, shape).astype(dt.np) if not dt.is_float else rng.standard_normal(shape).astype(dt.np)
        )
    return feed, env


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_every_sampled_extraction_matches_reference(name):
    g = lm.Graph()
    BLOCKS[name](g)
    view = view_of(g)
    plans = sample_genomes(view, 12, seed=1234)
    plans.append(view.extract(view.repair(view.preferred_genome({"NumpyMatmul"}))))
    rng = np.random.default_rng(99)
    backend = ReferenceBackend()
    for s in (1, 5):
        feed, env = _feed(g, s, rng)
        want = oracle(g, feed, env)
        for llir in plans:
            got = run_llir(llir, feed, env)
            assert backend.profile(llir, env) > 0
            for k in want:
                np.testing.assert_allclose(got[k], want[k], rtol=3e-5, atol=3e-6, err_msg=f"{name} {k} s={s}")
    n_mm = sum(1 for n in g.nodes if type(n.op).__name__ == "SumReduce")
    if "matmul" in name or name in ("mlp", "causal_attention", "embedding"):
        assert len(plans) >= 2 and n_mm >= 1  # the rewrite gave search a real choice


def test_sampling_is_reproducible():
    g = lm.Graph()
    causal_attention(g)
    view = view_of(g)
    a = [p.fingerprint() for p in sample_genomes(view, 8, seed=5)]
    b = [p.fingerprint() for p in sample_genomes(view_of(g), 8, seed=5)]
    assert a == b and len(set(a)) == len(a) > 2
