"""CPU: the CUDA backend's per-op measuring for search (luminal/backends/cuda/backend.py `measure`):
kernels of every measured plan compiled in one batch with the executor's own dims slots, costs net of
the timing overhead, a plan that cannot be built reported (not raised)."""

from __future__ import annotations

import pytest

from luminal.backends.cuda import backend as cb
from luminal.backends.cuda import runtime
from luminal.egraph.costs import one_op_plan
from luminal.errors import BackendError
from tests.backends.cuda import fake_driver
from tests.backends.cuda.graphs import build
from tests.backends.cuda.test_lowering import CpuCudaBackend
from tests.backends.cuda.test_runtime_cpu import plan


def _one_op_plans():
    g, _ = build("reduce_f32")
    llir = plan(g)
    return [one_op_plan(llir, i) for i, n in enumerate(llir.nodes) if n.inputs and type(n.op).__name__ != "Output"]


def test_precompile_batches_every_kernel_with_the_executors_slots(fake, monkeypatch):
    plans = _one_op_plans()
    calls = []
    monkeypatch.setattr(runtime, "load_kernels", lambda ks: calls.append([k.code for k in ks]) or {})
    cb._precompile(plans)
    assert len(calls) == 1  # one NVRTC program for all plans
    for p in plans:  # exactly the code each plan's executor asks for
        asked = []
        monkeypatch.setattr(
            runtime, "load_kernels", lambda ks, a=asked: a.extend(k.code for k in ks) or fake_driver.load_kernels(ks)
        )
        runtime.CudaExecutor(p.nodes)
        assert asked and set(asked) <= set(calls[0])


class Timed(CpuCudaBackend):
    """Deterministic 'timings': 1 us fixed + 2 us per kernel; plans with a Gather fail to build."""

    def profile(self, llir, env):
        if any("Gather" in type(n.op).__name__ for n in llir.nodes):
            raise BackendError("NVRTC: error in the gather kernel (test)")
        return 1e-6 + 2e-6 * sum(1 for n in llir.nodes if type(n.op).__name__ not in ("Input", "Output"))


def test_measure_is_net_of_the_timing_overhead_and_reports_failures():
    plans = _one_op_plans()
    got = Timed().measure(plans, {"s": 5})
    assert len(got) == len(plans)
    for p, v in zip(plans, got, strict=True):
        if any("Gather" in type(n.op).__name__ for n in p.nodes):
            assert isinstance(v, str) and "gather kernel" in v
        else:
            assert v == pytest.approx(2e-6)  # one launch of one kernel: the fixed 1 us is removed
    assert any(isinstance(v, str) for v in got) and any(not isinstance(v, str) for v in got)


@pytest.mark.cuda
def test_rolled_stack_on_the_gpu_matches_the_reference(tmp_path, monkeypatch):
    """GPU: a rolled 3-layer stack compiled for cuda (per-op measured search, two buckets) equals the
    reference plan; a second compile is a warm hit that measures nothing."""
    import numpy as np

    from luminal.egraph import costs
    from tests.egraph.test_roll import decoder, feed_for

    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    costs.clear_memo()
    buckets = {"s": [(1, 1), (2, 8)]}
    cold = decoder(3).compile("cuda", buckets=buckets)
    st = cold.stats
    assert st["rolled"]["bodies"][0]["layers"] == 3 and st["profiling"]["ops_measured"] > 0
    nv = st["backend_counters"]  # NVRTC: compiled now, or found in the in-process / disk kernel cache
    assert nv["compiles"] + nv["memory_hits"] + nv["disk_hits"] >= 1
    ref = decoder(3).compile("reference", buckets=buckets)
    for s in (1, 3):
        feed = feed_for(decoder(3), seed=s, s=s)
        want, got = ref.run(feed, dims={"p": 2}), cold.run(feed, dims={"p": 2})
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=2e-3, atol=2e-3, err_msg=f"s={s} {k}")
    costs.clear_memo()
    warm = decoder(3).compile("cuda", buckets=buckets)
    assert warm.stats["cache_hit"] is True and "profiling" not in warm.stats
