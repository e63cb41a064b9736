"""Build tiny random-weight reference models with Hugging Face transformers and save their weights,
config and reference logits (a prompt plus three greedy decode steps) under tests/models/goldens/.

Runs in the project venv (torch 2.14.1 CPU + transformers 5.24), never in CI:

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/make_goldens.py

golden.safetensors holds `input_ids` (prompt), `logits` (prompt logits), `decode_ids` (3 greedy
tokens) and `decode_logits` (the logits each decode step produced, computed with HF's KV cache);
Whisper adds `input_features` and `encoder_out`. golden_bf16.safetensors and golden_f16.safetensors
hold the same for the saved (f32) checkpoint loaded by transformers in that dtype (`from_pretrained(
dtype=...)`, which rounds each weight to nearest even, as luminal's loader does) with eager attention,
the forward pass in that dtype; their float tensors are stored as f32 (exact).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    WhisperConfig,
    WhisperForConditionalGeneration,
)  # fmt: skip

OUT = Path(__file__).resolve().parent.parent / "tests" / "models" / "goldens"
VOCAB, PROMPT, STEPS = 256, 12, 3
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128, head_dim=16, bos_token_id=1, eos_token_id=2,
              pad_token_id=0)  # fmt: skip


def decoder_models() -> dict:
    llama3 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 32}  # fmt: skip
    return {
        "llama": LlamaForCausalLM(LlamaConfig(**COMMON, rope_parameters=llama3, rms_norm_eps=1e-5)),
        "qwen2": Qwen2ForCausalLM(Qwen2Config(**{**COMMON, "head_dim": 16}, tie_word_embeddings=True)),
        "qwen3": Qwen3ForCausalLM(Qwen3Config(**COMMON, tie_word_embeddings=True)),
        "gemma3": Gemma3ForCausalLM(Gemma3TextConfig(**COMMON, sliding_window=4, query_pre_attn_scalar=16,
                                                     layer_types=["sliding_attention", "full_attention"])),
    }  # fmt: skip


def perturb_norms(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Random norm scales and biases, so a loader that ignores one of them fails the golden test."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn(p.shape, generator=gen) * 0.1)


@torch.no_grad()
def decode_golden(model, ids: torch.Tensor) -> dict:
    out = model(ids, use_cache=True)
    logits, past = out.logits[0], out.past_key_values
    tok = logits[-1].argmax()
    steps, step_logits = [], []
    for _ in range(STEPS):
        steps.append(int(tok))
        out = model(tok.view(1, 1), past_key_values=past, use_cache=True)
        past = out.past_key_values
        step_logits.append(out.logits[0, -1])
        tok = out.logits[0, -1].argmax()
    decode_ids = torch.tensor(steps, dtype=torch.int32)
    return {"input_ids": ids[0].to(torch.int32), "logits": logits.contiguous(), "decode_ids": decode_ids,
            "decode_logits": torch.stack(step_logits)}  # fmt: skip


def save(name: str, model, golden: dict) -> None:
    d = OUT / name
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d, safe_serialization=True)
    (d / "generation_config.json").unlink(missing_ok=True)
    save_golden(d / "golden.safetensors", golden)


def save_golden(path: Path, golden: dict) -> None:
    save_file({k: (v.float() if v.is_floating_point() else v).contiguous() for k, v in golden.items()}, path)


def sixteen_bit(name: str, cls, golden_fn) -> None:
    """golden_{bf16,f16}.safetensors: the saved checkpoint run by transformers in that dtype."""
    d = OUT / name
    for tag, dt in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        model = cls.from_pretrained(d, dtype=dt, attn_implementation="eager").eval()
        save_golden(d / f"golden_{tag}.safetensors", golden_fn(model, dt))
    size = sum(f.stat().st_size for f in d.iterdir())
    print(f"{name}: {size / 1e3:.0f} kB -> {d}")


@torch.no_grad()
def whisper_golden(w, feats: torch.Tensor, dt: torch.dtype) -> dict:
    enc = w.model.encoder(feats.to(dt)).last_hidden_state
    dec_ids = torch.tensor([[1, 5, 7, 9]])
    out = w(encoder_outputs=(enc,), decoder_input_ids=dec_ids, use_cache=True)
    logits, past = out.logits[0], out.past_key_values
    tok, steps, step_logits = logits[-1].argmax(), [], []
    for _ in range(STEPS):
        steps.append(int(tok))
        out = w(encoder_outputs=(enc,), decoder_input_ids=tok.view(1, 1), past_key_values=past, use_cache=True)
        past, tok = out.past_key_values, out.logits[0, -1].argmax()
        step_logits.append(out.logits[0, -1])
    return {"input_features": feats[0], "encoder_out": enc[0], "input_ids": dec_ids[0].to(torch.int32),
            "logits": logits, "decode_ids": torch.tensor(steps, dtype=torch.int32),
            "decode_logits": torch.stack(step_logits)}  # fmt: skip


def main() -> None:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, VOCAB, (1, PROMPT), generator=gen)
    for name, model in decoder_models().items():
        model = model.eval()
        perturb_norms(model, gen)
        save(name, model, decode_golden(model, ids))
        sixteen_bit(name, type(model), lambda m, dt: decode_golden(m, ids))

    cfg = WhisperConfig(vocab_size=VOCAB, num_mel_bins=80, d_model=32, encoder_layers=2, decoder_layers=2,
                        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                        max_source_positions=50, max_target_positions=32, decoder_start_token_id=1, pad_token_id=0,
                        bos_token_id=1, eos_token_id=2, begin_suppress_tokens=None, suppress_tokens=None)  # fmt: skip
    w = WhisperForConditionalGeneration(cfg).eval()
    perturb_norms(w, gen)
    feats = torch.randn((1, 80, 2 * cfg.max_source_positions), generator=gen)
    save("whisper", w, whisper_golden(w, feats, torch.float32))
    sixteen_bit("whisper", WhisperForConditionalGeneration, lambda m, dt: whisper_golden(m, feats, dt))
    (OUT / "README.md").write_text(
        "Tiny random-weight models and reference logits from transformers "
        f"{__import__('transformers').__version__} / torch {torch.__version__}, made by scripts/make_goldens.py.\n"
    )
    print(json.dumps({"prompt": ids[0].tolist()}))


if __name__ == "__main__":
    main()
