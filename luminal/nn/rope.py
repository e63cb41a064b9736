"""Rotary position embeddings (Hugging Face `rotate_half` layout): inverse frequencies from
config.json (default, linear and llama3 scaling; `rope_parameters` or the older `rope_theta` /
`rope_scaling` keys), applied in-graph at absolute positions p .. p+s-1."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

import luminal as lm
from luminal.errors import LuminalError
from luminal.graph import Graph
from luminal.nn.check import expect
from luminal.shape.expr import Expression, z
from luminal.tensor import GraphTensor


@dataclass(frozen=True)
class RopeConfig:
    theta: float = 10000.0
    kind: str = "default"  # default | linear | llama3
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192


def rope_config(cfg: Mapping, layer_type: str | None = None) -> RopeConfig:
    """Read rope settings from a config.json dict. transformers 5 writes `rope_parameters` (possibly one
    dict per layer type, as Gemma 3 does); older files have `rope_theta` and `rope_scaling`."""
    params = cfg.get("rope_parameters")
    if isinstance(params, Mapping) and layer_type is not None and isinstance(params.get(layer_type), Mapping):
        params = params[layer_type]
    if not isinstance(params, Mapping):
        params = dict(cfg.get("rope_scaling") or {})
        if cfg.get("rope_theta") is not None:
            params["rope_theta"] = cfg["rope_theta"]
    theta = params.get("rope_theta") or cfg.get("rope_theta") or 10000.0
    kind = params.get("rope_type") or params.get("type") or "default"
    if kind not in ("default", "linear", "llama3"):
        raise LuminalError(f"rope_type {kind!r} is not supported (supported: default, linear, llama3)")
    return RopeConfig(
        theta=float(theta), kind=kind, factor=float(params.get("factor", 1.0)),
        low_freq_factor=float(params.get("low_freq_factor", 1.0)),
        high_freq_factor=float(params.get("high_freq_factor", 4.0)),
        original_max_position=int(params.get("original_max_position_embeddings", 8192)),
    )  # fmt: skip


def inv_freq(rc: RopeConfig, head_dim: int) -> np.ndarray:
    """(head_dim/2,) f32 inverse frequencies, computed as transformers does (in f32)."""
    f = 1.0 / (rc.theta ** (np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / head_dim))
    if rc.kind == "linear":
        f = f / rc.factor
    elif rc.kind == "llama3":
        low_wavelen = rc.original_max_position / rc.low_freq_factor
        high_wavelen = rc.original_max_position / rc.high_freq_factor
        wavelen = 2 * math.pi / f
        scaled = np.where(wavelen > low_wavelen, f / rc.factor, f)
        smooth = (rc.original_max_position / wavelen - rc.low_freq_factor) / (rc.high_freq_factor - rc.low_freq_factor)
        mid = (1 - smooth) * scaled / rc.factor + smooth * scaled
        is_mid = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        f = np.where(is_mid, mid, scaled)
    return np.asarray(f, np.float32)


class RoPE:
    """cos/sin tables for positions p .. p+s-1 built once per graph; `__call__` rotates (s, heads, hd).

    Angles, cos/sin and the rotation run in f32 and the result is rounded once to the input's dtype
    (transformers rounds cos/sin to a 16-bit model's dtype and rotates in that dtype: within the
    16-bit tolerances of docs/numerics.md, and more accurate)."""

    def __init__(self, g: Graph, name: str, head_dim: int, past: Expression, new: Expression):
        self.head_dim = head_dim
        self.inv_freq = g.tensor(f"{name}.inv_freq", (head_dim // 2,)).persist()
        pos = g.iota(past + z, (new,)).cast(lm.f32)  # (s,) absolute positions
        freqs = pos.unsqueeze(1) * self.inv_freq.unsqueeze(0)  # (s, hd/2)
        self.cos, self.sin = freqs.cos().unsqueeze(1), freqs.sin().unsqueeze(1)  # (s, 1, hd/2)
        # the rotation as one elementwise expression (no concat, which is a scatter): with
        # rot(x) = x with its halves swapped (a view), rotate_half(x) = rot(x) * [-1]*h + [+1]*h, so
        # x*cos + rotate_half(x)*sin = x * cos2 + rot(x) * sin2 with cos2 = [cos, cos] and
        # sin2 = [-sin, sin], tables shared by every layer
        h, n = head_dim // 2, new
        sign = g.iota((z // h) * 2 - 1, (head_dim,)).cast(lm.f32)  # (hd,) -1 then +1
        self.cos2 = self.cos.unsqueeze(2).expand(n, 1, 2, h).reshape(n, 1, head_dim)  # (s, 1, hd)
        self.sin2 = self.sin.unsqueeze(2).expand(n, 1, 2, h).reshape(n, 1, head_dim) * sign

    def __call__(self, x: GraphTensor) -> GraphTensor:
        s, hd = self.cos.shape[0], self.head_dim
        expect(x, "RoPE", f"(s={s}, heads, head_dim={hd}) rows of the positions it was built for", 3, {0: s, 2: hd})
        h, dt, heads = self.head_dim // 2, x.dtype, x.shape[1]
        x = x.cast(lm.f32)
        rot = x.reshape(s, heads, 2, h)[:, :, ::-1, :].reshape(s, heads, hd)  # halves swapped: a view
        return (x * self.cos2 + rot * self.sin2).cast(dt)
