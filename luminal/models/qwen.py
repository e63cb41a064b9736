"""Qwen2 / Qwen2.5 (q/k/v biases) and Qwen3 (per-head q/k RMSNorm, no biases) as luminal graphs.

Both are Llama-shaped decoders, so this file holds only their configs; the blocks are models/llama.py's.
"""

from __future__ import annotations

from dataclasses import replace

from luminal.models import llama
from luminal.models.common import CausalLM, lm_main, load_hf, load_random_preset
from luminal.nn.rope import RopeConfig


class Config(llama.Config):
    @classmethod
    def from_hf(cls, c: dict) -> llama.Config:
        cfg = llama.Config.from_hf(c)
        arch = (c.get("architectures") or [""])[0]
        if c.get("use_sliding_window"):
            from luminal.models.checkpoint import UnsupportedModelError

            raise UnsupportedModelError("Qwen with use_sliding_window=true is not supported")
        if arch.startswith("Qwen3"):
            return replace(cfg, qk_norm=True)  # attention_bias (if any) covers q, k, v and o
        return replace(cfg, qkv_bias=True, o_bias=False)  # Qwen2: q/k/v biases, none on o_proj


CONFIGS = {
    "qwen3-0.6b": llama.Config(vocab_size=151936, dim=1024, n_layers=28, n_heads=16, n_kv_heads=8, hidden=3072,
                               head_dim=128, norm_eps=1e-6, rope=RopeConfig(1000000.0), tie_embeddings=True,
                               qk_norm=True, eos_token_id=(151645, 151643)),
    "qwen2.5-0.5b": llama.Config(vocab_size=151936, dim=896, n_layers=24, n_heads=14, n_kv_heads=2, hidden=4864,
                                 head_dim=64, norm_eps=1e-6, rope=RopeConfig(1000000.0), tie_embeddings=True,
                                 qkv_bias=True, eos_token_id=(151645, 151643)),
}  # fmt: skip

ARCHITECTURES = {"Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}


def load(model_dir, backend: str = "auto", max_seq: int = 512, dtype: object = "auto") -> CausalLM:
    return load_hf(model_dir, backend, max_seq, Config, ARCHITECTURES, llama.Transformer, dtype=dtype)


def load_random(preset: str, backend: str = "auto", max_seq: int = 512, layers: int | None = None, seed: int = 0,
                dtype: object = "auto") -> CausalLM:  # fmt: skip
    return load_random_preset(CONFIGS[preset], backend, max_seq, layers, seed, llama.Transformer, dtype)


def main(argv: list[str] | None = None) -> None:
    lm_main(argv, "qwen", load, load_random, CONFIGS)


if __name__ == "__main__":
    main()
