from __future__ import annotations

import io

import numpy as np
import pytest

from luminal.models import llama
from luminal.models.common import TextStream, load_random_preset, random_weights
from luminal.models.engine import Sampler, Stats
from tests.models.conftest import GOLDENS


def test_generate_stops_at_stop_token_and_reports_stats():
    model = llama.load(GOLDENS / "llama", backend="reference")
    ids = [5, 6, 7]
    free = model.generate(ids, 5, stop_ids=())
    assert len(free) == 5
    out = model.generate(ids, 5, stop_ids=[free[1]])
    assert out == free[:2]
    line = model.stats.line()
    for key in ("TTFT", "TPOT", "tok/s", "compile"):
        assert key in line
    assert model.stats.new_tokens == 2 and len(model.stats.decode_s) == 1


def test_seeded_sampling_generation_is_reproducible():
    model = llama.load(GOLDENS / "llama", backend="reference")
    s = Sampler(temperature=1.0, top_k=20, top_p=0.9, seed=7)
    assert model.generate([1, 2, 3], 6, s, stop_ids=()) == model.generate([1, 2, 3], 6, s, stop_ids=())


def test_stats_line_formats():
    st = Stats(prompt_tokens=4, new_tokens=3, ttft_s=0.01, decode_s=[0.002, 0.004], compile_s=1.5)
    assert st.tpot_ms == pytest.approx(3.0)
    assert st.tokens_per_s == pytest.approx(3 / 0.016)


def test_text_stream_prints_increments():
    class Tok:
        def decode(self, ids, skip_special_tokens=True):
            return "".join("ab"[i] for i in ids)

    out = io.StringIO()
    stream = TextStream(Tok(), out)
    for t in (0, 1, 1):
        stream(t)
    assert out.getvalue() == "abb"


def test_random_weights_shapes_norms_and_biases():
    w = random_weights({"a.weight": ((3, 4), np.float32), "n.norm.weight": ((4,), np.float32),
                        "b.bias": ((4,), np.float32)}, seed=1)  # fmt: skip
    assert w["a.weight"].shape == (3, 4) and np.all(w["n.norm.weight"] == 1) and np.all(w["b.bias"] == 0)


def test_load_random_preset_truncated_runs():
    from dataclasses import replace

    cfg = replace(llama.CONFIGS["llama-3.2-1b"], vocab_size=512, dim=64, hidden=128, n_heads=4, n_kv_heads=2,
                  head_dim=16)  # fmt: skip
    model = load_random_preset(cfg, "reference", 32, 1, 0, llama.Transformer)
    assert len(model.generate([1, 2], 3, stop_ids=())) == 3


def test_cli_runs_a_checkpoint(capsys):
    llama.main(["--model", str(GOLDENS / "llama"), "--prompt", "x", "--max-new-tokens", "2",
                "--backend", "reference"])  # fmt: skip
    captured = capsys.readouterr()
    assert "TTFT" in captured.err


def test_progress_bars_only_on_a_terminal(monkeypatch):
    import sys

    from luminal.models.engine import progress

    items = [1, 2, 3]
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert progress(items, "x") is items
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert list(progress(items, "x")) == items and progress(items, "x") is not items


def test_generate_checks_capacity_up_front():
    import luminal as lm

    model = llama.load(GOLDENS / "llama", backend="reference", max_seq=10)
    with pytest.raises(lm.InputError, match="capacity 10"):
        model.generate(list(range(8)), 4)
    assert len(model.generate(list(range(8)), 3, stop_ids=())) == 3


def test_cli_streams_decoded_text_with_a_tokenizer(copy_golden, capsys):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    d = copy_golden("llama")
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(256)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins word-level pieces with spaces
    tok.save(str(d / "tokenizer.json"))
    llama.main(["--model", str(d), "--prompt", "w5 w6 w7", "--max-new-tokens", "3", "--backend", "reference"])
    out = capsys.readouterr()
    ids = llama.load(d, backend="reference").generate([5, 6, 7], 3, stop_ids=())
    assert out.out == "w5 w6 w7" + tok.decode(ids) + "\n"
    assert "TTFT" in out.err and "3 + 3 tokens" in out.err
