"""Compile cache: a warm compile skips egglog and gives the identical plan; bad entries are rebuilt."""

from __future__ import annotations

import gzip
import logging

import numpy as np

import luminal as lm
from tests.egraph.test_equivalence import causal_attention


def _compile(**kw):
    g = lm.Graph()
    causal_attention(g)
    return g.compile("reference", **kw)


def _entry_files(root):
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_warm_hit_gives_identical_llir(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    cold = _compile()
    assert cold.stats["cache_hit"] is False and cold.stats["phases"]
    files = _entry_files(tmp_path)
    assert {p.name.split("-")[0] for p in files} == {"egraph.json.gz", "plan"}
    warm = _compile()
    assert warm.stats["cache_hit"] is True and warm.stats["phases"] == []
    assert warm.stats["time_saturate_s"] == 0.0
    assert [p.fingerprint() for p in warm.plans] == [p.fingerprint() for p in cold.plans]
    assert warm.plans[0].canonical() == cold.plans[0].canonical()


def test_other_search_settings_reuse_the_egraph(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    _compile()
    again = _compile(seed=7)
    assert again.stats["cache_hit"] is True and again.stats["buckets"][0]["cache"] == "egraph"


def test_corrupted_files_are_rebuilt(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    cold = _compile()
    for p in _entry_files(tmp_path):
        p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])  # truncated writes
    with caplog.at_level(logging.WARNING, logger="luminal"):
        rebuilt = _compile()
    assert rebuilt.stats["cache_hit"] is False
    assert "corrupt" in caplog.text
    assert rebuilt.plans[0].fingerprint() == cold.plans[0].fingerprint()
    assert _compile().stats["cache_hit"] is True  # and the rebuilt entry is good again


def test_tampered_payload_is_not_trusted(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    cold = _compile()
    (plan,) = [p for p in _entry_files(tmp_path) if p.name.startswith("plan-")]
    text = plan.read_text()
    plan.write_text(text.replace('"Mul"', '"Add"'))  # valid JSON, wrong checksum
    (eg,) = [p for p in _entry_files(tmp_path) if p.name == "egraph.json.gz"]
    eg.write_bytes(gzip.compress(b'{"format": 1, "key": "stale"}\n{}'))
    with caplog.at_level(logging.WARNING, logger="luminal"):
        again = _compile()
    assert again.stats["cache_hit"] is False
    assert again.plans[0].fingerprint() == cold.plans[0].fingerprint()


def test_cache_can_be_disabled(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE", "off")
    assert _compile().stats["cache_hit"] is False
    assert _compile().stats["cache_hit"] is False
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    _compile(cache=False)
    assert _entry_files(tmp_path) == []


def test_warm_model_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    rng = np.random.default_rng(0)
    w = {n: rng.standard_normal((8, 8)).astype(np.float32) for n in ("wq", "wk", "wv")}
    x = rng.standard_normal((5, 8)).astype(np.float32)
    a = _compile().run({"x": x, **w})["y"]
    b = _compile().run({"x": x, **w})["y"]
    np.testing.assert_array_equal(a, b)


def test_prune_keeps_the_newest_entries(tmp_path):
    import os

    from luminal.egraph.cache import CompileCache

    cache = CompileCache(tmp_path)
    for i in range(5):
        key = f"{i:02d}" + "0" * 62
        cache.store_plan(key, "s", _compile(cache=False).plans[0], {})
        os.utime(tmp_path / key[:2] / key, (i, i))
    assert cache.prune(3) == 2
    left = sorted(p.name[:2] for p in tmp_path.glob("*/*"))
    assert left == ["02", "03", "04"]
