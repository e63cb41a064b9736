"""Run every op of a zoo step plan alone on the CUDA backend, on the inputs the reference computes
for it, and compare with the reference: the first op that disagrees is the one to look at.

    python scripts/check_plan_ops.py --model llama --bucket prefill --s 12      # GPU
    python scripts/check_plan_ops.py --fake ...                                  # CPU, fake driver

A plan-level mismatch (tests/models/test_engine_gpu.py) says that something is wrong; this says what.
One-layer scaled-down bf16 model (tests/backends/cuda/test_inplace.py `plans`), random weights.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama", help="llama | qwen3 | gemma3")
    ap.add_argument("--bucket", default="prefill", help="decode | prefill")
    ap.add_argument("--s", default="12", help="prompt lengths, comma-separated (prefill)")
    ap.add_argument("--p", type=int, default=3, help="past length")
    ap.add_argument("--fake", action="store_true", help="the fake driver (CPU): checks the script itself")
    ap.add_argument("--decoder", default=None,
                    help="a preset (llama-3.2-1b, qwen3-0.6b, gemma-3-1b) cut to 2 layers, compiled by Decoder "
                         "for cuda (the searched plans, real widths): check its plan of --bucket")  # fmt: skip
    args = ap.parse_args()
    from luminal.backends.cuda import runtime

    if args.fake:
        from tests.backends.cuda import fake_driver

        runtime.driver, runtime.load_kernels, runtime.capture = (
            fake_driver,
            fake_driver.load_kernels,
            fake_driver.capture,
        )
    from luminal.backends.reference.executor import ReferenceExecutor
    from luminal.egraph.costs import one_op_plan
    from luminal.egraph.llir import LNode
    from luminal.hlir import Input, Output
    from luminal.models.common import random_weights
    from tests.backends.cuda.test_inplace import plans

    rng = np.random.default_rng(0)
    if args.decoder:
        from dataclasses import fields, replace

        from luminal.egraph.llir import LLIRGraph
        from luminal.models import gemma, llama, qwen
        from luminal.models.engine import Decoder

        mod, arch = {"llama-3.2-1b": (llama, llama), "qwen3-0.6b": (qwen, llama), "gemma-3-1b": (gemma, gemma)}[
            args.decoder
        ]
        cfg = replace(mod.CONFIGS[args.decoder], n_layers=2)
        if "dtype" in {f.name for f in fields(cfg)}:
            cfg = replace(cfg, dtype="bf16")
        model = arch.Transformer(cfg, 64)
        weights = {**random_weights(model.weight_shapes(), seed=0), **model.extra_inputs()}
        dec = Decoder(model.graph, model.cache_shapes, 64, weights, "cuda", model.extra_inputs(), cfg.vocab_size)
        want_s = (1, 1) if args.bucket == "decode" else None
        ex = next(ex for b, ex in dec.model._plans if (b.get("s") == (1, 1)) == (want_s is not None))
        llir = LLIRGraph(ex.nodes, {n.op.label: i for i, n in enumerate(ex.nodes) if isinstance(n.op, Output)})
    else:
        model, steps = plans(args.model)
        llir = steps[1 if args.bucket == "decode" else 5]
        weights = {**random_weights(model.weight_shapes(), seed=2, std=0.05), **model.extra_inputs()}
    bad = 0
    in_dt = {n.op.label: n.dtype for n in llir.nodes if isinstance(n.op, Input)}
    lengths = [1] if args.bucket == "decode" else [int(x) for x in args.s.split(",")]

    def make_feed(s: int) -> tuple[dict, dict]:
        """Random tokens and caches for a step of `s` tokens at past length `args.p`: (feed, dims)."""
        caches = {n: rng.uniform(-1, 1, sh).astype(in_dt[n].np) for n, sh in model.cache_shapes.items()}
        feed = {"tokens": rng.integers(0, 256, s).astype(np.int32), "rows": np.array([s - 1], np.int32),
                **weights, **caches}  # fmt: skip
        return feed, {"p": args.p, "s": s, "r": 1}

    for s in lengths:
        feed, env = make_feed(s)
        nodes = list(llir.nodes)  # every intermediate as an output of its own (kept alive to the end)
        for i, n in enumerate(llir.nodes):
            if not isinstance(n.op, (Input, Output)):
                nodes.append(LNode(Output(f"n{i}"), (i,), n.dtype))
        outs = {n.op.label: k for k, n in enumerate(nodes) if isinstance(n.op, Output)}
        vals = ReferenceExecutor(nodes, outs).run(dict(feed), env)
        inputs = {i: feed[n.op.label] for i, n in enumerate(llir.nodes) if isinstance(n.op, Input)}
        for i, n in enumerate(llir.nodes):
            if isinstance(n.op, (Input, Output)):
                continue
            plan = one_op_plan(llir, i)
            ins = {
                f"in{k}": np.asarray(vals[f"n{j}"] if j not in inputs else inputs[j]) for k, j in enumerate(n.inputs)
            }
            ex = runtime.CudaExecutor(plan.nodes)
            if args.fake:
                fake_driver.bind(ex)
            got = np.asarray(ex.run(ins, env)["out"], np.float64).reshape(-1)
            want = np.asarray(vals[f"n{i}"], np.float64).reshape(-1)
            err = float(np.nanmax(np.abs(got - want))) if want.size else 0.0
            scale = float(np.nanmax(np.abs(want))) if want.size else 0.0
            ok = err <= 0.02 * max(scale, 1e-3) + 1e-6 and np.array_equal(np.isnan(got), np.isnan(want))
            bad += not ok
            print(f"s={s:<4} node {i:>3} {type(n.op).__name__:<22} {'ok ' if ok else 'BAD'} max err {err:.3g} "
                  f"(|ref| max {scale:.3g}, {want.size} values)", flush=True)  # fmt: skip
    whole = runtime.CudaExecutor(llir.nodes)  # the whole plan, one executor across the lengths
    if args.fake:
        fake_driver.bind(whole)
    for s in lengths:
        feed, env = make_feed(s)
        want = ReferenceExecutor(llir.nodes, llir.outputs).run(dict(feed), env)
        got = whole.run(dict(feed), env)
        for label, w in want.items():
            w = np.asarray(w, np.float64)
            err = float(np.nanmax(np.abs(np.asarray(got[label], np.float64).reshape(w.shape) - w)))
            ok = err <= 0.02 * max(float(np.nanmax(np.abs(w))), 1e-3)
            bad += not ok
            print(f"s={s:<4} whole plan {label:<14} {'ok ' if ok else 'BAD'} max err {err:.3g}", flush=True)
    print(f"{bad} op(s) or outputs disagree with the reference")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
