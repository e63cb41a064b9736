"""Llama (2, 3, 3.1, 3.2) as a luminal graph, following transformers' `LlamaForCausalLM`.

One graph serves prefill and decode: `s` new tokens at past length `p` against a KV cache of fixed
capacity (luminal/nn/attention.py). Qwen 2/3 reuse this file's blocks (models/qwen.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import luminal as lm
from luminal import nn
from luminal.models.common import CausalLM, graph_weights, lm_main, load_hf, load_random_preset
from luminal.nn.rope import RopeConfig, inv_freq, rope_config
from luminal.shape.expr import dim


@dataclass(frozen=True)
class Config:
    vocab_size: int = 32000
    dim: int = 4096
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: int = 8
    hidden: int = 11008
    head_dim: int = 128
    norm_eps: float = 1e-5
    rope: RopeConfig = RopeConfig()
    tie_embeddings: bool = False
    qkv_bias: bool = False  # Qwen2
    o_bias: bool = False  # Llama `attention_bias` covers o_proj too
    qk_norm: bool = False  # Qwen3
    act: str = "silu"
    eos_token_id: tuple[int, ...] = ()

    @property
    def bias(self) -> tuple[bool, bool, bool, bool]:
        return (self.qkv_bias, self.qkv_bias, self.qkv_bias, self.o_bias)

    @classmethod
    def from_hf(cls, c: dict) -> Config:
        heads, bias = c["num_attention_heads"], bool(c.get("attention_bias", False))
        eos = c.get("eos_token_id")
        return cls(
            vocab_size=c["vocab_size"], dim=c["hidden_size"], n_layers=c["num_hidden_layers"], n_heads=heads,
            n_kv_heads=c.get("num_key_value_heads") or heads, hidden=c["intermediate_size"],
            head_dim=c.get("head_dim") or c["hidden_size"] // heads, norm_eps=c.get("rms_norm_eps", 1e-6),
            rope=rope_config(c), tie_embeddings=bool(c.get("tie_word_embeddings", False)),
            qkv_bias=bias, o_bias=bias, act=c.get("hidden_act", "silu"),
            eos_token_id=tuple(eos if isinstance(eos, list) else [eos] if eos is not None else []),
        )  # fmt: skip


CONFIGS = {
    "llama-3.2-1b": Config(vocab_size=128256, dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, hidden=8192,
                           head_dim=64, rope=RopeConfig(500000.0, "llama3", 32.0, 1.0, 4.0, 8192),
                           tie_embeddings=True, eos_token_id=(128001, 128008, 128009)),
    "llama-3.1-8b": Config(vocab_size=128256, dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, hidden=14336,
                           head_dim=128, rope=RopeConfig(500000.0, "llama3", 8.0, 1.0, 4.0, 8192),
                           eos_token_id=(128001, 128008, 128009)),
}  # fmt: skip


class Block:
    def __init__(self, g: lm.Graph, cfg: Config, i: int, capacity: int, dtype: lm.DType):
        p = f"model.layers.{i}"
        cache = nn.KVCache(f"cache.{i}", cfg.n_kv_heads, capacity, cfg.head_dim, dtype)
        self.attn_norm = nn.RMSNorm(g, f"{p}.input_layernorm", cfg.dim, cfg.norm_eps, dtype=dtype)
        self.attn = nn.Attention(g, f"{p}.self_attn", cfg.dim, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cache,
                                 bias=cfg.bias, qk_norm=cfg.norm_eps if cfg.qk_norm else None, dtype=dtype)  # fmt: skip
        self.mlp_norm = nn.RMSNorm(g, f"{p}.post_attention_layernorm", cfg.dim, cfg.norm_eps, dtype=dtype)
        self.mlp = nn.GatedMLP(g, f"{p}.mlp", cfg.dim, cfg.hidden, cfg.act, dtype=dtype)

    def __call__(self, x: lm.GraphTensor, rope: nn.RoPE, past) -> lm.GraphTensor:
        h = x + self.attn(self.attn_norm(x), rope, past)
        return h + self.mlp(self.mlp_norm(h))


class Transformer:
    """Token ids (s,) at past length p -> f32 logits (r, vocab) for the positions listed in `rows`.
    Weights, activations and the KV cache are in `dtype`; norms, rotary, activations and softmax
    compute in f32 (luminal/nn)."""

    def __init__(self, cfg: Config, capacity: int, dtype: object = lm.f32):
        self.cfg, self.capacity, self.dtype = cfg, capacity, lm.dtype.to_dtype(dtype)
        g = self.graph = lm.Graph()
        s, p = dim("s"), dim("p")
        tokens, rows = g.tensor("tokens", ("s",), lm.i32), g.tensor("rows", ("r",), lm.i32)
        self.embed = nn.Embedding(g, "model.embed_tokens", cfg.vocab_size, cfg.dim, self.dtype)
        rope = nn.RoPE(g, "rope", cfg.head_dim, p, s)
        x = self.embed(tokens)  # (s, dim)
        for i in range(cfg.n_layers):
            x = Block(g, cfg, i, capacity, self.dtype)(x, rope, p)
        x = nn.RMSNorm(g, "model.norm", cfg.dim, cfg.norm_eps, dtype=self.dtype)(x.gather(rows, axis=0))  # (r, dim)
        if cfg.tie_embeddings:
            logits = self.embed.attend(x)
        else:
            logits = nn.Linear(g, "lm_head", cfg.dim, cfg.vocab_size, dtype=self.dtype)(x)
        logits.cast(lm.f32).output("logits")  # (r, vocab)

    @property
    def cache_shapes(self) -> dict[str, tuple[int, ...]]:
        shape = (self.cfg.n_kv_heads, self.capacity, self.cfg.head_dim)
        return {f"cache.{i}.{kv}": shape for i in range(self.cfg.n_layers) for kv in "kv"}

    def extra_inputs(self) -> dict:
        return {"rope.inv_freq": inv_freq(self.cfg.rope, self.cfg.head_dim)}

    def weight_shapes(self) -> dict:
        return graph_weights(self.graph, [*self.cache_shapes, *self.extra_inputs()])


ARCHITECTURES = {"LlamaForCausalLM": "llama"}


def load(model_dir, backend: str = "auto", max_seq: int = 512, dtype: object = "auto") -> CausalLM:
    return load_hf(model_dir, backend, max_seq, Config, ARCHITECTURES, Transformer, dtype=dtype)


def load_random(preset: str, backend: str = "auto", max_seq: int = 512, layers: int | None = None, seed: int = 0,
                dtype: object = "auto") -> CausalLM:  # fmt: skip
    return load_random_preset(CONFIGS[preset], backend, max_seq, layers, seed, Transformer, dtype)


def main(argv: list[str] | None = None) -> None:
    lm_main(argv, "llama", load, load_random, CONFIGS)


if __name__ == "__main__":
    main()
