"""The StaticCache decode attention as torch traces it on a CUDA device (bench/torch_frontend.py on
the H200, session 7): SDPA with a mask is dispatched to `_scaled_dot_product_efficient_attention`,
whose bias is the boolean mask turned additive by SDPA itself (zeros + masked_fill(~keep, -inf),
aligned and expanded to (b, heads, s, capacity)). cache_attention.py must recognize it as it does
the CPU trace (the composite op with the boolean mask): before, it read the mask only from the
composite op's `attn_mask`, so on the GPU no layer took the paged-attention plan (no fixed dims,
320 launch steps, 3.87x the zoo's TPOT). Traced here with fake tensors (the efficient op's meta
kernel); the values against eager's math SDPA on the same inputs. On the H100 (session 10) torch
dispatched to `_scaled_dot_product_cudnn_attention` instead, whose bias is `where(keep, 0, -65504)`
(cuDNN's finite minus infinity): not recognized, the decode plan again missed the paged attention
(310 launches per step, 3.34x the zoo's TPOT)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from luminal.torch.ops.cache_attention import QUERY_ROWS  # noqa: E402
from luminal.torch.program import Program  # noqa: E402
from luminal.torch.translate import translate  # noqa: E402
from tests.torch.util import assert_close, trace  # noqa: E402

H, KV, HD, CAP = 8, 2, 64, 24


def _bias(keep: torch.Tensor, dtype) -> torch.Tensor:
    """SDPA's own conversion of a boolean mask for the efficient kernel (convert_boolean_attn_mask)."""
    return torch.zeros_like(keep, dtype=dtype).masked_fill(keep.logical_not(), float("-inf"))


def _cudnn_bias(keep: torch.Tensor, dtype) -> torch.Tensor:
    """SDPA's own conversion of a boolean mask for the cuDNN kernel (a finite minus infinity)."""
    return torch.where(keep, torch.scalar_tensor(0.0, dtype=dtype), torch.scalar_tensor(-65504.0, dtype=dtype))


def _decode(q, kc, vc, pos, efficient: bool, padded: bool = False, cudnn: bool = False):
    """One query row against the whole cache under `key j visible iff j <= pos` (HF's StaticCache
    decode): repeat_kv to the query heads, then SDPA (efficient / cudnn: as traced on CUDA)."""
    keep = torch.arange(CAP)[None, None, None, :] <= pos[None, None, :, None]  # (1, 1, 1, cap)
    k = kc[:, :, None].expand(1, KV, H // KV, CAP, HD).reshape(1, H, CAP, HD)
    v = vc[:, :, None].expand(1, KV, H // KV, CAP, HD).reshape(1, H, CAP, HD)
    if cudnn:
        bias = _cudnn_bias(keep, q.dtype)  # (1, 1, 1, cap), as the H100 trace holds it
        return torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, bias, False, scale=HD**-0.5)[0]
    if not efficient:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=HD**-0.5)
    bias = _bias(keep, q.dtype)
    if padded:  # SDPA's alignment of a bias whose rows are not 16-byte aligned: pad, then slice back
        bias = torch.nn.functional.pad(bias, (0, 8 - CAP % 8 or 8))[..., :CAP]
    bias = bias.expand(1, H, 1, CAP)
    return torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, bias, False, scale=HD**-0.5)[0]


@pytest.mark.parametrize(
    "efficient,padded,cudnn", [(True, False, False), (True, True, False), (False, False, False), (False, False, True)]
)
def test_the_cuda_traced_decode_attention_is_cache_attention(efficient, padded, cudnn):
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(1, H, 1, HD, generator=gen)
    kc, vc = (torch.randn(1, KV, CAP, HD, generator=gen) for _ in range(2))
    pos = torch.tensor([9])
    tr = translate(trace(lambda *a: _decode(*a, efficient, padded, cudnn), (q, kc, vc, pos)))
    assert tr.ranges.get(QUERY_ROWS) == (1, 1), tr.ranges  # the paged graph (cache_attention.py) was built
    got = Program(tr, "reference")(q, kc, vc, pos)[0]
    assert_close(got, _decode(q, kc, vc, pos, efficient=False), "decode attention")


@pytest.mark.parametrize("kernel", ["efficient", "cudnn"])
def test_hf_decode_with_cuda_sdpa_dispatch_takes_the_paged_plan(monkeypatch, kernel):
    """The whole HF StaticCache decode with SDPA dispatched as on a CUDA device (the boolean mask
    made SDPA's additive bias, the efficient or cuDNN kernel called): the decode graph is the paged
    one (cache_attention fixed the query rows and the capacity) and its logits equal eager's."""
    transformers = pytest.importorskip("transformers")
    from tests.torch.test_hf import LM, _close, _decode, _model
    from tests.torch.util import decode_program, record_programs

    composite = torch.nn.functional.scaled_dot_product_attention

    def cuda_like(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if attn_mask is None or attn_mask.dtype != torch.bool or enable_gqa:
            return composite(q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
        if kernel == "cudnn":
            bias = _cudnn_bias(attn_mask, q.dtype)
            return torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, bias, False, dropout_p, is_causal,
                                                                      scale=scale)[0]  # fmt: skip
        bias = _bias(attn_mask, q.dtype).expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
        return torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, bias, False, dropout_p, is_causal,
                                                                      scale=scale)[0]  # fmt: skip

    cfg = transformers.LlamaConfig(**{**LM, "hidden_size": 128, "head_dim": 64, "num_hidden_layers": 2})
    m = _model(lambda: transformers.LlamaForCausalLM(cfg))
    ids = torch.randint(0, LM["vocab_size"], (1, 5), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        want, _ = _decode(m, m.config, ids, steps=3)
        programs = record_programs(monkeypatch)
        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", cuda_like)
        torch._dynamo.reset()
        fast = torch.compile(m, backend="luminal", dynamic=True, options={"backend": "reference"})
        got, _ = _decode(fast, m.config, ids, steps=3)
    torch._dynamo.reset()
    dec = decode_program(programs)
    assert f"aten._scaled_dot_product_{kernel}_attention.default" in dec.aten_ops, sorted(dec.aten_ops)
    assert dec.ranges.get(QUERY_ROWS) == (1, 1) and len(dec.ranges) >= 2, dec.ranges
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        _close(g, w, f"step {k}")
