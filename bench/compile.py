"""Compile-time benchmark (not a test): a synthetic decoder-only transformer at 1, 4 and 16 layers.

Real op mix: token embedding (gather), RMSNorm, RoPE, GQA attention over a KV cache with a
causal mask, SwiGLU MLP, final norm and LM head. For each depth it compiles cold (empty cache
directory) and warm (same directory), printing each phase's time, the e-graph size and the peak
memory (RSS high-water mark of a fresh process per measurement). Run: `make bench-compile` or
`.venv/bin/python bench/compile.py [layers ...]`.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import luminal as lm
from luminal.shape.expr import dim, z

D, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 64, 4, 2, 16, 128, 256


def rope(x: lm.GraphTensor, cos: lm.GraphTensor, sin: lm.GraphTensor) -> lm.GraphTensor:
    """x (s, h, hd) rotated by half: (x1 cos - x2 sin, x1 sin + x2 cos); cos/sin (s, hd/2)."""
    half = HEAD_DIM // 2
    x1, x2 = x[:, :, :half], x[:, :, half:]
    c, s = cos.unsqueeze(1), sin.unsqueeze(1)  # (s, 1, hd/2)
    return lm.concat([x1 * c - x2 * s, x1 * s + x2 * c], axis=-1)


def attention(g: lm.Graph, h: lm.GraphTensor, i: int, cos, sin, mask) -> lm.GraphTensor:
    s = h.shape[0]
    wq, wk, wv, wo = (g.tensor(f"l{i}.{n}", shp).persist() for n, shp in
                      (("wq", (D, HEADS * HEAD_DIM)), ("wk", (D, KV_HEADS * HEAD_DIM)),
                       ("wv", (D, KV_HEADS * HEAD_DIM)), ("wo", (HEADS * HEAD_DIM, D))))  # fmt: skip
    q = rope((h @ wq).reshape(s, HEADS, HEAD_DIM), cos, sin)  # (s, H, hd)
    k = rope((h @ wk).reshape(s, KV_HEADS, HEAD_DIM), cos, sin)  # (s, KV, hd)
    v = (h @ wv).reshape(s, KV_HEADS, HEAD_DIM)
    k_cache = g.tensor(f"l{i}.k_cache", ("p", KV_HEADS, HEAD_DIM)).persist()
    v_cache = g.tensor(f"l{i}.v_cache", ("p", KV_HEADS, HEAD_DIM)).persist()
    k_all = lm.concat([k_cache, k], axis=0)  # (t, KV, hd)
    v_all = lm.concat([v_cache, v], axis=0)
    k_all.output(f"l{i}.k_out")
    v_all.output(f"l{i}.v_out")
    t = k_all.shape[0]
    rep = HEADS // KV_HEADS
    kh = k_all.permute(1, 0, 2).unsqueeze(1).expand(KV_HEADS, rep, t, HEAD_DIM).reshape(HEADS, t, HEAD_DIM)
    vh = v_all.permute(1, 0, 2).unsqueeze(1).expand(KV_HEADS, rep, t, HEAD_DIM).reshape(HEADS, t, HEAD_DIM)
    scores = (q.permute(1, 0, 2) @ kh.transpose(-1, -2)) * (1.0 / np.sqrt(HEAD_DIM))  # (H, s, t)
    scores = lm.where(mask, scores, -1e9)
    out = (scores.softmax(-1) @ vh).permute(1, 0, 2).reshape(s, HEADS * HEAD_DIM)  # (s, H*hd)
    return out @ wo


def mlp(g: lm.Graph, h: lm.GraphTensor, i: int) -> lm.GraphTensor:
    w1, w3 = (g.tensor(f"l{i}.{n}", (D, FFN)).persist() for n in ("w1", "w3"))
    w2 = g.tensor(f"l{i}.w2", (FFN, D)).persist()
    return ((h @ w1).silu() * (h @ w3)) @ w2


def build(layers: int) -> lm.Graph:
    g = lm.Graph()
    tokens = g.tensor("tokens", ("s",), lm.i32)
    emb = g.tensor("emb", (VOCAB, D)).persist()
    cos, sin = g.tensor("cos", ("s", HEAD_DIM // 2)), g.tensor("sin", ("s", HEAD_DIM // 2))
    s, p = dim("s"), dim("p")
    t = p + s
    mask = g.iota((z % t).lt(z // t + p + 1), (s, t)).cast(lm.bool).unsqueeze(0).expand(HEADS, s, t)
    x = emb.gather(tokens, axis=0)  # (s, D)
    for i in range(layers):
        x = x + attention(g, x.rms_norm() * g.tensor(f"l{i}.attn_norm", (D,)).persist(), i, cos, sin, mask)
        x = x + mlp(g, x.rms_norm() * g.tensor(f"l{i}.mlp_norm", (D,)).persist(), i)
    x = x.rms_norm() * g.tensor("norm", (D,)).persist()
    (x @ g.tensor("lm_head", (D, VOCAB)).persist()).output("logits")
    return g


def measure(layers: int, cache: str) -> dict:
    """One compile in this process (called in a fresh subprocess so peak RSS is per compile)."""
    os.environ["LUMINAL_CACHE"] = cache
    t0 = time.perf_counter()
    g = build(layers)
    t_build = time.perf_counter() - t0
    model = g.compile("reference")
    st = model.stats
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    keys = ("hlir_nodes", "egraph_nodes", "egraph_classes", "llir_nodes", "time_serialize_s", "time_saturate_s",
            "time_extract_s", "time_search_s", "time_total_s", "cache_hit")  # fmt: skip
    out = {k: st[k] for k in keys} | {"time_build_s": t_build, "peak_mb": peak_mb,
                                      "matmuls": st["llir_ops"].get("NumpyMatmul", 0)}  # fmt: skip
    out["phases"] = [(p["phase"], round(p["seconds"], 3), p["iterations"]) for p in st["phases"]]
    return out


COLUMNS = (  # header, stats key, format
    ("hlir", "hlir_nodes", "{:>6}"), ("e-nodes", "egraph_nodes", "{:>8}"), ("classes", "egraph_classes", "{:>8}"),
    ("llir", "llir_nodes", "{:>5}"), ("mm", "matmuls", "{:>4}"), ("build", "time_build_s", "{:>6.2f}"),
    ("serial", "time_serialize_s", "{:>7.3f}"), ("satur", "time_saturate_s", "{:>7.3f}"),
    ("extract", "time_extract_s", "{:>7.3f}"), ("search", "time_search_s", "{:>7.3f}"),
    ("total", "time_total_s", "{:>7.3f}"), ("peakMB", "peak_mb", "{:>7.0f}"),
)  # fmt: skip


def main(argv: list[str]) -> None:
    if argv[:1] == ["--one"]:
        print(json.dumps(measure(int(argv[1]), argv[2])))
        return
    depths = [int(a) for a in argv] or [1, 4, 16]
    widths = [len(f.format(0)) for _, _, f in COLUMNS]
    print(f"{'layers':>6} {'run':>5} " + " ".join(h.rjust(w) for (h, _, _), w in zip(COLUMNS, widths, strict=True)))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    for n in depths:
        with tempfile.TemporaryDirectory() as d:
            for run in ("cold", "warm"):
                cmd = [sys.executable, __file__, "--one", str(n), d]
                r = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
                m = json.loads(r.stdout.strip().splitlines()[-1])
                cells = " ".join(f.format(m[k]) for _, k, f in COLUMNS)
                print(f"{n:>6} {run:>5} {cells}  {m['phases'] if run == 'cold' else ''}")


if __name__ == "__main__":
    main(sys.argv[1:])
