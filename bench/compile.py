"""Compile-time benchmark (not a test): every zoo preset at its real shapes, cold and warm.

For each preset's step graph(s) (llama-3.2-1b, llama-3.1-8b, qwen3-0.6b, qwen2.5-0.5b, gemma-3-1b,
whisper tiny: encoder and decoder) it compiles cold (empty cache directory) and warm (same directory),
each in a fresh process, with the prefill + decode buckets the generation engine uses
(`s` in [1, 1] and [2, max_seq]); it prints the phase breakdown, the rolled bodies, what search
measured, NVRTC time (cuda), the peak RSS of the process, and machine-independent sizes (HLIR nodes,
egglog commands, e-graph nodes, saturation iterations and rule matches). `--torch` adds the
torch.compile time of the same architecture (transformers, random weights, same device) as the peer.

  python bench/compile.py                                   # reference backend (CPU), every preset
  python bench/compile.py --backend cuda --presets llama-3.2-1b,qwen3-0.6b,gemma-3-1b --torch
  python bench/compile.py --backend cuda-cpu --presets llama-3.2-1b   # the CUDA rules without a GPU
`--backend cuda-cpu` compiles with the CUDA backend's ops, rules and schedule on a machine without a GPU:
kernels are really compiled by NVRTC (for sm_90, batched like the GPU path: each search batch's new
kernels in one program, each whole plan's missing ones in another; per-kernel disk cache,
nvrtc.compile_units), but plans are priced analytically
(a launch cost per kernel plus bytes moved at the H200's copy bandwidth) instead of timed, and loaded
as reference executors. Its `profile_s` column is then 0; `plans`, `readMB` (the ones-filled inputs the
timed plans read), `fillMB` (what the profiling pool, runtime.OnesPool, fills on the device for them)
and `nvrtc` (NVRTC CPU seconds; `nvwait`: wall seconds the compile waited for NVRTC, its critical
path; `rend`: kernels rendered, not found in the rendered-kernel cache) are what the GPU run pays for on
top of the CPU work. NVRTC runs in worker processes where LUMINAL_NVRTC_PROCS says so (default with >= 8
CPUs): their CPU seconds are in `nvrtc`, not in `cpu` (this process's); the JSON line holds `nvrtc_procs`.
  python bench/compile.py --synthetic 1,4,16                # the small synthetic decoder of earlier notes
Add `--json FILE` to append one JSON line per measurement; with LUMINAL_DEBUG=1 each compile's own
breakdown (per region and phase, profiling, NVRTC) follows its row on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).parents[1]
# bench/kernels.py would shadow the `kernels` package transformers imports when it is installed
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
PRESETS = ("llama-3.2-1b", "llama-3.1-8b", "qwen3-0.6b", "qwen2.5-0.5b", "gemma-3-1b", "whisper-tiny")


# -- graphs -----------------------------------------------------------------------------------------
def graphs(preset: str, max_seq: int, layers: int | None, dtype: str = "f32"):
    """[(name, graph, buckets)] of one preset: the step graph(s) its runtime compiles, with the buckets
    the generation engine gives them (luminal/models/engine.py `step_buckets`: decode and prefill)."""
    import luminal as lm
    from luminal.models.engine import step_buckets

    dt = lm.dtype.to_dtype(dtype)

    def buckets(g, cap):
        dims = g.dims()
        return [{d: b for d, b in plan.items() if d in dims} for plan in step_buckets(cap)]

    if preset.startswith("synthetic-"):
        g = synthetic(int(preset.split("-")[1]))
        return [("step", g, {"s": [(1, 1), (2, max_seq)]})]
    from luminal.models import gemma, llama, qwen, whisper

    if preset.startswith("whisper-"):
        cfg = whisper.CONFIGS[preset.split("-", 1)[1]]
        if layers:
            cfg = dataclasses.replace(cfg, enc_layers=layers, dec_layers=layers)
        dec = whisper.decoder_graph(cfg, dt)
        return [("encoder", whisper.encoder_graph(cfg, dt), {}), ("decoder", dec, buckets(dec, cfg.text_ctx))]
    family = {"llama": (llama, llama.Transformer), "qwen3": (qwen, llama.Transformer),
              "qwen2.5": (qwen, llama.Transformer), "gemma": (gemma, gemma.Transformer)}  # fmt: skip
    mod, build = family[preset.split("-")[0]]
    cfg = mod.CONFIGS[preset]
    if layers:
        cfg = dataclasses.replace(cfg, n_layers=layers)
    g = build(cfg, max_seq, dt).graph
    return [("step", g, buckets(g, max_seq))]


def synthetic(layers: int):
    """The small decoder of the earlier notes: embedding, RMSNorm, RoPE, GQA over a KV cache, SwiGLU."""
    import luminal as lm
    from luminal.shape.expr import dim, z

    d, heads, kv, hd, ffn, vocab = 64, 4, 2, 16, 128, 256
    g = lm.Graph()
    tokens = g.tensor("tokens", ("s",), lm.i32)
    cos, sin = g.tensor("cos", ("s", hd // 2)), g.tensor("sin", ("s", hd // 2))
    s, p = dim("s"), dim("p")
    t = p + s
    mask = g.iota((z % t).lt(z // t + p + 1), (s, t)).cast(lm.bool).unsqueeze(0).expand(heads, s, t)

    def rope(x):
        x1, x2, c, sn = x[:, :, : hd // 2], x[:, :, hd // 2 :], cos.unsqueeze(1), sin.unsqueeze(1)
        return lm.concat([x1 * c - x2 * sn, x1 * sn + x2 * c], axis=-1)

    x = g.tensor("emb", (vocab, d)).persist().gather(tokens, axis=0)
    for i in range(layers):
        w = {n: g.tensor(f"l{i}.{n}", shp).persist() for n, shp in
             (("wq", (d, heads * hd)), ("wk", (d, kv * hd)), ("wv", (d, kv * hd)), ("wo", (heads * hd, d)),
              ("w1", (d, ffn)), ("w3", (d, ffn)), ("w2", (ffn, d)), ("n1", (d,)), ("n2", (d,)))}  # fmt: skip
        h = x.rms_norm() * w["n1"]
        q, k = rope((h @ w["wq"]).reshape(s, heads, hd)), rope((h @ w["wk"]).reshape(s, kv, hd))
        v = (h @ w["wv"]).reshape(s, kv, hd)
        k_all = lm.concat([g.tensor(f"l{i}.k_cache", ("p", kv, hd)).persist(), k], axis=0).output(f"l{i}.k")
        v_all = lm.concat([g.tensor(f"l{i}.v_cache", ("p", kv, hd)).persist(), v], axis=0).output(f"l{i}.v")
        kh = k_all.permute(1, 0, 2).unsqueeze(1).expand(kv, heads // kv, t, hd).reshape(heads, t, hd)
        vh = v_all.permute(1, 0, 2).unsqueeze(1).expand(kv, heads // kv, t, hd).reshape(heads, t, hd)
        sc = lm.where(mask, (q.permute(1, 0, 2) @ kh.transpose(-1, -2)) * (1.0 / np.sqrt(hd)), -1e9)
        x = x + (sc.softmax(-1) @ vh).permute(1, 0, 2).reshape(s, heads * hd) @ w["wo"]
        h = x.rms_norm() * w["n2"]
        x = x + ((h @ w["w1"]).silu() * (h @ w["w3"])) @ w["w2"]
    (x.rms_norm() @ g.tensor("lm_head", (d, vocab)).persist()).output("logits")
    return g


# -- the CUDA backend without a GPU --------------------------------------------------------------------
LAUNCH_S, COPY_BW = 3e-6, 4.25e12  # analytic pricing: per kernel launch, bytes/s (docs/perf.md)


def cpu_cuda_backend():
    """The CUDA backend's ops, rules and schedule with analytic pricing and NVRTC compiles (docstring)."""
    from luminal.backends.cuda import backend as cb
    from luminal.backends.cuda import nvrtc
    from luminal.backends.cuda.kernel import source
    from luminal.backends.reference.executor import ReferenceExecutor
    from luminal.hlir import Input, Output

    class CpuCuda(cb.CudaBackend):
        name = "cuda"
        compiled: set[str] = set()  # kernel code compiled so far (the runtime's loaded modules)

        def __init__(self) -> None:
            pass

        _arch = "sm_90"
        prefetch_kernels = True  # like the GPU path: candidates' kernels compile in the background

        @property
        def device(self) -> str:
            return "cuda-cpu-sm_90-analytic"

        def _compile(self, plans, dims=()) -> None:
            """What the runtime's load_kernels does: the kernels not loaded yet, in one NVRTC program
            (through nvrtc.compile_units: kernels on disk from any earlier batch are not recompiled);
            `dims`: the slots the executor renders with (profiling: the graph's dims)."""
            ks = {k.code: k for p in plans for k in cb.plan_kernels(p.nodes, dims) if k.code not in self.compiled}
            if ks:
                nvrtc.compile_units(list(ks), lambda codes: source([ks[c] for c in codes]), arch="sm_90")
                self.compiled |= set(ks)

        def measure(self, plans, env):
            self._compile(plans, env)  # like the GPU path: the batch's kernels in one NVRTC program
            return [self.profile(p, env) - LAUNCH_S for p in plans]  # as CudaBackend.measure, net of the base

        def profile(self, llir, env):
            self._compile([llir], env)
            sizes = cb.input_extents(llir.nodes, env)
            read = sum(sizes[n.op.label] * n.dtype.itemsize for n in llir.nodes if isinstance(n.op, Input))
            ops = [n for n in llir.nodes if not isinstance(n.op, (Input, Output))]
            wrote = sum(int(n.op.out_size().evaluate(env)) * n.dtype.itemsize for n in ops if n.op.alias() is None)
            cb.count_profile(llir, sizes, 0.0, self._pool_fill(llir, sizes))  # nothing is timed: profile_s stays 0
            return LAUNCH_S * (1 + len(ops)) + (read + wrote) / COPY_BW

        def _pool_fill(self, llir, sizes) -> int:
            """Bytes runtime.OnesPool would fill on the device for this plan: a dtype's shared buffer when
            it grows, a buffer written in place every time."""
            from luminal.backends.aliasing import alias_roots

            grown = self.__dict__.setdefault("_pool", {})
            written = {alias_roots(llir.nodes)[i][0] for i, n in enumerate(llir.nodes) if n.op.inplace}
            need = {i: int(sizes[n.op.label]) * n.dtype.itemsize for i, n in enumerate(llir.nodes)
                    if isinstance(n.op, Input)}  # fmt: skip
            filled, rank = 0, {}
            for i in sorted(need, key=lambda i: -need[i]):
                key = (llir.nodes[i].dtype, i in written)
                rank[key] = k = rank.get(key, -1) + 1
                if i in written or need[i] > grown.get((*key, k), 0):
                    grown[(*key, k)] = max(need[i], grown.get((*key, k), 0))
                    filled += grown[(*key, k)]
            return filled

        def load(self, llir):
            self._compile([llir], llir.dims)
            return ReferenceExecutor(llir.nodes, llir.outputs)

    return CpuCuda()


