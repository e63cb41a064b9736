"""A gpt-fast-style PyTorch peer for bench/decode.py: the zoo's Llama / Qwen / Gemma 3 text models
written as plain torch (fused wqkv and gate/up weights, static KV cache of the run's capacity,
SDPA over the whole cache with a mask, decode step under torch.compile(mode="reduce-overhead")),
loaded from the same weight dict (Hugging Face names) the luminal model binds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812


@dataclass(frozen=True)
class Spec:
    """What the peer needs of a zoo config (luminal.models.llama.Config or gemma.Config)."""

    vocab: int
    dim: int
    layers: int
    heads: int
    kv: int
    head_dim: int
    eps: float
    qk_norm: bool
    gemma: bool
    act: str
    scale: float
    window: tuple[int | None, ...]  # per layer: sliding window or None
    inv_freq: tuple[np.ndarray, ...]  # per layer
    tie: bool
    softcap: float | None = None

    @staticmethod
    def of(cfg, model) -> Spec:
        from luminal.nn.rope import inv_freq

        if hasattr(cfg, "sliding"):  # Gemma 3
            rope = {False: inv_freq(cfg.rope_global, cfg.head_dim), True: inv_freq(cfg.rope_local, cfg.head_dim)}
            return Spec(cfg.vocab_size, cfg.dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.norm_eps,
                        True, True, "gelu_tanh", cfg.query_pre_attn_scalar**-0.5,
                        tuple(cfg.sliding_window if s else None for s in cfg.sliding),
                        tuple(rope[s] for s in cfg.sliding), True, cfg.final_softcap)  # fmt: skip
        f = inv_freq(cfg.rope, cfg.head_dim)
        return Spec(cfg.vocab_size, cfg.dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.norm_eps,
                    cfg.qk_norm, False, "silu", cfg.head_dim**-0.5, (None,) * cfg.n_layers, (f,) * cfg.n_layers,
                    cfg.tie_embeddings)  # fmt: skip


def to_torch(a: np.ndarray, dtype, device) -> torch.Tensor:
    if a.dtype.name == "bfloat16":
        t = torch.from_numpy(np.ascontiguousarray(a).view(np.uint16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(np.ascontiguousarray(a))
    return t.to(device=device, dtype=dtype)


class Buffers(torch.nn.Module):
    """A layer's tensors as registered buffers (static addresses for CUDA graphs, like gpt-fast's caches)."""

    def __init__(self, tensors: dict[str, torch.Tensor]):
        super().__init__()
        for k, v in tensors.items():
            self.register_buffer(k, v)


class Model(torch.nn.Module):
    def __init__(self, spec: Spec, weights: dict[str, np.ndarray], capacity: int, dtype=torch.bfloat16, device="cuda"):
        super().__init__()
        self.spec, self.capacity = spec, capacity
        w = lambda n: to_torch(weights[n], dtype, device)  # noqa: E731
        self.embed = w("model.embed_tokens.weight")
        self.head = self.embed if spec.tie else w("lm_head.weight")
        self.norm = w("model.norm.weight")
        self.blocks = torch.nn.ModuleList()
        for i in range(spec.layers):
            p = f"model.layers.{i}"
            b = {"wqkv": torch.cat([w(f"{p}.self_attn.{x}_proj.weight") for x in "qkv"]),
                 "wo": w(f"{p}.self_attn.o_proj.weight"),
                 "w13": torch.cat([w(f"{p}.mlp.gate_proj.weight"), w(f"{p}.mlp.up_proj.weight")]),
                 "w2": w(f"{p}.mlp.down_proj.weight"), "n1": w(f"{p}.input_layernorm.weight"),
                 "n2": w(f"{p}.post_attention_layernorm.weight")}  # fmt: skip
            bias = f"{p}.self_attn.q_proj.bias"
            if bias in weights:
                b["bqkv"] = torch.cat([w(f"{p}.self_attn.{x}_proj.bias") for x in "qkv"])
            if spec.qk_norm:
                b["qn"], b["kn"] = w(f"{p}.self_attn.q_norm.weight"), w(f"{p}.self_attn.k_norm.weight")
            if spec.gemma:
                b["n3"] = w(f"{p}.pre_feedforward_layernorm.weight")
                b["n4"] = w(f"{p}.post_feedforward_layernorm.weight")
            b["k"] = torch.zeros(1, spec.kv, capacity, spec.head_dim, dtype=dtype, device=device)
            b["v"] = torch.zeros_like(b["k"])
            t = torch.arange(capacity, dtype=torch.float32, device=device)[:, None]
            f = torch.from_numpy(np.asarray(spec.inv_freq[i], np.float32)).to(device)[None, :]
            ang = torch.cat([t * f, t * f], dim=-1)  # (capacity, head_dim), HF rotate_half layout
            b["cos"], b["sin"] = ang.cos(), ang.sin()
            pos = torch.arange(capacity, device=device)
            mask = pos[None, :] <= pos[:, None]
            if spec.window[i] is not None:
                mask &= pos[None, :] > pos[:, None] - spec.window[i]
            b["mask"] = mask
            self.blocks.append(Buffers(b))

    def rms(self, x, w):
        y = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.spec.eps)
        return (y * (1.0 + w.float()) if self.spec.gemma else y * w.float()).to(x.dtype)

    @staticmethod
    def rope(x, cos, sin):  # x: (1, h, s, d); cos, sin: (s, d)
        x1, x2 = x.chunk(2, dim=-1)
        return (x.float() * cos + torch.cat([-x2, x1], dim=-1).float() * sin).to(x.dtype)

    def forward(self, tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """tokens, pos: (s,) -> logits (vocab,) f32 of the last position."""
        sp, s = self.spec, tokens.shape[0]
        x = F.embedding(tokens, self.embed)[None]  # (1, s, dim)
        if sp.gemma:
            x = x * math.sqrt(sp.dim)
        nq, nk = sp.heads * sp.head_dim, sp.kv * sp.head_dim
        for b in self.blocks:
            h = self.rms(x, b.n1)
            qkv = F.linear(h, b.wqkv, getattr(b, "bqkv", None))
            q, k, v = qkv.split([nq, nk, nk], dim=-1)
            q = q.view(1, s, sp.heads, sp.head_dim)
            k = k.view(1, s, sp.kv, sp.head_dim)
            if sp.qk_norm:
                q, k = self.rms(q, b.qn), self.rms(k, b.kn)
            q, k = q.transpose(1, 2), k.transpose(1, 2)
            v = v.view(1, s, sp.kv, sp.head_dim).transpose(1, 2)
            cos, sin = b.cos[pos], b.sin[pos]
            q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
            b.k.index_copy_(2, pos, k)
            b.v.index_copy_(2, pos, v)
            mask = b.mask[pos][None, None]  # (1, 1, s, capacity)
            o = F.scaled_dot_product_attention(q, b.k, b.v, attn_mask=mask, scale=sp.scale, enable_gqa=True)
            o = F.linear(o.transpose(1, 2).reshape(1, s, nq), b.wo)
            if sp.gemma:
                x = x + self.rms(o, b.n2)
                h = self.rms(x, b.n3)
            else:
                x = x + o
                h = self.rms(x, b.n2)
            g, u = F.linear(h, b.w13).chunk(2, dim=-1)
            a = F.gelu(g, approximate="tanh") if sp.act == "gelu_tanh" else F.silu(g)
            m = F.linear(a * u, b.w2)
            x = x + (self.rms(m, b.n4) if sp.gemma else m)
        logits = F.linear(self.rms(x[:, -1], self.norm), self.head).float()[0]
        if sp.softcap is not None:
            logits = torch.tanh(logits / sp.softcap) * sp.softcap
        return logits


class Peer:
    """Greedy generation with the gpt-fast recipe: eager prefill, compiled (CUDA-graph) decode step."""

    def __init__(self, model: Model, compile_decode: bool = True):
        self.model = model
        step = lambda tok, pos: torch.argmax(model(tok, pos), dim=-1, keepdim=True)  # noqa: E731
        self.decode = torch.compile(step, mode="reduce-overhead", fullgraph=True) if compile_decode else step

    @torch.no_grad()
    def prefill(self, ids: list[int]) -> torch.Tensor:
        dev = self.model.embed.device
        tok = torch.tensor(ids, dtype=torch.long, device=dev)
        return torch.argmax(self.model(tok, torch.arange(len(ids), device=dev)), dim=-1, keepdim=True)

    @torch.no_grad()
    def generate(self, ids: list[int], n: int, times: list[float] | None = None) -> list[int]:
        """n new tokens; each decode step's seconds appended to `times` (the token id read back each step)."""
        import time

        dev = self.model.embed.device
        tok = self.prefill(ids)
        out = [int(tok.item())]
        for i in range(n - 1):
            t0 = time.perf_counter()
            pos = torch.tensor([len(ids) + i], dtype=torch.long, device=dev)
            tok = self.decode(tok, pos).clone()
            out.append(int(tok.item()))
            if times is not None:
                times.append(time.perf_counter() - t0)
        return out
