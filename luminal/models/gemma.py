"""Gemma 3 (text) as a luminal graph, following transformers' `Gemma3ForCausalLM`: embeddings scaled
by sqrt(dim), RMSNorm with `1 + w`, four norms per block plus q/k norms, GeGLU (gelu-tanh) MLP,
sliding-window layers with their own rope base between global layers, optional logit soft-capping."""

from __future__ import annotations

import math
from dataclasses import dataclass

import luminal as lm
from luminal import nn
from luminal.models.common import CausalLM, graph_weights, lm_main, load_hf, load_random_preset
from luminal.nn.rope import RopeConfig, inv_freq, rope_config
from luminal.shape.expr import dim


@dataclass(frozen=True)
class Config:
    vocab_size: int = 262144
    dim: int = 1152
    n_layers: int = 26
    n_heads: int = 4
    n_kv_heads: int = 1
    hidden: int = 6912
    head_dim: int = 256
    norm_eps: float = 1e-6
    query_pre_attn_scalar: float = 256
    sliding_window: int = 512
    layer_types: tuple[str, ...] = ()  # "sliding_attention" | "full_attention" per layer
    rope_global: RopeConfig = RopeConfig(1000000.0)
    rope_local: RopeConfig = RopeConfig(10000.0)
    final_softcap: float | None = None
    attn_softcap: float | None = None
    act: str = "gelu_pytorch_tanh"

    @property
    def sliding(self) -> tuple[bool, ...]:
        types = self.layer_types or tuple("full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                                          for i in range(self.n_layers))  # fmt: skip
        return tuple(t == "sliding_attention" for t in types[: self.n_layers])

    @classmethod
    def from_hf(cls, c: dict) -> Config:
        if "text_config" in c:  # Gemma3ForConditionalGeneration: the text tower's config, HF defaults filled in
            c = {**TEXT_DEFAULTS, **c["text_config"]}
        n = c["num_hidden_layers"]
        types = c.get("layer_types")
        if not types:
            pattern = c.get("sliding_window_pattern") or c.get("_sliding_window_pattern") or 6
            types = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n)]
        params = c.get("rope_parameters")
        if isinstance(params, dict) and "full_attention" in params:
            glob, local = rope_config(c, "full_attention"), rope_config(c, "sliding_attention")
        else:
            glob, local = rope_config(c), RopeConfig(float(c.get("rope_local_base_freq", 10000.0)))
        if c.get("attn_logit_softcapping") is not None:
            from luminal.models.checkpoint import UnsupportedModelError

            raise UnsupportedModelError("Gemma 3 with attn_logit_softcapping is not supported (Gemma 2 style)")
        return cls(
            vocab_size=c["vocab_size"], dim=c["hidden_size"], n_layers=n, n_heads=c["num_attention_heads"],
            n_kv_heads=c["num_key_value_heads"], hidden=c["intermediate_size"], head_dim=c.get("head_dim", 256),
            norm_eps=c.get("rms_norm_eps", 1e-6), query_pre_attn_scalar=c.get("query_pre_attn_scalar", 256),
            sliding_window=c.get("sliding_window", 512), layer_types=tuple(types), rope_global=glob, rope_local=local,
            final_softcap=c.get("final_logit_softcapping"), act=c.get("hidden_activation", "gelu_pytorch_tanh"),
        )  # fmt: skip


CONFIGS = {"gemma-3-1b": Config()}
# transformers' Gemma3TextConfig defaults, which multimodal config.json files leave out of text_config
TEXT_DEFAULTS = {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                 "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "rms_norm_eps": 1e-6,
                 "query_pre_attn_scalar": 256, "sliding_window": 4096, "rope_theta": 1000000.0,
                 "rope_local_base_freq": 10000.0}  # fmt: skip


