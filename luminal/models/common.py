"""Shared model-zoo plumbing: inputs of a compiled decoder, the KV-cache state loop, sampling,
prefill + decode generation with timing, random weights at real shapes, and the model CLIs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

import luminal as lm
from luminal.graph import Graph
from luminal.models.checkpoint import Renamed, Safetensors, UnsupportedModelError, bind, read_config
from luminal.models.engine import CausalLM, Decoder, Sampler, progress


def graph_weights(g: Graph, state: Iterable[str] = ()) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """{name: (shape, numpy dtype)} of the graph's persistent inputs other than `state` (the caches)."""
    skip = set(state)
    out = {}
    for name in sorted(g.persistent - skip):
        shape = tuple(int(d.evaluate({})) for d in g.input_shapes[name])
        out[name] = (shape, g.nodes[g.inputs[name]].dtype.np)
    return out


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
    """`python -m luminal.models.<name> --model DIR | --random PRESET --prompt TEXT --max-new-tokens N`."""
    ap = argparse.ArgumentParser(
        prog=f"python -m luminal.models.{name}", description=f"Run a {name} model with luminal."
    )
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
