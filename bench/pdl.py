"""Programmatic dependent launch on vs off (issue 11): one compiled bf16 Decoder (random weights at the
preset's real shapes, bench/decode.py's `build`) whose CUDA graphs are rebuilt under LUMINAL_PDL=1 and =0
in alternating rounds of one process, so drift hits both. Per setting: TPOT (median per-token time of
CausalLM.generate, host work included), the decode plan's graph replayed back to back (CUDA events: the
step on the GPU alone), its edges, and the greedy tokens (must be the same in every round).

    python bench/pdl.py                               # llama-3.2-1b, 16-token prompt, 128 new tokens
    python bench/pdl.py --layers 2 --new 32 --rounds 2  # quick
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench.decode import COPY_BW, MODELS, build, prompt, step_bytes  # noqa: E402
from luminal.backends.cuda import driver  # noqa: E402
from luminal.models.engine import CausalLM, Decoder, Sampler  # noqa: E402


def rebuild_graphs(dec: Decoder) -> None:
    """Rebuild every plan's CUDA graph now, under the current LUMINAL_PDL (a plan not run yet builds its
    graph on first use)."""
    for _, ex in dec.model._plans:
        if getattr(ex, "_graph", None) is not None:
            ex._bind()


def edge_kinds(dec: Decoder) -> dict[str, int]:
    """Edges of every built graph of `dec`, by kind (driver.FULL / driver.PROGRAMMATIC)."""
    out: dict[str, int] = {}
    for _, ex in dec.model._plans:
        graph = getattr(ex, "_graph", None)
        for *_, kind in graph.edges if graph is not None else ():
            out[kind] = out.get(kind, 0) + 1
    return out


def decode_plan(dec: Decoder):
    return next(ex for bounds, ex in dec.model._plans if bounds.get("s") == (1, 1))


def replay_s(ex, n: int = 200) -> float:
    """Seconds per replay of the decode plan's graph, back to back (same dims and inputs as its last run)."""
    dev = ex.dev
    for _ in range(10):
        ex._graph.launch(dev.stream)
    a, b = driver.Event(), driver.Event()
    a.record(dev.stream)
    for _ in range(n):
        ex._graph.launch(dev.stream)
    b.record(dev.stream)
    b.synchronize()
    return b.elapsed_ms(a) * 1e-3 / n


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.2-1b", choices=list(MODELS))
    ap.add_argument("--layers", type=int, default=None, help="keep only the first N layers")
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3, help="alternating on / off rounds")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    capacity = args.prompt + args.new + 8
    t0 = time.perf_counter()
    cfg, model, weights = build(args.model, args.layers, "bf16", capacity)
    nbytes = step_bytes(cfg, weights, model, args.prompt + args.new / 2)
    os.environ["LUMINAL_PDL"] = "1"
    dec = Decoder(model.graph, model.cache_shapes, capacity, weights, "cuda", model.extra_inputs(), cfg.vocab_size)
    del weights
    print(f"{args.model} bf16, {cfg.n_layers} layers: built and compiled in {time.perf_counter() - t0:.1f} s "
          f"(compile {dec.compile_s:.1f} s)", flush=True)  # fmt: skip
    lm = CausalLM(dec)
    ids = prompt(args.prompt, cfg.vocab_size)
    lm.generate(ids, 8, Sampler(), stop_ids=())  # warm-up: both plans' graphs built, host ops captured
    runs: dict[str, list[dict]] = {"1": [], "0": []}
    tokens: dict[str, list[list[int]]] = {"1": [], "0": []}
    for r in range(args.rounds):
        for pdl in ("1", "0") if r % 2 == 0 else ("0", "1"):
            os.environ["LUMINAL_PDL"] = pdl
            rebuild_graphs(dec)
            lm.generate(ids, 8, Sampler(), stop_ids=())
            out = lm.generate(ids, args.new, Sampler(), stop_ids=())
            ex = decode_plan(dec)
            row = {"tpot_s": float(np.median(lm.stats.decode_s)), "replay_s": replay_s(ex), "edges": edge_kinds(dec),
                   "launches": ex.stats["launches"], "graph_builds": ex.stats["graph_builds"]}  # fmt: skip
            runs[pdl].append(row)
            tokens[pdl].append(out)
            print(f"round {r} PDL={pdl}: TPOT {row['tpot_s'] * 1e3:.3f} ms, "
                  f"graph replay {row['replay_s'] * 1e3:.3f} ms, edges {row['edges']}", flush=True)  # fmt: skip
    os.environ["LUMINAL_PDL"] = "1"
    first = tokens["1"][0]
    same = all(t == first for ts in tokens.values() for t in ts)
    print(f"\n{args.model} bf16 decode, {cfg.n_layers} layers, {runs['1'][0]['launches']} launches per step, "
          f"{args.prompt}-token prompt + {args.new} new, median of {args.rounds} rounds")  # fmt: skip
    print(f"{'PDL':<5} {'tok/s':>8} {'TPOT ms':>9} {'replay ms':>10} {'% roof':>7}  edges")
    summary = {}
    for pdl in ("1", "0"):
        tpot = float(np.median([x["tpot_s"] for x in runs[pdl]]))
        rep = float(np.median([x["replay_s"] for x in runs[pdl]]))
        summary[pdl] = {
            "tpot_s": tpot,
            "tok_s": 1 / tpot,
            "replay_s": rep,
            "roofline_pct": 100 * nbytes / COPY_BW / tpot,
        }
        print(f"{'on' if pdl == '1' else 'off':<5} {1 / tpot:8.1f} {tpot * 1e3:9.3f} {rep * 1e3:10.3f} "
              f"{summary[pdl]['roofline_pct']:7.1f}  {runs[pdl][-1]['edges']}")  # fmt: skip
    on, off = summary["1"], summary["0"]
    print(f"PDL speed-up: TPOT x{off['tpot_s'] / on['tpot_s']:.3f} ({(off['tpot_s'] - on['tpot_s']) * 1e6:+.1f} us), "
          f"graph replay x{off['replay_s'] / on['replay_s']:.3f} ({(off['replay_s'] - on['replay_s']) * 1e6:+.1f} us); "
          f"greedy tokens equal in every round: {same} (first 8: {first[:8]})")  # fmt: skip
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"args": vars(args), "runs": runs, "summary": summary,
                                              "tokens_equal": same}, indent=1))  # fmt: skip
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
