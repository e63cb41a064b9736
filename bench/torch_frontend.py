"""PyTorch-frontend benchmark: a Hugging Face LlamaForCausalLM (random weights) decoding through
`torch.compile(backend="luminal")` with a StaticCache, next to the zoo's own llama (luminal graph,
same shapes, same backend) and to torch itself (eager, and `torch.compile(mode="reduce-overhead")`
on CUDA), measured in one run. Target (issue 14): luminal-through-torch TPOT within 10% of the
zoo's, and a compile faster than reduce-overhead's.

    .venv/bin/python bench/torch_frontend.py --preset llama-3.2-1b --backend cuda --prompt 32 --new 32
    .venv/bin/python bench/torch_frontend.py --tiny --backend reference --new 4   # CPU smoke run

Prints one line per engine: compile s (first prefill + first decode), TTFT, TPOT (median of the
decode steps, CUDA-synchronized, including reading nothing back but what the loop itself needs),
tok/s, and the ratio to the zoo; then what a luminal decode step moved (runtime counters: bytes
host->device, device->host, device->device; CUDA-graph builds over the loop), and the two verdicts
of issue 14. `--json PATH` writes the numbers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

_BENCH = Path(__file__).resolve().parent
# bench/kernels.py would shadow the `kernels` package transformers imports when it is installed
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.insert(0, str(_BENCH.parent))

import torch  # noqa: E402
import transformers  # noqa: E402


def _bench_module(name: str):
    """bench/<name>.py, loaded by path (bench/ stays off sys.path: see above)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", _BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


hf_config = _bench_module("models").hf_config  # HF config kwargs for a zoo preset

import luminal.torch as lt  # noqa: E402
from luminal.models import llama  # noqa: E402
from luminal.models.engine import Sampler  # noqa: E402
from luminal.torch import dynamo, program  # noqa: E402

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


RESULTS: dict = {}


STEP_KEYS = ("h2d_bytes", "d2h_bytes", "d2d_bytes")


def line(name: str, compile_s: float, r: dict, zoo_tpot: float | None, step: dict | None = None) -> str:
    """One engine's row: compile s, TTFT, TPOT, tok/s, ratio to the zoo, and what its last decode
    step moved (`step`: the luminal runtime's counters; torch's own engines are not counted)."""
    tpot = statistics.median(r["steps"]) if r["steps"] else float("nan")
    RESULTS[name] = {"compile_s": compile_s, "ttft_s": r["ttft"], "tpot_s": tpot, "tok_s": 1.0 / tpot}
    ratio = f" | {tpot / zoo_tpot:.2f}x zoo TPOT" if zoo_tpot else ""
    moved = "bytes/step: not counted (torch)" if step is None else "bytes/step: n/a (host path)"
    if step is not None and "h2d_bytes" in step:
        RESULTS[name].update({k: step[k] for k in STEP_KEYS})
        moved = "bytes/step h2d {h2d_bytes} d2h {d2h_bytes} d2d {d2d_bytes}".format(**step)
    return (f"{name:28s} compile {compile_s:7.2f} s | TTFT {r['ttft'] * 1e3:8.1f} ms | TPOT {tpot * 1e3:7.2f} ms "
            f"| {1.0 / tpot:7.1f} tok/s{ratio} | {moved}")  # fmt: skip


class _Recorded(program.Program):
    """The backend's Programs, to read the decode graph's runtime counters (and how long building
    each took: the translation's compile, CUDA init and kernel loads included)."""

    made: list = []
    build_s: list = []

    def __init__(self, *a, **k):
        t0 = time.perf_counter()
        super().__init__(*a, **k)
        _Recorded.build_s.append(time.perf_counter() - t0)
        _Recorded.made.append(self)


TRANSLATE_S: list = []


DUMP_FX: list = []  # [directory] when --dump-fx: each translated ATen graph's code goes there


def _timed_translate(translate):
    def wrapped(*a, **k):
        if DUMP_FX:
            path = DUMP_FX[0] / f"graph{len(TRANSLATE_S)}.py"
            path.write_text(a[0].print_readable(print_output=False, include_stride=True, include_device=True))
        t0 = time.perf_counter()
        out = translate(*a, **k)
        TRANSLATE_S.append(time.perf_counter() - t0)
        return out

    return wrapped


def _decode_program():
    """The decode Program (per-call tensors of one token, besides 0-d host scalars), or None."""
    for p in _Recorded.made:
        per_call = [s for s in p.inputs if s.kind == "tensor" and not s.persistent and s.shape]
        if per_call and all(e.is_num and int(e) == 1 for s in per_call for e in s.shape):
            return p
    return None


