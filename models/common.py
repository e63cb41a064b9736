"""Shared model-zoo plumbing: inputs of a compiled decoder, the KV-cache state loop, sampling,
prefill + decode generation with timing, random weights at real shapes, and the model CLIs."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

import luminal as lm
from luminal.errors import InputError
from luminal.graph import Graph
from models.checkpoint import Renamed, Safetensors, UnsupportedModelError, bind, read_config


def progress(items: Iterable, desc: str, total: int | None = None) -> Iterable:
    """tqdm over `items` when stderr is a terminal, else `items` unchanged."""
    if not sys.stderr.isatty():
        return items
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, desc=desc, total=total if total is not None else _len(items), leave=False, file=sys.stderr)


def _len(items) -> int | None:
    try:
        return len(items)
    except TypeError:
        return None


def graph_weights(g: Graph, state: Iterable[str] = ()) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """{name: (shape, numpy dtype)} of the graph's persistent inputs other than `state` (the caches)."""
    skip = set(state)
    out = {}
    for name in sorted(g.persistent - skip):
        shape = tuple(int(d.evaluate({})) for d in g.input_shapes[name])
        out[name] = (shape, g.nodes[g.inputs[name]].dtype.np)
    return out


def compile_graphs(graphs: Sequence[Graph], backend: str) -> tuple[list[lm.compiled.CompiledModel], float]:
    t0 = time.perf_counter()
    out = [g.compile(backend) for g in progress(graphs, "compiling")]
    return out, time.perf_counter() - t0


def random_weights(names: dict[str, tuple[tuple[int, ...], np.dtype]], seed: int = 0, std: float = 0.02):
    """Random weights at the given shapes (norm scales 1, biases 0), for benchmarks without a checkpoint."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, (shape, dt) in progress(names.items(), "random weights"):
        if name.endswith("bias"):
            out[name] = np.zeros(shape, dt)
        elif "norm" in name:
            out[name] = np.ones(shape, dt)
        else:
            out[name] = (rng.standard_normal(shape, np.float32) * std).astype(dt)
    return out


# -- sampling -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sampler:
    """Greedy when temperature == 0; otherwise seeded sampling after temperature, top-k and top-p."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def rng(self) -> np.random.Generator:
        return np.random.default_rng(self.seed)

    def __call__(self, logits: np.ndarray, rng: np.random.Generator) -> int:
        logits = np.asarray(logits, np.float64).reshape(-1)
        if self.temperature <= 0:
            return int(np.argmax(logits))
        x = logits / self.temperature
        if 0 < self.top_k < x.size:
            kth = np.partition(x, -self.top_k)[-self.top_k]
            x = np.where(x < kth, -np.inf, x)
        p = np.exp(x - x.max())
        p /= p.sum()
        if self.top_p < 1.0:
            order = np.argsort(-p, kind="stable")
            cum = np.cumsum(p[order])
            cut = cum - p[order] >= self.top_p  # drop tokens once the mass before them reaches top_p (as HF)
            p[order[cut]] = 0.0
            p /= p.sum()
        return int(rng.choice(p.size, p=p))


# -- a compiled decoder with its KV-cache state --------------------------------------------------
@dataclass
class Stats:
    prompt_tokens: int = 0
    new_tokens: int = 0
    ttft_s: float = 0.0
    decode_s: list[float] = field(default_factory=list)
    compile_s: float = 0.0

    @property
    def tpot_ms(self) -> float:
        return 1e3 * float(np.mean(self.decode_s)) if self.decode_s else float("nan")

    @property
    def tokens_per_s(self) -> float:
        total = self.ttft_s + sum(self.decode_s)
        return self.new_tokens / total if total else float("nan")

    def line(self) -> str:
        return (f"TTFT {self.ttft_s * 1e3:.1f} ms | TPOT {self.tpot_ms:.1f} ms | {self.tokens_per_s:.2f} tok/s | "
                f"compile {self.compile_s:.2f} s | {self.prompt_tokens} + {self.new_tokens} tokens")  # fmt: skip


