"""CPU: the `matmul_backend` rules put cuBLASLt host ops (and the decode GEMV kernel) into the
e-class of each frontend matmul -- every layout (NN, NT, TN, TT), 2-D and batched, epilogues
(bias, relu, gelu, beta), dtypes -- and only where the library can run them (near misses keep the
kernel plan only). The library ops' numpy semantics (their `reference`) then run the plan that
prefers them, which checks the layout arithmetic (ld, trans, batch strides) against the oracle."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.backends.cuda import nvrtc
from luminal.backends.cuda.backend import PHASES, RULESETS
from luminal.backends.cuda.host.cublaslt import CUBLASLT_OPS
from luminal.backends.cuda.kernel import source
from luminal.backends.cuda.kernels import KERNEL_OPS
from luminal.backends.cuda.kernels.gemv import GEMV_KERNELS, KernelGemv
from luminal.backends.reference.executor import ReferenceExecutor
from luminal.dtype import DType
from luminal.egraph.compile import build_egraph
from luminal.hlir import Input, Mul, Output, SumReduce
from luminal.shape.expr import num, var, z
from tests.helpers import assert_matches

LIBRARY = frozenset({"CublasLt", "CublasLtBias", "CublasLtAccum", "KernelGemv"})


class MatmulCpuBackend:
    """The CUDA backend's kernel + matmul ops, rules and schedule, executed by reference semantics."""

    name = "cuda-matmul-cpu"
    device = "cpu-matmul-rules-test"
    ops = (*KERNEL_OPS, *GEMV_KERNELS, *CUBLASLT_OPS)
    hlir_ops = (Input, Output)
    rulesets = RULESETS
    phases = PHASES

    def load(self, llir):
        return ReferenceExecutor(llir.nodes, llir.outputs)

    def profile(self, llir, env):
        return float(len(llir.nodes))


def library_ops(g: lm.Graph, out: str = "y", bounds=None) -> list[tuple[str, list]]:
    """(op name, field values) of every library op in the e-class the output reads."""
    view = build_egraph(g, MatmulCpuBackend(), bounds)
    (cls,) = {view.nodes[m].children[0] for c in view.classes for m in view.choices[c] if view.nodes[m].op == "Output"}
    found = []
    for m in view.choices[cls]:
        n = view.nodes[m]
        if n.op == "Op":
            kind = view.nodes[view.members[n.children[0]][0]]
            if kind.op in LIBRARY:
                found.append((kind.op, [view.value(k) for k in kind.children]))
    return found


def run_preferring_library(g: lm.Graph, feed: dict, env: dict, bounds=None):
    """Run the plan that picks library ops wherever it can (reference semantics) and the oracle."""
    view = build_egraph(g, MatmulCpuBackend(), bounds)
    llir = view.extract(view.repair(view.preferred_genome(LIBRARY)))
    used = {type(n.op).__name__ for n in llir.nodes} & LIBRARY
    got = ReferenceExecutor(llir.nodes, llir.outputs).run(feed, env)
    want = ReferenceExecutor(g.nodes, g.outputs).run(feed, env)
    return got, want, used


def _rand(shape, dt, seed):
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype(DType(dt.value).np if isinstance(dt, DType) else dt)


def _matmul_graph(layout: str, dtype=lm.f32, batch=()):
    """y = a @ b with a (.., s, 8) and b (.., 8, 4), each stored as given (N) or transposed (T)."""
    g = lm.Graph()
    a = g.tensor("a", (*batch, "s", 8) if layout[0] == "N" else (*batch, 8, "s"), dtype)
    b = g.tensor("b", (*batch, 8, 4) if layout[1] == "N" else (*batch, 4, 8), dtype)
    a = a if layout[0] == "N" else a.transpose(-1, -2)
    b = b if layout[1] == "N" else b.transpose(-1, -2)
    (a @ b).output("y")
    return g


