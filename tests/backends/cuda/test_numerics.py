"""Issue 10's numerics on the CUDA backend. CPU: the lowered plans of the graphs below are CUDA
kernels only, compute what the reference computes (by the kernels' reference semantics), and every
kernel compiles with NVRTC for sm_90. GPU (`cuda` marker): the same graphs run on the device and
agree with the reference exactly where docs/numerics.md says so; an out-of-range index raises."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cuda import nvrtc
from luminal.backends.cuda.kernel import ERROR_SLOT, KernelOp, headers, source
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


def division_graph():
    g = lm.Graph()
    ts = {d: (g.tensor(f"a{d.value}", ("n",), d), g.tensor(f"b{d.value}", ("n",), d)) for d in DIV_DTYPES}
    for d, (a, b) in ts.items():
        (a / b).output(f"div_{d.value}")
        (a // b).output(f"floordiv_{d.value}")

    def feed(n, rng):
        out = {}
        for d in DIV_DTYPES:
            for k in "ab":
                x = rng.standard_normal(n) * 2.0 ** rng.integers(-40, 40, n)
                x[rng.random(n) < 0.1] = rng.choice([0.0, -0.0, np.inf, np.nan, 2.0**-1074])
                with np.errstate(over="ignore"):
                    out[f"{k}{d.value}"] = x.astype(d.np)
        return out

    return g, feed


def pow_graph():
    g = lm.Graph()
    x, e = g.tensor("x", ("n",), lm.f64), g.tensor("e", ("n",), lm.f64)
    y, f = g.tensor("y", ("n",), lm.f32), g.tensor("f", ("n",), lm.f32)
    i, j = g.tensor("i", ("n",), lm.i32), g.tensor("j", ("n",), lm.i32)
    (x**e).output("p64")
    (y**f).output("p32")
    (i**j).output("pi")

    def feed(n, rng):
        base, ex = np.round(rng.uniform(-12, 12, n)), rng.integers(0, 14, n).astype(np.float64)
        return {"x": base, "e": ex, "y": base.astype(np.float32), "f": (ex % 6).astype(np.float32),
                "i": base.astype(np.int32), "j": rng.integers(-2, 40, n).astype(np.int32)}  # fmt: skip

    return g, feed


def transcendental16_graph():
    g = lm.Graph()
    for d in (lm.f16, lm.bf16):
        x = g.tensor(f"x{d.value}", (4, "n"), d)
        for op in ("exp", "sigmoid", "tanh", "gelu", "gelu_tanh", "softplus", "softmax", "log_softmax"):
            getattr(x, op)().output(f"{op}_{d.value}")
        x.mean().output(f"mean_{d.value}")

    def feed(n, rng):
        return {f"x{d.value}": rng.uniform(-10, 10, (4, n)).astype(d.np) for d in (lm.f16, lm.bf16)}

    return g, feed


DIV_DTYPES = (lm.f32, lm.f16, lm.bf16, lm.f64)
# graph -> (builder, tolerance scale on the GPU: 0 = bit-exact with the reference)
GRAPHS = {"constants": (constants_graph, 0.0), "gather": (gather_graph, 0.0), "division": (division_graph, 0.0),
          "pow": (pow_graph, 0.0), "transcendental16": (transcendental16_graph, 1.0)}  # fmt: skip


# -- CPU ------------------------------------------------------------------------------------------
def assert_headers_complete(kernel, what: str) -> None:
    """Every 16/8-bit float type a kernel's code uses comes with its header in `kernel.headers`
    (a missing one compiles only when another kernel of the same NVRTC program brings it)."""
    for dt in (lm.f16, lm.bf16, lm.f8e4m3, lm.f8e5m2):
        if dt.cuda in kernel.code:
            assert headers(dt) <= kernel.headers, f"{what} uses {dt.cuda} without {headers(dt)}"


@pytest.mark.parametrize("case", sorted(GRAPHS))
def test_lowered_plan_compiles_and_matches_reference(case, no_cache):
    g, feed = GRAPHS[case][0]()
    ex, (llir,), _ = compile_plans(g, CpuCudaBackend(), CompileOptions(cache=False, search_budget=2))
    kernels = [n.op for n in llir.nodes if isinstance(n.op, KernelOp)]
    for k in kernels:  # each kernel names its own headers: the runtime compiles kernels in any grouping
        assert_headers_complete(k.render(SLOTS), type(k).__name__)
    image = nvrtc.compile_cubin(source([k.render(SLOTS) for k in kernels]), arch="sm_90", name=f"{case}.cu")
    assert image[:4] == b"\x7fELF"
    ref = g.compile("reference", cache=False)
    rng = np.random.default_rng(0)
    for n in (1, 7):
        f = feed(n, rng)
        got, want = ex.run(f, {"n": n}), ref.run(f)
        for name, arr in want.items():
            dt = g.nodes[g.outputs[name]].dtype
            tol = 0.0 if dt != lm.f64 or case != "pow" else 1.0  # the CPU run uses numpy's libm too
            assert_matches(np.asarray(got[name]).reshape(arr.shape), arr, dt, tol, f"{case}/{name}")


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
def test_gpu_matches_reference(case):
    """Bit-exact where the composition is exact on both (constants, gather, division, pow with
    integer exponents); within the dtype's tolerance where CUDA's libm differs from numpy's."""
    build, tol = GRAPHS[case]
    g, feed = build()
    cm, rm = g.compile("cuda", cache=False), g.compile("reference", cache=False)
    rng = np.random.default_rng(1)
    for n in (1, 7, 300):
        f = feed(n, rng)
        got, want = cm.run(f), rm.run(f)
        for name, arr in want.items():
            assert_matches(got[name], arr, g.nodes[g.outputs[name]].dtype, tol, f"{case}/{name} n={n}")


@cuda
@pytest.mark.parametrize("bad", [4, -5, 2**32 + 1, -(2**32)])
def test_gpu_out_of_range_index_raises(bad):
    g, feed = gather_graph()
    cm = g.compile("cuda", cache=False)
    f = feed(4, np.random.default_rng(2))
    f["i"][1, 0] = bad  # row 1: the flat position of index 4 is row 2's first element
    with pytest.raises(lm.BackendError, match="out of range"):
        cm.run(f)


@pytest.mark.parametrize("dt", (lm.f32, lm.f16, lm.bf16, lm.f64), ids=str)
def test_float_add_mul_are_never_contracted(dt):
    """HLIR Add / Mul render as the _rn intrinsics (NVRTC never fuses them into an FMA), in their
    own kernels and inline in fused ones: each rounds once, like the reference."""
    from luminal.backends.cuda.kernels import KernelAdd, KernelMul
    from luminal.shape.expr import num, z

    p = "d" if dt == lm.f64 else "f"
    for op, name in ((KernelAdd, "add"), (KernelMul, "mul")):
        k = op((num(8),), (z,), (z,), dt)
        assert f"__{p}{name}_rn(a, b)" in k.render(SLOTS).code
        assert f"__{p}{name}_rn(a, b)" in k.inline("o", ["x", "y"], "i", wide=True)
