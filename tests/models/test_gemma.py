from __future__ import annotations

import luminal as lm
from luminal.models import gemma
from tests.models.decoder_checks import (
    check_cache_equals_recompute,
    check_dtypes,
    check_golden,
    check_one_compile_many_lengths,
)


def test_gemma3_golden_prefill_and_decode():
    check_golden(gemma.load, "gemma3")  # sliding window 4 < prompt 12: the window mask matters


def test_gemma3_bf16_golden():
    check_golden(gemma.load, "gemma3", "bf16")  # embedding scale rounded to bf16 as HF does, f32 soft-cap


def test_gemma3_graph_weights_and_cache_in_bf16():
    cfg = gemma.Config(vocab_size=64, dim=16, n_layers=2, n_heads=2, n_kv_heads=1, hidden=32, head_dim=8,
                       sliding_window=4, final_softcap=30.0)  # fmt: skip
    check_dtypes(gemma.Transformer(cfg, 8, lm.bf16).graph, lm.bf16)


def test_gemma3_cache_decode_equals_recompute():
    check_cache_equals_recompute(gemma.load, "gemma3")


def test_gemma3_one_compile_serves_several_prompt_lengths():
    check_one_compile_many_lengths(gemma.load, "gemma3")


def test_gemma3_layer_types_from_pattern_and_old_rope_keys():
    c = {"vocab_size": 8, "hidden_size": 8, "num_hidden_layers": 7, "num_attention_heads": 2, "num_key_value_heads": 1,
         "intermediate_size": 8, "head_dim": 4, "rope_theta": 1e6, "rope_local_base_freq": 1e4,
         "sliding_window_pattern": 6}  # fmt: skip
    cfg = gemma.Config.from_hf(c)
    assert cfg.sliding == (True, True, True, True, True, False, True)
    assert cfg.rope_global.theta == 1e6 and cfg.rope_local.theta == 1e4


def test_gemma3_multimodal_checkpoint_loads_its_text_tower(copy_golden):
    import json

    import numpy as np

    from luminal.models.checkpoint import Safetensors
    from tests.models.conftest import assert_close, golden
    from tests.models.test_checkpoint import _write_safetensors

    d = copy_golden("gemma3")
    text = json.loads((d / "config.json").read_text())
    cfg = {"architectures": ["Gemma3ForConditionalGeneration"], "text_config": text, "vision_config": {}}
    (d / "config.json").write_text(json.dumps(cfg))
    st = Safetensors.from_dir(d)
    renamed = {"language_model." + k: np.array(st[k]) for k in st}  # the original hub layout
    renamed["vision_tower.patch.weight"] = np.zeros(3, np.float32)
    _write_safetensors(d / "model.safetensors", renamed)
    g = golden("gemma3")
    assert_close(gemma.load(d, backend="reference").logits(g["input_ids"].tolist()), g["logits"], "gemma3 text tower")
