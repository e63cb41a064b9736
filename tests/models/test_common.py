from __future__ import annotations

import io

import ml_dtypes
import numpy as np
import pytest

import luminal as lm
from luminal.models import gemma, llama, qwen
from luminal.models.common import TextStream, load_random_preset, random_weights
from luminal.models.engine import Sampler, Stats
from tests.models.conftest import GOLDENS
from tests.models.decoder_checks import check_dtypes, recording


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


@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16, np.float16])
def test_random_weights_dtypes_never_zero_nor_constant_and_seeded(dt):
    names = {"a.weight": ((300, 40), dt), "n.norm.weight": ((40,), dt), "b.bias": ((40,), dt)}
    w = dict(random_weights(names, seed=1))
    for name, (shape, _) in names.items():
        a = w[name].astype(np.float32)
        assert w[name].shape == shape and w[name].dtype == dt, name
        assert np.all(a != 0) and np.unique(a).size > 8, name  # bf16 near 1 has steps of 2^-7
    assert abs(w["a.weight"].astype(np.float32).std() - 0.02) < 0.002
    assert abs(w["n.norm.weight"].astype(np.float32).mean() - 1) < 0.02
    again = dict(random_weights(names, seed=1))
    assert all(np.array_equal(w[n], again[n]) for n in names)
    other = dict(random_weights(names, seed=2))
    assert not np.array_equal(w["a.weight"], other["a.weight"])
    reordered = random_weights(dict(reversed(names.items())), seed=1)
    assert all(np.array_equal(w[n], reordered[n]) for n in names)  # a tensor depends on (seed, name) only


def test_tiled_repeats_the_pool_from_an_offset():
    from luminal.models.common import tiled

    pool = np.arange(7, dtype=np.float32).astype(ml_dtypes.bfloat16)
    for off in (0, 3, 6):
        for n in (0, 1, 6, 7, 8, 29, 64):
            np.testing.assert_array_equal(tiled(pool, off, n), pool[(off + np.arange(n)) % 7], f"{off=} {n=}")


def test_random_weights_tile_a_pool_so_big_presets_are_fast():
    import time

    from luminal.models.common import POOL

    names = {f"l{i}.weight": ((4096, 4096), ml_dtypes.bfloat16) for i in range(4)}  # 67M values
    t0 = time.perf_counter()
    arrays = list(random_weights(names).values())
    elapsed = time.perf_counter() - t0
    assert elapsed < 10, elapsed  # drawing 67M normals would take several seconds more on this box
    flat = arrays[0].reshape(-1)
    np.testing.assert_array_equal(flat[:1000], flat[POOL : POOL + 1000])  # the documented period
    assert not np.array_equal(arrays[0][:8], arrays[1][:8])  # each tensor starts elsewhere in the pool


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


# -- dtypes and weight binding ---------------------------------------------------------------------
def test_resolve_dtype_auto_follows_the_checkpoint_on_cuda_only():
    from luminal.models.common import config_dtype, resolve_dtype

    assert resolve_dtype("auto", "reference", "bfloat16") == lm.f32
    assert resolve_dtype("auto", "cuda", "bfloat16") == lm.bf16
    assert resolve_dtype("auto", "cuda", "float16") == lm.f16
    assert resolve_dtype("auto", "cuda", None) == lm.f32
    assert resolve_dtype("bf16", "reference", "float32") == lm.bf16
    with pytest.raises(lm.DTypeError, match="f64"):
        resolve_dtype("f64", "reference")
    assert config_dtype({"torch_dtype": "bfloat16"}) == "bfloat16"
    assert config_dtype({"text_config": {"dtype": "bfloat16"}}) == "bfloat16"
    assert config_dtype({"dtype": "float16", "torch_dtype": "float32"}) == "float16"  # transformers 5 key first


def test_auto_dtype_without_a_config_key_is_the_stored_one(copy_golden, monkeypatch):
    import json

    from luminal.models import common
    from luminal.models.checkpoint import Safetensors
    from tests.models.test_checkpoint import _write_safetensors

    d = copy_golden("qwen2")
    st = Safetensors.from_dir(d)
    _write_safetensors(d / "model.safetensors", {k: np.array(st[k]).astype(ml_dtypes.bfloat16) for k in st})
    cfg = {k: v for k, v in json.loads((d / "config.json").read_text()).items() if k not in ("dtype", "torch_dtype")}
    (d / "config.json").write_text(json.dumps(cfg))
    monkeypatch.setattr(common, "resolve_backend", lambda b: "cuda")  # `auto` as on a GPU machine...
    graphs: list = []
    monkeypatch.setattr(llama, "Transformer", recording(llama.Transformer, graphs))
    qwen.load(d, backend="reference").logits([1, 2])  # ...while running on the reference backend
    check_dtypes(graphs[0], lm.bf16)


