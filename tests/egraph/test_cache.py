"""Compile cache: a warm compile skips egglog and gives the identical plan; bad entries are rebuilt."""

from __future__ import annotations

import gzip
import json
import logging

import numpy as np
import pytest

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


def test_warm_stats_break_down_the_backend_and_the_plan_reads(tmp_path, monkeypatch):
    """A warm compile reports creating the backend (time_backend_s) and reading its stored plans
    (time_cache_s) apart, and LUMINAL_DEBUG's table shows both."""
    from luminal.egraph.compile import format_stats

    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    assert _compile().stats["time_cache_s"] >= 0.0  # cold: the miss was looked up too
    st = _compile().stats
    assert st["cache_hit"] is True and st["time_cache_s"] > 0.0 and st["time_backend_s"] > 0.0
    assert st["time_cache_s"] < st["time_total_s"]
    table = format_stats(st)
    assert "time_backend_s" in table and "time_cache_s" in table


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


def test_cache_root_that_is_a_file_compiles_without_cache(tmp_path, monkeypatch, caplog):
    """LUMINAL_CACHE naming a regular file: compile works uncached, the problem is logged once."""
    not_a_dir = tmp_path / "cache-file"
    not_a_dir.write_text("precious")
    monkeypatch.setenv("LUMINAL_CACHE", str(not_a_dir))
    with caplog.at_level(logging.WARNING, logger="luminal"):
        first, second = _compile(), _compile()
    assert first.stats["cache_hit"] is False and second.stats["cache_hit"] is False
    assert first.plans[0].fingerprint() == second.plans[0].fingerprint()
    warnings = [r for r in caplog.records if "not a usable directory" in r.getMessage()]
    assert len(warnings) == 1 and str(not_a_dir) in warnings[0].getMessage()
    assert not_a_dir.read_text() == "precious"
    monkeypatch.setenv("LUMINAL_CACHE", str(not_a_dir / "below"))  # a file as a parent: the same
    assert _compile().stats["cache_hit"] is False


def _rewrite(root, name: str, edit) -> None:
    """Replace the body of the cache file `name` by edit(body), with a correct checksum and key."""
    from luminal.egraph.cache import CompileCache

    (p,) = [p for p in _entry_files(root) if p.name.startswith(name)]
    raw = p.read_bytes()
    text = gzip.decompress(raw).decode() if p.suffix == ".gz" else raw.decode()
    head, _, body = text.partition("\n")
    key = json.loads(head)["key"]
    CompileCache(root)._store(key, p.name, edit(json.loads(body)), compressed=p.suffix == ".gz")


MALFORMED_PLANS = {
    "llir not an object": lambda b: b | {"llir": 5},
    "no llir": lambda b: {k: v for k, v in b.items() if k != "llir"},
    "no fingerprint": lambda b: {k: v for k, v in b.items() if k != "fingerprint"},
    "meta a list": lambda b: b | {"meta": [1, 2]},
    "meta count a string": lambda b: b | {"meta": b["meta"] | {"egraph_nodes": "many"}},
    "meta cost a string": lambda b: b | {"meta": b["meta"] | {"cost": "cheap"}},
    "nodes of wrong type": lambda b: b | {"llir": b["llir"] | {"nodes": "none"}},
    "body a list": lambda b: [b],
}
MALFORMED_EGRAPHS = {
    "no nodes": lambda b: {k: v for k, v in b.items() if k != "nodes"},
    "nodes a list": lambda b: b | {"nodes": list(b["nodes"])},
    "op not a string": lambda b: b | {"nodes": {k: v | {"op": 3} for k, v in b["nodes"].items()}},
    "dangling child": lambda b: b | {"nodes": {k: v | {"children": ["nowhere"]} for k, v in b["nodes"].items()}},
    "children a string": lambda b: b | {"nodes": {k: v | {"children": "x"} for k, v in b["nodes"].items()}},
    "no eclass": lambda b: b | {"nodes": {k: {"op": v["op"], "children": []} for k, v in b["nodes"].items()}},
    "class_data values": lambda b: b | {"class_data": {"a": 1}},
    "roots not strings": lambda b: b | {"root_eclasses": [1]},
}


@pytest.mark.parametrize("what", sorted(MALFORMED_PLANS))
def test_well_checksummed_malformed_plan_is_a_miss(what, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    cold = _compile()
    _rewrite(tmp_path, "plan-", MALFORMED_PLANS[what])
    with caplog.at_level(logging.WARNING, logger="luminal"):
        again = _compile()
    assert again.stats["buckets"][0]["cache"] == "egraph"  # the plan was rebuilt from the stored e-graph
    assert again.plans[0].fingerprint() == cold.plans[0].fingerprint()
    assert "ignoring unusable plan" in caplog.text
    assert _compile().stats["buckets"][0]["cache"] == "plan"  # and stored again, usable


@pytest.mark.parametrize("what", sorted(MALFORMED_EGRAPHS))
def test_well_checksummed_malformed_egraph_is_a_miss(what, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    cold = _compile()
    _rewrite(tmp_path, "egraph", MALFORMED_EGRAPHS[what])
    for p in _entry_files(tmp_path):
        if p.name.startswith("plan-"):
            p.unlink()  # force the e-graph to be read
    with caplog.at_level(logging.WARNING, logger="luminal"):
        again = _compile()
    assert again.stats["cache_hit"] is False and again.stats["phases"]  # saturated again
    assert again.plans[0].fingerprint() == cold.plans[0].fingerprint()
    assert "malformed e-graph" in caplog.text


def test_prune_survives_entries_vanishing(tmp_path, monkeypatch):
    """A concurrent prune may delete entries while this one lists them: never an exception."""
    from luminal.egraph import cache as cache_mod

    cache = cache_mod.CompileCache(tmp_path)
    plan = _compile(cache=False).plans[0]
    for i in range(4):
        cache.store_plan(f"{i:02d}" + "0" * 62, "s", plan, {})
    real_stat = type(tmp_path).stat

    def vanished(self, *a, **k):  # entry 01.. is deleted by another process between listing and stat
        if self.name.startswith("01") and len(self.name) == 64 and not k and not a:
            raise FileNotFoundError(str(self))
        return real_stat(self, *a, **k)

    monkeypatch.setattr(type(tmp_path), "stat", vanished)
    assert cache.prune(1) >= 1
    monkeypatch.undo()
    file_root = tmp_path / "f"
    file_root.write_text("x")
    assert cache_mod.CompileCache(file_root).prune(0) == 0 and file_root.read_text() == "x"


def test_bucket_keys_from_one_serialization_equal_separate_ones(tmp_path, monkeypatch):
    """The compiler serializes a region once and appends each bucket's bound facts (program.with_bounds):
    the keys equal those of serializing each bucket on its own, and differ between buckets."""
    from luminal.backends.base import get_backend
    from luminal.egraph import program as prog
    from luminal.egraph.cache import cache_key
    from luminal.egraph.compile import CompileOptions, _Compilation, _version

    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    g = lm.Graph()
    causal_attention(g)
    be = get_backend("reference")
    comp = _Compilation(g, be, CompileOptions(roll=False))
    keys = []
    for bounds in ({"s": (1, 1)}, {"s": (2, 64)}, {}):
        gp, key = comp._program("graph", g, bounds)
        alone = prog.serialize_graph(g, comp.registry, bounds)
        assert gp.commands == alone.commands
        assert key == cache_key(comp.head + alone.text + comp.phases_text, be.name, be.device, _version(be))
        keys.append(key)
    assert len(set(keys)) == 3
    assert len(comp.bases) == 1  # one serialization for the three buckets
