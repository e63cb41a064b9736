"""Hugging Face models through `torch.compile(model, backend="luminal")`: tiny random-weight Llama,
Qwen3, Gemma 3 and Whisper built offline from configs, checked against eager transformers for
several sequence lengths with one compile (forward without a cache), and a StaticCache decode loop
whose logits and cache contents match eager step by step with no recompile per token."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import luminal.torch as lt  # noqa: E402

RTOL, ATOL = 1e-4, 1e-4  # f32 model outputs (tests/models/conftest.py, docs/numerics.md)
LM = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
          num_key_value_heads=2, head_dim=8, max_position_embeddings=64)  # fmt: skip


def _llama():
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**LM))


def _qwen3():
    return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**LM))


def _gemma3():
    cfg = transformers.Gemma3TextConfig(**LM, sliding_window=4, query_pre_attn_scalar=8)
    return transformers.Gemma3ForCausalLM(cfg)


CAUSAL = {"llama": _llama, "qwen3": _qwen3, "gemma3": _gemma3}


def _model(build):
    torch.manual_seed(0)
    m = build().eval()
    m.config._attn_implementation = "sdpa"
    return m


def _close(got, want, what):
    torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL, msg=lambda m: f"{what}: {m}")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _compiled(model):
    return torch.compile(model, backend="luminal", dynamic=True, options={"backend": "reference"})


@pytest.mark.parametrize("name", list(CAUSAL))
def test_forward_one_compile_many_lengths(name):
    m = _model(CAUSAL[name])
    fast = _compiled(m)
    before = lt.counters["compiles"]
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for n in (3, 6, 9):
            ids = torch.randint(0, LM["vocab_size"], (1, n), generator=gen)
            _close(
                fast(input_ids=ids, use_cache=False).logits, m(input_ids=ids, use_cache=False).logits, f"{name} s={n}"
            )
    assert lt.counters["compiles"] - before == 1, "one luminal compile must serve every length"


def _decode(model, cfg, ids, steps: int):
    cache = transformers.StaticCache(config=cfg, max_cache_len=16)
    n, dev = ids.shape[1], ids.device
    out = model(input_ids=ids, past_key_values=cache, use_cache=True, cache_position=torch.arange(n, device=dev))
    logits = [out.logits]
    tok = out.logits[:, -1:].argmax(-1)
    for pos in range(n, n + steps):
        out = model(
            input_ids=tok, past_key_values=cache, use_cache=True, cache_position=torch.tensor([pos], device=dev)
        )
        logits.append(out.logits)
        tok = out.logits[:, -1:].argmax(-1)
    return logits, cache


@pytest.mark.parametrize("name", list(CAUSAL))
def test_static_cache_decode(name):
    m = _model(CAUSAL[name])
    fast = _compiled(m)
    before = lt.counters["compiles"]
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for n in (5, 7):  # two prompt lengths (both past gemma3's window): prefill and decode graphs reused
            ids = torch.randint(0, LM["vocab_size"], (1, n), generator=gen)
            got, got_cache = _decode(fast, m.config, ids, steps=3)
            want, want_cache = _decode(m, m.config, ids, steps=3)
            for k, (g, w) in enumerate(zip(got, want, strict=True)):
                _close(g, w, f"{name} prompt {n} step {k}")
            for layer_g, layer_w in zip(got_cache.layers, want_cache.layers, strict=True):
                _close(layer_g.keys, layer_w.keys, f"{name} key cache")
                _close(layer_g.values, layer_w.values, f"{name} value cache")
    assert lt.counters["compiles"] - before == 2, "prefill (any length) + decode (one token): two compiles in all"


def _whisper():
    cfg = transformers.WhisperConfig(
        vocab_size=96, num_mel_bins=8, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, d_model=16, max_source_positions=6,
        max_target_positions=32, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
    )  # fmt: skip
    return transformers.WhisperForConditionalGeneration(cfg)


def test_whisper_forward_one_compile_many_lengths():
    m = _model(_whisper)
    fast = _compiled(m)
    before = lt.counters["compiles"]
    gen = torch.Generator().manual_seed(3)
    feats = torch.randn(1, 8, 12, generator=gen)  # (batch, mel bins, 2 * max_source_positions)
    with torch.no_grad():
        for n in (2, 4, 7):
            dec = torch.randint(0, 96, (1, n), generator=gen)
            got = fast(input_features=feats, decoder_input_ids=dec, use_cache=False).logits
            _close(got, m(input_features=feats, decoder_input_ids=dec, use_cache=False).logits, f"whisper s={n}")
    assert lt.counters["compiles"] - before == 1


def test_whisper_static_cache_decode():
    """The decoder loop over an EncoderDecoderCache of StaticCaches (self and cross attention)."""
    m = _model(_whisper)
    cfg, gen = m.config, torch.Generator().manual_seed(4)
    fast = _compiled(m)
    before = lt.counters["compiles"]

    def run(model, enc, dec, steps=3):
        cache = transformers.EncoderDecoderCache(
            transformers.StaticCache(config=cfg, max_cache_len=16),
            transformers.StaticCache(config=cfg, max_cache_len=6),
        )
        n = dec.shape[1]
        kw = dict(encoder_outputs=(enc,), past_key_values=cache, use_cache=True)
        out = model(decoder_input_ids=dec, cache_position=torch.arange(n), **kw)
        logits, tok = [out.logits], out.logits[:, -1:].argmax(-1)
        for pos in range(n, n + steps):
            out = model(decoder_input_ids=tok, cache_position=torch.tensor([pos]), **kw)
            logits.append(out.logits)
            tok = out.logits[:, -1:].argmax(-1)
        return logits

    with torch.no_grad():
        enc = m.model.encoder(torch.randn(1, 8, 12, generator=gen)).last_hidden_state
        for n in (3, 5):
            dec = torch.randint(0, 96, (1, n), generator=gen)
            for k, (g, w) in enumerate(zip(run(fast, enc, dec), run(m, enc, dec), strict=True)):
                _close(g, w, f"whisper prompt {n} step {k}")
    assert lt.counters["compiles"] - before == 2
