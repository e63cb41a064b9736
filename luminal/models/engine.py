"""The generation engine: a compiled decoder step with its KV-cache state, sampling, and the
prefill + decode loop with timing (`CausalLM.generate`)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

import luminal as lm
from luminal.errors import InputError
from luminal.graph import Graph


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


def compile_graphs(graphs: Sequence[Graph], backend: str) -> tuple[list[lm.compiled.CompiledModel], float]:
    t0 = time.perf_counter()
    out = [g.compile(backend) for g in progress(graphs, "compiling")]
    return out, time.perf_counter() - t0


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
        self.cache_dtypes = {n: graph.nodes[graph.inputs[n]].dtype.np for n in cache_shapes}  # the model's dtype
        self._pending = {**weights, **(extra or {})}  # bound on the first run, then dropped
        self.state: dict[str, np.ndarray] = {}
        self.past = 0

    def bind(self, inputs: dict[str, np.ndarray]) -> None:
        """Persistent inputs to (re)bind on the next step (e.g. Whisper's cross-attention K/V)."""
        self._pending.update(inputs)

    def reset(self) -> None:
        self.state = {n: np.zeros(s, self.cache_dtypes[n]) for n, s in self.cache_shapes.items()}
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
        if not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 0:
            raise InputError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        self.stats = Stats(prompt_tokens=len(token_ids), compile_s=self.decoder.compile_s)
        if max_new_tokens == 0:  # zero means zero: no step runs
            return []
        if len(token_ids) + max_new_tokens - 1 > self.decoder.capacity:
            raise InputError(
                f"{len(token_ids)} prompt + {max_new_tokens} new tokens exceed the KV-cache capacity "
                f"{self.decoder.capacity}; load with a larger max_seq (--max-seq)"
            )
        rng = sampler.rng()
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
