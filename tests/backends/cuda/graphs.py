"""Small graphs that together use every HLIR primitive on every dtype family, with symbolic dims:
the lowering test runs them on CPU (kernel-op LLIR by reference semantics), the GPU test runs them
on CUDA against the reference backend. Each entry: name -> (inputs {name: (shape, dtype)}, build)."""

from __future__ import annotations

import numpy as np

import luminal as lm

FLOAT_DTYPES = (lm.f32, lm.f16, lm.bf16, lm.f64)
INT_DTYPES = (lm.i8, lm.i16, lm.i32, lm.i64, lm.u8)


def _unary(g, x):
    return {"exp": x.exp(), "log": (x.abs() + 0.5).log(), "sin": x.sin(), "sqrt": x.abs().sqrt(),
            "recip": (x.abs() + 1).reciprocal()}  # fmt: skip


def _binary(g, x, y):
    return {"add": x + y, "mul": x * y, "mod": x % (y.abs() + 1), "lt": x < y, "bcast": x + y[:, 0:1]}


def _reduce(g, x):
    return {"sum_rows": x.sum(axis=1), "sum_cols": x.sum(axis=0), "max_rows": x.max(axis=1),
            "max_all": x.max(), "sum_t": x.transpose(0, 1).sum(axis=1)}  # fmt: skip


def _index(g, x, i, u):
    out = {"gather": x.gather(i, axis=0), "scatter": x.scatter(i, u, axis=0), "iota": g.arange("s") + 1}
    if x.dtype.is_float:
        out["const"] = x * 0.5 + 1.25
    return out


CAST_TO = (lm.f32, lm.f16, lm.bf16, lm.f64, lm.i8, lm.i32, lm.i64, lm.u8, lm.bool, lm.f8e4m3, lm.f8e5m2)


def _cast(g, x):
    return {f"to_{dt.value}": x.cast(dt) for dt in CAST_TO if dt != x.dtype}


def _ints(g, x, y):
    return {"add": x + y, "mul": x * y, "mod": x % y, "lt": x < y, "sum": x.sum(axis=1), "max": x.max(axis=0)}


def _bools(g, a, b):
    return {"or": a | b, "and": a & b, "not": ~a, "to_i32": a.cast(lm.i32)}


def cases() -> dict:
    out = {}
    for dt in FLOAT_DTYPES:
        out[f"unary_{dt.value}"] = ({"x": (("s", 8), dt)}, _unary)
        out[f"binary_{dt.value}"] = ({"x": (("s", 8), dt), "y": (("s", 8), dt)}, _binary)
        out[f"reduce_{dt.value}"] = ({"x": (("s", 40), dt)}, _reduce)
        out[f"cast_{dt.value}"] = ({"x": (("s", 4), dt)}, _cast)
    for dt in (lm.f32, lm.bf16, lm.i64):
        out[f"index_{dt.value}"] = ({"x": (("s", 6), dt), "i": ((2,), lm.i32), "u": ((2, 6), dt)}, _index)
    for dt in INT_DTYPES:
        out[f"ints_{dt.value}"] = ({"x": (("s", 5), dt), "y": (("s", 5), dt)}, _ints)
        out[f"cast_{dt.value}"] = ({"x": (("s", 4), dt)}, _cast)
    out["bools"] = ({"a": (("s", 3), lm.bool), "b": (("s", 3), lm.bool)}, _bools)
    return out


def build(case: str):
    specs, fn = cases()[case]
    g = lm.Graph()
    ins = [g.tensor(n, shape, dt) for n, (shape, dt) in specs.items()]
    for name, t in fn(g, *ins).items():
        t.output(name)
    return g, specs


def make_inputs(specs: dict, s: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, (shape, dt) in specs.items():
        shp = tuple(s if d == "s" else d for d in shape)
        if name == "i":  # gather / scatter indexes: valid rows for any s >= 1
            out[name] = np.array([0, max(s - 1, 0)], np.int32)
        elif dt == lm.bool:
            out[name] = rng.random(shp) < 0.5
        elif dt.is_int:
            info = np.iinfo(dt.np)
            lo, hi = max(info.min, -100), min(info.max, 100)
            v = rng.integers(lo, hi, size=shp, endpoint=True)
            if name == "y":
                v = np.where(v == 0, 3, v)  # keep % defined on both backends
            out[name] = v.astype(dt.np)
        else:
            out[name] = rng.uniform(-3, 3, size=shp).astype(dt.np)
    return out
