from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.models import llama
from tests.models.conftest import GOLDENS
from tests.models.decoder_checks import (
    check_cache_equals_recompute,
    check_dtypes,
    check_golden,
    check_one_compile_many_lengths,
)


def test_llama_golden_prefill_and_decode():
    check_golden(llama.load, "llama")  # llama3 rope scaling, untied lm_head


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_llama_16bit_golden_matches_transformers_in_that_dtype(dtype):
    check_golden(llama.load, "llama", dtype)


@pytest.mark.parametrize("dtype", [lm.f32, lm.bf16, lm.f16])
def test_llama_graph_weights_and_cache_in_the_model_dtype(dtype):
    cfg = llama.Config(vocab_size=64, dim=16, n_layers=1, n_heads=2, n_kv_heads=1, hidden=32, head_dim=8,
                       qk_norm=True, qkv_bias=True)  # fmt: skip
    check_dtypes(llama.Transformer(cfg, 8, dtype).graph, dtype)


def test_llama_cache_decode_equals_recompute():
    check_cache_equals_recompute(llama.load, "llama")


def test_llama_one_compile_serves_several_prompt_lengths():
    check_one_compile_many_lengths(llama.load, "llama")


def test_llama_config_reads_rope_parameters_and_rope_theta():
    base = {"vocab_size": 8, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 8}
    old = llama.Config.from_hf({**base, "rope_theta": 5e5, "rope_scaling": {"rope_type": "llama3", "factor": 32.0}})
    params = {"rope_theta": 5e5, "rope_type": "llama3", "factor": 32.0}
    new = llama.Config.from_hf({**base, "rope_theta": None, "rope_parameters": params})
    assert old.rope == new.rope and new.rope.theta == 5e5 and new.rope.kind == "llama3" and new.head_dim == 4


def test_llama_capacity_overflow_is_a_clear_error():
    model = llama.load(GOLDENS / "llama", backend="reference", max_seq=8)
    with pytest.raises(lm.InputError, match="capacity 8"):
        model.logits(np.arange(9).tolist())