def _decode_stats(p) -> str:
    """What the decode Program did over the measured loops: paths, CUDA-graph builds, patches."""
    if p is None:
        return "#   no decode Program recorded"
    paths = ", ".join(f"{q.paths['device']} device / {q.paths['host']} host" for q in _Recorded.made)
    rt = p.model.stats.get("runtime")
    if rt is None:
        return f"#   luminal runs per graph (device/host path): {paths}; reference backend: no device counters"
    RESULTS["luminal decode step"] = {k: rt[k] for k in ("graph_builds", "graph_patches", "runs")}
    return (f"#   luminal runs per graph: {paths} (a host-path run copies state through the host) | decode graph "
            f"builds {rt['graph_builds']} over {rt['runs']} runs (one per StaticCache), patches {rt['graph_patches']}"
            f" | host scalars fed: {len(p.host_fed)}")  # fmt: skip


def _decode_plan(p) -> str:
    """The decode plan's bucket (the dims its candidates were priced at) and what its launches are."""
    if p is None:
        return "#   no decode Program recorded"
    bounds = [b.get("bounds") for b in p.model.stats.get("buckets", [])]
    plans = [ex for _, ex in getattr(p.model, "_plans", []) if hasattr(ex, "steps")]
    if not plans:
        return f"#   decode plan bucket {bounds}"
    nodes = p.model.plans[0].nodes
    kinds = Counter(type(nodes[s.node].op).__name__ for s in plans[0].steps)
    RESULTS["decode plan launches by op"] = dict(kinds)
    return f"#   decode plan bucket {bounds} | launches by op: {dict(kinds.most_common())}"