# -- one measurement (a fresh process) ----------------------------------------------------------------
def measure(preset: str, which: str, backend: str, cache: str, max_seq: int, layers: int | None, dtype: str,
            search_time: float = 10.0) -> dict:  # fmt: skip
    os.environ["LUMINAL_CACHE"] = cache
    if backend == "cuda-cpu":
        from luminal.backends.base import register_backend

        register_backend("cuda-cpu", cpu_cuda_backend)
    t0 = time.perf_counter()
    name, g, buckets = next(x for x in graphs(preset, max_seq, layers, dtype) if x[0] == which)
    t_build = time.perf_counter() - t0
    t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    model = g.compile(backend, buckets=buckets, search_time_s=search_time)
    wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime  # this process's CPU seconds: load-independent
    st = model.stats
    out = {k: st.get(k) for k in ("hlir_nodes", "live_hlir_nodes", "egglog_commands", "egraph_nodes",
                                  "egraph_classes", "llir_nodes", "time_serialize_s", "time_roll_s",
                                  "time_saturate_s", "time_extract_s", "time_search_s", "time_load_s",
                                  "time_backend_s", "time_cache_s", "time_total_s", "cache_hit", "profiling",
                                  "backend_counters", "backend_lines", "rolled")}  # fmt: skip
    if backend.startswith("cuda"):  # where NVRTC ran: worker processes (their CPU is not in cpu_s) or threads
        from luminal.backends.cuda import nvrtc, nvrtc_procs

        out |= {"nvrtc_procs": nvrtc_procs.procs(), "nvrtc_workers": nvrtc.workers()}
    # the chosen plans (one per bucket): a compile-time change must leave them alone (issue 12)
    out["fingerprints"] = [p.fingerprint() for p in model.plans]
    out |= {"preset": preset, "graph": name, "backend": backend, "dtype": dtype, "time_build_s": t_build,
            "wall_s": wall, "cpu_s": cpu,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "iterations": sum(p["iterations"] for p in st["phases"]),
            "matches": sum(p["matches"] for p in st["phases"])}  # fmt: skip
    return out


