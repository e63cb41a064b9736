"""RMSNorm (Llama, Qwen; Gemma's `1 + w` form) and LayerNorm, computed in f32 like Hugging Face."""

from __future__ import annotations

import luminal as lm
from luminal.graph import Graph
from luminal.nn.check import block_name, expect
from luminal.nn.linear import weight
from luminal.tensor import GraphTensor


class RMSNorm:
    """x / rms(x) * w (or * (1 + w) when `offset`, as Gemma stores it), over the last axis.

    The weight is stored in `dtype`; the statistics and the scaling run in f32 and the result is
    rounded once to the input's dtype (transformers' Llama norm rounds the normalized value to the
    input dtype before scaling, Gemma's rounds once at the end: one rounding is the more accurate)."""

    def __init__(self, g: Graph, name: str, dim: int, eps: float = 1e-6, offset: bool = False,
                 dtype: object = lm.f32):  # fmt: skip
        self.eps, self.offset = eps, offset
        self.weight = weight(g, f"{name}.weight", (dim,), dtype)

    def __call__(self, x: GraphTensor) -> GraphTensor:
        d = self.weight.shape[0]
        expect(x, block_name("RMSNorm", self.weight), f"(..., dim={d})", None, {-1: d})
        dt = x.dtype
        y = x.cast(lm.f32).rms_norm(-1, self.eps)
        w = self.weight.cast(lm.f32)
        return (y * (w + 1.0 if self.offset else w)).cast(dt)


class LayerNorm:
    """(x - mean) / std * gamma + beta over the last axis, in f32, rounded once to the input's dtype
    (Whisper). gamma and beta are stored in `dtype`."""

    def __init__(self, g: Graph, name: str, dim: int, eps: float = 1e-5, dtype: object = lm.f32):
        self.eps = eps
        self.weight = weight(g, f"{name}.weight", (dim,), dtype)
        self.bias = weight(g, f"{name}.bias", (dim,), dtype)

    def __call__(self, x: GraphTensor) -> GraphTensor:
        d = self.weight.shape[0]
        expect(x, block_name("LayerNorm", self.weight), f"(..., dim={d})", None, {-1: d})
        dt = x.dtype
        y = x.cast(lm.f32).layer_norm(-1, self.eps)
        return (y * self.weight.cast(lm.f32) + self.bias.cast(lm.f32)).cast(dt)
