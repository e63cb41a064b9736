"""Model benchmark: TTFT, TPOT, tokens/s and compile time of --random presets at real shapes, next
to Hugging Face transformers (eager, same shapes, same thread count) measured in the same run.

    .venv/bin/python bench/models.py --preset llama-3.2-1b --prompt 32 --new 16
    .venv/bin/python bench/models.py --preset qwen3-0.6b --layers 4 --peer-python /tmp/goldens-venv/bin/python

The peer runs in-process when torch is importable, otherwise in `--peer-python` (a Python with
torch + transformers, e.g. the goldens venv of scripts/make_goldens.py); without either it is skipped.
Prints one line per engine and a roofline (weight bytes / bandwidth) for the decode step.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from luminal.models import gemma, llama, qwen  # noqa: E402
from luminal.models.common import load_random_preset  # noqa: E402
from luminal.models.engine import Sampler  # noqa: E402

PRESETS = {**{k: (llama, v) for k, v in llama.CONFIGS.items()}, **{k: (qwen, v) for k, v in qwen.CONFIGS.items()},
           **{k: (gemma, v) for k, v in gemma.CONFIGS.items()}}  # fmt: skip


def hf_config(preset: str, cfg) -> tuple[str, dict]:
    """(transformers class stem, config kwargs) with the same shapes as our preset."""
    common = dict(vocab_size=cfg.vocab_size, hidden_size=cfg.dim, intermediate_size=cfg.hidden,
                  num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_kv_heads,
                  head_dim=cfg.head_dim, max_position_embeddings=4096, rms_norm_eps=cfg.norm_eps)  # fmt: skip
    if preset.startswith("gemma"):
        return "Gemma3", {
            **common,
            "sliding_window": cfg.sliding_window,
            "layer_types": list("sliding_attention" if s else "full_attention" for s in cfg.sliding),
            "query_pre_attn_scalar": cfg.query_pre_attn_scalar,
        }
    rope = {"rope_type": cfg.rope.kind, "rope_theta": cfg.rope.theta}
    if cfg.rope.kind == "llama3":
        rope.update(factor=cfg.rope.factor, low_freq_factor=cfg.rope.low_freq_factor,
                    high_freq_factor=cfg.rope.high_freq_factor,
                    original_max_position_embeddings=cfg.rope.original_max_position)  # fmt: skip
    stem = "Qwen3" if cfg.qk_norm else "Qwen2" if cfg.qkv_bias else "Llama"
    return stem, {**common, "rope_parameters": rope, "tie_word_embeddings": cfg.tie_embeddings}


PEER = r"""
import json, sys, time, torch, transformers
a = json.loads(sys.argv[1]); torch.set_num_threads(a["threads"]); torch.manual_seed(0)
stem = a["stem"]; cls = {"Gemma3": "Gemma3Text"}.get(stem, stem)
cfg = getattr(transformers, cls + "Config")(**a["config"])
model = getattr(transformers, stem + "ForCausalLM")(cfg).eval()
ids = torch.tensor([a["prompt"]])
with torch.no_grad():
    model(ids[:, :2])  # warm-up
    t0 = time.perf_counter(); out = model(ids, use_cache=True); tok = out.logits[0, -1].argmax()
    ttft = time.perf_counter() - t0; past, steps = out.past_key_values, []
    for _ in range(a["new"] - 1):
        t0 = time.perf_counter(); out = model(tok.view(1, 1), past_key_values=past, use_cache=True)
        past, tok = out.past_key_values, out.logits[0, -1].argmax(); steps.append(time.perf_counter() - t0)
