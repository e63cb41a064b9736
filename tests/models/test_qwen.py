from __future__ import annotations

from luminal.models import qwen
from tests.models.decoder_checks import check_cache_equals_recompute, check_golden


def test_qwen2_golden_prefill_and_decode():
    check_golden(qwen.load, "qwen2")  # q/k/v biases, tied embeddings


def test_qwen3_golden_prefill_and_decode():
    check_golden(qwen.load, "qwen3")  # per-head q/k RMSNorm


def test_qwen2_bf16_golden():
    check_golden(qwen.load, "qwen2", "bf16")


def test_qwen3_bf16_golden():
    check_golden(qwen.load, "qwen3", "bf16")


def test_qwen3_cache_decode_equals_recompute():
    check_cache_equals_recompute(qwen.load, "qwen3")


def test_qwen_architectures_pick_bias_and_qk_norm():
    base = {"vocab_size": 8, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 8}
    q2 = qwen.Config.from_hf({**base, "architectures": ["Qwen2ForCausalLM"]})
    q3 = qwen.Config.from_hf({**base, "architectures": ["Qwen3ForCausalLM"]})
    assert q2.bias == (True, True, True, False) and not q2.qk_norm
    assert q3.bias == (False, False, False, False) and q3.qk_norm
