"""CPU: the decode engine. The in-place KV-cache rule fires for every zoo model's caches; every sampled
extraction keeps the same outputs and state; a decode step on the CUDA runtime (fake driver: each
kernel runs its reference semantics on fake device memory) moves only the token id, the dims and the
sampled id, never cache bytes, and replays one CUDA graph for a whole 128-token generation."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from luminal.backends.base import register_backend
from luminal.backends.cuda import runtime
from luminal.backends.reference import ReferenceExecutor
from luminal.backends.reference.backend import ReferenceBackend
from luminal.egraph.compile import build_egraph
from luminal.egraph.search import sample_genomes
from luminal.models import gemma, llama, qwen, whisper
from luminal.models.checkpoint import read_config
from luminal.models.common import load_random_preset, random_weights
from luminal.models.engine import Sampler, step_buckets
from tests.backends.cuda import fake_driver
from tests.backends.cuda.test_lowering import CpuCudaBackend
from tests.models.conftest import GOLDENS

CAP = 12
TINY = replace(llama.CONFIGS["llama-3.2-1b"], vocab_size=64, dim=32, n_layers=1, n_heads=4, n_kv_heads=2, hidden=64,
               head_dim=8)  # fmt: skip


def step_graph(name: str):
    c = read_config(GOLDENS / name)
    if name == "whisper":
        return whisper.decoder_graph(whisper.Config.from_hf(c))
    mod, cls = {"llama": (llama, llama), "qwen2": (qwen, llama), "qwen3": (qwen, llama), "gemma3": (gemma, gemma)}[name]
    return cls.Transformer(mod.Config.from_hf(c), CAP).graph


def caches(g) -> list[str]:
    return sorted(n for n in g.persistent if n.startswith("cache.") and n in g.outputs)


class FakeCuda(CpuCudaBackend):
    """The CUDA backend's ops and rules; plans run by the real CudaExecutor over the fake driver."""

    name = "cuda-fake"

    @property
    def device(self) -> str:
        return "cuda-fake-cpu"

    def load(self, llir):
        ex = runtime.CudaExecutor(llir.nodes)
        fake_driver.bind(ex)
        return ex

    def profile(self, llir, env):  # elements written (an in-place update writes no copy), then node count
        from luminal.hlir import Input, Output

        written = sum(int(n.op.out_size().evaluate(env)) for n in llir.nodes
                      if not isinstance(n.op, (Input, Output)) and n.op.alias() is None)  # fmt: skip
        return written + len(llir.nodes)


@pytest.fixture
def fake_cuda(monkeypatch):
    monkeypatch.setattr(runtime, "driver", fake_driver)
    monkeypatch.setattr(runtime, "load_kernels", fake_driver.load_kernels)
    monkeypatch.setattr(runtime, "capture", fake_driver.capture)
    monkeypatch.setenv("LUMINAL_CACHE", "off")
    register_backend("cuda-fake", FakeCuda)
    fake_driver.reset()
    yield fake_driver
    fake_driver.reset()


# -- buffer_reuse --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["llama", "qwen2", "qwen3", "gemma3", "whisper"])
def test_inplace_rule_fires_for_every_cache_of_the_zoo(name):
    g = step_graph(name)
    names = caches(g)
    assert len(names) == 4  # two layers, k and v
    # the CUDA backend's in-place updates: the scatter computing what it writes (preferred), or reading it
    cuda_ops = ("KernelScatterFused", "KernelScatterInplace")
    for backend, ops in ((ReferenceBackend(), ("InplaceScatter",)), (CpuCudaBackend(), cuda_ops)):
        bounds = {"s": (1, 1), "r": (1, 1), "p": (0, CAP - 1)} if isinstance(backend, CpuCudaBackend) else None
        view = build_egraph(g, backend, bounds)
        rest = [c.__name__ for c in backend.ops if c.__name__ not in ops]
        llir = view.extract(view.repair(view.preferred_genome([*ops, *rest])))
        ins = {n.op.label: i for i, n in enumerate(llir.nodes) if type(n.op).__name__ == "Input"}
        inplace = [n for n in llir.nodes if type(n.op).__name__ in ops]
        assert sorted(llir.nodes[n.inputs[0]].op.label for n in inplace) == names, (backend.name, name)
        for label in names:  # the cache output is the in-place node: it aliases the input buffer
            out = llir.nodes[llir.nodes[llir.outputs[label]].inputs[0]]
            assert type(out.op).__name__ in ops and out.inputs[0] == ins[label]


def test_no_inplace_update_of_a_state_something_else_reads():
    import luminal as lm
    from luminal.shape.expr import z

    g = lm.Graph()
    cache = g.tensor("c", (4, 3)).persist()
    rows = g.iota(z, (1,))
    cache.scatter(rows, g.tensor("x", (1, 3)), axis=0).output("c")
    (cache * 2.0).output("old")  # a second reader of the old contents: the copy must stay
    view = build_egraph(g, ReferenceBackend())
    assert not any(view.nodes[m].op == "InplaceScatter" for c in view.classes for m in view.choices[c])


def _feed_steps():
    rng = np.random.default_rng(0)
    return [(rng.integers(0, TINY.vocab_size, 3), [2], 0), (rng.integers(0, TINY.vocab_size, 1), [0], 3)]