LAYOUTS = ("NN", "NT", "TN", "TT")
# (trans_b, trans_a) = cuBLAS's ops on B' (n x k) and A' (k x m) for luminal's (a, b) layouts
EXPECT_TRANS = {"NN": ("N", "N"), "NT": ("T", "N"), "TN": ("N", "T"), "TT": ("T", "T")}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("batch", [(), (3,)], ids=["2d", "batched"])
def test_every_layout_gets_cublaslt(layout, batch):
    g = _matmul_graph(layout, batch=batch)
    ops = [f for name, f in library_ops(g) if name == "CublasLt"]
    want_batch = batch[0] if batch else 1
    strided = [f for f in ops if f[0] == want_batch]
    assert strided, f"{layout} {batch}: no CublasLt with batch {want_batch} in {ops}"
    bt, m, n, k, tb, ldb, sb, ta, lda, sa, dt, dd, ep = strided[0]
    assert (m, n, k) == (var("s"), num(4), num(8)) and (tb, ta) == EXPECT_TRANS[layout], strided[0]
    assert (dt, dd, ep) == (DType.f32, DType.f32, "DEFAULT")
    feed = {"a": _rand((*batch, 5, 8) if layout[0] == "N" else (*batch, 8, 5), np.float32, 1),
            "b": _rand((*batch, 8, 4) if layout[1] == "N" else (*batch, 4, 8), np.float32, 2)}  # fmt: skip
    got, want, used = run_preferring_library(g, feed, {"s": 5})
    assert "CublasLt" in used
    assert_matches(got["y"].reshape(want["y"].shape), want["y"], lm.f32, 1.0, f"{layout} {batch}")


@pytest.mark.parametrize("dtype", [lm.f32, lm.f16, lm.bf16, lm.f64])
def test_float_dtypes_get_cublaslt(dtype):
    ops = library_ops(_matmul_graph("NT", dtype))
    assert any(name == "CublasLt" and f[10] == dtype and f[11] == dtype for name, f in ops), ops


def test_batched_input_against_2d_weight_flattens_to_one_gemm():
    g = lm.Graph()
    x, w = g.tensor("x", (2, "s", 8)), g.tensor("w", (4, 8))
    (x @ w.T).output("y")
    fields = [f for name, f in library_ops(g) if name == "CublasLt"]
    assert any(f[0] == num(1) and f[1] == var("s") * 2 for f in fields), fields  # one (2s x 4) GEMM
    assert any(f[0] == num(2) for f in fields), fields  # and the strided batch with B broadcast
    feed = {"x": _rand((2, 3, 8), np.float32, 3), "w": _rand((4, 8), np.float32, 4)}
    got, want, _ = run_preferring_library(g, feed, {"s": 3})
    assert_matches(got["y"].reshape(want["y"].shape), want["y"], lm.f32, 1.0, "flattened")


def test_attention_scores_and_values_are_strided_batches():
    g = lm.Graph()
    q, k, v = (g.tensor(n, (2, 4, "s", 16)) for n in "qkv")
    ((q @ k.transpose(-1, -2)) @ v).output("y")
    view = build_egraph(g, MatmulCpuBackend())
    kinds = [view.nodes[m].op for c in view.classes for m in view.choices[c]]
    assert kinds.count("CublasLt") >= 2, "both attention matmuls need a strided-batch cuBLASLt"
    feed = {n: _rand((2, 4, 3, 16), np.float32, i) for i, n in enumerate("qkv")}
    got, want, used = run_preferring_library(g, feed, {"s": 3})
    assert "CublasLt" in used
    assert_matches(got["y"].reshape(want["y"].shape), want["y"], lm.f32, 4.0, "attention")


def _linear(dtype=lm.f32, batch=(), bias=True, act=None, c=False):
    g = lm.Graph()
    x = g.tensor("x", (*batch, "s", 8), dtype)
    w = g.tensor("w", (4, 8), dtype)
    y = x @ w.T
    if bias:
        y = y + g.tensor("b", (4,), dtype)
    if c:
        y = y + g.tensor("c", (*batch, "s", 4), dtype)
    if act == "relu":
        y = y.relu()
    elif act == "gelu":
        y = y.gelu_tanh()
    y.output("y")
    return g


EPILOGUES = [  # (bias, act, c) -> the op and epilogue that must appear in the output's class
    (True, None, False, "CublasLtBias", "BIAS"),
    (False, "relu", False, "CublasLt", "RELU"),
    (True, "relu", False, "CublasLtBias", "RELU_BIAS"),
    (False, "gelu", False, "CublasLt", "GELU"),
    (True, "gelu", False, "CublasLtBias", "GELU_BIAS"),
    (False, None, True, "CublasLtAccum", "DEFAULT"),
]


