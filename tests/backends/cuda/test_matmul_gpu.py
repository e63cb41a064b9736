"""GPU (`cuda` marker): cuBLASLt host ops and the GEMV kernel against numpy for many shapes (odd
sizes 1, 3, 127, 4097), every layout and dtype, epilogues, symbolic m at several values with one
op, CUDA-graph capture; and all-extractions-agree fuzz of an MLP and an attention block through
the CUDA backend."""

from __future__ import annotations

import random

import numpy as np
import pytest

import luminal as lm
from luminal.dtype import DType
from luminal.hlir import Input, Output
from luminal.shape.expr import num, var
from tests.helpers import assert_matches

pytestmark = pytest.mark.cuda

SHAPES = [(1, 1, 1), (3, 5, 7), (1, 4097, 64), (127, 3, 129), (4097, 127, 3), (64, 64, 4097)]
LAYOUTS = ("NN", "NT", "TN", "TT")
DTYPES = (DType.f32, DType.f16, DType.bf16)


def _dev():
    from luminal.backends.cuda import driver

    return driver, driver.device()


def _upload(arr: np.ndarray):
    driver, dev = _dev()
    buf = driver.DeviceBuffer(max(arr.nbytes, 1))
    driver.htod(buf.ptr, np.ascontiguousarray(arr).reshape(-1), dev.stream)
    return buf


