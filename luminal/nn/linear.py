"""Linear and Embedding: weights as persistent inputs in the Hugging Face (out, in) layout."""

from __future__ import annotations

from collections.abc import Sequence

import luminal as lm
from luminal.graph import Graph
from luminal.nn.check import block_name, expect
from luminal.tensor import GraphTensor


def weight(g: Graph, name: str, shape: Sequence[int], dtype: object = lm.f32) -> GraphTensor:
    """The persistent input `name`: a checkpoint tensor, bound once and kept across runs."""
    return g.tensor(name, tuple(shape), dtype).persist()


class Linear:
    """y = x @ W.T + b with W of shape (out, in), as nn.Linear stores it, all in `dtype`.

    The matmul accumulates in f32 and rounds once (NumpyMatmul, cuBLASLt; docs/numerics.md), like
    torch's 16-bit GEMMs; the bias add rounds once more, as in an unfused torch `x @ W.T + b`."""

    def __init__(self, g: Graph, name: str, d_in: int, d_out: int, bias: bool = False, dtype: object = lm.f32):
        self.d_in, self.d_out = d_in, d_out
        self.weight = weight(g, f"{name}.weight", (d_out, d_in), dtype)
        self.bias = weight(g, f"{name}.bias", (d_out,), dtype) if bias else None

    def __call__(self, x: GraphTensor) -> GraphTensor:
        expect(x, block_name("Linear", self.weight), f"(..., d_in={self.d_in})", None, {-1: self.d_in})
        y = x @ self.weight.T  # (..., d_out)
        return y + self.bias if self.bias is not None else y


class Embedding:
    """Row lookup into a (vocab, dim) table; `attend` is the tied output projection x @ E.T."""

    def __init__(self, g: Graph, name: str, vocab: int, dim: int, dtype: object = lm.f32):
        self.vocab, self.dim = vocab, dim
        self.weight = weight(g, f"{name}.weight", (vocab, dim), dtype)

    def __call__(self, ids: GraphTensor) -> GraphTensor:
        return self.weight.gather(ids, axis=0)  # (*ids.shape, dim)

    def attend(self, x: GraphTensor) -> GraphTensor:
        expect(x, block_name("Embedding.attend", self.weight), f"(..., dim={self.dim})", None, {-1: self.dim})
        return x @ self.weight.T  # (..., vocab)
