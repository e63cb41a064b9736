"""Decode benchmark (issue 11): luminal vs a gpt-fast-style torch.compile peer vs HF eager, same random
weights at real shapes, batch 1: a 16-token prompt then 128 new tokens (TPOT, tok/s), and a 512-token
prompt (TTFT). Prints one table, writes the rows as JSON (plot them with bench/plot_decode.py).

    python bench/decode.py                                    # every model and peer (GPU)
    python bench/decode.py --models llama-3.2-1b,qwen3-0.6b --peers luminal,torch --out $OUT/decode.json
    python bench/decode.py --models llama-3.2-1b --layers 2 --backend reference --peers luminal,torch  # CPU smoke

Roofline: bytes one decode step must read (the weights, the embedding table only when tied to the
head, plus the KV cache at the mean context) over the H200's measured copy bandwidth, 4.25 TB/s.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from luminal.models import gemma, llama, qwen  # noqa: E402
from luminal.models.common import random_weights  # noqa: E402
from luminal.models.engine import CausalLM, Decoder, Sampler  # noqa: E402

MODELS = {"llama-3.2-1b": (llama, llama), "qwen3-0.6b": (qwen, llama), "gemma-3-1b": (gemma, gemma),
          "llama-3.1-8b": (llama, llama)}  # fmt: skip
PEERS = ("luminal", "torch", "hf")
COPY_BW = 4.25e12


def build(name: str, layers: int | None, dtype: str, capacity: int):
    """(config, zoo model object, weights) at the preset's real shapes with random weights."""
    mod, arch = MODELS[name]
    cfg = mod.CONFIGS[name]
    if layers is not None:
        cfg = replace(cfg, n_layers=layers)
    model = arch.Transformer(cfg, capacity, dtype)
    weights = {**random_weights(model.weight_shapes(), seed=0), **model.extra_inputs()}
    return cfg, model, weights


def step_bytes(cfg, weights: dict, model, ctx: float) -> float:
    """Bytes a decode step reads: every weight (the embedding table only if it is also the head) + KV."""
    skip = set(model.extra_inputs())
    if not getattr(cfg, "tie_embeddings", True):
        skip.add("model.embed_tokens.weight")
    w = sum(a.nbytes for n, a in weights.items() if n not in skip)
    kv_item = np.dtype(next(iter(weights.values())).dtype).itemsize
    return w + 2 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim * ctx * kv_item


def prompt(n: int, vocab: int, seed: int = 1) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(0, min(vocab, 30000), n)]


def run_luminal(cfg, model, weights, args) -> dict:
    t0 = time.perf_counter()
    dec = Decoder(model.graph, model.cache_shapes, model.capacity, weights, args.backend, model.extra_inputs(),
                  cfg.vocab_size)  # fmt: skip
    compile_s = time.perf_counter() - t0
    lm = CausalLM(dec)
    ids = prompt(args.prompt, cfg.vocab_size)
    lm.generate(ids, 8, Sampler(), stop_ids=())  # warm-up (graphs built, host ops captured)
    tpots = []
    for _ in range(args.reps):
        out = lm.generate(ids, args.new, Sampler(), stop_ids=())
        tpots.append(float(np.median(lm.stats.decode_s)))
    long = prompt(args.ttft_prompt, cfg.vocab_size, seed=2)
    ttfts = []
    for _ in range(args.reps + 1):
        dec.reset()
        t = time.perf_counter()
        dec.next(long, Sampler())
        ttfts.append(time.perf_counter() - t)
    st = dec.model.stats.get("runtime", {})
    return {"tpot_s": float(np.median(tpots)), "ttft_s": float(np.median(ttfts[1:])), "compile_s": compile_s,
            "tokens": out[:16], "graph_builds": st.get("graph_builds"), "h2d_bytes": st.get("h2d_bytes"),
            "d2h_bytes": st.get("d2h_bytes"), "host_captures": st.get("host_captures")}  # fmt: skip


def run_torch(cfg, model, weights, args) -> dict:
    import torch

    from bench.gptfast import Model, Peer, Spec

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    net = Model(Spec.of(cfg, model), weights, model.capacity, torch.bfloat16 if dev == "cuda" else torch.float32, dev)
    peer = Peer(net, compile_decode=dev == "cuda")
    ids = prompt(args.prompt, cfg.vocab_size)
    t0 = time.perf_counter()
    peer.generate(ids, 8)  # compiles the decode step (and its CUDA graphs)
    compile_s = time.perf_counter() - t0
    tpots = []
    for _ in range(args.reps):
        times: list[float] = []
        out = peer.generate(ids, args.new, times)
        tpots.append(float(np.median(times)))
    long = prompt(args.ttft_prompt, cfg.vocab_size, seed=2)
    ttfts = []
    for _ in range(args.reps + 1):
        t = time.perf_counter()
        int(peer.prefill(long).item())
        ttfts.append(time.perf_counter() - t)
    del peer, net
    return {"tpot_s": float(np.median(tpots)), "ttft_s": float(np.median(ttfts[1:])), "compile_s": compile_s,
            "tokens": out[:16]}  # fmt: skip