def test_every_sampled_extraction_keeps_outputs_and_state():
    model = llama.Transformer(TINY, CAP)
    g = model.graph
    weights = {**random_weights(model.weight_shapes(), seed=1), **model.extra_inputs()}
    zeros = {n: np.zeros(s, np.float32) for n, s in model.cache_shapes.items()}
    want, state = [], dict(zeros)
    for toks, rows, p in _feed_steps():  # the raw HLIR, state fed back by hand
        out = ReferenceExecutor(g.nodes, g.outputs).run(
            {"tokens": toks.astype(np.int32), "rows": np.array(rows, np.int32), **weights, **state},
            {"p": p, "s": len(toks), "r": len(rows)},
        )
        state = {n: out[n].reshape(zeros[n].shape) for n in zeros}
        want.append(out)
    seen = set()
    for backend in (ReferenceBackend(), CpuCudaBackend()):
        view = build_egraph(g, backend)
        plans = sample_genomes(view, 8, seed=3)
        plans.append(view.extract(view.repair(view.preferred_genome([c.__name__ for c in backend.ops]))))
        for llir in plans:
            ex = ReferenceExecutor(llir.nodes, llir.outputs)
            ex.set_persistent(frozenset(g.persistent))
            for k, v in {**weights, **zeros}.items():
                ex.bind(k, v)
            seen |= {type(n.op).__name__ for n in llir.nodes}
            for (toks, rows, p), ref in zip(_feed_steps(), want, strict=True):
                feed = {"tokens": toks.astype(np.int32), "rows": np.array(rows, np.int32)}
                got = ex.run(feed, {"p": p, "s": len(toks), "r": len(rows)})
                for name, arr in ref.items():
                    np.testing.assert_allclose(got[name].reshape(-1), arr.reshape(-1), rtol=2e-5, atol=2e-5,
                                               err_msg=f"{backend.name} {name} p={p}")  # fmt: skip
            assert all(not v.any() for v in zeros.values())  # the bound arrays were never written
    assert {"InplaceScatter", "Scatter", "KernelScatterInplace", "KernelScatter"} <= seen


# -- the decode loop on the CUDA runtime (fake driver) --------------------------------------------
def test_step_buckets_cover_decode_and_prefill():
    assert step_buckets(8) == [{"s": (1, 1), "r": (1, 1), "p": (0, 7)}, {"s": (2, 8), "r": (1, 8), "p": (0, 6)}]


def test_decode_moves_token_dims_and_sampled_id_only(fake_cuda):
    ref = load_random_preset(TINY, "reference", CAP, None, 0, llama.Transformer)
    lm_ = load_random_preset(TINY, "cuda-fake", CAP, None, 0, llama.Transformer)
    prompt = [3, 9, 27, 5]
    assert lm_.generate(prompt, 6, stop_ids=()) == ref.generate(prompt, 6, stop_ids=())
    decode, prefill = lm_.decoder.model._plans[0][1], lm_.decoder.model._plans[1][1]
    st = decode.stats
    dims = 8 * (len(decode.slots) + 2)  # the dims buffer: its dims, then the (cleared) error pair
    assert dims <= st["h2d_bytes"] <= 4 + dims, st  # + the token id, unless equal to the last (rows never change)
    assert st["d2h_bytes"] == 8 * 3, st  # the error pair and the sampled id, one read
    assert st["d2d_bytes"] == 0 and prefill.stats["d2d_bytes"] == 0  # the caches were updated in place
    assert prefill.resident is decode.resident  # one copy of the weights and caches for both plans
    cache_bytes = sum(int(np.prod(s)) * 4 for s in lm_.decoder.cache_shapes.values())
    weight_bytes = sum(int(np.prod(s)) * np.dtype(d).itemsize for s, d in load_weight_shapes().values())
    assert decode.resident.bytes_bound == weight_bytes + cache_bytes  # uploaded once, at bind
    # teacher-forced logits through the fetch path agree with the reference backend
    for m in (ref, lm_):
        m.decoder.reset()
    np.testing.assert_allclose(lm_.decoder.step(prompt), ref.decoder.step(prompt), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(lm_.decoder.step([7]), ref.decoder.step([7]), rtol=1e-4, atol=1e-5)


def load_weight_shapes():
    model = llama.Transformer(TINY, CAP)
    shapes = model.weight_shapes()
    shapes |= {k: (v.shape, v.dtype) for k, v in model.extra_inputs().items()}
    return shapes


def test_one_graph_replay_per_token_over_a_128_token_generation(fake_cuda):
    cap = 16 + 128
    lm_ = load_random_preset(TINY, "cuda-fake", cap, None, 0, llama.Transformer)
    out = lm_.generate(list(range(1, 17)), 128, Sampler(temperature=0.8, top_k=20, seed=5), stop_ids=())
    assert len(out) == 128
    st = lm_.decoder.model._plans[0][1].stats
    assert st["pinned"] and st["runs"] == 127
    assert st["graph_builds"] == 1 and st["replans"] == 1 and st["pointer_moves"] == 1, st
    assert st["graph_patches"] == 0, st  # grids sized at the bucket bounds: no node changes with p
    assert fake_cuda.LOG.count("instantiate") == 2  # decode + prefill, once each
