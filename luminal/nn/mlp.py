"""Feed-forward blocks: the gated MLP (SwiGLU / GeGLU) and the plain two-layer GELU MLP."""

from __future__ import annotations

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
    """down(act(gate(x)) * up(x)): SwiGLU with act=silu (Llama, Qwen), GeGLU with gelu_tanh (Gemma)."""

    def __init__(self, g: Graph, name: str, dim: int, hidden: int, act: str = "silu", bias: bool = False):
        self.act = activation(act)
        self.gate = Linear(g, f"{name}.gate_proj", dim, hidden, bias)
        self.up = Linear(g, f"{name}.up_proj", dim, hidden, bias)
        self.down = Linear(g, f"{name}.down_proj", hidden, dim, bias)

    def __call__(self, x: GraphTensor) -> GraphTensor:
        return self.down(self.act(self.gate(x)) * self.up(x))  # (s, dim)


class MLP:
    """fc2(act(fc1(x))) with biases (Whisper)."""

    def __init__(self, g: Graph, name: str, dim: int, hidden: int, act: str = "gelu", bias: bool = True):
        self.act = activation(act)
        self.fc1 = Linear(g, f"{name}.fc1", dim, hidden, bias)
        self.fc2 = Linear(g, f"{name}.fc2", hidden, dim, bias)

    def __call__(self, x: GraphTensor) -> GraphTensor:
        return self.fc2(self.act(self.fc1(x)))
