"""The torch frontend on the CUDA backend (GPU machine only): CUDA tensors in, CUDA tensors out, and
the same numbers as eager torch; run with `pytest tests/torch/test_cuda.py` on the H200."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import luminal.torch as lt  # noqa: E402
from tests.torch.test_hf import LM, _decode  # noqa: E402

pytestmark = pytest.mark.cuda


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_llama_decode_on_cuda(dtype):
    torch.manual_seed(0)
    m = transformers.LlamaForCausalLM(transformers.LlamaConfig(**LM)).to("cuda", dtype).eval()
    fast = torch.compile(m, backend="luminal", dynamic=True, options={"backend": "cuda"})
    before = lt.counters["compiles"]
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    with torch.no_grad():
        for n in (5, 7):
            ids = torch.randint(0, LM["vocab_size"], (1, n), device="cuda")
            got, got_cache = _decode(fast, m.config, ids, steps=4)
            want, want_cache = _decode(m, m.config, ids, steps=4)
            for g, w in zip(got, want, strict=True):
                assert g.device.type == "cuda" and g.dtype == w.dtype
                torch.testing.assert_close(g, w, rtol=tol, atol=tol)
            for lg, lw in zip(got_cache.layers, want_cache.layers, strict=True):
                torch.testing.assert_close(lg.keys, lw.keys, rtol=tol, atol=tol)
    assert lt.counters["compiles"] - before == 2