@pytest.mark.parametrize("bias,act,c,op,epilogue", EPILOGUES)
@pytest.mark.parametrize("dtype", [lm.f32, lm.bf16])
@pytest.mark.parametrize("batch", [(), (2,)], ids=["2d", "3d"])
def test_epilogues_fuse(bias, act, c, op, epilogue, dtype, batch):
    g = _linear(dtype, batch, bias, act, c)
    ops = library_ops(g)
    assert any(name == op and f[12] == epilogue for name, f in ops), f"want {op} {epilogue}, got {ops}"
    if dtype == lm.f32:
        feed = {"x": _rand((*batch, 5, 8), np.float32, 5), "w": _rand((4, 8), np.float32, 6),
                "b": _rand((4,), np.float32, 7), "c": _rand((*batch, 5, 4), np.float32, 8)}  # fmt: skip
        feed = {k: v for k, v in feed.items() if k in g.inputs}
        got, want, used = run_preferring_library(g, feed, {"s": 5})
        assert op in used, used
        # one rounding instead of several, and cuBLASLt's gelu is the same tanh formula
        assert_matches(got["y"].reshape(want["y"].shape), want["y"], lm.f32, 8.0, f"{op} {epilogue}")


@pytest.mark.parametrize("low", [lm.bf16, lm.f16])
def test_16bit_inputs_with_f32_output(low):
    g = lm.Graph()
    x, w = g.tensor("x", ("s", 8), low), g.tensor("w", (4, 8), low)
    (x.cast(lm.f32) @ w.cast(lm.f32).T).output("y")
    ops = library_ops(g)
    assert any(f[10] == low and f[11] == DType.f32 for name, f in ops if name == "CublasLt"), ops
    view = build_egraph(g, MatmulCpuBackend())
    genome = view.preferred_genome(LIBRARY)
    for k, c in enumerate(view.classes):  # pick the variant that reads the 16-bit buffers
        for j, m in enumerate(view.choices[c]):
            n = view.nodes[m]
            kind = view.nodes[view.members[n.children[0]][0]] if n.op == "Op" else None
            if kind is not None and kind.op == "CublasLt" and view.value(kind.children[10]) == low:
                genome[k] = j
    llir = view.extract(view.repair(genome))
    assert any(isinstance(n.op, CUBLASLT_OPS) and n.op.dtype == low for n in llir.nodes)
    feed = {"x": _rand((3, 8), np.float32, 1).astype(low.np), "w": _rand((4, 8), np.float32, 2).astype(low.np)}
    got = ReferenceExecutor(llir.nodes, llir.outputs).run(feed, {"s": 3})["y"].reshape(3, 4)
    want = feed["x"].astype(np.float64) @ feed["w"].astype(np.float64).T
    assert_matches(got, want, lm.f32, 1.0, f"{low} x {low} -> f32")


def test_f32_output_needs_plain_casts():
    g = lm.Graph()
    x, w = g.tensor("x", ("s", 8), lm.bf16), g.tensor("w", (8, 4), lm.bf16)
    (x.cast(lm.f32) @ w.T.cast(lm.f32).T).output("y")  # the cast copies a transposed view: not the source layout
    assert not any(f[10] == DType.bf16 for _, f in library_ops(g))


# -- near misses: no library op, the kernel plan stays --------------------------------------------------
def test_integer_matmul_gets_no_library_op():
    assert library_ops(_matmul_graph("NT", lm.i32)) == []


def test_operand_without_unit_stride_gets_no_library_op():
    g = lm.Graph()
    x, w = g.tensor("x", ("s", 8)), g.tensor("w", (4, 16))
    (x @ w.reshape(4, 8, 2)[:, :, 0].T).output("y")  # W read with strides (16, 2): no unit stride
    assert library_ops(g) == []


def _raw_matmul(a_strides, b_strides, k: int = 8, n: int = 4):
    """A Mul -> SumReduce pair written directly in HLIR (views the frontend would not build)."""
    g = lm.Graph()
    a, b = g.tensor("a", (64,)), g.tensor("b", (64,))
    s = var("s")
    mul = g.node(Mul((s, num(n), num(k)), a_strides, b_strides), [a, b], (s, n, k))
    y = g.node(SumReduce((s, num(n)), num(k), (z * (n * k), z * k), z), [mul], (s, n))
    y.output("y")
    return g


def test_overlapping_rows_get_no_library_op():
    # a's rows start every 4 elements but are 8 long: ld (4) < rows (k = 8) is illegal for cuBLAS
    assert library_ops(_raw_matmul((z * 4, num(0), z), (num(0), z * 8, z))) == []
    assert library_ops(_raw_matmul((z * 8, num(0), z), (num(0), z * 8, z))) != []  # the legal twin


def test_offset_view_gets_no_library_op():
    assert library_ops(_raw_matmul((z * 8 + 1, num(0), z), (num(0), z * 8, z))) == []


def test_erf_gelu_is_not_fused_as_tanh_gelu():
    g = lm.Graph()
    x, w = g.tensor("x", ("s", 8)), g.tensor("w", (4, 8))
    (x @ w.T).gelu().output("y")
    assert not any(f[12] == "GELU" for _, f in library_ops(g))