def torch_compile_time(preset: str, layers: int | None) -> float | None:
    """Seconds for torch.compile + the first forward of the same architecture (random weights, bf16,
    built on the GPU directly: no f32 copy in host memory); None when transformers cannot build it here."""
    try:
        import torch
        import transformers as tf

        from luminal.models import gemma, llama, qwen, whisper

        dev = "cuda" if torch.cuda.is_available() else "cpu"
        fam = preset.split("-")[0]
        if fam == "whisper":
            w = whisper.CONFIGS[preset.removeprefix("whisper-")]
            cfg = tf.WhisperConfig(vocab_size=w.vocab_size, num_mel_bins=w.n_mels, d_model=w.dim,
                                   encoder_layers=layers or w.enc_layers, decoder_layers=layers or w.dec_layers,
                                   encoder_attention_heads=w.heads, decoder_attention_heads=w.heads,
                                   encoder_ffn_dim=w.ffn, decoder_ffn_dim=w.ffn, max_source_positions=w.audio_ctx,
                                   max_target_positions=w.text_ctx)  # fmt: skip
            with torch.device(dev):
                model = tf.WhisperForConditionalGeneration(cfg).to(torch.bfloat16).eval()
            args = dict(input_features=torch.randn(1, w.n_mels, 2 * w.audio_ctx, device=dev, dtype=torch.bfloat16),
                        decoder_input_ids=torch.randint(0, w.vocab_size, (1, 16), device=dev))  # fmt: skip
        else:
            c = {"llama": llama.CONFIGS, "qwen3": qwen.CONFIGS, "qwen2.5": qwen.CONFIGS, "gemma": gemma.CONFIGS}[fam][
                preset
            ]
            common = dict(vocab_size=c.vocab_size, hidden_size=c.dim, intermediate_size=c.hidden,
                          num_hidden_layers=layers or c.n_layers, num_attention_heads=c.n_heads,
                          num_key_value_heads=c.n_kv_heads, head_dim=c.head_dim)  # fmt: skip
            cls = {"llama": tf.LlamaConfig, "qwen3": tf.Qwen3Config, "qwen2.5": tf.Qwen2Config,
                   "gemma": tf.Gemma3TextConfig}[fam]  # fmt: skip
            with torch.device(dev):
                model = tf.AutoModelForCausalLM.from_config(cls(**common), dtype=torch.bfloat16).eval()
            args = dict(input_ids=torch.randint(0, c.vocab_size, (1, 16), device=dev))
        t0 = time.perf_counter()
        cm = torch.compile(model)
        with torch.no_grad():
            cm(**args)
        if dev == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - the peer is optional: report why it is missing
        print(f"  torch.compile peer unavailable for {preset}: {type(e).__name__}: {e}", file=sys.stderr)
        return None


