"""The generation engine: a compiled decoder step whose KV-cache state stays with the runtime (on the
GPU, updated in place), sampling where the logits lie, and the prefill + decode loop with timing
(`CausalLM.generate`). docs/engine.md describes the decode path."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

import luminal as lm
from luminal.errors import InputError
from luminal.graph import Graph
from luminal.sampling import Sampler

GREEDY = Sampler()

__all__ = ["CausalLM", "Decoder", "Sampler", "Stats", "compile_graphs", "progress", "step_buckets"]


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


def step_buckets(capacity: int) -> list[dict[str, tuple[int, int]]]:
    """The two plans of a step graph: decode (s = r = 1: GEMV, every buffer and small grid sized at
    the bounds so each token replays one CUDA graph) and prefill (s >= 2, r <= s: GEMMs)."""
    last = max(capacity - 1, 0)
    plans = [{"s": (1, 1), "r": (1, 1), "p": (0, last)}]
    if capacity >= 2:
        plans.append({"s": (2, capacity), "r": (1, capacity), "p": (0, last - 1)})
    return plans


class Decoder:
    """A compiled step graph with inputs `tokens` (s,) i32 and `rows` (r,) i32 (which positions get
    logits), dims `p` (past length) and `s`, and persistent caches `cache.{i}.k|v` that the step
    updates where they live (outputs of the same names: in place on the device, docs/engine.md).

    Weights are bound once at construction; a step sends the new token ids and `p`, and either
    fetches the logits (`step`) or samples on the device and reads back only the ids (`next`).
    `buckets`: None = per-step plans (`step_buckets`) on device backends, one plan on the reference."""

    def __init__(self, graph: Graph, cache_shapes: dict[str, tuple[int, ...]], capacity: int,
                 weights: dict[str, np.ndarray], backend: str = "auto", extra: dict | None = None,
                 vocab_size: int | None = None, buckets=None):  # fmt: skip
        if backend == "auto":
            from luminal.compiled import _cuda_usable

            backend = "cuda" if _cuda_usable() else "reference"
        if buckets is None and backend != "reference":
            dims = graph.dims()
            buckets = [{d: b for d, b in plan.items() if d in dims} for plan in step_buckets(capacity)]
        buckets = buckets or {}
        t0 = time.perf_counter()
        self.model = graph.compile(backend, buckets=buckets)
        self.compile_s = time.perf_counter() - t0
        self.capacity, self.vocab_size = capacity, vocab_size
        self.cache_shapes = cache_shapes
        self.cache_dtypes = {n: graph.nodes[graph.inputs[n]].dtype.np for n in cache_shapes}
        self.model.bind({**weights, **(extra or {})})
        self._cleared = False
        self.past = 0

    def bind(self, inputs: dict[str, np.ndarray]) -> None:
        """Bind persistent inputs now (e.g. Whisper's cross-attention K/V)."""
        self.model.bind(inputs)

    def reset(self, clear: bool = False) -> None:
        """Start a new sequence. The caches are zeroed on the first reset (or with `clear`); later
        ones only rewind `past`: a step reads only the first p + s cache rows, which it wrote."""
        if clear or not self._cleared:
            self.model.bind({n: np.zeros(s, self.cache_dtypes[n]) for n, s in self.cache_shapes.items()})
            self._cleared = True
        self.past = 0

    def _feed(self, tokens: Sequence[int], rows: Sequence[int] | None) -> tuple[dict, int]:
        s = len(tokens)
        if s == 0:
            raise InputError("step() needs at least one token")
        if self.past + s > self.capacity:
            raise InputError(f"sequence of {self.past + s} tokens exceeds the KV-cache capacity {self.capacity}")
        if not self._cleared:
            self.reset()
        ids = np.asarray(tokens, np.int32)
        if self.vocab_size is not None and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise InputError(f"token ids must be in [0, {self.vocab_size}), got {ids.min()} .. {ids.max()}")
        rows = [s - 1] if rows is None else list(rows)
        return {"tokens": ids, "rows": np.asarray(rows, np.int32)}, s

    def step(self, tokens: Sequence[int], rows: Sequence[int] | None = None) -> np.ndarray:
        """Run `tokens` at positions past .. past+s-1; logits (len(rows), vocab) for `rows` (default: last)."""
        feed, s = self._feed(tokens, rows)
        out = self.model.run(feed, dims={"p": self.past}, fetch=("logits",))
        self.past += s
        return out["logits"]

    def next(self, tokens: Sequence[int], sampler: Sampler) -> int:
        """Run `tokens` and draw the next token from the last position's logits where they lie
        (on the GPU for cuda): only the token ids and `p` travel."""
        feed, s = self._feed(tokens, None)
        self.model.run(feed, dims={"p": self.past}, fetch=())
        self.past += s
        return int(self.model.sample("logits", sampler, self.past)[0])


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
        self, token_ids: Sequence[int], max_new_tokens: int, sampler: Sampler = GREEDY,
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
        self.decoder.reset()
        out: list[int] = []
        t0 = time.perf_counter()
        tok = self.decoder.next(list(token_ids), sampler)
        self.stats.ttft_s = time.perf_counter() - t0
        while True:
            out.append(tok)
            if on_token is not None:
                on_token(tok)
            if tok in stop or len(out) >= max_new_tokens:
                break
            t0 = time.perf_counter()
            tok = self.decoder.next([tok], sampler)
            self.stats.decode_s.append(time.perf_counter() - t0)
        self.stats.new_tokens = len(out)
        return out
