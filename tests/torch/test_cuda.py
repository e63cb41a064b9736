"""The torch frontend on the CUDA backend (GPU machine only): CUDA tensors in, CUDA tensors out, the
same numbers as eager torch, and the device path's promises on a StaticCache decode loop -- weights
and caches bound by address, the cache updated in place in torch's own tensors, nothing read back
per step, one CUDA-graph build. Run with `pytest tests/torch/test_cuda.py -m cuda` on the H200."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import luminal.torch as lt  # noqa: E402
from tests.torch.test_hf import LM, _decode  # noqa: E402
from tests.torch.util import (  # noqa: E402
    decode_program,
    expected_step_bytes,
    host_scalars,
    record_programs,
    state_in_place,
)

pytestmark = pytest.mark.cuda


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_llama_decode_on_cuda(dtype, monkeypatch):
    programs = record_programs(monkeypatch)
    torch.manual_seed(0)
    m = transformers.LlamaForCausalLM(transformers.LlamaConfig(**LM)).to("cuda", dtype).eval()
    fast = torch.compile(m, backend="luminal", dynamic=True, options={"backend": "cuda"})
    before = lt.counters["compiles"]
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    steps = 6
    kept = []  # the first StaticCache stays alive, so the second gets new addresses (torch's allocator
    # would hand the freed blocks back, and a cache at the same addresses needs no new graph)
    with torch.no_grad():
        for n in (5, 7):
            ids = torch.randint(0, LM["vocab_size"], (1, n), device="cuda")
            got, got_cache = _decode(fast, m.config, ids, steps=steps)
            kept.append(got_cache)
            want, want_cache = _decode(m, m.config, ids, steps=steps)
            for g, w in zip(got, want, strict=True):
                assert g.device.type == "cuda" and g.dtype == w.dtype
                torch.testing.assert_close(g, w, rtol=tol, atol=tol)
            for lg, lw in zip(got_cache.layers, want_cache.layers, strict=True):
                torch.testing.assert_close(lg.keys, lw.keys, rtol=tol, atol=tol)
                torch.testing.assert_close(lg.values, lw.values, rtol=tol, atol=tol)
    assert lt.counters["compiles"] - before == 2

    dec = decode_program(programs)
    # every graph (prefill too) ran on the device path: Dynamo's float inputs (0-d CPU tensors) and
    # the StaticCache's CPU position counter before prefill are fed from the host as scalars (they
    # once sent every graph down the host path: the KV cache through the host each token)
    assert all(p.paths["host"] == 0 for p in programs), [p.paths for p in programs]
    rt = dec.model.stats["runtime"]
    assert rt["runs"] == 2 * steps
    # one graph per cache object (two prompts: two StaticCaches, new addresses), none per token
    assert rt["graph_builds"] == 2 and rt["graph_patches"] == 0
    # the caches are torch's tensors, written in place by the plan
    caches = {s.name for s in dec.inputs if s.state and len(s.shape) == 4}
    assert len(caches) == 2 * LM["num_hidden_layers"] and caches <= state_in_place(dec)
    res = dec.model._plans[0][1].resident
    ptrs = {t.data_ptr() for layer in got_cache.layers for t in (layer.keys, layer.values)}
    assert {res.bufs[n].ptr for n in caches} == ptrs
    # a decode step: the dims record up, nothing down, no cache bytes on the device
    want = expected_step_bytes(dec)
    assert {k: rt[k] for k in want} == want
    assert dec.host_fed == host_scalars(dec)  # (none when torch specializes floats)


def test_decode_runs_on_a_side_stream():
    """Ordering against torch's *current* stream: the same loop on a non-default stream."""
    torch.manual_seed(0)
    m = transformers.LlamaForCausalLM(transformers.LlamaConfig(**LM)).to("cuda").eval()
    fast = torch.compile(m, backend="luminal", dynamic=True, options={"backend": "cuda"})
    ids = torch.randint(0, LM["vocab_size"], (1, 6), device="cuda")
    side = torch.cuda.Stream()
    with torch.no_grad(), torch.cuda.stream(side):
        got, _ = _decode(fast, m.config, ids, steps=8)
        want, _ = _decode(m, m.config, ids, steps=8)
    torch.cuda.synchronize()
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
