"""Compile cache reuse: what must not invalidate a plan (weight values, dims inside a bucket) does
not; what must (a rule's text) does; a warm start neither saturates nor measures."""

from __future__ import annotations

import numpy as np

from luminal.egraph import program, run
from tests.egraph.test_roll import decoder, feed_for

BUCKETS = {"s": [(1, 1), (2, 16)]}


def _compile(**kw):
    return decoder(3).compile("reference", buckets=BUCKETS, **kw)


def test_new_weight_values_and_prompt_lengths_reuse_the_plan(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    cold = _compile()
    assert cold.stats["cache_hit"] is False
    warm = _compile()  # a new process would see the same: the key is the program, not the data
    assert warm.stats["cache_hit"] is True
    assert all(b["cache"] == "plan" for b in warm.stats["buckets"])
    assert [p.fingerprint() for p in warm.plans] == [p.fingerprint() for p in cold.plans]
    for seed, s in ((0, 2), (1, 3), (2, 4)):  # other weights, other prompt lengths in bucket (2, 16)
        feed = feed_for(decoder(3), seed=seed, s=s)
        a, b = warm.run(feed, dims={"p": 1}), cold.run(feed, dims={"p": 1})
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])


def test_warm_start_runs_no_egglog_and_measures_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    _compile()

    def no_egglog(*a, **k):
        raise AssertionError("a warm compile must not saturate")

    monkeypatch.setattr("luminal.egraph.compile.saturate", no_egglog)
    monkeypatch.setattr(run, "saturate", no_egglog)
    warm = _compile()
    assert warm.stats["phases"] == [] and "profiling" not in warm.stats


def test_editing_a_rule_file_is_a_miss(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    _compile()
    original = program._core

    def edited(name: str) -> str:
        text = original(name)
        return text + "\n; an edit\n" if name == "cleanup.egg" else text

    monkeypatch.setattr(program, "_core", edited)
    again = _compile()
    assert again.stats["cache_hit"] is False and all(b["cache"] == "miss" for b in again.stats["buckets"])


def test_warm_start_in_a_new_process_never_imports_egglog(tmp_path, monkeypatch):
    """Issue 12 item 4: a warm compile (a new process, plans on disk) loads them without egglog at all:
    not run, not even imported (importing it costs seconds on a loaded machine)."""
    import subprocess
    import sys
    from pathlib import Path

    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    _compile()
    code = (
        "import sys; from tests.egraph.test_cache_reuse import _compile; m = _compile(); "
        "print(m.stats['cache_hit'], sorted(k for k in sys.modules if k.split('.')[0] == 'egglog'))"
    )
    root = Path(__file__).parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True)
    assert out.stdout.split()[0] == "True" and out.stdout.strip().endswith("[]"), out.stdout + out.stderr