class Decoder:
    """A compiled step graph with inputs `tokens` (s,) i32 and `rows` (r,) i32 (which positions get
    logits), dims `p` (past length) and `s`, and caches `cache.{i}.k|v` fed back after every step."""

    def __init__(self, graph: Graph, cache_shapes: dict[str, tuple[int, ...]], capacity: int,
                 weights: dict[str, np.ndarray], backend: str = "auto", extra: dict | None = None,
                 vocab_size: int | None = None):  # fmt: skip
        (self.model,), self.compile_s = compile_graphs([graph], backend)
        self.capacity, self.vocab_size = capacity, vocab_size
        self.cache_shapes = cache_shapes
        self._pending = {**weights, **(extra or {})}  # bound on the first run, then dropped
        self.state: dict[str, np.ndarray] = {}
        self.past = 0

    def bind(self, inputs: dict[str, np.ndarray]) -> None:
        """Persistent inputs to (re)bind on the next step (e.g. Whisper's cross-attention K/V)."""
        self._pending.update(inputs)

    def reset(self) -> None:
        self.state = {n: np.zeros(s, np.float32) for n, s in self.cache_shapes.items()}
        self.past = 0

    def step(self, tokens: Sequence[int], rows: Sequence[int] | None = None) -> np.ndarray:
        """Run `tokens` at positions past .. past+s-1; logits (len(rows), vocab) for `rows` (default: last)."""
        s = len(tokens)
        if s == 0:
            raise InputError("step() needs at least one token")
        if self.past + s > self.capacity:
            raise InputError(f"sequence of {self.past + s} tokens exceeds the KV-cache capacity {self.capacity}")
        if not self.state:
            self.reset()
        rows = [s - 1] if rows is None else list(rows)
        ids = np.asarray(tokens, np.int32)
        if self.vocab_size is not None and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise InputError(f"token ids must be in [0, {self.vocab_size}), got {ids.min()} .. {ids.max()}")
        feed = {"tokens": ids, "rows": np.asarray(rows, np.int32), **self.state}
        if self._pending:
            feed.update(self._pending)
            self._pending = {}
        out = self.model.run(feed, dims={"p": self.past})
        self.state = {n: out[n] for n in self.cache_shapes}
        self.past += s
        return out["logits"]


class CausalLM:
    """What `load()` returns for a decoder-only model: `logits(ids)` and `generate(ids, n, ...)`."""

    def __init__(self, decoder: Decoder, tokenizer=None, stop_ids: Sequence[int] = (), name: str = "model"):
        self.decoder, self.tokenizer, self.stop_ids, self.name = decoder, tokenizer, tuple(stop_ids), name
        self.vocab_size = decoder.vocab_size
        self.stats = Stats(compile_s=decoder.compile_s)  # of the last generate()

    def logits(self, token_ids: Sequence[int]) -> np.ndarray:
        """Prefill logits (len(token_ids), vocab) from an empty cache."""
        self.decoder.reset()
        return self.decoder.step(token_ids, rows=range(len(token_ids)))

    def generate(
        self, token_ids: Sequence[int], max_new_tokens: int, sampler: Sampler = Sampler(),
        stop_ids: Sequence[int] | None = None, on_token: Callable[[int], None] | None = None,
    ) -> list[int]:  # fmt: skip
        """Prefill, then decode one token at a time until `max_new_tokens` or a stop token; timing in self.stats."""
        stop = set(self.stop_ids if stop_ids is None else stop_ids)
        if len(token_ids) + max_new_tokens - 1 > self.decoder.capacity:
            raise InputError(
                f"{len(token_ids)} prompt + {max_new_tokens} new tokens exceed the KV-cache capacity "
                f"{self.decoder.capacity}; load with a larger max_seq (--max-seq)"
            )
        rng = sampler.rng()
        self.stats = Stats(prompt_tokens=len(token_ids), compile_s=self.decoder.compile_s)
        self.decoder.reset()
        out: list[int] = []
        t0 = time.perf_counter()
        tok = sampler(self.decoder.step(list(token_ids)), rng)
        self.stats.ttft_s = time.perf_counter() - t0
        while True:
            out.append(tok)
            if on_token is not None:
                on_token(tok)
            if tok in stop or len(out) >= max_new_tokens:
                break
            t0 = time.perf_counter()
            tok = sampler(self.decoder.step([tok]), rng)
            self.stats.decode_s.append(time.perf_counter() - t0)
        self.stats.new_tokens = len(out)
        return out


def load_tokenizer(model_dir: str | Path):
    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


class TextStream:
    """Prints decoded text as tokens arrive (decoding the whole suffix so multi-token characters work)."""

    def __init__(self, tokenizer, out=None):
        self.tokenizer, self.out, self.ids, self.shown = tokenizer, out or sys.stdout, [], ""

    def __call__(self, tok: int) -> None:
        self.ids.append(tok)
        if self.tokenizer is None:
            self.out.write(f"{tok} ")
        else:
            text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
            if text.endswith("\ufffd"):
                return
            self.out.write(text[len(self.shown) :])
            self.shown = text
        self.out.flush()


