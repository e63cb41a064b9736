"""Checks every decoder-only golden runs through: prefill logits, greedy decode with the KV cache,
cache decode == full recompute, and one compile serving several prompt lengths."""

from __future__ import annotations

import numpy as np

import luminal as lm
from tests.models.conftest import GOLDENS, SCALED, assert_close, golden, margin


def check_golden(load, name: str, dtype: str = "f32", backend: str = "reference") -> None:
    """The golden model loaded in `dtype` (the f32 checkpoint converted tensor by tensor) against
    transformers run in that dtype: prompt logits, greedy tokens, teacher-forced decode-step logits."""
    g = golden(name, dtype)
    model = load(GOLDENS / name, backend=backend, dtype=dtype)
    ids = g["input_ids"].tolist()
    logits = model.logits(ids)
    assert_close(logits, g["logits"], f"{name} prompt logits", dtype)
    check_runs_in(logits, name, dtype)
    out = model.generate(ids, 3, stop_ids=())
    check_greedy(out, g, dtype, name)
    dec = model.decoder
    dec.reset()
    dec.step(ids)
    steps = np.stack([dec.step([t])[0] for t in g["decode_ids"].tolist()])  # HF's tokens fed back
    assert_close(steps, g["decode_logits"], f"{name} decode-step logits (KV cache)", dtype)


def check_runs_in(logits: np.ndarray, name: str, dtype: str) -> None:
    """The model really computed in `dtype` (the 16-bit tolerance also admits an f32 run): its f32
    logits carry that dtype's rounding, away from transformers' f32 ones (graph dtypes: check_dtypes)."""
    assert logits.dtype == np.float32, f"{name}: logits are {logits.dtype}"
    if dtype != "f32":
        err = np.abs(logits - golden(name)["logits"]).max()  # an f32 run: < 1e-6
        assert err > 1e-5, f"{name}: {dtype} logits equal the f32 ones"


def check_greedy(out: list[int], g: dict, dtype: str, name: str) -> None:
    """Greedy tokens equal transformers' up to the first step whose top-2 margin is within the
    tolerance (there either token is right, and later steps see different inputs)."""
    rows = [g["logits"][-1], *g["decode_logits"]]
    for i, want in enumerate(g["decode_ids"].tolist()):
        tol = 0.0 if dtype == "f32" else 2 * SCALED[dtype] * np.abs(rows[i]).max()
        if margin(rows[i]) <= tol:
            return
        assert out[i] == want, f"{name} ({dtype}) greedy token {i}: {out[i]} != {want}"


def check_cache_equals_recompute(load, name: str) -> None:
    """Logits of token t decoded one at a time with the cache == logits of the full sequence."""
    model = load(GOLDENS / name, backend="reference")
    ids = golden(name)["input_ids"].tolist()
    full = model.logits(ids)
    dec = model.decoder
    dec.reset()
    first = dec.step(ids[:5], rows=range(5))
    rest = [dec.step([t])[0] for t in ids[5:]]
    np.testing.assert_allclose(np.concatenate([first, np.stack(rest)]), full, rtol=1e-5, atol=1e-5)


def check_one_compile_many_lengths(load, name: str) -> None:
    model = load(GOLDENS / name, backend="reference")
    g = golden(name)
    compiled = model.decoder.model
    for n in (1, 3, 8, len(g["input_ids"])):
        assert_close(model.logits(g["input_ids"][:n].tolist()), g["logits"][:n], f"{name} prefix of {n} tokens")
    assert model.decoder.model is compiled


def graph_dtypes(g: lm.Graph) -> dict[str, lm.DType]:
    """{name: dtype} of a graph's persistent inputs and outputs."""
    return {n: g.nodes[i].dtype for n, i in [*((n, g.inputs[n]) for n in g.persistent), *g.outputs.items()]}


def check_dtypes(g: lm.Graph, dtype: lm.DType, f32: tuple[str, ...] = ("logits",)) -> None:
    """Every weight, cache and state of `g` is in `dtype`; the computed inputs (rope tables) and the
    outputs named in `f32` are f32."""
    for name, dt in graph_dtypes(g).items():
        want = lm.f32 if name in f32 or "inv_freq" in name else dtype
        assert dt == want, f"{name}: {dt}, expected {want}"
    # the weights are used in their dtype (matmuls, lookups, adds), not widened: only norm scales are
    # cast, to f32, for the norm's f32 arithmetic
    weights = {g.inputs[n]: n for n in g.persistent if "inv_freq" not in n and not n.startswith(("cache.", "cross."))}
    for node in g.nodes:
        for i in node.inputs:
            if i in weights:
                is_cast = type(node.op).__name__ == "Cast"
                ok = (is_cast and node.dtype == lm.f32 and "norm" in weights[i]) or (
                    not is_cast and node.dtype == dtype
                )
                assert ok, f"{weights[i]} is read by a {type(node.op).__name__} of {node.dtype} in a {dtype} model"


def recording(build, graphs: list):
    """`build` (a Transformer class) that appends each graph it builds to `graphs`."""

    def make(cfg, capacity, dtype):
        m = build(cfg, capacity, dtype)
        graphs.append(m.graph)
        return m

    return make
