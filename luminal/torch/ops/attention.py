"""scaled_dot_product_attention, kept whole through the decompositions (every variant torch may
pick: the composite op, flash / flash-for-CPU / efficient / cuDNN), translated as one masked
softmax(Q K^T * scale) V with GQA head sharing. Scores and softmax run in f32 (like
luminal.nn.attention), so 16-bit models keep their accuracy."""

from __future__ import annotations

import math

import luminal as lm
from luminal.dtype import DType
from luminal.shape.expr import ge, z
from luminal.torch.ops.cache_attention import cache_attention
from luminal.torch.registry import aten


def sdpa(c, q, k, v, mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p:
        raise c.unsupported("attention dropout is not translated (inference only): use model.eval()")
    hq, hk = q.shape[-3] if q.ndim >= 3 else None, k.shape[-3] if k.ndim >= 3 else None
    if hq is not None and hk is not None and hq is not hk:  # GQA: each kv head serves hq/hk query heads
        r = hq.value // hk.value
        lead = k.shape[:-3]
        k = k.unsqueeze(-3).expand(*lead, hk, r, *k.shape[-2:]).reshape(*lead, hq, *k.shape[-2:])
        v = v.unsqueeze(-3).expand(*lead, hk, r, *v.shape[-2:]).reshape(*lead, hq, *v.shape[-2:])
    if v.shape[-2] is not k.shape[-2]:  # torch's meta need not unify them; eager requires them equal
        v = c.fix(v, (*v.shape[:-2], k.shape[-2], v.shape[-1]))
    e = q.shape[-1]
    sc = scale if scale is not None else 1.0 / math.sqrt(e.value)
    cached = cache_attention(c, q, k, v, mask, is_causal, sc)  # a StaticCache's decode / prefill
    if cached is not None:
        return cached
    scores = (q @ k.transpose(-1, -2)).cast(DType.f32) * sc  # (..., L, S)
    lq, sk = scores.shape[-2], scores.shape[-1]
    if is_causal:  # top-left aligned: query i sees keys j <= i
        keep = c.graph.iota(ge(z // sk, z % sk), (lq, sk)).cast(DType.bool)
        scores = lm.where(keep, scores, -math.inf)
    if mask is None:
        return scores.softmax(-1).cast(v.dtype) @ v
    if mask.dtype == DType.bool:
        scores = lm.where(mask, scores, -math.inf)
    else:
        scores = scores + mask.cast(DType.f32)
    # a query that may see no key attends to nothing: torch returns zeros there, not NaN
    blind = scores.max(-1, keepdim=True).eq(-math.inf)
    p = lm.where(blind, 0.0, scores.softmax(-1))
    return p.cast(v.dtype) @ v


@aten(
    "scaled_dot_product_attention.default",
    note="masked softmax(QK^T*scale)V in f32, causal, GQA, scale; against a static KV cache under the "
    "position mask: nn.attention's paged graph (cache_attention.py)",
)
def sdpa_composite(c, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return sdpa(c, q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)


@aten("_scaled_dot_product_flash_attention_for_cpu.default", note="as the composite (output 0; no logsumexp)")
def sdpa_flash_cpu(c, q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    return sdpa(c, q, k, v, attn_mask, dropout_p, is_causal, scale), None


@aten("_scaled_dot_product_flash_attention.default", note="as the composite (output 0)")
def sdpa_flash(c, q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None):
    return (sdpa(c, q, k, v, None, dropout_p, is_causal, scale),) + (None,) * 8


@aten("_scaled_dot_product_efficient_attention.default", note="as the composite (output 0)")
def sdpa_efficient(c, q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, *, scale=None):
    return sdpa(c, q, k, v, attn_bias, dropout_p, is_causal, scale), None, None, None


@aten("_scaled_dot_product_cudnn_attention.default", note="as the composite (output 0)")
def sdpa_cudnn(c, q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False,
               return_debug_mask=False, *, scale=None):  # fmt: skip
    return (sdpa(c, q, k, v, attn_bias, dropout_p, is_causal, scale),) + (None,) * 8