# -- driver -------------------------------------------------------------------------------------------
def _row(m: dict, run: str) -> str:
    prof = m.get("profiling") or {}
    nv = m.get("backend_counters") or {}
    bodies = ", ".join(f"{b['layers']}x{b['nodes']}" for b in (m.get("rolled") or {}).get("bodies", []))
    return (f"{m['preset']:<14}{m['graph']:<9}{run:<5}{m['wall_s']:>7.2f}{m['cpu_s']:>7.2f}{m['time_roll_s']:>6.2f}"
            f"{m['time_saturate_s']:>7.2f}{m['time_extract_s']:>6.2f}{m['time_search_s']:>7.2f}{m['time_load_s']:>6.2f}"
            f"{m['peak_mb']:>7.0f}{m['hlir_nodes']:>7}{m['live_hlir_nodes'] or 0:>6}{m['egglog_commands'] or 0:>7}"
            f"{m['egraph_nodes']:>7}{m['iterations']:>6}{m['matches']:>8}{prof.get('ops_measured', 0):>6}"
            f"{prof.get('op_hits', 0):>7}{nv.get('plans_timed', 0):>6.0f}{nv.get('upload_mb', 0.0):>8.0f}"
            f"{nv.get('fill_mb', 0.0):>7.0f}{nv.get('profile_s', 0.0):>7.2f}{nv.get('kernels', 0):>5.0f}"
            f"{nv.get('compile_cpu_s', 0.0):>7.2f}{nv.get('wait_s', 0.0):>7.2f}{nv.get('renders', 0):>5.0f}"
            f"  {bodies}")  # fmt: skip