def test_bias_of_the_wrong_axis_is_not_fused():
    g = lm.Graph()
    x, w, b = g.tensor("x", (4, 8)), g.tensor("w", (4, 8)), g.tensor("b", (4, 1))
    (x @ w.T + b).output("y")  # a column bias (broadcast over n), not the row bias cuBLASLt adds
    assert not any(name == "CublasLtBias" for name, _ in library_ops(g))


# -- decode GEMV --------------------------------------------------------------------------------------
def test_gemv_for_a_decode_bucket_only():
    assert any(name == "KernelGemv" for name, _ in library_ops(_linear(lm.bf16, bias=False), bounds={"s": (1, 1)}))
    assert not any(name == "KernelGemv" for name, _ in library_ops(_linear(lm.bf16, bias=False)))
    assert not any(name == "KernelGemv" for name, _ in library_ops(_linear(lm.bf16, bias=False), bounds={"s": (2, 64)}))


def test_gemv_needs_whole_vectors():
    g = lm.Graph()
    x, w = g.tensor("x", (1, 12), lm.bf16), g.tensor("w", (4, 12), lm.bf16)  # 12 bf16 = 24 bytes
    (x @ w.T).output("y")
    assert not any(name == "KernelGemv" for name, _ in library_ops(g))


def test_gemv_semantics_on_cpu():
    g = lm.Graph()
    x, w = g.tensor("x", (1, 16), lm.f32), g.tensor("w", (8, 16), lm.f32)
    (x @ w.T).output("y")
    view = build_egraph(g, MatmulCpuBackend())
    llir = view.extract(view.repair(view.preferred_genome({"KernelGemv"})))
    assert any(isinstance(n.op, KernelGemv) for n in llir.nodes)
    feed = {"x": _rand((1, 16), np.float32, 1), "w": _rand((8, 16), np.float32, 2)}
    got = ReferenceExecutor(llir.nodes, llir.outputs).run(feed, {})["y"]
    assert_matches(got.reshape(1, 8), feed["x"].astype(np.float64) @ feed["w"].T, lm.f32, 1.0, "gemv")


def test_gemv_source_compiles_for_sm90():
    sizes = ((num(8192), 2048), (var("n"), 64))
    kernels = [
        KernelGemv(n, num(k), num(k), dt).render({"n": 0})
        for dt in (DType.f32, DType.f16, DType.bf16)
        for n, k in sizes
    ]
    assert nvrtc.compile_cubin(source(kernels), arch="sm_90")[:4] == b"\x7fELF"


def _mlp_block():
    g = lm.Graph()
    x = g.tensor("x", (2, "s", 16))
    h = (x @ g.tensor("w1", (32, 16)).T + g.tensor("b1", (32,))).relu()
    y = (h @ g.tensor("w2", (16, 32)).T).gelu_tanh() + x
    y.output("y")
    return g


def _attention_block():
    g = lm.Graph()
    q, k, v = (g.tensor(n, (2, 2, "s", 8)) for n in "qkv")
    ((q @ k.transpose(-1, -2)) * 0.25).softmax(-1).__matmul__(v).output("y")
    return g


@pytest.mark.parametrize("build", [_mlp_block, _attention_block], ids=["mlp", "attention"])
@pytest.mark.parametrize("bounds", [None, {"s": (1, 1)}], ids=["any-s", "decode"])
def test_every_sampled_extraction_agrees(build, bounds):
    """Library ops, GEMV and kernels mixed at random: every plan computes the oracle's values."""
    import random

    g = build()
    view = build_egraph(g, MatmulCpuBackend(), bounds)
    sv = 1 if bounds else 3
    rng = np.random.default_rng(0)
    feed = {n: rng.uniform(-1, 1, tuple(int(d.evaluate({"s": sv})) for d in sh)).astype(np.float32)
            for n, sh in g.input_shapes.items()}  # fmt: skip
    want = ReferenceExecutor(g.nodes, g.outputs).run(feed, {"s": sv})["y"]
    r = random.Random(0)
    used: set[str] = set()
    for gen in [view.preferred_genome(LIBRARY)] + [view.random_genome(r) for _ in range(16)]:
        llir = view.extract(view.repair(gen))
        used |= {type(n.op).__name__ for n in llir.nodes} & LIBRARY
        got = ReferenceExecutor(llir.nodes, llir.outputs).run(feed, {"s": sv})["y"]
        assert_matches(got.reshape(want.shape), want, lm.f32, 8.0, f"{build.__name__}: {llir.op_counts()}")
    assert used, "no sampled plan used a library op"