class Block:
    def __init__(self, g: lm.Graph, cfg: Config, i: int, capacity: int, dtype: lm.DType):
        p, eps = f"model.layers.{i}", cfg.norm_eps
        self.sliding = cfg.sliding[i]
        cache = nn.KVCache(f"cache.{i}", cfg.n_kv_heads, capacity, cfg.head_dim, dtype)
        self.attn = nn.Attention(g, f"{p}.self_attn", cfg.dim, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cache,
                                 qk_norm=eps, qk_norm_offset=True, scale=cfg.query_pre_attn_scalar**-0.5,
                                 window=cfg.sliding_window if self.sliding else None, dtype=dtype)  # fmt: skip
        self.mlp = nn.GatedMLP(g, f"{p}.mlp", cfg.dim, cfg.hidden, cfg.act, dtype=dtype)
        norm = lambda n: nn.RMSNorm(g, f"{p}.{n}", cfg.dim, eps, offset=True, dtype=dtype)  # noqa: E731
        self.input_norm, self.post_attn_norm = norm("input_layernorm"), norm("post_attention_layernorm")
        self.pre_mlp_norm, self.post_mlp_norm = norm("pre_feedforward_layernorm"), norm("post_feedforward_layernorm")

    def __call__(self, x: lm.GraphTensor, ropes: dict[bool, nn.RoPE], past) -> lm.GraphTensor:
        h = x + self.post_attn_norm(self.attn(self.input_norm(x), ropes[self.sliding], past))
        return h + self.post_mlp_norm(self.mlp(self.pre_mlp_norm(h)))


class Transformer:
    """Token ids (s,) at past length p -> f32 logits (r, vocab) for the positions in `rows`; weights,
    activations and the KV cache in `dtype` (norms, rotary, GeGLU, softmax and soft-cap in f32)."""

    def __init__(self, cfg: Config, capacity: int, dtype: object = lm.f32):
        self.cfg, self.capacity, self.dtype = cfg, capacity, lm.dtype.to_dtype(dtype)
        g = self.graph = lm.Graph()
        s, p = dim("s"), dim("p")
        tokens, rows = g.tensor("tokens", ("s",), lm.i32), g.tensor("rows", ("r",), lm.i32)
        embed = nn.Embedding(g, "model.embed_tokens", cfg.vocab_size, cfg.dim, self.dtype)
        ropes = {
            False: nn.RoPE(g, "rope_global", cfg.head_dim, p, s),
            True: nn.RoPE(g, "rope_local", cfg.head_dim, p, s),
        }
        x = embed(tokens) * float(math.sqrt(cfg.dim))  # (s, dim); the scale rounds to dtype, as in HF
        for i in range(cfg.n_layers):
            x = Block(g, cfg, i, capacity, self.dtype)(x, ropes, p)
        final_norm = nn.RMSNorm(g, "model.norm", cfg.dim, cfg.norm_eps, offset=True, dtype=self.dtype)
        logits = embed.attend(final_norm(x.gather(rows, axis=0))).cast(lm.f32)  # (r, vocab), tied
        if cfg.final_softcap is not None:
            logits = (logits * (1.0 / cfg.final_softcap)).tanh() * cfg.final_softcap
        logits.output("logits")

    @property
    def cache_shapes(self) -> dict[str, tuple[int, ...]]:
        shape = (self.cfg.n_kv_heads, self.capacity, self.cfg.head_dim)
        return {f"cache.{i}.{kv}": shape for i in range(self.cfg.n_layers) for kv in "kv"}

    def extra_inputs(self) -> dict:
        return {"rope_global.inv_freq": inv_freq(self.cfg.rope_global, self.cfg.head_dim),
                "rope_local.inv_freq": inv_freq(self.cfg.rope_local, self.cfg.head_dim)}  # fmt: skip

    def weight_shapes(self) -> dict:
        return graph_weights(self.graph, [*self.cache_shapes, *self.extra_inputs()])


ARCHITECTURES = {"Gemma3ForCausalLM": "gemma3", "Gemma3ForConditionalGeneration": "gemma3 (text tower only)"}


def _text_tower(name: str) -> list[str]:
    """Where a text-model tensor lives: Gemma3ForCausalLM, transformers 5 multimodal, original multimodal."""
    rest = name.removeprefix("model.")
    return [name, f"model.language_model.{rest}", f"language_model.model.{rest}"]


def load(model_dir, backend: str = "auto", max_seq: int = 512, dtype: object = "auto") -> CausalLM:
    return load_hf(model_dir, backend, max_seq, Config, ARCHITECTURES, Transformer, _text_tower, dtype)


def load_random(preset: str, backend: str = "auto", max_seq: int = 512, layers: int | None = None, seed: int = 0,
                dtype: object = "auto") -> CausalLM:  # fmt: skip
    return load_random_preset(CONFIGS[preset], backend, max_seq, layers, seed, Transformer, dtype)


def main(argv: list[str] | None = None) -> None:
    lm_main(argv, "gemma", load, load_random, CONFIGS)


if __name__ == "__main__":
    main()
