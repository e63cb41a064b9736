"""Neural-network building blocks written with the GraphTensor API (the layer above the frontend).

Each block creates its weights as persistent graph inputs named like the Hugging Face checkpoint
tensors they hold (`model.layers.0.self_attn.q_proj.weight`), so loading a checkpoint is a name
lookup. Blocks are plain callables that add nodes to the graph; they hold no data.
"""

from __future__ import annotations

from luminal.nn.attention import Attention, KVCache, attend, causal_mask
from luminal.nn.conv import Conv1d
from luminal.nn.linear import Embedding, Linear, weight
from luminal.nn.mlp import MLP, GatedMLP
from luminal.nn.norm import LayerNorm, RMSNorm
from luminal.nn.rope import RoPE, rope_config

__all__ = [
    "Attention", "KVCache", "attend", "causal_mask", "Conv1d", "Embedding", "Linear", "weight", "GatedMLP", "MLP",
    "LayerNorm", "RMSNorm", "RoPE", "rope_config",
]  # fmt: skip
