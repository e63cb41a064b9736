"""Shared model-zoo plumbing: the model dtype (`--dtype`), loading a decoder-only HF directory or a
random preset (weights bound tensor by tensor), random weights at real shapes, and the model CLIs."""

from __future__ import annotations

import argparse
import math
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import fields, replace
from pathlib import Path

import numpy as np

import luminal as lm
from luminal.dtype import DType, to_dtype
from luminal.graph import Graph
from luminal.models.checkpoint import (
    CheckpointError,
    Config,
    Renamed,
    Safetensors,
    UnsupportedModelError,
    check,
    dtype_of,
    read_config,
    stream,
)
from luminal.models.engine import CausalLM, Decoder, Sampler, progress


def graph_weights(g: Graph, state: Iterable[str] = ()) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """{name: (shape, numpy dtype)} of the graph's persistent inputs other than `state` (the caches)."""
    skip = set(state)
    out = {}
    for name in sorted(g.persistent - skip):
        shape = tuple(int(d.evaluate({})) for d in g.input_shapes[name])
        out[name] = (shape, g.nodes[g.inputs[name]].dtype.np)
    return out


# -- dtypes ---------------------------------------------------------------------------------------
DTYPES = ("auto", "f32", "bf16", "f16")
PRESET_DTYPE = lm.bf16  # what every preset's published checkpoint stores: `auto` for --random on cuda


def resolve_backend(backend: str) -> str:
    """`auto` -> `cuda` when a GPU is usable, else `reference` (what `Graph.compile` picks)."""
    from luminal.compiled import _cuda_usable

    return ("cuda" if _cuda_usable() else "reference") if backend == "auto" else backend


def resolve_dtype(dtype: object, backend: str, stored: object = None) -> DType:
    """The model dtype for `dtype` in auto | f32 | bf16 | f16 (or a DType). `auto` is the checkpoint's
    dtype (`stored`: config.json `dtype` / `torch_dtype`) on cuda and f32 on the reference backend,
    whose numpy arithmetic on 16-bit floats is slow and which serves as the f32 oracle."""
    if isinstance(dtype, str) and dtype == "auto":
        if resolve_backend(backend) != "cuda" or stored is None:
            return lm.f32
        dtype = stored
    try:
        dt = to_dtype(dtype)
    except lm.DTypeError:
        dt = None
    if dt not in (lm.f32, lm.bf16, lm.f16):
        raise lm.DTypeError(f"model dtype {dtype!r} is not supported; use one of {', '.join(DTYPES)}")
    return dt


def stored_dtype(source, name: str) -> np.dtype | None:
    """The dtype tensor `name` is stored in (for `auto` when config.json does not say), if it is there."""
    return dtype_of(source, name) if name in source else None


def config_dtype(c: dict) -> object:
    """The dtype config.json says the weights are stored in (transformers 5: `dtype`, 4: `torch_dtype`)."""
    for obj in (c, c.get("text_config") or {}):
        for key in ("dtype", "torch_dtype"):
            if isinstance(obj.get(key), str):
                return obj[key]
    return None


# -- weights --------------------------------------------------------------------------------------
POOL = (1 << 22) + 7  # random values generated per dtype; odd, so rows of a power-of-two width drift


class RandomWeights(Mapping):
    """Random weights at the given shapes and dtypes, for benchmarks without a checkpoint: a tensor
    source like `Safetensors` (`{name: array}`, with `shape`), each tensor made when it is read:
    N(0, std) for weights and biases, 1 + N(0, std) for norm scales.

    Drawing 8e9 normal samples for an 8B preset would take minutes, so POOL values are drawn once (per
    dtype, already rounded to it, exact zeros replaced by `std`) and each tensor is the pool tiled
    from an offset that depends on the seed and the tensor's name: a memcpy per tensor. Values repeat
    with period POOL (about 4M) inside a tensor, which a benchmark does not notice; they are never all
    equal and never zero, and the same (seed, name) gives the same tensor in any order."""

    def __init__(self, names: Mapping[str, tuple[tuple[int, ...], np.dtype]], seed: int = 0, std: float = 0.02):
        self.names, self.seed, self.std = dict(names), seed, std
        self._base = np.random.default_rng(seed).standard_normal(POOL, np.float32) * np.float32(std)
        self._pools: dict[tuple[np.dtype, bool], np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        shape, dt = self.names[name]
        norm = "norm" in name and not name.endswith("bias")
        if (dt, norm) not in self._pools:
            p = (self._base + np.float32(1.0) if norm else self._base).astype(dt)
            p[p == 0] = np.asarray(self.std, dt)
            self._pools[dt, norm] = p
        off = int(np.random.default_rng([self.seed, zlib.crc32(name.encode())]).integers(POOL))
        return tiled(self._pools[dt, norm], off, math.prod(shape)).reshape(shape)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.names[name][0])