version = transformers.__version__ + " / torch " + torch.__version__
print(json.dumps({"ttft_s": ttft, "decode_s": steps, "version": version}))
"""


def run_peer(stem: str, config: dict, prompt: list[int], new: int, python: str | None, threads: int) -> dict | None:
    arg = json.dumps({"stem": stem, "config": config, "prompt": prompt, "new": new, "threads": threads})
    try:
        import torch  # noqa: F401

        python = sys.executable
    except ImportError:
        if python is None:
            return None
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    res = subprocess.run([python, "-c", PEER, arg], capture_output=True, text=True, env=env, timeout=3600)
    if res.returncode != 0:
        print(f"peer failed: {res.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="llama-3.2-1b", choices=sorted(PRESETS))
    ap.add_argument("--layers", type=int, default=None, help="keep only the first N layers")
    ap.add_argument("--prompt", type=int, default=32, help="prompt length (random token ids)")
    ap.add_argument("--new", type=int, default=16, help="tokens to generate")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--peer-python", default=None, help="a Python with torch + transformers for the peer")
    ap.add_argument("--bandwidth-gbs", type=float, default=None, help="roofline bandwidth (default: measured copy)")
    args = ap.parse_args(argv)
    module, cfg = PRESETS[args.preset]
    if args.layers is not None:
        cfg = replace(cfg, n_layers=args.layers)
    build = gemma.Transformer if module is gemma else llama.Transformer
    prompt = [int(i) for i in np.random.default_rng(0).integers(0, min(cfg.vocab_size, 32000), args.prompt)]
    capacity = args.prompt + args.new

    t0 = time.perf_counter()
    model = load_random_preset(cfg, args.backend, capacity, None, 0, build)
    setup_s = time.perf_counter() - t0
    model.generate(prompt[:2], 2, stop_ids=())  # warm-up: binds weights, touches every buffer once
    model.generate(prompt, args.new, Sampler(), stop_ids=())
    st = model.stats
    n_params = sum(int(np.prod(s)) for s, _ in build(cfg, 1).weight_shapes().values())
    weight_bytes = 4 * n_params  # f32 weights on the reference backend
    bw = args.bandwidth_gbs or _copy_bandwidth_gbs()
    roof_ms = weight_bytes / (bw * 1e9) * 1e3
    layers = f"{cfg.n_layers} layers" + (" (truncated)" if args.layers is not None else "")
    print(f"{args.preset} [{layers}, {n_params / 1e6:.0f} M params, prompt {args.prompt}, {args.new} new tokens]")
    print(f"  luminal/{model.decoder.model.backend:9s} TTFT {st.ttft_s * 1e3:8.1f} ms  TPOT {st.tpot_ms:8.1f} ms  "
          f"{st.tokens_per_s:6.2f} tok/s  compile {st.compile_s:6.2f} s  (setup {setup_s:.1f} s)")  # fmt: skip
    stem, hf = hf_config(args.preset, cfg)
    peer = run_peer(stem, hf, prompt, args.new, args.peer_python, threads=os.cpu_count() or 1)
    if peer is None:
        print("  transformers: skipped (no torch here; pass --peer-python /path/to/python-with-torch)")
    else:
        tpot = 1e3 * float(np.mean(peer["decode_s"])) if peer["decode_s"] else float("nan")
        tps = args.new / (peer["ttft_s"] + sum(peer["decode_s"]))
        print(f"  transformers eager TTFT {peer['ttft_s'] * 1e3:8.1f} ms  TPOT {tpot:8.1f} ms  {tps:6.2f} tok/s  "
              f"({peer['version']})")  # fmt: skip
    print(f"  roofline: decode reads {weight_bytes / 1e9:.2f} GB of f32 weights -> >= {roof_ms:.1f} ms/token at "
          f"{bw:.1f} GB/s")  # fmt: skip
    print(json.dumps({"preset": args.preset, "config": asdict(cfg) | {"rope": None}, "ttft_ms": st.ttft_s * 1e3,
                      "tpot_ms": st.tpot_ms, "compile_s": st.compile_s, "peer": peer}, default=str))  # fmt: skip


def _copy_bandwidth_gbs() -> float:
    """Measured memory bandwidth of a large numpy copy (read + write bytes / time, best of 3)."""
    a = np.ones(64 << 20, np.float32)
    b = np.empty_like(a)
    best = min(_timed(lambda: np.copyto(b, a)) for _ in range(3))
    return 2 * a.nbytes / best / 1e9


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