def _launches(model, decode_bounds: bool = False) -> int | None:
    """Launch steps of one run of a compiled model's (decode) plan on the CUDA runtime: kernels and
    library calls (the runtime's own step list; None on the reference backend)."""
    plans = [(b, ex) for b, ex in getattr(model, "_plans", []) if hasattr(ex, "steps")]
    if decode_bounds:  # the zoo: the s = 1 bucket's plan
        plans = [(b, ex) for b, ex in plans if tuple(b.get("s", (1, 1))) == (1, 1)] or plans
    return len(plans[0][1].steps) if plans else None


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
    ap.add_argument("--no-eager", action="store_true", help="skip the eager HF run")
    ap.add_argument("--peer-only", action="store_true",
                    help="only torch.compile(mode='reduce-overhead'): run it in a process of its own (it crashed "
                         "once after the luminal backend had run in the same process, session 6)")  # fmt: skip
    ap.add_argument("--json", type=Path, default=None, help="write the numbers here")
    ap.add_argument("--dynamic-floats", action="store_true",
                    help="keep Dynamo's default specialize_float=False: every float the model reads (RMSNorm "
                         "eps, attention scaling) becomes a runtime input, which hides it from luminal's fusion "
                         "rules (docs/torch.md)")  # fmt: skip
    ap.add_argument("--dynamic", action="store_true",
                    help="torch.compile(dynamic=True) for the luminal engine; by default both engines use torch's "
                         "default (static first, dynamic at the first new length), as the peer does: "
                         "dynamic=True doubles Dynamo's tracing, each layer's cache a symbol of its own")  # fmt: skip
    ap.add_argument("--dump-fx", type=Path, default=None,
                    help="write each ATen graph the luminal backend translates (its code, with shapes, strides "
                         "and devices) into this directory: what a GPU trace really holds")  # fmt: skip
    a = ap.parse_args(argv)
    if a.dump_fx is not None:
        a.dump_fx.mkdir(parents=True, exist_ok=True)
        DUMP_FX.append(a.dump_fx)
    # floats as guarded constants (both torch.compile engines alike): see docs/torch.md, "Floats"
    torch._dynamo.config.specialize_float = not a.dynamic_floats
    dynamo.Program = _Recorded  # record the backend's Programs (read-only use: counters)
    dynamo.translate = _timed_translate(dynamo.translate)
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
          f"device {device}, prompt {a.prompt}, new {a.new}, {versions}, "
          f"specialize_float={torch._dynamo.config.specialize_float}, luminal dynamic={a.dynamic or None}")  # fmt: skip

    zoo_tpot = None
    with torch.no_grad():
        if not a.peer_only:  # (--peer-only: the reduce-overhead peer alone, in a process of its own)
            # the zoo's llama: the same shapes as a luminal graph (random weights of its own)
            t0 = time.perf_counter()
            zoo = llama.load_random_preset(cfg, a.backend, cache_len, None, 0, llama.Transformer, dtype=a.dtype)
            zoo.generate(prompt[0].tolist(), 2, Sampler())  # compile + warm-up
            zoo_compile = time.perf_counter() - t0
            zoo.generate(prompt[0].tolist(), a.new, Sampler())
            zoo_tpot = zoo.stats.tpot_ms / 1e3
            zoo_step = zoo.decoder.model.stats.get("runtime", {})
            zoo_r = {"ttft": zoo.stats.ttft_s, "steps": zoo.stats.decode_s}
            print(line("zoo llama (luminal graph)", zoo_compile, zoo_r, None, zoo_step))
            zoo_launches = _launches(zoo.decoder.model, decode_bounds=True)

            # HF model through the luminal backend: one prefill graph + one decode graph
            before = lt.counters["compiles"]
            fast = torch.compile(model, backend="luminal", dynamic=a.dynamic or None, options={"backend": a.backend})
            t0 = time.perf_counter()
            decode_torch(fast, hf_cfg, prompt, 2, cache_len, device)  # compiles prefill + decode
            lum_compile = time.perf_counter() - t0
            r = decode_torch(fast, hf_cfg, prompt, a.new, cache_len, device)
            dec = _decode_program()
            step = {} if dec is None else dec.model.stats.get("runtime", {})
            print(line("HF llama, backend=luminal", lum_compile, r, zoo_tpot, step))
            print(
                f"#   luminal compiles: {lt.counters['compiles'] - before} (expect 2), "
                f"fallbacks {lt.counters['fallbacks']}"
            )
            own = sum(p.stats.get("time_total_s", 0.0) for p in _Recorded.made)
            print(f"#   of the compile: luminal's own {own:.1f} s (e-graph, search, load), the rest torch's tracing "
                  "(Dynamo + AOTAutograd, shared with reduce-overhead) and the first calls")  # fmt: skip
            RESULTS["luminal own compile s"] = own
            built, tr_s = sum(_Recorded.build_s), sum(TRANSLATE_S)
            rest = lum_compile - tr_s - built
            RESULTS["compile split s"] = {"translate": tr_s, "Program": built, "torch and first calls": rest}
            print(f"#   compile split: ATen -> luminal translation {tr_s:.1f} s, Program build {built:.1f} s "
                  f"(luminal's compile, CUDA init, kernel loads), Dynamo + AOTAutograd tracing and the first "
                  f"calls {rest:.1f} s")  # fmt: skip
            print(_decode_stats(dec))
            print(_decode_plan(dec))
            lum_launches = None if dec is None else _launches(dec.model)
            RESULTS["launches per decode step"] = {"zoo": zoo_launches, "HF via luminal": lum_launches}
            per = (
                ""
                if not (zoo_launches and lum_launches)
                else f" ({(lum_launches - zoo_launches) / cfg.n_layers:+.1f} per layer)"
            )
            print(f"#   launches per decode step (kernels + library calls): HF via luminal {lum_launches}, "
                  f"zoo {zoo_launches}{per}")  # fmt: skip
            lum_tpot = RESULTS["HF llama, backend=luminal"]["tpot_s"]

            if not a.no_eager:
                r = decode_torch(model, hf_cfg, prompt, a.new, cache_len, device)
                print(line("HF llama, eager", 0.0, r, zoo_tpot))
        ro_compile = None
        if device.type == "cuda" and not a.no_torch_compile:
            torch._dynamo.reset()
            ro = torch.compile(model, mode="reduce-overhead")
            t0 = time.perf_counter()
            decode_torch(ro, hf_cfg, prompt, 2, cache_len, device)
            ro_compile = time.perf_counter() - t0
            r = decode_torch(ro, hf_cfg, prompt, a.new, cache_len, device)
            print(line("HF llama, reduce-overhead", ro_compile, r, zoo_tpot))
    if a.peer_only:
        if a.json is not None:
            a.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()}, "results": RESULTS}))
        return
    ok = lum_tpot <= 1.10 * zoo_tpot
    print(f"# verdict: luminal-through-torch TPOT / zoo TPOT = {lum_tpot / zoo_tpot:.3f} "
          f"({'PASS' if ok else 'FAIL'}: target <= 1.10)")  # fmt: skip
    if ro_compile is not None:
        ok = lum_compile < ro_compile
        print(f"# verdict: luminal compile {lum_compile:.1f} s vs reduce-overhead {ro_compile:.1f} s "
              f"({'PASS' if ok else 'FAIL'}: target luminal < reduce-overhead)")  # fmt: skip
    if a.json is not None:
        a.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()}, "results": RESULTS}, indent=1))


if __name__ == "__main__":
    main()
