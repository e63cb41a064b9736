"""The one op-check helper of the property tests: build a graph with symbolic dims, compile it once
per key (op, variant, dtype), and let hypothesis vary the sizes and the data of every run.

    check_op(data, "add", lambda g, a, b: a + b, np.add, {"a": Arg(("m", 1)), "b": Arg(("n",))}, lm.f32)

`build(g, *inputs)` returns a tensor or a dict name -> tensor (several variants of one op share a
graph, and so one compile); `ref(*arrays)` returns the matching array or dict. Reference inputs are
the exact values fed to luminal, widened (floats to f64, ints to i64), so the oracle computes
exactly and the comparison uses the tolerance of the output dtype (docs/numerics.md). Integer and
bool outputs must match exactly (after wrapping the reference to the output dtype).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

import luminal as lm
from luminal.dtype import DType, to_dtype

FLOATS = (lm.f32, lm.f16, lm.bf16)
NUMERIC = (lm.f32, lm.f16, lm.bf16, lm.i32)

# (rtol, atol) per output dtype; the table of docs/numerics.md ("Test tolerances").
TOL: dict[DType, tuple[float, float]] = {
    lm.f64: (1e-10, 1e-12),
    lm.f32: (2e-5, 2e-6),
    lm.f16: (4e-3, 4e-3),
    lm.bf16: (3e-2, 3e-2),
    lm.f8e4m3: (1.3e-1, 1.3e-1),
    lm.f8e5m2: (2.5e-1, 2.5e-1),
}

_MODELS: dict[tuple, tuple] = {}  # full key -> (compiled model, output names, output dtypes)
compile_count = 0


@dataclass(frozen=True)
class Arg:
    """One input: a shape pattern (ints are fixed, names are dims hypothesis sizes) and its data.

    Floats are uniform in [lo, hi] (rounded to the dtype); ints uniform in [lo, hi]; bools fair coins.
    `min_abs` keeps values away from zero (divisors, log of |x|). `dtype=None` means the test's dtype.
    """

    shape: tuple
    dtype: object = None
    lo: float = -3.0
    hi: float = 3.0
    min_abs: float = 0.0
    persist: bool = False


def _dims_of(args: Mapping[str, Arg]) -> list[str]:
    out: list[str] = []
    for a in args.values():
        for d in a.shape:
            if isinstance(d, str) and d not in out:
                out.append(d)
    return out


def model_for(key: tuple, build: Callable, args: Mapping[str, Arg], dtype: DType):
    """The compiled model of `key` (built and compiled on first use): (model, out names, out dtypes)."""
    global compile_count
    full = (*key, dtype.value, tuple((n, a.shape, str(a.dtype)) for n, a in args.items()))
    hit = _MODELS.get(full)
    if hit is not None:
        return hit
    g = lm.Graph()
    ins = []
    for name, a in args.items():
        t = g.tensor(name, a.shape, to_dtype(a.dtype) if a.dtype is not None else dtype)
        ins.append(t.persist() if a.persist else t)
    res = build(g, *ins)
    outs = res if isinstance(res, dict) else {"out": res}
    dts = {}
    for name, t in outs.items():
        t.output(name)
        dts[name] = t.dtype
    model = g.compile(os.environ.get("LUMINAL_TEST_BACKEND", "reference"))
    compile_count += 1
    if path := os.environ.get("LUMINAL_TEST_COMPILE_LOG"):
        with open(path, "a") as f:
            f.write(repr(full[:-1]) + "\n")
    _MODELS[full] = (model, tuple(outs), dts)
    return _MODELS[full]


def sizes(lo: int = 1, hi: int = 5) -> st.SearchStrategy[int]:
    """Dim sizes, biased to 1 (broadcast-like) and small values."""
    return st.one_of(st.just(1), st.integers(lo, hi)) if lo <= 1 else st.integers(lo, hi)


def make_array(rng: np.random.Generator, shape: tuple[int, ...], dt: DType, a: Arg) -> np.ndarray:
    if dt == lm.bool:
        return rng.random(shape) < 0.5
    if dt.is_int:
        info = np.iinfo(dt.np)
        lo, hi = max(int(a.lo), info.min), min(int(a.hi), info.max)
        x = rng.integers(lo, hi, size=shape, endpoint=True, dtype=np.int64)
        if a.min_abs:
            m = int(np.ceil(a.min_abs))
            x = np.where(np.abs(x) < m, np.where(x < 0, -m, m), x)
        return x.astype(dt.np)
    x = rng.uniform(a.lo, a.hi, size=shape)
    if a.min_abs:
        x = np.where(np.abs(x) < a.min_abs, np.where(x < 0, -a.min_abs, a.min_abs), x)
    return x.astype(dt.np)


def widen(x: np.ndarray) -> np.ndarray:
    """The exact value of an array in a wide type: floats -> f64, ints -> i64, bools stay."""
    if x.dtype == np.bool_:
        return x
    if np.issubdtype(x.dtype, np.integer):
        return x.astype(np.int64)
    return x.astype(np.float64)


def assert_matches(actual: np.ndarray, expected, dt: DType, tol: float, what: str) -> None:
    """actual (luminal, dtype dt) against the reference: exact for ints/bool, tolerance for floats."""
    expected = np.asarray(expected)
    assert actual.dtype == dt.np, f"{what}: output dtype {actual.dtype}, graph says {dt}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, numpy gives {expected.shape}"
    if not dt.is_float:
        if dt == lm.bool:
            assert expected.dtype == np.bool_, f"{what}: bool output but the reference is {expected.dtype}"
        else:
            assert np.issubdtype(expected.dtype, np.integer) or expected.dtype == np.bool_, (
                f"{what}: {dt} output but the reference is {expected.dtype}"
            )
        want = expected.astype(dt.np)
        bad = actual != want
        if bad.any():
            i = tuple(int(k[0]) for k in np.nonzero(np.atleast_1d(bad)))[-bad.ndim :] if bad.ndim else ()
            raise AssertionError(
                f"{what}: {int(bad.sum())}/{bad.size} elements differ; first at {i}: got {actual[i]}, want {want[i]}"
                f"\n got={actual.tolist()}\nwant={want.tolist()}"
            )
        return
    rtol, atol = TOL[dt]
    rtol, atol = rtol * tol, atol * tol
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    inf_e = np.isinf(e)
    with np.errstate(invalid="ignore"):
        close = np.abs(a - e) <= atol + rtol * np.abs(e)
    ok = np.where(nan_e, nan_a, np.where(inf_e, a == e, close & ~nan_a))
    if not ok.all():
        i = tuple(int(k[0]) for k in np.nonzero(np.atleast_1d(~ok)))[-ok.ndim :] if ok.ndim else ()
        with np.errstate(invalid="ignore"):
            err = np.nanmax(np.where(ok, 0, np.abs(a - e)))
        raise AssertionError(
            f"{what}: {int((~ok).sum())}/{ok.size} elements off (rtol={rtol:g}, atol={atol:g}, max err {err:g}); "
            f"first at {i}: got {a[i]!r}, want {e[i]!r}\n got={a.tolist()}\nwant={e.tolist()}"
        )


def check_op(
    data,
    key: str | tuple,
    build: Callable,
    ref: Callable,
    args: Mapping[str, Arg],
    dtype: object = lm.f32,
    *,
    tol: float | Mapping[str, float] = 1.0,
    dim_sizes: st.SearchStrategy[int] | Mapping[str, st.SearchStrategy[int]] | None = None,
    extra_dims: Sequence[str] = (),
    out_dtypes: Mapping[str, object] | None = None,
    prep: Callable[[dict[str, np.ndarray], dict[str, int]], dict[str, np.ndarray]] | None = None,
    runs: int = 2,
) -> None:
    """Check one op (or one graph of variants) against numpy on one hypothesis example: the model
    compiled once for `key` runs `runs` times, each at freshly drawn sizes and data.

    `data` is hypothesis' `st.data()` object. `extra_dims` are dim names that no input shape fixes
    (they are drawn, passed in `dims=`, and given to `ref` as `dims=`). `prep(arrays, dims)` may
    rewrite the drawn arrays (e.g. to make indices valid for the drawn sizes). `out_dtypes` asserts
    the graph dtype of named outputs. `tol` scales the dtype's tolerance (a number, or per output
    name; 0 = exact).
    """
    dt = to_dtype(dtype)
    key = key if isinstance(key, tuple) else (key,)
    model, names, dts = model_for(key, build, args, dt)
    for name in names:
        if out_dtypes and name in out_dtypes:
            assert dts[name] == to_dtype(out_dtypes[name]), f"{key}/{name}: dtype {dts[name]}, not {out_dtypes[name]}"
    syms = _dims_of(args) + [d for d in extra_dims if d not in _dims_of(args)]
    for run in range(runs):
        env = {}
        for s in syms:
            if isinstance(dim_sizes, Mapping):
                strat = dim_sizes.get(s, sizes())
            else:
                strat = sizes() if dim_sizes is None else dim_sizes
            env[s] = data.draw(strat, label=f"run {run} dim {s}")
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label=f"run {run} seed"))
        arrays = {}
        for name, a in args.items():
            shape = tuple(env[d] if isinstance(d, str) else d for d in a.shape)
            arrays[name] = make_array(rng, shape, to_dtype(a.dtype) if a.dtype is not None else dt, a)
        if prep is not None:
            arrays = prep(dict(arrays), env)
        outs = model.run(arrays, dims={d: env[d] for d in extra_dims})
        with np.errstate(all="ignore"):
            kw = {"dims": env} if extra_dims else {}
            expected = ref(*(widen(arrays[n]) for n in args), **kw)
        if not isinstance(expected, dict):
            expected = {"out": expected}
        assert set(expected) == set(names), f"reference gives {sorted(expected)}, graph outputs {sorted(names)}"
        for name in names:
            odt = dts[name]
            if not (out_dtypes and name in out_dtypes) and dt.is_float and np.asarray(expected[name]).dtype.kind == "f":
                assert odt == dt, f"{key}/{name}: float op on {dt} gave a {odt} tensor"
            what = f"{'/'.join(map(str, key))}[{name}] dtype={dt} dims={env}"
            scale = tol.get(name, 1.0) if isinstance(tol, Mapping) else tol
            assert_matches(outs[name], expected[name], odt, scale, what)