def run_hf(cfg, model, weights, args) -> dict:
    import torch
    import transformers

    from bench.gptfast import to_torch
    from bench.models import hf_config

    stem, kw = hf_config(args.model_name, cfg)
    cls = {"Gemma3": "Gemma3Text"}.get(stem, stem)
    conf = getattr(transformers, cls + "Config")(**kw)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    net = getattr(transformers, cls + "ForCausalLM")(conf).to(device=dev, dtype=dt).eval()
    state = {k: to_torch(v, dt, dev) for k, v in weights.items() if not k.startswith("rope")}
    net.load_state_dict(state, strict=False)

    @torch.no_grad()
    def gen(ids, n, times=None):
        cache = transformers.DynamicCache()
        x = torch.tensor([ids], device=dev)
        out = []
        for i in range(n):
            t = time.perf_counter()
            logits = net(input_ids=x, past_key_values=cache, use_cache=True).logits[0, -1]
            tok = int(torch.argmax(logits).item())
            if i and times is not None:
                times.append(time.perf_counter() - t)
            out.append(tok)
            x = torch.tensor([[tok]], device=dev)
        return out

    ids = prompt(args.prompt, cfg.vocab_size)
    gen(ids, 4)
    times: list[float] = []
    out = gen(ids, args.new, times)
    long = prompt(args.ttft_prompt, cfg.vocab_size, seed=2)
    ttfts = []
    for _ in range(2):
        t = time.perf_counter()
        gen(long, 1)
        ttfts.append(time.perf_counter() - t)
    return {"tpot_s": float(np.median(times)), "ttft_s": ttfts[-1], "compile_s": 0.0, "tokens": out[:16]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma list of {', '.join(MODELS)}")
    ap.add_argument("--peers", default=",".join(PEERS), help="comma list of luminal, torch (gpt-fast), hf (eager)")
    ap.add_argument("--backend", default="cuda", help="luminal backend (reference: CPU smoke runs)")
    ap.add_argument("--dtype", default="bf16", help="weights/KV dtype where the zoo supports it (else f32)")
    ap.add_argument("--layers", type=int, default=None, help="keep only the first N layers")
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--ttft-prompt", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default="bench/decode.json", help="JSON rows for bench/plot_decode.py")
    ap.add_argument("--capacity", type=int, default=None, help="KV-cache capacity (default: fits both prompts)")
    ap.add_argument("--one-step", action="store_true",
                    help="luminal only: prefill + one decode step, then exit (for compute-sanitizer)")  # fmt: skip
    args = ap.parse_args(argv)
    rows = []
    capacity = args.capacity or max(args.ttft_prompt, args.prompt + args.new) + 8
    if args.one_step:
        for name in args.models.split(","):
            cfg, model, weights = build(name, args.layers, args.dtype, capacity)
            dec = Decoder(model.graph, model.cache_shapes, capacity, weights, args.backend, model.extra_inputs(),
                          cfg.vocab_size)  # fmt: skip
            dec.reset()
            tok = dec.next(prompt(args.prompt, cfg.vocab_size), Sampler())
            print(f"{name}: prefill -> {tok}, decode -> {dec.next([tok], Sampler())}", flush=True)
        return
    for name in args.models.split(","):
        args.model_name = name
        cfg, model, weights = build(name, args.layers, args.dtype, capacity)
        ctx = args.prompt + args.new / 2
        nbytes = step_bytes(cfg, weights, model, ctx)
        for peer in args.peers.split(","):
            run = {"luminal": run_luminal, "torch": run_torch, "hf": run_hf}[peer]
            try:
                r = run(cfg, model, weights, args)
            except Exception as e:  # noqa: BLE001 - a failing peer is reported, the others still run
                print(f"{name} {peer}: FAILED {type(e).__name__}: {e}", flush=True)
                r = {"error": f"{type(e).__name__}: {e}"}
            if "tpot_s" in r:
                r["tok_s"] = 1.0 / r["tpot_s"]
                r["roofline_pct"] = 100 * nbytes / COPY_BW / r["tpot_s"]
            rows.append({"model": name, "engine": peer, "layers": cfg.n_layers, "step_bytes": nbytes,
                         "weights_dtype": str(next(iter(weights.values())).dtype), **r})  # fmt: skip
            gc.collect()
            print(line(rows[-1]), flush=True)
            save(args, rows)  # after every row: a run cut short by a timeout keeps what it measured
        toks = {r["engine"]: r["tokens"] for r in rows if r["model"] == name and "tokens" in r}
        if len(toks) > 1:  # greedy on the same weights: a disagreement is a bug or a near tie
            agree = {e: t == next(iter(toks.values())) for e, t in toks.items()}
            print(f"{name}: first {len(next(iter(toks.values())))} greedy tokens agree: {agree}", flush=True)
        del model, weights
        gc.collect()
    print("\n" + table(rows))
    save(args, rows)
    print(f"wrote {args.out}")


def save(args, rows: list[dict]) -> None:
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"copy_bw": COPY_BW, "args": vars(args), "rows": rows}, indent=1))


def line(r: dict) -> str:
    if "error" in r:
        return f"{r['model']:<14} {r['engine']:<8} {r['error']}"
    return (
        f"{r['model']:<14} {r['engine']:<8} {r['tok_s']:9.1f} tok/s  TPOT {r['tpot_s'] * 1e3:7.3f} ms  "
        f"TTFT {r['ttft_s'] * 1e3:8.1f} ms  compile {r['compile_s']:6.1f} s  {r['roofline_pct']:5.1f}% roofline"
    )


def table(rows: list[dict]) -> str:
    head = f"{'model':<14} {'engine':<8} {'tok/s':>9} {'TPOT ms':>9} {'TTFT ms':>9} {'compile s':>9} {'% roof':>7}"
    out = [head]
    for r in rows:
        if "error" in r:
            out.append(f"{r['model']:<14} {r['engine']:<8} failed")
            continue
        out.append(f"{r['model']:<14} {r['engine']:<8} {r['tok_s']:9.1f} {r['tpot_s'] * 1e3:9.3f} "
                   f"{r['ttft_s'] * 1e3:9.1f} {r['compile_s']:9.1f} {r['roofline_pct']:7.1f}")  # fmt: skip
    return "\n".join(out)


if __name__ == "__main__":
    main()
