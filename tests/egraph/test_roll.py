"""Loop rolling (luminal/egraph/roll.py): repeated layers are saturated and searched once per kind,
unrolled into a plan that computes what the unrolled compile computes."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.backends.reference.backend import ReferenceBackend
from luminal.backends.reference.inplace import InplaceScatter
from luminal.egraph import roll
from luminal.egraph.compile import CompileOptions, build_rolled, compile_plans
from luminal.egraph.search import sample_genomes
from luminal.hlir import Input, Output, Scatter
from luminal.shape.expr import dim, ge, lt, z
from tests.egraph.util import oracle, run_llir

D, F, CAP = 8, 16, 6


def decoder(layers: int, windows: tuple[int | None, ...] = (None,)) -> lm.Graph:
    """A small decoder stack: embedding, per layer a cached state updated in place (scatter of the new
    rows at p .. p+s-1, output under the input's name), a masked mixing over the state (layer i uses
    window `windows[i % len(windows)]`: alternating kinds, like Gemma's sliding / global layers),
    RMSNorm, a gated MLP and residual adds; final norm and head."""
    g = lm.Graph()
    s, p = dim("s"), dim("p")
    tokens = g.tensor("tokens", ("s",), lm.i32)
    x = g.tensor("emb", (11, D)).persist().gather(tokens, axis=0)  # (s, D)
    for i in range(layers):
        w1, w3 = g.tensor(f"l{i}.w1", (D, F)).persist(), g.tensor(f"l{i}.w3", (D, F)).persist()
        w2, wn = g.tensor(f"l{i}.w2", (F, D)).persist(), g.tensor(f"l{i}.norm", (D,)).persist()
        cache = g.tensor(f"cache.{i}", (CAP, D)).persist()
        rows = g.iota(p + z, (s,))
        state = cache.scatter(rows, x, axis=0).output(f"cache.{i}")[: p + s]  # (p+s, D)
        keys = state.shape[0]
        keep = ge(p + z // keys, z % keys)
        win = windows[i % len(windows)]
        if win is not None:
            keep = keep * lt(p + z // keys - win, z % keys)
        mask = g.iota(keep, (s, keys)).cast(lm.bool)
        scores = lm.where(mask, x @ state.transpose(0, 1), -1e9).softmax(-1)  # (s, p+s)
        h = x + scores @ state
        hn = h.rms_norm() * wn
        x = h + ((hn @ w1).silu() * (hn @ w3)) @ w2
    (x.rms_norm() @ g.tensor("head", (D, 11)).persist()).output("logits")
    return g


def feed_for(g: lm.Graph, seed: int = 0, s: int = 3) -> dict:
    rng = np.random.default_rng(seed)
    feed = {"tokens": np.array([1, 7, 3, 5][:s], np.int32)}
    for name in g.inputs:
        if name != "tokens":
            shape = tuple(int(d.evaluate({})) for d in g.input_shapes[name])
            feed[name] = rng.standard_normal(shape).astype(np.float32) * 0.5
    return feed


def _compile(g, **kw):
    return compile_plans(g, ReferenceBackend(), CompileOptions(cache=False, search_budget=4, **kw))


@pytest.mark.parametrize("layers", [2, 3, 16])
def test_rolled_plan_equals_unrolled(layers):
    g = decoder(layers)
    ex, (llir,), st = _compile(g)
    assert st["rolled"]["bodies"] == [{"body": "body0", "layers": layers, "nodes": st["rolled"]["bodies"][0]["nodes"]}]
    assert st["rolled"]["saturations"]["body0"] == 1  # saturated once, whatever the depth
    feed, env = feed_for(g), {"p": 2, "s": 3}
    want = oracle(g, feed, env)
    if layers <= 3:  # the unrolled compile (slower: its e-graph grows with depth)
        unrolled, _, ust = _compile(g, roll=False)
        assert "rolled" not in ust
        want_c = unrolled.run(feed, env)
        for k in want:
            np.testing.assert_array_equal(want_c[k], ex.run(feed, env)[k])
    got = ex.run(feed, env)
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5, err_msg=k)


def test_every_sampled_extraction_of_every_region_agrees():
    g = decoder(3)
    rolling, views = build_rolled(g, ReferenceBackend())
    assert rolling is not None and set(views) == {"outer", "body0"}
    samples = {name: sample_genomes(v, 6, seed=1) for name, v in views.items()}
    assert len(samples["body0"]) > 1
    feed, env = feed_for(g, seed=2), {"p": 1, "s": 3}
    want = oracle(g, feed, env)
    for k in range(max(len(v) for v in samples.values())):
        llir = rolling.unroll({name: plans[k % len(plans)] for name, plans in samples.items()})
        got = run_llir(llir, feed, env)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5, err_msg=f"sample {k}: {name}")


def test_alternating_layer_kinds_roll_into_two_bodies():
    g = decoder(6, windows=(2, None))  # sliding, global, sliding, ...
    ex, _, st = _compile(g)
    bodies = {b["body"]: b["layers"] for b in st["rolled"]["bodies"]}
    assert sorted(bodies.values()) == [3, 3] and len(bodies) == 2
    assert all(st["rolled"]["saturations"][b] == 1 for b in bodies)
    feed, env = feed_for(g), {"p": 3, "s": 2}
    feed["tokens"] = feed["tokens"][:2]
    want, got = oracle(g, feed, env), ex.run(feed, env)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5, err_msg=k)


def test_no_repetition_is_unchanged():
    g = lm.Graph()
    x, w = g.tensor("x", ("s", 4)), g.tensor("w", (4, 5))
    ((x @ w).relu().sum(axis=1) + x.max(axis=1)).exp().output("y")
    assert roll.detect(g) is None
    _, (a,), st = _compile(g)
    _, (b,), _ = _compile(g, roll=False)
    assert "rolled" not in st and a.fingerprint() == b.fingerprint()


def test_state_updates_stay_in_place_candidates_per_layer():
    """The body keeps each layer's cache as a persistent input whose updated value is the output of
    the same name (the facts an in-place update rule needs), and the unrolled plan scatters into every
    layer's own cache (a copy or, as the search now prefers, in place)."""
    g = decoder(4)
    rolling = roll.detect(g)
    (body,) = [bg for name, bg in rolling.regions() if name == "body0"]
    assert "cache.0" in body.persistent and "cache.0" in body.outputs
    assert not any(label.startswith("@roll") for label in body.persistent)  # placeholders are never state
    _, (llir,), _ = _compile(g)
    for i in range(4):
        out = llir.nodes[llir.outputs[f"cache.{i}"]]
        src = llir.nodes[out.inputs[0]]
        assert isinstance(src.op, (Scatter, InplaceScatter))
        assert llir.nodes[src.inputs[0]].op == Input(f"cache.{i}", lm.f32)
    assert not any(isinstance(n.op, (Input, Output)) and n.op.label.startswith("@roll") for n in llir.nodes)


def test_shared_pure_nodes_are_computed_once():
    g = decoder(5)
    _, (llir,), _ = _compile(g)
    pure = [n for n in llir.nodes if not n.inputs and not isinstance(n.op, Input)]
    keys = [(str(n.op), n.dtype) for n in pure]
    assert len(keys) == len(set(keys))  # one mask / position table per distinct definition


def test_windows_cover_whole_layers():
    g = decoder(4)
    rolling = roll.detect(g)
    (run,) = rolling.runs
    assert len(run.windows) == 4
    for k, w in enumerate(run.windows):
        labels = {g.nodes[i].op.label for i in w if isinstance(g.nodes[i].op, Input)}
        assert labels == {f"l{k}.w1", f"l{k}.w3", f"l{k}.w2", f"l{k}.norm", f"cache.{k}"}
    # the rotation carries only the residual stream: one value from each window to the next
    (kind,) = run.kinds
    assert len({r for _, refs in kind.form for r in refs if r[0] == "p"}) == 1


def _accum_classes(view) -> int:
    """IR classes with a cuBLASLt A @ B + C alternative (the residual epilogue)."""
    n = 0
    for c in view.classes:
        kinds = [view.nodes[m].children[0] for m in view.choices[c] if view.nodes[m].op == "Op"]
        if any(view.nodes[k].op == "CublasLtAccum" for kc in kinds for k in view.members.get(kc, [])):
            n += 1
    return n


def test_residual_epilogues_fire_in_the_rolled_body():
    """The CUDA rules see the same residual adds in the body as in every unrolled layer: the window
    boundary falls on the residual stream, never between a matmul and the add that consumes it."""
    from luminal.egraph.compile import build_egraph
    from tests.backends.cuda.test_lowering import CpuCudaBackend

    g = decoder(2)
    be = CpuCudaBackend()
    unrolled = _accum_classes(build_egraph(g, be))
    rolling, views = build_rolled(g, be)
    per_body = _accum_classes(views["body0"])
    assert per_body >= 1  # the MLP's down projection + residual
    assert unrolled == 2 * per_body + _accum_classes(views["outer"])


def test_rolled_cuda_plan_computes_the_oracle():
    """The CUDA backend's rules and ops (kernels run by reference semantics on the CPU): the rolled,
    searched and unrolled plan of a 3-layer stack equals the raw-HLIR oracle."""
    from tests.backends.cuda.test_lowering import CpuCudaBackend

    g = decoder(3)
    ex, (llir,), st = compile_plans(g, CpuCudaBackend(), CompileOptions(cache=False, search_budget=6))
    assert st["rolled"]["bodies"][0]["layers"] == 3 and st["profiling"]["ops_measured"] > 0
    feed, env = feed_for(g), {"p": 2, "s": 3}
    want, got = oracle(g, feed, env), ex.run(feed, env)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-4, err_msg=k)