def random_weights(names: Mapping[str, tuple[tuple[int, ...], np.dtype]], seed: int = 0, std: float = 0.02
                   ) -> RandomWeights:  # fmt: skip
    """{name: random array} for `names` ({name: (shape, dtype)}), made lazily (RandomWeights)."""
    return RandomWeights(names, seed, std)


def tiled(pool: np.ndarray, off: int, n: int) -> np.ndarray:
    """out[i] = pool[(off + i) % len(pool)] for i < n, by copies that double the filled prefix (on raw
    unsigned views: numpy copies ml_dtypes element by element, and np.tile is several times slower)."""
    raw = pool.view(np.dtype(f"u{pool.dtype.itemsize}"))
    out = np.empty(n, raw.dtype)
    head = raw[off:][:n]
    out[: head.size] = head
    out[head.size : min(n, raw.size)] = raw[: min(n, raw.size) - head.size]
    k = raw.size
    while k < n:  # out[:k] holds whole periods, so out[k + j] = out[j]
        m = min(k, n - k)
        out[k : k + m] = out[:m]
        k += m
    return out.view(pool.dtype)


def bind_weights(model, weights: Iterable[tuple[str, np.ndarray]], fallback: Callable[[dict], None]) -> None:
    """Bind each (name, array) of `weights` to the compiled `model` as it arrives, so no whole-model
    copy sits in host memory: `CompiledModel.bind` where the runtime has it (on cuda it uploads at
    once and keeps no host reference), else `fallback` (e.g. `Decoder.bind`: fed on the first run)."""
    bind = model.bind if hasattr(model, "bind") else fallback
    for name, arr in weights:
        bind({name: arr})


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
def decoder(model, backend: str) -> Decoder:
    """The compiled step graph of a decoder-only `model` (llama.Transformer, gemma.Transformer), with
    its computed inputs (rope tables) bound; the weights are bound by the caller."""
    return Decoder(
        model.graph, model.cache_shapes, model.capacity, {}, backend, model.extra_inputs(), model.cfg.vocab_size
    )


def load_hf(model_dir, backend: str, max_seq: int, config_cls, architectures: dict, build, rename=None,
            dtype: object = "auto") -> CausalLM:  # fmt: skip
    """A decoder-only HF directory: check the architecture, read config.json into `config_cls`, build the
    graph with `build(cfg, capacity, dtype)`, check the safetensors against it (names through `rename`,
    graph name -> candidate checkpoint names, when given), compile, then bind the weights tensor by
    tensor in the model's dtype; load the tokenizer."""
    c = read_config(model_dir)
    arch = (c.get("architectures") or ["?"])[0]
    if arch not in architectures:
        raise UnsupportedModelError(f"{model_dir}: architecture {arch!r} is not one of {sorted(architectures)}")
    cfg = from_config(config_cls, c)
    source = Safetensors.from_dir(model_dir)
    if rename:
        source = Renamed(source, rename)
    dt = resolve_dtype(dtype, backend, config_dtype(c) or stored_dtype(source, "model.embed_tokens.weight"))
    model = build(cfg, min(max_seq, c.get("max_position_embeddings") or max_seq), dt)
    names = model.weight_shapes()
    check(names, source)  # before compiling: a bad checkpoint fails fast
    dec = decoder(model, backend)
    bind_weights(dec.model, stream(names, source, progress), dec.bind)
    stop = stop_ids_from(model_dir, c)
    return CausalLM(dec, load_tokenizer(model_dir), stop, arch)


