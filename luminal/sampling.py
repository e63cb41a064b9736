"""Token sampling: greedy, temperature, top-k, top-p, with a counter-based RNG -- the numpy oracle.

The CUDA backend runs the same algorithm in one kernel on the device
(luminal/backends/cuda/sample.py); every step below is spelled so both compute the same integers,
hence the same token stream for a seed (up to a last-ulp difference of `exp`, which can only move
a draw that lands within ~2^-40 of a boundary). Per row of logits x (any float dtype, read as f32):

1. temperature <= 0: argmax, ties to the lowest index.
2. y = x / T in f32; key(y) = the order-preserving u32 of y's bits.
3. top-k (0 < k < V): keep y whose key >= the k-th largest key (ties at the threshold all stay).
4. weights q = floor(exp(f64(y - max y)) * 2^32) as u64 (0 for dropped tokens; the max gets 2^32).
5. top-p (< 1): with Z = sum q and P = max(1, floor(top_p * Z)), keep the tokens whose key is >= t,
   t the key where the mass of strictly larger keys is < P <= the mass of keys >= t (the smallest
   set of top tokens holding a top_p share, ties at the threshold all kept; Hugging Face's rule up
   to those ties).
6. u = uniform(seed, position, row) in [0, 1); target = floor(u * Z') over the kept mass Z'; the
   token is the first index whose running sum of kept weights (in index order) exceeds target.

`uniform` hashes (seed, position of the sampled token, row) with the splitmix64 finalizer, so a
draw does not depend on how many tokens were sampled before (prefill or decode, either backend).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from luminal.errors import InputError

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
SCALE = 4294967296.0  # 2^32: fixed-point scale of the weights


@dataclass(frozen=True)
class Sampler:
    """Greedy when temperature == 0; otherwise seeded sampling after temperature, top-k and top-p."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0 or self.top_k < 0 or not 0.0 < self.top_p <= 1.0:
            raise InputError(
                f"Sampler(temperature={self.temperature}, top_k={self.top_k}, top_p={self.top_p}): need "
                "temperature >= 0, top_k >= 0 and 0 < top_p <= 1"
            )

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0


def mix64(x: int) -> int:
    """splitmix64's finalizer (a bijection of u64 with good avalanche)."""
    x &= M64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def uniform(seed: int, position: int, row: int) -> float:
    """A double in [0, 1) from (seed, position, row): 53 bits of mix(seed ^ mix(position * G + row))."""
    x = mix64((seed & M64) ^ mix64((position * GOLDEN + row) & M64))
    return (x >> 11) * 2.0**-53


def keys(y: np.ndarray) -> np.ndarray:
    """Order-preserving u32 keys of f32 values (larger float -> larger key)."""
    u = np.ascontiguousarray(y, np.float32).view(np.uint32)
    return np.where(u & np.uint32(0x80000000), ~u, u | np.uint32(0x80000000)).astype(np.uint32)


def sample_row(x: np.ndarray, sampler: Sampler, position: int, row: int = 0) -> int:
    x = np.asarray(x).astype(np.float32).reshape(-1)
    if sampler.greedy:
        return int(np.argmax(x))
    y = x / np.float32(sampler.temperature)
    k = keys(y)
    keep = np.ones(x.size, bool)
    if 0 < sampler.top_k < x.size:
        kth = np.partition(k, x.size - sampler.top_k)[x.size - sampler.top_k]
        keep = k >= kth
    m = y[keep].max()
    q = np.floor(np.exp((y - m).astype(np.float64)) * SCALE).astype(np.uint64)
    q[~keep] = 0
    if sampler.top_p < 1.0:
        z = int(q.sum(dtype=np.uint64))
        p = max(1, int(sampler.top_p * float(z)))
        uk, inv = np.unique(k[keep], return_inverse=True)  # ascending distinct keys
        mass = np.zeros(uk.size, np.uint64)
        np.add.at(mass, inv, q[keep])
        at_or_above = np.cumsum(mass[::-1], dtype=np.uint64)  # descending keys: mass of keys >= each
        t = uk[::-1][int(np.argmax(at_or_above >= np.uint64(p)))]
        q[k < t] = 0
    cum = np.cumsum(q, dtype=np.uint64)
    target = int(uniform(sampler.seed, position, row) * float(int(cum[-1])))
    return int(np.searchsorted(cum, np.uint64(target), side="right"))


def sample(logits: np.ndarray, sampler: Sampler, position: int) -> np.ndarray:
    """Token ids (rows,) i32 for (rows, vocab) logits; `position` is the sampled token's position."""
    logits = np.asarray(logits)
    if logits.ndim != 2:
        raise InputError(f"sample: logits must be (rows, vocab), got shape {logits.shape}")
    return np.array([sample_row(r, sampler, position, i) for i, r in enumerate(logits)], np.int32)