def stop_ids_from(model_dir: str | Path | None, config: dict) -> list[int]:
    """EOS ids from generation_config.json (preferred) or config.json."""
    ids = config.get("eos_token_id")
    if model_dir is not None and (Path(model_dir) / "generation_config.json").is_file():
        ids = read_config(model_dir, "generation_config.json").get("eos_token_id", ids)
    if ids is None:
        return []
    return [int(i) for i in (ids if isinstance(ids, list) else [ids])]


# -- loading ---------------------------------------------------------------------------------------
def decoder(model, weights: dict, backend: str) -> Decoder:
    """The compiled step graph of a decoder-only `model` (llama.Transformer, gemma.Transformer)."""
    return Decoder(
        model.graph, model.cache_shapes, model.capacity, weights, backend, model.extra_inputs(), model.cfg.vocab_size
    )


def load_hf(model_dir, backend: str, max_seq: int, config_cls, architectures: dict, build, rename=None) -> CausalLM:
    """A decoder-only HF directory: check the architecture, read config.json into `config_cls`, build the
    graph with `build(cfg, capacity)`, bind the safetensors weights by name (through `rename`, graph name ->
    candidate checkpoint names, when given), load the tokenizer."""
    c = read_config(model_dir)
    arch = (c.get("architectures") or ["?"])[0]
    if arch not in architectures:
        raise UnsupportedModelError(f"{model_dir}: architecture {arch!r} is not one of {sorted(architectures)}")
    cfg = config_cls.from_hf(c)
    model = build(cfg, min(max_seq, c.get("max_position_embeddings") or max_seq))
    source = Safetensors.from_dir(model_dir)
    weights = bind(model.weight_shapes(), Renamed(source, rename) if rename else source, progress)
    stop = stop_ids_from(model_dir, c)
    return CausalLM(decoder(model, weights, backend), load_tokenizer(model_dir), stop, arch)


def load_random_preset(cfg, backend: str, max_seq: int, layers: int | None, seed: int, build) -> CausalLM:
    """Random weights at `cfg`'s real shapes (optionally only the first `layers` layers), for benchmarks."""
    if layers is not None:
        cfg = replace(cfg, n_layers=layers)
    model = build(cfg, max_seq)
    return CausalLM(decoder(model, random_weights(model.weight_shapes(), seed), backend), None, (), "random")


# -- CLI ------------------------------------------------------------------------------------------
def lm_main(argv: list[str] | None, name: str, load: Callable, load_random: Callable, presets: Sequence[str]) -> None:
    """`python -m models.<name> --model DIR | --random PRESET --prompt TEXT --max-new-tokens N`."""
    ap = argparse.ArgumentParser(prog=f"python -m models.{name}", description=f"Run a {name} model with luminal.")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="Hugging Face model directory (config.json, *.safetensors, tokenizer.json)")
    src.add_argument("--random", choices=sorted(presets), help="random weights at a preset's real shapes")
    ap.add_argument("--prompt", default="The capital of France is")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--backend", default="auto", choices=["auto", "reference", "cuda"])
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-seq", type=int, default=512, help="KV-cache capacity in tokens")
    ap.add_argument("--layers", type=int, default=None, help="with --random: keep only the first N layers")
    args = ap.parse_args(argv)
    try:
        if args.model:
            model = load(args.model, backend=args.backend, max_seq=args.max_seq)
        else:
            model = load_random(args.random, backend=args.backend, max_seq=args.max_seq, layers=args.layers,
                                seed=args.seed)  # fmt: skip
    except lm.LuminalError as e:
        sys.exit(f"error: {e}")
    tok = model.tokenizer
    if tok is not None:
        ids = tok.encode(args.prompt).ids
        print(args.prompt, end="", flush=True)
    else:
        ids = [int(i) for i in np.random.default_rng(args.seed).integers(0, min(1000, model.vocab_size), 8)]
        print(f"(no tokenizer.json: random prompt ids {ids})", flush=True)
    sampler = Sampler(args.temperature, args.top_k, args.top_p, args.seed)
    model.generate(ids, args.max_new_tokens, sampler, on_token=TextStream(tok))
    print()
    print(model.stats.line(), file=sys.stderr)
