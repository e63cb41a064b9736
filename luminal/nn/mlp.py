"""Feed-forward blocks: the gated MLP (SwiGLU / GeGLU) and the plain two-layer GELU MLP."""

from __future__ import annotations

import luminal as lm
from luminal.graph import Graph
from luminal.nn.linear import Linear
from luminal.tensor import GraphTensor

ACTIVATIONS = {
    "silu": lambda x: x.silu(),
    "gelu": lambda x: x.gelu(),
    "gelu_pytorch_tanh": lambda x: x.gelu_tanh(),
    "gelu_tanh": lambda x: x.gelu_tanh(),
    "relu": lambda x: x.relu(),
}


def activation(name: str):
    if name not in ACTIVATIONS:
        from luminal.errors import LuminalError

        raise LuminalError(f"unknown activation {name!r}; known: {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


class GatedMLP:
    """down(act(gate(x)) * up(x)): SwiGLU with act=silu (Llama, Qwen), GeGLU with gelu_tanh (Gemma).
    Weights in `dtype`; the activation and the gating product run in f32 and round once."""

    def __init__(self, g: Graph, name: str, dim: int, hidden: int, act: str = "silu", bias: bool = False,
                 dtype: object = lm.f32):  # fmt: skip
        self.act = activation(act)
        self.gate = Linear(g, f"{name}.gate_proj", dim, hidden, bias, dtype)
        self.up = Linear(g, f"{name}.up_proj", dim, hidden, bias, dtype)
        self.down = Linear(g, f"{name}.down_proj", hidden, dim, bias, dtype)

    def __call__(self, x: GraphTensor) -> GraphTensor:
        h = self.act(self.gate(x).cast(lm.f32)) * self.up(x).cast(lm.f32)  # (s, hidden) f32
        return self.down(h.cast(x.dtype))  # (s, dim)


class MLP:
    """fc2(act(fc1(x))) with biases (Whisper). Weights in `dtype`; the activation runs in f32."""

    def __init__(self, g: Graph, name: str, dim: int, hidden: int, act: str = "gelu", bias: bool = True,
                 dtype: object = lm.f32):  # fmt: skip
        self.act = activation(act)
        self.fc1 = Linear(g, f"{name}.fc1", dim, hidden, bias, dtype)
        self.fc2 = Linear(g, f"{name}.fc2", hidden, dim, bias, dtype)

    def __call__(self, x: GraphTensor) -> GraphTensor:
        return self.fc2(self.act(self.fc1(x).cast(lm.f32)).cast(x.dtype))