def from_config(config_cls, c: Config):
    """`config_cls.from_hf(c)`, checked: a missing key or a value of the wrong type (a string where
    the config dataclass has an int or float field) is a CheckpointError naming config.json."""
    path = getattr(c, "path", "config.json")
    try:
        cfg = config_cls.from_hf(c)
    except KeyError as e:  # a nested object (e.g. text_config) without a required key
        raise CheckpointError(f"{path}: required key {e} is missing") from None
    except (TypeError, ValueError, AttributeError) as e:
        if isinstance(e, lm.LuminalError):
            raise
        raise CheckpointError(f"{path}: bad value ({type(e).__name__}: {e})") from None
    for f in fields(cfg):
        v = getattr(cfg, f.name)
        want = {"int": (int,), "float": (int, float), "float | None": (int, float, type(None))}.get(str(f.type))
        if want and (isinstance(v, bool) or not isinstance(v, want) or (isinstance(v, int) and v < 0)):
            raise CheckpointError(f"{path}: bad value {v!r} for the model's {f.name} (expected {f.type} >= 0)")
    return cfg


def load_random_preset(cfg, backend: str, max_seq: int, layers: int | None, seed: int, build,
                       dtype: object = "auto") -> CausalLM:  # fmt: skip
    """Random weights at `cfg`'s real shapes (optionally only the first `layers` layers), for benchmarks;
    `auto` dtype is PRESET_DTYPE on cuda, f32 on the reference backend."""
    if layers is not None:
        cfg = replace(cfg, n_layers=layers)
    model = build(cfg, max_seq, resolve_dtype(dtype, backend, PRESET_DTYPE))
    dec = decoder(model, backend)
    names = model.weight_shapes()
    bind_weights(dec.model, stream(names, random_weights(names, seed), progress), dec.bind)
    return CausalLM(dec, None, (), "random")


# -- CLI ------------------------------------------------------------------------------------------
@contextmanager
def user_errors():
    """For CLIs: a LuminalError (bad checkpoint, bad option, capacity, ...) becomes one `error:` line
    on stderr and exit status 1, never a traceback."""
    try:
        yield
    except lm.LuminalError as e:
        sys.exit("error: " + " ".join(str(e).split()))


def non_negative(text: str) -> int:
    n = int(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


def add_dtype_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--dtype", default="auto", choices=DTYPES,
                    help="weights, activations and KV cache; auto: the checkpoint's dtype on cuda, f32 on the "
                         "reference backend (logits are f32 in every case)")  # fmt: skip


def lm_main(argv: list[str] | None, name: str, load: Callable, load_random: Callable, presets: Sequence[str]) -> None:
    """`python -m luminal.models.<name> --model DIR | --random PRESET --prompt TEXT --max-new-tokens N`."""
    ap = argparse.ArgumentParser(
        prog=f"python -m luminal.models.{name}", description=f"Run a {name} model with luminal."
    )
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="Hugging Face model directory (config.json, *.safetensors, tokenizer.json)")
    src.add_argument("--random", choices=sorted(presets), help="random weights at a preset's real shapes")
    ap.add_argument("--prompt", default="The capital of France is")
    ap.add_argument("--max-new-tokens", type=non_negative, default=32)
    ap.add_argument("--backend", default="auto", choices=["auto", "reference", "cuda"])
    add_dtype_option(ap)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-seq", type=int, default=512, help="KV-cache capacity in tokens")
    ap.add_argument("--layers", type=int, default=None, help="with --random: keep only the first N layers")
    args = ap.parse_args(argv)
    with user_errors():
        opts = dict(backend=args.backend, max_seq=args.max_seq, dtype=args.dtype)
        if args.model:
            model = load(args.model, **opts)
        else:
            model = load_random(args.random, layers=args.layers, seed=args.seed, **opts)
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