def _operands(layout: str, bt: int, m: int, n: int, k: int, dt: DType, seed: int):
    """Logical A (bt, m, k), B (bt, k, n) in f64, and their stored flat buffers + op fields."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (bt, m, k)).astype(dt.np).astype(np.float64)
    b = rng.uniform(-1, 1, (bt, k, n)).astype(dt.np).astype(np.float64)
    a_st = a if layout[0] == "N" else a.transpose(0, 2, 1)  # stored (m, k) row-major or (k, m)
    b_st = b if layout[1] == "N" else b.transpose(0, 2, 1)
    ta, lda = ("N", k) if layout[0] == "N" else ("T", m)
    tb, ldb = ("N", n) if layout[1] == "N" else ("T", k)
    return a, b, a_st.astype(dt.np), b_st.astype(dt.np), (tb, num(ldb), num(k * n), ta, num(lda), num(m * k))


def _run(op, ins: list[np.ndarray], env: dict) -> np.ndarray:
    driver, dev = _dev()
    bufs = [_upload(x) for x in ins]
    n_out = int(op.out_size().evaluate(env))
    out = driver.DeviceBuffer(max(1, n_out * op.d_dtype.itemsize))
    ptrs = [b.ptr for b in bufs]
    op.prepare(env, out.ptr, ptrs)
    op.launch(dev.stream, out.ptr, ptrs, env)
    res = np.empty(n_out, op.d_dtype.np)
    driver.dtoh(res, out.ptr, dev.stream)
    dev.synchronize()
    return res


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_cublaslt_matches_numpy(shape, layout, dt):
    from luminal.backends.cuda.host.cublaslt import CublasLt

    m, n, k = shape
    for bt in (1, 3):
        a, b, a_st, b_st, f = _operands(layout, bt, m, n, k, dt, seed=m + n + k)
        op = CublasLt(num(bt), num(m), num(n), num(k), *f, dt, dt, "DEFAULT")
        got = _run(op, [a_st, b_st], {})
        # f32 sums of k products drift ~ sqrt(k) ulps; 16-bit outputs are dominated by their rounding
        tol = 1.0 + (k / 256 if dt == DType.f32 else 0.0)
        assert_matches(got.reshape(bt, m, n), a @ b, dt, tol, f"{layout} {shape} b{bt} {dt}")


def test_broadcast_batch_operand():
    from luminal.backends.cuda.host.cublaslt import CublasLt

    a, b, a_st, b_st, f = _operands("NT", 3, 17, 40, 64, DType.f16, 5)
    b = np.broadcast_to(b[:1], b.shape)  # one W for every batch: batch stride 0
    tb, ldb, _, ta, lda, sa = f
    op = CublasLt(num(3), num(17), num(40), num(64), tb, ldb, num(0), ta, lda, sa, DType.f16, DType.f16, "DEFAULT")
    got = _run(op, [a_st, b_st[:1]], {})
    assert_matches(got.reshape(3, 17, 40), a @ b, lm.f16, 1.0, "batch stride 0")


def test_bf16_inputs_f32_output():
    from luminal.backends.cuda.host.cublaslt import CublasLt

    a, b, a_st, b_st, f = _operands("NT", 1, 33, 65, 257, DType.bf16, 1)
    got = _run(CublasLt(num(1), num(33), num(65), num(257), *f, DType.bf16, DType.f32, "DEFAULT"), [a_st, b_st], {})
    assert_matches(got.reshape(1, 33, 65), a @ b, lm.f32, 4.0, "bf16 -> f32")


@pytest.mark.parametrize("epilogue", ["RELU", "GELU", "BIAS", "RELU_BIAS", "GELU_BIAS", "ACCUM"])
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_epilogues_match_their_reference(epilogue, dt):
    from luminal.backends.cuda.host.cublaslt import CublasLt, CublasLtAccum, CublasLtBias

    m, n, k = 37, 96, 64
    a, b, a_st, b_st, f = _operands("NT", 1, m, n, k, dt, 2)
    extra = np.random.default_rng(3).uniform(-1, 1, n if "BIAS" in epilogue else m * n).astype(dt.np)
    cls = CublasLtAccum if epilogue == "ACCUM" else CublasLtBias if "BIAS" in epilogue else CublasLt
    op = cls(num(1), num(m), num(n), num(k), *f, dt, dt, "DEFAULT" if epilogue == "ACCUM" else epilogue)
    ins = [a_st.reshape(-1), b_st.reshape(-1), extra] if cls is not CublasLt else [a_st.reshape(-1), b_st.reshape(-1)]
    got = _run(op, ins, {})
    want = op.reference(ins, (dt, dt, dt), {})
    assert_matches(got, want.astype(np.float64), dt, 2.0, f"{epilogue} {dt}")


def test_symbolic_m_runs_every_value_with_one_op():
    from luminal.backends.cuda.host.cublaslt import CublasLt

    s = var("s")
    op = CublasLt(num(1), s, num(96), num(128), "T", num(128), num(0), "N", num(128), num(0), DType.bf16, DType.bf16,
                  "DEFAULT")  # fmt: skip
    for sv in (1, 7, 64, 4097):
        a, b, a_st, b_st, _ = _operands("NT", 1, sv, 96, 128, DType.bf16, sv)
        got = _run(op, [a_st, b_st], {"s": sv})
        assert_matches(got.reshape(1, sv, 96), a @ b, lm.bf16, 2.0, f"s={sv}")


def test_empty_sum_gives_zero_or_c():
    from luminal.backends.cuda.host.cublaslt import CublasLt, CublasLtAccum

    t = var("t")  # k as a dim at 0: an empty sum, no library call
    fields = ("N", num(5), num(0), "N", t, num(0), DType.f32, DType.f32, "DEFAULT")
    got = _run(CublasLt(num(1), num(3), num(5), t, *fields), [np.ones(1, np.float32), np.ones(1, np.float32)], {"t": 0})
    assert (got == 0).all()
    c = np.arange(15, dtype=np.float32)
    got = _run(CublasLtAccum(num(1), num(3), num(5), t, *fields), [np.ones(1, np.float32)] * 2 + [c], {"t": 0})
    np.testing.assert_array_equal(got, c)


def test_child_graph_node_follows_symbolic_m():
    """What the runtime does with a host op: a child-graph node in the plan's graph, patched with
    cuGraphExecChildGraphNodeSetParams when m changes (re-instantiated if the topology changed)."""
    from luminal.backends.cuda.host import HostStep
    from luminal.backends.cuda.host.cublaslt import CublasLt
    from luminal.errors import BackendError

    driver, dev = _dev()
    s = var("s")
    op = CublasLt(num(2), s, num(80), num(96), "N", num(80), num(96 * 80), "N", num(96), s * 96, DType.f16, DType.f16,
                  "DEFAULT")  # fmt: skip
    cap = 300
    a_buf, b_buf = driver.DeviceBuffer(2 * cap * 96 * 2), driver.DeviceBuffer(2 * 96 * 80 * 2)
    out = driver.DeviceBuffer(2 * cap * 80 * 2)
    step, parent, exe, node = HostStep(op), None, None, None
    for sv in (64, 33, 300, 1):
        a, b, a_st, b_st, _ = _operands("NN", 2, sv, 80, 96, DType.f16, sv)
        driver.htod(a_buf.ptr, np.ascontiguousarray(a_st).reshape(-1), dev.stream)
        driver.htod(b_buf.ptr, np.ascontiguousarray(b_st).reshape(-1), dev.stream)
        changed = step.update({"s": sv}, out.ptr, [a_buf.ptr, b_buf.ptr], dev.stream)
        assert changed
        if parent is None:
            parent = driver.call("cuGraphCreate", 0)
            node = driver.call("cuGraphAddChildGraphNode", parent, [], 0, step.graph(dev.stream))
            exe = driver.call("cuGraphInstantiate", parent, 0)
        else:
            try:
                driver.call("cuGraphExecChildGraphNodeSetParams", exe, node, step.graph(dev.stream))
            except BackendError:  # another algorithm, another topology: rebuild
                driver.call("cuGraphExecDestroy", exe)
                driver.call("cuGraphDestroy", parent)
                parent = driver.call("cuGraphCreate", 0)
                node = driver.call("cuGraphAddChildGraphNode", parent, [], 0, step.graph(dev.stream))
                exe = driver.call("cuGraphInstantiate", parent, 0)
        driver.call("cuGraphLaunch", exe, dev.stream)
        res = np.empty(2 * sv * 80, np.float16)
        driver.dtoh(res, out.ptr, dev.stream)
        dev.synchronize()
        assert_matches(res.reshape(2, sv, 80), a @ b, lm.f16, 1.0, f"graph s={sv}")


@pytest.mark.parametrize("dt", DTYPES, ids=str)
@pytest.mark.parametrize("n,k", [(1, 8), (127, 4096), (4097, 64), (8192, 2048)])
def test_gemv_kernel_matches_numpy(dt, n, k):
    from luminal.backends.cuda.kernels.gemv import KernelGemv
    from luminal.backends.cuda.runtime import CudaExecutor
    from luminal.egraph.llir import LNode

    k = max(k, 16 // dt.itemsize)
    nodes = [LNode(Input("x", dt), (), dt), LNode(Input("w", dt), (), dt),
             LNode(KernelGemv(var("n"), num(k), num(k), dt), (0, 1), dt), LNode(Output("y"), (2,), dt)]  # fmt: skip
    rng = np.random.default_rng(n)
    x, w = rng.uniform(-1, 1, k).astype(dt.np), rng.uniform(-1, 1, (n, k)).astype(dt.np)
    got = CudaExecutor(nodes).run({"x": x, "w": w.reshape(-1)}, {"n": n})["y"]
    tol = 1.0 + (k / 256 if dt == DType.f32 else 0.0)
    assert_matches(got, w.astype(np.float64) @ x.astype(np.float64), dt, tol, f"gemv {n}x{k}")


# -- through the compiler: every sampled extraction of the CUDA e-graph computes the reference -----------
def _mlp(dt):
    g = lm.Graph()
    x = g.tensor("x", ("s", 64), dt)
    h = (x @ g.tensor("w1", (128, 64), dt).T + g.tensor("b1", (128,), dt)).relu()
    (h @ g.tensor("w2", (64, 128), dt).T).gelu_tanh().output("y")
    return g


def _attention(dt):
    g = lm.Graph()
    q, k, v = (g.tensor(n, (2, 4, "s", 32), dt) for n in "qkv")
    ((q @ k.transpose(-1, -2)) * (1 / 32**0.5)).softmax(-1).__matmul__(v).output("y")
    return g


@pytest.mark.parametrize("build", [_mlp, _attention], ids=["mlp", "attention"])
@pytest.mark.parametrize("dt", [lm.f32, lm.bf16], ids=str)
@pytest.mark.parametrize("bounds", [None, {"s": (1, 1)}], ids=["any-s", "decode"])
def test_all_extractions_agree(build, dt, bounds):
    from luminal.backends.cuda.backend import CudaBackend
    from luminal.egraph.compile import build_egraph, preference

    g = build(dt)
    backend = CudaBackend()
    view = build_egraph(g, backend, bounds)
    sv = 1 if bounds else 5
    rng = np.random.default_rng(0)
    feed = {name: rng.uniform(-1, 1, tuple(int(d.evaluate({"s": sv})) for d in shape)).astype(dt.np)
            for name, shape in g.input_shapes.items()}  # fmt: skip
    want = g.compile("reference", cache=False).run(feed)["y"]
    r = random.Random(1)
    seen = set()
    for gen in [view.grounded_genome(), view.preferred_genome(preference(backend))] + [
        view.random_genome(r) for _ in range(12)
    ]:
        llir = view.extract(view.repair(gen))
        if llir.fingerprint() in seen:
            continue
        seen.add(llir.fingerprint())
        got = backend.load(llir).run(feed, {"s": sv})["y"]
        assert_matches(got.reshape(want.shape), want, dt, 8.0, f"{build.__name__} {llir.op_counts()}")