def test_prefill_and_decode_buckets_share_one_saturation():
    """Buckets whose programs differ only in bound facts saturate once (then each bucket's facts are
    added and the schedule re-run): on the reference backend's rules, same e-graphs and plans as
    saturating each bucket alone (on the CUDA backend's, same plans: test_launches.py)."""
    g = decoder(3)
    buckets = {"s": [(1, 1), (2, 8)]}
    _, shared, st = _compile(g, buckets=buckets)
    _, alone, st1 = _compile(g, buckets=buckets, share_saturation=False)
    assert st["rolled"]["saturations"] == {"outer": 1, "body0": 1}
    assert st1["rolled"]["saturations"] == {"outer": 2, "body0": 2}
    assert st["egraph_nodes"] == st1["egraph_nodes"] and st["egraph_classes"] == st1["egraph_classes"]
    assert [p.fingerprint() for p in shared] == [p.fingerprint() for p in alone]


def test_a_rolling_failure_falls_back_to_the_unrolled_compile(monkeypatch, caplog):
    def broken(self, plans):
        raise KeyError("@roll.out.7")

    monkeypatch.setattr(roll.Rolling, "unroll", broken)
    g = decoder(2)
    ex, _, st = _compile(g)
    assert "rolled" not in st and "KeyError" in st["roll_failed"] and "loop rolling failed" in caplog.text
    feed, env = feed_for(g), {"p": 1, "s": 3}
    want, got = oracle(g, feed, env), ex.run(feed, env)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5, err_msg=k)
