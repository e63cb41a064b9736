"""Property tests of the movement ops (views, and the Iota+Gather/Scatter ones) against numpy:
reshape permute transpose unsqueeze squeeze flatten expand [...] pad repeat, on symbolic dims."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import luminal as lm
from luminal.shape.expr import maximum, var
from tests.helpers import Arg, assert_matches, check_op

DTYPES = (lm.f32, lm.bf16, lm.i32)
X = ("a", "b", "c")


def _case(key, build, ref, args, dtype, data, **kw):
    check_op(data, key, build, ref, args, dtype, **kw)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(data=st.data())
def test_reshape(dtype, data):
    def build(g, x):
        return {"split": x.reshape("a", "b", 2, 3), "merge": x.reshape("a", -1), "flat": x.reshape(-1),
                "tuple": x.reshape(("a", "b", 3, 2)), "lead": x.reshape(-1, 6),
                "t_flat": x.permute(2, 0, 1).reshape(-1),
                "t_merge": x.transpose(0, 1).reshape("b", -1), "t_split": x.transpose(0, 1).reshape("b", "a", 3, 2),
                "ones": x.reshape(1, "a", "b", 1, 6)}  # fmt: skip

    def ref(x):
        a, b = x.shape[:2]
        return {"split": x.reshape(a, b, 2, 3), "merge": x.reshape(a, -1), "flat": x.reshape(-1),
                "tuple": x.reshape(a, b, 3, 2), "lead": x.reshape(-1, 6), "t_flat": x.transpose(2, 0, 1).reshape(-1),
                "t_merge": x.transpose(1, 0, 2).reshape(b, -1), "t_split": x.transpose(1, 0, 2).reshape(b, a, 3, 2),
                "ones": x.reshape(1, a, b, 1, 6)}  # fmt: skip

    _case("reshape", build, ref, {"x": Arg(("a", "b", 6))}, dtype, data)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(data=st.data())
def test_permute_transpose(dtype, data):
    def build(g, x):
        return {"p": x.permute(2, 0, 1), "p_tuple": x.permute((1, 0, 2)), "p_neg": x.permute(-1, -2, -3),
                "t": x.transpose(), "t02": x.transpose(0, 2), "T": x.T,
                "pp": x.permute(1, 2, 0).permute(2, 1, 0)}  # fmt: skip

    def ref(x):
        return {"p": x.transpose(2, 0, 1), "p_tuple": x.transpose(1, 0, 2), "p_neg": x.transpose(2, 1, 0),
                "t": np.swapaxes(x, -2, -1), "t02": np.swapaxes(x, 0, 2), "T": x.T,
                "pp": x.transpose(1, 2, 0).transpose(2, 1, 0)}  # fmt: skip

    _case("permute", build, ref, {"x": Arg(X)}, dtype, data)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(data=st.data())
def test_unsqueeze_squeeze_flatten(dtype, data):
    def build(g, x):
        return {"u0": x.unsqueeze(0), "u_last": x.unsqueeze(-1), "u2": x.unsqueeze(2), "sq1": x.squeeze(1),
                "sq": x.squeeze(), "sq_neg": x.squeeze(-2), "sq_tuple": x.unsqueeze(0).squeeze((0, 2)),
                "fl": x.flatten(), "fl1": x.flatten(1), "fl01": x.flatten(0, 1), "fl_t": x.T.flatten(),
                "fl_t1": x.permute(2, 1, 0).flatten(1)}  # fmt: skip

    def ref(x):
        return {"u0": x[None], "u_last": x[..., None], "u2": np.expand_dims(x, 2), "sq1": x.squeeze(1),
                "sq": x.squeeze(1), "sq_neg": x.squeeze(-2), "sq_tuple": x.squeeze(1),
                "fl": x.reshape(-1), "fl1": x.reshape(x.shape[0], -1), "fl01": x.reshape(-1, x.shape[2]),
                "fl_t": x.T.reshape(-1), "fl_t1": x.transpose(2, 1, 0).reshape(x.shape[2], -1)}  # fmt: skip

    _case("squeeze", build, ref, {"x": Arg(("a", 1, "c"))}, dtype, data)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(data=st.data())
def test_expand_repeat(dtype, data):
    def build(g, x):
        return {"e": x.expand("a", "n", "c"), "e_lead": x.expand(2, "a", "n", "c"), "e_keep": x.expand(-1, 3, -1),
                "e_tuple": x.expand(("a", 1, "c")), "e_t": x.T.expand("c", 4, "a"),
                "r": x.repeat(2, 3, 1), "r_lead": x.repeat(2, 1, 1, 2), "r_short": x.repeat(3),
                "r_t": x.T.repeat(1, 2, 2), "r_sym": x.repeat(1, "n", 1)}  # fmt: skip

    def ref(x, dims):
        a, _, c = x.shape
        n = dims["n"]
        return {"e": np.broadcast_to(x, (a, n, c)), "e_lead": np.broadcast_to(x, (2, a, n, c)),
                "e_keep": np.broadcast_to(x, (a, 3, c)), "e_tuple": x, "e_t": np.broadcast_to(x.T, (c, 4, a)),
                "r": np.tile(x, (2, 3, 1)), "r_lead": np.tile(x, (2, 1, 1, 2)), "r_short": np.tile(x, 3),
                "r_t": np.tile(x.T, (1, 2, 2)), "r_sym": np.tile(x, (1, n, 1))}  # fmt: skip

    _case("expand", build, ref, {"x": Arg(("a", 1, "c"))}, dtype, data, extra_dims=("n",))


# keys that hold for any size >= 1 of the symbolic axes (empty results included)
SYM_KEYS = {
    "int0": (0,), "int_neg": (-1,), "int_mid": (slice(None), 0), "start": (slice(None), slice(1, None)),
    "stop_neg": (slice(None, -1),), "both": (slice(1, -1),), "step": (Ellipsis, slice(None, None, 2)),
    "step3": (slice(None), slice(None, None, 3)), "rev": (slice(None, None, -1),),
    "rev2": (Ellipsis, slice(None, None, -2)), "none": (slice(None), None), "none_end": (Ellipsis, None),
    "mix": (0, Ellipsis, slice(1, 3)), "tail": (slice(None), slice(-2, None)), "ellipsis": (Ellipsis,),
    "all_int": (0, 0, -1), "none_int": (None, -1, slice(None), None), "stop_big": (slice(None, 100),),
}  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(data=st.data())
def test_getitem_symbolic(dtype, data):
    build = lambda g, x: {k: x[key] for k, key in SYM_KEYS.items()}  # noqa: E731
    ref = lambda x: {k: x[key] for k, key in SYM_KEYS.items()}  # noqa: E731
    _case("getitem_sym", build, ref, {"x": Arg(X)}, dtype, data)


CONCRETE_KEYS = {
    "neg_range": (slice(-3, -1),), "rev_step": (slice(4, 0, -2),), "rev_all": (slice(None, None, -2),),
    "clamped": (slice(-100, 100),), "empty": (slice(3, 1),), "rev_stop": (slice(None, 1, -1),),
    "int_neg": (-2, slice(None)), "step_start": (slice(1, None, 3), slice(None, None, -1)),
}  # fmt: skip


@pytest.mark.parametrize("dtype", (lm.f32, lm.i32), ids=str)
@given(data=st.data())
def test_getitem_concrete(dtype, data):
    build = lambda g, x: {k: x[key] for k, key in CONCRETE_KEYS.items()}  # noqa: E731
    ref = lambda x: {k: x[key] for k, key in CONCRETE_KEYS.items()}  # noqa: E731
    _case("getitem_concrete", build, ref, {"x": Arg((5, "b"))}, dtype, data)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(data=st.data())
def test_getitem_of_view(dtype, data):
    """Slices of permuted / broadcast views read the right elements."""

    def build(g, x):
        return {"t": x.T[1:, ::-1], "bc": x.expand("a", 3, "c")[:, 1:, 0], "rep": x.repeat(1, 4, 1)[:, 1::2]}

    def ref(x):
        return {"t": x.T[1:, ::-1], "bc": np.broadcast_to(x, (x.shape[0], 3, x.shape[2]))[:, 1:, 0],
                "rep": np.tile(x, (1, 4, 1))[:, 1::2]}  # fmt: skip

    _case("getitem_view", build, ref, {"x": Arg(("a", 1, "c"))}, dtype, data)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(data=st.data())
def test_pad(dtype, data):
    v = -1.5 if dtype.is_float else -7

    def build(g, x):
        return {"p": x.pad(((1, 2), (0, 1))), "all": x.pad((1, 1)), "value": x.pad(((0, 0), (2, 0)), value=v),
                "zero": x.pad(((0, 0), (0, 0))), "t": x.T.pad(((1, 0), (0, 2)), value=v)}  # fmt: skip

    def ref(x):
        return {"p": np.pad(x, ((1, 2), (0, 1))), "all": np.pad(x, 1),
                "value": np.pad(x, ((0, 0), (2, 0)), constant_values=v), "zero": x,
                "t": np.pad(x.T, ((1, 0), (0, 2)), constant_values=v)}  # fmt: skip

    _case("pad", build, ref, {"x": Arg(("a", "b"))}, dtype, data)


def test_pad_symbolic_width():
    """Pad widths may be dim symbols."""
    g = lm.Graph()
    x = g.tensor("x", ("a",))
    x.pad((("w", 1),), value=2.0).output("y")
    m = g.compile("reference")
    out = m.run({"x": np.arange(3, dtype=np.float32)}, dims={"w": 2})["y"]
    np.testing.assert_array_equal(out, np.pad(np.arange(3.0), (2, 1), constant_values=2.0).astype(np.float32))


# -- size-0 dims -------------------------------------------------------------------------------------
def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _zero_size_ops(rank: int) -> dict:
    """name -> (luminal op, numpy op, the axis it reduces with a max or None): the movement and
    reduction families, at every axis of a rank-`rank` tensor."""
    same = {  # the same spelling in luminal and numpy
        "slice1": lambda x: x[1:], "slice_last": lambda x: x[..., 1:], "slice_stop": lambda x: x[:-1],
        "rev": lambda x: x[::-1], "step": lambda x: x[..., ::2], "flat": lambda x: x.reshape(-1), "T": lambda x: x.T,
        "sum_all": lambda x: x.sum(), "mean_all": lambda x: x.mean(), "exp": lambda x: (x.exp() + 1).sqrt(),
    }  # fmt: skip
    if rank >= 2:
        same |= {"slice_mid": lambda x: x[:, 3:], "slice_head": lambda x: x[..., 0:1], "tail": lambda x: x[:, -2:]}
    ops = {k: (f, f, None) for k, f in same.items()}
    ops["exp"] = (same["exp"], lambda x: np.sqrt(np.exp(x) + 1), None)
    ops["pad"] = (lambda x: x.pad(1, value=2.0), lambda x: np.pad(x, 1, constant_values=2.0), None)
    ops["stack"] = (lambda x: lm.stack([x, x]), lambda x: np.stack([x, x]), None)
    ops["bcast"] = (lambda x: x.unsqueeze(0).expand(2, *x.shape), lambda x: np.broadcast_to(x, (2, *x.shape)), None)
    ops["repeat"] = (lambda x: x.repeat(*[2] * x.ndim), lambda x: np.tile(x, [2] * x.ndim), None)
    if rank >= 2:
        ops["flatten1"] = (lambda x: x.flatten(1), lambda x: x.reshape(x.shape[0], math.prod(x.shape[1:])), None)
        ops["perm"] = (lambda x: x.permute(*reversed(range(x.ndim))).flatten(), lambda x: x.T.reshape(-1), None)
        ops["tril"] = (lambda x: x.tril(), np.tril, None)
        ops["triu"] = (lambda x: x.triu(1), lambda x: np.triu(x, 1), None)
    for a in range(rank):
        tail = (slice(None),) * a + (slice(1, None),)  # drop the first row along axis a
        widths = [(0, 0)] * a + [(2, 1)] + [(0, 0)] * (rank - a - 1)
        ops |= {
            f"cat{a}": (lambda x, a=a, t=tail: lm.concat([x, x[t]], a),
                        lambda x, a=a, t=tail: np.concatenate([x, x[t]], a), None),
            f"pad{a}": (lambda x, w=widths: x.pad(w), lambda x, w=widths: np.pad(x, w), None),
            f"sum{a}": (lambda x, a=a: x.sum(axis=a), lambda x, a=a: x.sum(axis=a), None),
            f"mean{a}": (lambda x, a=a: x.mean(axis=a, keepdim=True), lambda x, a=a: x.mean(a, keepdims=True), None),
            f"var{a}": (lambda x, a=a: x.var(axis=a), lambda x, a=a: x.var(axis=a), None),
            f"prod{a}": (lambda x, a=a: x.prod(axis=a), lambda x, a=a: x.prod(axis=a), None),
            f"cumsum{a}": (lambda x, a=a: x.cumsum(a), lambda x, a=a: x.cumsum(a), None),
            f"max{a}": (lambda x, a=a: x.max(axis=a), lambda x, a=a: x.max(axis=a), a),
            f"min{a}": (lambda x, a=a: x.min(axis=a, keepdim=True), lambda x, a=a: x.min(a, keepdims=True), a),
            f"argmax{a}": (lambda x, a=a: x.argmax(a), lambda x, a=a: x.argmax(a), a),
            f"softmax{a}": (lambda x, a=a: x.softmax(a), lambda x, a=a: _softmax(x, a), a),
        }  # fmt: skip
    return ops


@st.composite
def _zero_shapes(draw):
    """A shape of rank 1-3 holding a 0 (and 1s), each dim static or a symbol sized at run time."""
    rank = draw(st.integers(1, 3))
    sizes = draw(st.lists(st.sampled_from((0, 0, 1, 2, 3)), min_size=rank, max_size=rank).filter(lambda s: 0 in s))
    symbolic = draw(st.lists(st.booleans(), min_size=rank, max_size=rank))
    return sizes, symbolic


@settings(max_examples=40)  # ~60 ops per example
@given(case=_zero_shapes(), seed=st.integers(0, 2**16))
def test_size_zero_dims_in_every_op(case, seed):
    """Shapes holding 0 through every movement op and reduction, static and symbolic, against numpy
    (by the raw-HLIR interpreter, the oracle). A max over an empty axis raises ShapeError at build
    time when the axis is static; compiled models check symbolic ones at run time (next test)."""
    from tests.egraph.util import oracle

    sizes, symbolic = case
    names = [f"d{k}" for k in range(len(sizes))]
    shape = tuple(n if s else v for n, s, v in zip(names, symbolic, sizes, strict=True))
    env = {n: v for n, s, v in zip(names, symbolic, sizes, strict=True) if s}
    xv = np.random.default_rng(seed).uniform(-2, 2, sizes).astype(np.float32)
    g = lm.Graph()
    x = g.tensor("x", shape)
    refs = {}
    for name, (op, ref, max_axis) in _zero_size_ops(len(sizes)).items():
        if max_axis is not None and sizes[max_axis] == 0:
            if not symbolic[max_axis]:
                with pytest.raises(lm.ShapeError, match="max/min over an axis of size 0"):
                    op(x)
            continue
        op(x).output(name)
        refs[name] = ref
    out = oracle(g, {"x": xv}, env)
    for name, ref in refs.items():
        want = np.asarray(ref(xv.astype(np.float64)) if name[:6] not in ("argmax",) else ref(xv))
        got_shape = tuple(int(d.evaluate(env)) for d in g.output_shapes[name])
        dt = g.nodes[g.outputs[name]].dtype
        with np.errstate(all="ignore"):
            assert_matches(out[name].reshape(got_shape), want, dt, 4.0, f"{name} on {shape} = {sizes}")


def _size_zero_graph():
    g = lm.Graph()
    x, s = g.tensor("x", (2, 3)), g.tensor("s", ("a", "b"))
    e = x[:, 3:]  # (2, 0)
    outs = {"slice": e, "pad": e.pad(((0, 0), (1, 1))), "cat": lm.concat([e, x], axis=1), "cumsum": e.cumsum(),
            "sum": e.sum(1), "mean": e.mean(1), "flat": e.T.reshape(-1), "s_slice": s[:, 3:],
            "s_cat": lm.concat([s, s], 1), "s_cumsum": s.cumsum(), "s_sum": s.sum(1), "s_pad": s.pad(1)}  # fmt: skip
    for k, t in outs.items():
        t.output(k)
    return g


def _check_size_zero(g, run) -> None:
    """run(feed, env) of a plan for _size_zero_graph against the reference, sizes holding 0."""
    ref = g.compile("reference", cache=False)
    xv = np.arange(6, dtype=np.float32).reshape(2, 3)
    for a, b in ((0, 3), (2, 0), (0, 0), (2, 4)):
        feed = {"x": xv, "s": np.arange(a * b, dtype=np.float32).reshape(a, b)}
        got, want = run(feed, {"a": a, "b": b}), ref.run(feed)
        for k, w in want.items():
            np.testing.assert_array_equal(np.asarray(got[k]).reshape(w.shape), w, err_msg=f"{k} at a={a}, b={b}")


def test_size_zero_dims_lower_to_cuda_kernels():
    """Static and run-time size-0 dims through the CUDA lowering: every op becomes a kernel, the plan
    computes what the reference computes (run on the CPU by reference semantics), NVRTC compiles it."""
    nvrtc = pytest.importorskip("luminal.backends.cuda.nvrtc")
    from luminal.backends.cuda.kernel import KernelOp, source
    from luminal.egraph.compile import CompileOptions, compile_plans
    from tests.backends.cuda.test_lowering import CpuCudaBackend

    g = _size_zero_graph()
    ex, (llir,), _ = compile_plans(g, CpuCudaBackend(), CompileOptions(cache=False, search_budget=2))
    _check_size_zero(g, ex.run)
    kernels = [n.op.render({"a": 0, "b": 1}) for n in llir.nodes if isinstance(n.op, KernelOp)]
    assert kernels and nvrtc.compile_cubin(source(kernels), arch="sm_90")[:4] == b"\x7fELF"


# -- repeated slicing of a symbolic dim ----------------------------------------------------------------
def _slice_chain(n: int):
    """`y = y[1:] + 1` n times on (s,), and a 2-D chain trimming both ends, as one graph."""
    g = lm.Graph()
    x, w = g.tensor("x", ("s",)), g.tensor("w", ("s", "t"))
    y, v = x, w
    for _ in range(n):
        y = y[1:] + 1
        v = v[1:, :-1] * 2 + v[:-1, 1:]
    y.output("y")
    v.output("v")
    return g, y, v


def _program_chars(g) -> int:
    from luminal.egraph import program
    from luminal.egraph.registry import OpRegistry
    from luminal.hlir import HLIR_OPS

    return len(program.serialize_graph(g, OpRegistry(HLIR_OPS)).text)


def test_repeated_slices_keep_shapes_small():
    """Each slice of a symbolic dim used to nest the previous dim twice (exponential expressions and
    compile time): the dims stay max(s - n, 0) and the program grows linearly with the chain."""
    s, t = var("s"), var("t")
    sizes = {}
    for n in (8, 16, 32):
        g, y, v = _slice_chain(n)
        assert y.shape == (maximum(s - n, 0),), y.shape
        assert v.shape == (maximum(s - n, 0), maximum(t - n, 0)), v.shape
        assert max(_tree_size(d) for nd in g.nodes for d in (nd.size,)) <= 12
        sizes[n] = _program_chars(g)
    assert sizes[32] < 2.3 * sizes[16] and sizes[16] < 2.3 * sizes[8], sizes  # linear, not doubling per slice


def _tree_size(e) -> int:
    return 1 + sum(_tree_size(a) for a in e.args if isinstance(a, type(e)))


@pytest.mark.parametrize("n", [16, 32])
def test_repeated_slices_compile_and_match_numpy(n):
    g, _, _ = _slice_chain(n)
    m = g.compile("reference", cache=False)
    rng = np.random.default_rng(n)
    for sv, tv in ((n + 5, n + 2), (n, n + 1), (3, 40)):  # long enough, exactly used up, too short (empty)
        xv, wv = rng.standard_normal(sv).astype(np.float32), rng.standard_normal((sv, tv)).astype(np.float32)
        out = m.run({"x": xv, "w": wv})
        y, v = xv.astype(np.float64), wv.astype(np.float64)
        for _ in range(n):
            y = y[1:] + 1
            v = v[1:, :-1] * 2 + v[:-1, 1:]
        np.testing.assert_allclose(out["y"], y, rtol=2e-5, atol=1e-5)
        np.testing.assert_allclose(out["v"], v, rtol=2e-5, atol=2e-5 * max(1.0, float(np.abs(v).max(initial=0))))


@pytest.mark.cuda
def test_size_zero_dims_and_slice_chains_on_gpu():
    """On the GPU: the size-0 graph at sizes holding 0, and a 32-slice chain, equal the reference."""
    g = _size_zero_graph()
    _check_size_zero(g, g.compile("cuda", cache=False).run)
    g, _, _ = _slice_chain(32)
    gpu, ref = g.compile("cuda", cache=False), g.compile("reference", cache=False)
    rng = np.random.default_rng(0)
    for sv, tv in ((40, 35), (32, 33), (3, 40)):
        feed = {"x": rng.standard_normal(sv).astype(np.float32), "w": rng.standard_normal((sv, tv)).astype(np.float32)}
        got, want = gpu.run(feed), ref.run(feed)
        for k, w in want.items():
            np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(w).max(initial=0))))