def test_weights_stream_one_tensor_at_a_time_without_copying_stored_dtype(tmp_path):
    from luminal.models.checkpoint import Safetensors, stream
    from luminal.models.common import bind_weights
    from tests.models.test_checkpoint import _write_safetensors

    a = np.arange(6, dtype=np.float32).reshape(2, 3).astype(ml_dtypes.bfloat16)
    _write_safetensors(tmp_path / "m.safetensors", {"a": a, "b": np.array([1.0, 1 / 3], np.float32)})
    src = Safetensors([tmp_path / "m.safetensors"])
    names = {"a": ((2, 3), np.dtype(ml_dtypes.bfloat16)), "b": ((2,), np.dtype(ml_dtypes.bfloat16))}

    class Runtime:  # a CompiledModel that binds at once (the engine's CompiledModel.bind)
        calls: list = []

        def bind(self, inputs):
            self.calls.append({k: (v.dtype, isinstance(v.base, np.memmap)) for k, v in inputs.items()})

    fallback: list = []
    bind_weights(Runtime(), stream(names, src), fallback.append)
    bf16 = np.dtype(ml_dtypes.bfloat16)
    assert Runtime.calls == [{"a": (bf16, True)}, {"b": (bf16, False)}] and fallback == []  # a: the mapped file
    bind_weights(object(), stream(names, src), fallback.append)  # no bind(): the fallback gets each tensor
    assert [list(f) for f in fallback] == [["a"], ["b"]]
    np.testing.assert_array_equal(fallback[1]["b"].astype(np.float32), [1.0, 0.333984375])  # rounded to bf16


def test_bf16_stored_checkpoint_equals_converted_one(copy_golden):
    from luminal.models.checkpoint import Safetensors
    from tests.models.conftest import golden
    from tests.models.test_checkpoint import _write_safetensors

    d = copy_golden("qwen3")
    st = Safetensors.from_dir(d)
    _write_safetensors(d / "model.safetensors", {k: np.array(st[k]).astype(ml_dtypes.bfloat16) for k in st})
    ids = golden("qwen3")["input_ids"].tolist()
    stored = qwen.load(d, backend="reference", dtype="bf16")
    np.testing.assert_array_equal(stored.logits(ids), qwen.load(GOLDENS / "qwen3", backend="reference",
                                                                dtype="bf16").logits(ids))  # fmt: skip


def test_random_preset_in_bf16_runs_with_a_bf16_cache():
    from dataclasses import replace

    cfg = replace(gemma.CONFIGS["gemma-3-1b"], vocab_size=300, dim=32, hidden=64, n_heads=2, n_kv_heads=1,
                  head_dim=16, sliding_window=4)  # fmt: skip
    graphs: list = []
    model = load_random_preset(cfg, "reference", 16, 2, 0, recording(gemma.Transformer, graphs), "bf16")
    check_dtypes(graphs[0], lm.bf16)  # weights and the KV cache
    out = model.generate([1, 2, 3], 3, stop_ids=())
    assert len(out) == 3 and all(0 <= t < 300 for t in out)
    logits = model.logits([1, 2, 3])
    assert logits.dtype == np.float32 and np.isfinite(logits).all() and logits.std() > 0


# -- generation length and the CLI error rule -------------------------------------------------------
def test_zero_new_tokens_generates_none():

    model = llama.load(GOLDENS / "llama", backend="reference")
    assert model.generate([5, 6, 7], 0) == [] and model.stats.new_tokens == 0
    with pytest.raises(lm.InputError, match="max_new_tokens"):
        model.generate([5, 6, 7], -1)


def test_cli_max_new_tokens_zero_prints_no_token(capsys):
    llama.main(["--model", str(GOLDENS / "llama"), "--prompt", "x", "--max-new-tokens", "0", "--backend", "reference"])
    captured = capsys.readouterr()
    assert "+ 0 tokens" in captured.err
    assert captured.out.strip().startswith("(no tokenizer.json: random prompt ids")
    with pytest.raises(SystemExit):
        llama.main(["--model", str(GOLDENS / "llama"), "--max-new-tokens", "-1"])
    assert "must be >= 0" in capsys.readouterr().err


def test_cli_error_after_loading_is_one_error_line(capsys):
    # 8 random prompt ids + 4 new tokens do not fit a KV cache of 6: generate() raises InputError
    argv = ["--model", str(GOLDENS / "llama"), "--max-seq", "6", "--max-new-tokens", "4", "--backend", "reference"]
    with pytest.raises(SystemExit) as e:
        llama.main(argv)
    assert isinstance(e.value.code, str) and e.value.code.startswith("error: ") and "capacity 6" in e.value.code
    assert "\n" not in e.value.code


def test_cli_bad_dtype_option_and_bad_checkpoint(tmp_path, capsys):
    with pytest.raises(SystemExit):
        qwen.main(["--model", str(GOLDENS / "qwen3"), "--dtype", "f64"])
    assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        gemma.main(["--model", str(tmp_path), "--backend", "reference"])
    assert e.value.code.startswith("error: ") and "config.json" in e.value.code


def test_module_cli_subprocess_has_no_traceback():
    import subprocess
    import sys

    argv = ["-m", "luminal.models.llama", "--model", str(GOLDENS / "llama"), "--max-seq", "6", "--backend", "reference"]
    root = GOLDENS.parents[2]  # this checkout, so the subprocess imports its luminal
    res = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=300, cwd=root)
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in res.stderr, res.stderr