HEADER = (f"{'preset':<14}{'graph':<9}{'run':<5}{'wall':>7}{'cpu':>7}{'roll':>6}{'satur':>7}{'extr':>6}{'search':>7}"
          f"{'load':>6}{'peakMB':>7}{'hlir':>7}{'live':>6}{'cmds':>7}{'enode':>7}{'iters':>6}{'matches':>8}"
          f"{'meas':>6}{'hits':>7}{'plans':>6}{'readMB':>8}{'fillMB':>7}{'prof_s':>7}{'kern':>5}{'nvrtc':>7}{'nvwait':>7}{'rend':>5}"
          "  rolled bodies (layers x nodes)")  # fmt: skip


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="reference", help="reference | cuda | cuda-cpu (module docstring)")
    ap.add_argument("--dtype", default=None, help="weights and activations: default bf16 on cuda, f32 on reference")
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--synthetic", default="", help="layer counts of the synthetic decoder, e.g. 1,4,16")
    ap.add_argument("--layers", type=int, default=None, help="override every preset's depth")
    ap.add_argument("--max-seq", type=int, default=512)
    ap.add_argument("--torch", action="store_true", help="also time torch.compile of the same architecture")
    ap.add_argument(
        "--search-time",
        type=float,
        default=10.0,
        help="the search's clock limit per region (compile option search_time_s); raise it on a "
        "loaded machine so that the candidate count, not the clock, ends the search",
    )
    ap.add_argument("--json", default=None, help="append one JSON line per measurement to this file")
    ap.add_argument("--one", nargs=3, metavar=("PRESET", "GRAPH", "CACHE"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    dtype = a.dtype or ("bf16" if a.backend.startswith("cuda") else "f32")
    if a.one:
        print(json.dumps(measure(a.one[0], a.one[1], a.backend, a.one[2], a.max_seq, a.layers, dtype, a.search_time)))
        return
    presets = [f"synthetic-{n}" for n in a.synthetic.split(",") if n] or [p for p in a.presets.split(",") if p]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"backend {a.backend}, {dtype}; engine buckets (decode s=1, prefill s in [2, {a.max_seq}]); seconds, MB; "
          f"load average {load:.1f}", flush=True)  # fmt: skip
    print(HEADER, flush=True)
    for preset in presets:
        names = ["encoder", "decoder"] if preset.startswith("whisper-") else ["step"]
        with tempfile.TemporaryDirectory() as d:
            for name in names:
                for run in ("cold", "warm"):
                    cmd = [sys.executable, __file__, "--backend", a.backend, "--max-seq", str(a.max_seq),
                           "--dtype", dtype, "--search-time", str(a.search_time),
                           *(["--layers", str(a.layers)] if a.layers else []),
                           "--one", preset, name, d]  # fmt: skip
                    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
                    if r.returncode != 0:
                        print(f"{preset:<14}{name:<9}{run:<5} FAILED: {r.stderr.strip().splitlines()[-1:]}", flush=True)
                        break
                    m = json.loads(r.stdout.strip().splitlines()[-1])
                    print(_row(m, run), flush=True)
                    if os.environ.get("LUMINAL_DEBUG", "0") not in ("", "0") and r.stderr.strip():
                        print(r.stderr.rstrip(), file=sys.stderr, flush=True)  # the compile's own breakdown
                    if a.json:
                        with open(a.json, "a") as f:
                            f.write(json.dumps(m | {"run": run}) + "\n")
        if a.torch and not preset.startswith("synthetic"):
            t = torch_compile_time(preset, a.layers)
            print(f"{preset:<14}torch.compile + first forward: {'n/a' if t is None else f'{t:.1f} s'}", flush=True)
            if a.json:
                with open(a.json, "a") as f:
                    f.write(json.dumps({"preset": preset, "torch_compile_s": t}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
