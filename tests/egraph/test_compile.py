"""The compile entry point: options, stats, LUMINAL_DEBUG / LUMINAL_DUMP, custom backends."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import luminal as lm
from luminal.backends.base import Backend, get_backend, register_backend
from luminal.backends.reference.backend import ReferenceBackend
from luminal.egraph.rulesets import main_cycle
from luminal.errors import BackendError, CompileError
from tests.egraph.test_equivalence import mlp

STATS = ("hlir_nodes egraph_nodes egraph_classes llir_nodes time_serialize_s time_saturate_s time_extract_s "
         "time_search_s time_total_s cache_hit").split()  # fmt: skip


def _mlp():
    g = lm.Graph()
    mlp(g)
    return g


def test_stats_hold_every_key():
    st = _mlp().compile("reference").stats
    for k in STATS:
        assert k in st, k
    assert st["egraph_nodes"] > st["hlir_nodes"] > 0 and st["llir_nodes"] > 0
    assert st["time_total_s"] >= st["time_saturate_s"] > 0
    assert st["phases"][0]["phase"] == "main" and st["phases"][0]["rules"]["numpy-matmul-2d"] == 3
    assert st["llir_ops"]["NumpyMatmul"] == 3


def test_debug_flag_logs_the_phase_table(monkeypatch, caplog):
    monkeypatch.setenv("LUMINAL_DEBUG", "1")
    with caplog.at_level(logging.INFO, logger="luminal"):
        _mlp().compile("reference")
    text = caplog.text
    assert "phase" in text and "main" in text and "time_saturate_s" in text and "drop-row-major=" in text


def test_dump_flag_writes_program_and_plan(monkeypatch, tmp_path):
    monkeypatch.setenv("LUMINAL_DUMP", str(tmp_path / "dump"))
    _mlp().compile("reference")
    names = sorted(p.suffix for p in (tmp_path / "dump").iterdir())
    assert names == [".egg", ".html"]
    egg = next((tmp_path / "dump").glob("*.egg")).read_text()
    assert "(let $root" in egg and "(ruleset matmul_backend)" in egg


def test_unknown_option_and_backend_are_errors():
    with pytest.raises(CompileError, match="unknown compile option"):
        _mlp().compile("reference", sead=1)
    with pytest.raises(BackendError, match="unknown backend"):
        _mlp().compile("tpu")


def test_reference_backend_satisfies_the_protocol():
    assert isinstance(ReferenceBackend(), Backend)
    assert isinstance(get_backend("reference"), ReferenceBackend)


class HlirOnly(ReferenceBackend):
    """A backend with no rewrites: the plan must be the HLIR itself."""

    name = "hlir-only"
    ops = ()
    rulesets = ()
    phases = main_cycle([])


def test_custom_backend_through_the_protocol():
    register_backend("hlir-only", HlirOnly)
    g = _mlp()
    model = g.compile("hlir-only")
    assert "NumpyMatmul" not in model.stats["llir_ops"] and model.stats["llir_ops"]["SumReduce"] == 3
    rng = np.random.default_rng(0)
    feed = {n: rng.standard_normal(tuple(int(d.evaluate({"s": 3})) for d in g.input_shapes[n])).astype(np.float32)
            for n in g.inputs}  # fmt: skip
    np.testing.assert_allclose(model.run(feed)["y"], g.compile("reference").run(feed)["y"], rtol=2e-5, atol=2e-6)


def test_graph_without_outputs_is_refused():
    g = lm.Graph()
    g.tensor("x", (2,))
    with pytest.raises(lm.InputError, match="no outputs"):
        g.compile("reference")
