"""PyTorch-frontend benchmark: a Hugging Face LlamaForCausalLM (random weights) decoding through
`torch.compile(backend="luminal")` with a StaticCache, next to the zoo's own llama (luminal graph,
same shapes, same backend) and to torch itself (eager, and `torch.compile(mode="reduce-overhead")`
on CUDA), measured in one run. Target (issue 14): luminal-through-torch TPOT within 10% of the
zoo's, and a compile faster than reduce-overhead's.

    .venv/bin/python bench/torch_frontend.py --preset llama-3.2-1b --backend cuda --prompt 32 --new 32
    .venv/bin/python bench/torch_frontend.py --tiny --backend reference --new 4   # CPU smoke run

Prints one line per engine: compile s (first prefill + first decode), TTFT, TPOT (median of the
decode steps, CUDA-synchronized), and the ratios to the zoo.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import transformers  # noqa: E402
from models import hf_config  # noqa: E402  (bench/models.py: HF config kwargs for a zoo preset)

import luminal.torch as lt  # noqa: E402
from luminal.models import llama  # noqa: E402
from luminal.models.engine import Sampler  # noqa: E402

TINY = llama.Config(vocab_size=256, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden=128, head_dim=16)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def decode_torch(model, cfg, prompt: torch.Tensor, new: int, cache_len: int, device) -> dict:
    """Prefill + greedy decode with a StaticCache through `model` (eager or compiled); timings in s."""
    cache = transformers.StaticCache(config=cfg, max_cache_len=cache_len)
    n = prompt.shape[1]
    t0 = time.perf_counter()
    out = model(input_ids=prompt, past_key_values=cache, use_cache=True, cache_position=torch.arange(n, device=device))
    tok = out.logits[:, -1:].argmax(-1)
    _sync(device)
    ttft, steps = time.perf_counter() - t0, []
    for pos in range(n, n + new - 1):
        t0 = time.perf_counter()
        out = model(input_ids=tok, past_key_values=cache, use_cache=True,
                    cache_position=torch.tensor([pos], device=device))  # fmt: skip
        tok = out.logits[:, -1:].argmax(-1)
        _sync(device)
        steps.append(time.perf_counter() - t0)
    return {"ttft": ttft, "steps": steps}


def line(name: str, compile_s: float, r: dict, zoo_tpot: float | None) -> str:
    tpot = statistics.median(r["steps"]) if r["steps"] else float("nan")
    ratio = f" | {tpot / zoo_tpot:.2f}x zoo" if zoo_tpot else ""
    return f"{name:28s} compile {compile_s:7.2f} s | TTFT {r['ttft'] * 1e3:8.1f} ms | TPOT {tpot * 1e3:7.2f} ms{ratio}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="llama-3.2-1b", choices=sorted(llama.CONFIGS))
    ap.add_argument("--tiny", action="store_true", help="a tiny config (CPU smoke run)")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--backend", default="cuda", choices=["cuda", "reference", "auto"])
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--no-torch-compile", action="store_true", help="skip torch.compile(mode='reduce-overhead')")
    a = ap.parse_args(argv)
    cfg = TINY if a.tiny else llama.CONFIGS[a.preset]
    if a.layers:
        cfg = dataclasses.replace(cfg, n_layers=a.layers)
    device = torch.device("cuda" if a.backend in ("cuda", "auto") and torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    cache_len = a.prompt + a.new + 8
    _, kwargs = hf_config(a.preset, cfg)
    hf_cfg = transformers.LlamaConfig(**kwargs)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(hf_cfg).to(device=device, dtype=dtype).eval()
    prompt = torch.randint(0, cfg.vocab_size, (1, a.prompt), device=device)
    versions = f"torch {torch.__version__}, transformers {transformers.__version__}"
    print(f"# {'tiny' if a.tiny else a.preset}, {cfg.n_layers} layers, {a.dtype}, backend {a.backend}, "
          f"device {device}, prompt {a.prompt}, new {a.new}, {versions}")  # fmt: skip

    with torch.no_grad():
        # the zoo's llama: the same shapes as a luminal graph (random weights of its own)
        t0 = time.perf_counter()
        zoo = llama.load_random_preset(cfg, a.backend, cache_len, None, 0, llama.Transformer)
        zoo.generate(prompt[0].tolist(), 2, Sampler())  # compile + warm-up
        zoo_compile = time.perf_counter() - t0
        zoo.generate(prompt[0].tolist(), a.new, Sampler())
        zoo_tpot = zoo.stats.tpot_ms / 1e3
        print(line("zoo llama (luminal graph)", zoo_compile, {"ttft": zoo.stats.ttft_s, "steps": zoo.stats.decode_s},
                   None))  # fmt: skip

        # HF model through the luminal backend: one prefill graph + one decode graph
        before = lt.counters["compiles"]
        fast = torch.compile(model, backend="luminal", dynamic=True, options={"backend": a.backend})
        t0 = time.perf_counter()
        decode_torch(fast, hf_cfg, prompt, 2, cache_len, device)  # compiles prefill + decode
        lum_compile = time.perf_counter() - t0
        r = decode_torch(fast, hf_cfg, prompt, a.new, cache_len, device)
        print(line("HF llama, backend=luminal", lum_compile, r, zoo_tpot))
        print(
            f"#   luminal compiles: {lt.counters['compiles'] - before} (expect 2), fallbacks {lt.counters['fallbacks']}"
        )

        r = decode_torch(model, hf_cfg, prompt, a.new, cache_len, device)
        print(line("HF llama, eager", 0.0, r, zoo_tpot))
        if device.type == "cuda" and not a.no_torch_compile:
            torch._dynamo.reset()
            ro = torch.compile(model, mode="reduce-overhead")
            t0 = time.perf_counter()
            decode_torch(ro, hf_cfg, prompt, 2, cache_len, device)
            ro_compile = time.perf_counter() - t0
            r = decode_torch(ro, hf_cfg, prompt, a.new, cache_len, device)
            print(line("HF llama, reduce-overhead", ro_compile, r, zoo_tpot))


if __name__ == "__main__":
    main()
