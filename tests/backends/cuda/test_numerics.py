"""Issue 10's numerics on the CUDA backend. CPU: the lowered plans of the graphs below are CUDA
kernels only, compute what the reference computes (by the kernels' reference semantics), and every
kernel compiles with NVRTC for sm_90. GPU (`cuda` marker): the same graphs run on the device and
agree with the reference exactly where docs/numerics.md says so; an out-of-range index raises."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cuda import nvrtc
from luminal.backends.cuda.kernel import ERROR_SLOT, KernelOp, source
from luminal.backends.cuda.kernels.io import KernelConstant, c_literal
from luminal.egraph.compile import CompileOptions, compile_plans
from luminal.hlir import Constant
from tests.backends.cuda.test_lowering import CpuCudaBackend
from tests.helpers import assert_matches

cuda = pytest.mark.cuda
SLOTS = {"n": 0, ERROR_SLOT: 1}


# -- graphs -----------------------------------------------------------------------------------------
def constants_graph():
    g = lm.Graph()
    x, i = g.tensor("x", ("n",), lm.f64), g.tensor("i", ("n",), lm.i64)
    h, b, u = g.tensor("h", ("n",), lm.f16), g.tensor("b", ("n",), lm.bf16), g.tensor("u", ("n",), lm.u8)
    (x * 1e300).output("big")
    (x * 1e-50).output("tiny")
    (x * -0.0).output("negzero")
    (x + 0.1).output("tenth")
    (i + (2**50 + 2**26 + 1)).output("i53")
    (i - 2**62).output("i62")
    (h * 0.1).output("h")
    (b + 1 / 3).output("b")
    (255 - u).output("u")

    def feed(n, rng):
        return {"x": rng.uniform(-2, 2, n), "i": rng.integers(-1000, 1000, n),
                "h": rng.uniform(-2, 2, n).astype(np.float16), "b": rng.uniform(-2, 2, n).astype(lm.bf16.np),
                "u": rng.integers(0, 255, n).astype(np.uint8)}  # fmt: skip

    return g, feed


def gather_graph():
    g = lm.Graph()
    x, i = g.tensor("x", (3, "n")), g.tensor("i", (3, 1), lm.i64)
    x.take_along_axis(i, 1).output("y")
    x.gather(i.reshape(3), axis=1).output("z")

    def feed(n, rng):
        return {"x": rng.standard_normal((3, n)).astype(np.float32), "i": rng.integers(-n, n, (3, 1))}

    return g, feed


GRAPHS = {"constants": constants_graph, "gather": gather_graph}


# -- CPU ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", sorted(GRAPHS))
def test_lowered_plan_compiles_and_matches_reference(case, no_cache):
    g, feed = GRAPHS[case]()
    ex, (llir,), _ = compile_plans(g, CpuCudaBackend(), CompileOptions(cache=False, search_budget=2))
    kernels = [n.op for n in llir.nodes if isinstance(n.op, KernelOp)]
    image = nvrtc.compile_cubin(source([k.render(SLOTS) for k in kernels]), arch="sm_90", name=f"{case}.cu")
    assert image[:4] == b"\x7fELF"
    ref = g.compile("reference", cache=False)
    rng = np.random.default_rng(0)
    for n in (1, 7):
        f = feed(n, rng)
        got, want = ex.run(f, {"n": n}), ref.run(f)
        for name, arr in want.items():
            dt = g.nodes[g.outputs[name]].dtype
            assert_matches(np.asarray(got[name]).reshape(arr.shape), arr, dt, 0.0, f"{case}/{name}")


CONSTANTS = [(1e300, lm.f64), (2.0**-1074, lm.f64), (-0.0, lm.f64), (float("nan"), lm.f64),
             (float("-inf"), lm.f64), (0.1, lm.f32), (0.1, lm.f16), (1 / 3, lm.bf16), (448.0, lm.f8e4m3),
             (2**62 + 1, lm.i64), (-(2**63), lm.i64), (-128, lm.i8), (255, lm.u8), (-(2**31), lm.i32),
             (True, lm.bool), (7, lm.i16)]  # fmt: skip


@pytest.mark.parametrize(("value", "dt"), CONSTANTS, ids=[f"{d.value}-{v}" for v, d in CONSTANTS])
def test_constant_literal_is_exact_and_compiles(value, dt, no_cache):
    c = Constant.of(value, dt)
    op = KernelConstant(c.value, c.dtype, c.exact)
    lit = c_literal(c.value, c.exact, dt, wide=True)
    if dt.is_float and np.isfinite(c.value):  # the literal parses back to the very value
        assert float.fromhex(lit.rstrip("f")) == c.value or (c.value == 0 and lit.startswith("-0x0"))
    elif dt.is_int and c.exact != -(2**63):
        assert f"{c.exact}LL" in lit
    image = nvrtc.compile_cubin(source([op.render(SLOTS)]), arch="sm_90", name="const.cu")
    assert image[:4] == b"\x7fELF"


# -- GPU ------------------------------------------------------------------------------------------
@cuda
@pytest.mark.parametrize("case", sorted(GRAPHS))
def test_gpu_matches_reference_exactly(case):
    g, feed = GRAPHS[case]()
    cm, rm = g.compile("cuda", cache=False), g.compile("reference", cache=False)
    rng = np.random.default_rng(1)
    for n in (1, 7, 300):
        f = feed(n, rng)
        got, want = cm.run(f), rm.run(f)
        for name, arr in want.items():
            assert_matches(got[name], arr, g.nodes[g.outputs[name]].dtype, 0.0, f"{case}/{name} n={n}")


@cuda
@pytest.mark.parametrize("bad", [4, -5, 2**32 + 1, -(2**32)])
def test_gpu_out_of_range_index_raises(bad):
    g, feed = gather_graph()
    cm = g.compile("cuda", cache=False)
    f = feed(4, np.random.default_rng(2))
    f["i"][1, 0] = bad  # row 1: the flat position of index 4 is row 2's first element
    with pytest.raises(lm.BackendError, match="out of range"):
        cm.run(f)
