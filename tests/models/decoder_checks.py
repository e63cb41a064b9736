"""Checks every decoder-only golden runs through: prefill logits, greedy decode with the KV cache,
cache decode == full recompute, and one compile serving several prompt lengths."""

from __future__ import annotations

import numpy as np

from tests.models.conftest import GOLDENS, assert_close, golden


def check_golden(load, name: str) -> None:
    g = golden(name)
    model = load(GOLDENS / name, backend="reference")
    ids = g["input_ids"].tolist()
    assert_close(model.logits(ids), g["logits"], f"{name} prompt logits")
    out = model.generate(ids, 4, stop_ids=())
    assert out[:3] == g["decode_ids"].tolist(), f"{name} greedy tokens"
    decoder = model.decoder  # the same decode steps, teacher-forced, with their logits fetched
    decoder.reset()
    decoder.step(ids)
    steps = [decoder.step([t])[0] for t in g["decode_ids"].tolist()[: len(g["decode_logits"])]]
    assert_close(np.stack(steps), g["decode_logits"], f"{name} decode-step logits (KV cache)")


def check_cache_equals_recompute(load, name: str) -> None:
    """Logits of token t decoded one at a time with the cache == logits of the full sequence."""
    model = load(GOLDENS / name, backend="reference")
    ids = golden(name)["input_ids"].tolist()
    full = model.logits(ids)
    dec = model.decoder
    dec.reset()
    first = dec.step(ids[:5], rows=range(5))
    rest = [dec.step([t])[0] for t in ids[5:]]
    np.testing.assert_allclose(np.concatenate([first, np.stack(rest)]), full, rtol=1e-5, atol=1e-5)


def check_one_compile_many_lengths(load, name: str) -> None:
    model = load(GOLDENS / name, backend="reference")
    g = golden(name)
    compiled = model.decoder.model
    for n in (1, 3, 8, len(g["input_ids"])):
        assert_close(model.logits(g["input_ids"][:n].tolist()), g["logits"][:n], f"{name} prefix of {n} tokens")
    assert model.decoder.model is compiled
