"""Arena planner: every intermediate buffer of a plan gets an offset in one device arena.

Lifetimes come from the LLIR's topological order: a buffer is live from the step that writes it
to the last step that reads it (buffers read by an Output stay live to the end, since outputs are
copied out after the whole plan ran). Buffers whose lifetimes overlap never share bytes; dead
buffers' space is reused. Placement is greedy by size (largest first, lowest fitting offset),
aligned to 256 bytes, and deterministic, so the same sizes give the same offsets on every run
(captured CUDA graphs keep valid pointers). Sizes are capacities: the runtime plans for the
largest sizes seen so far and replans only when a run needs more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ALIGN = 256


def align(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


@dataclass(frozen=True)
class Buffer:
    """A buffer to place: `size` bytes, live for steps start..end (inclusive)."""

    key: object
    size: int
    start: int
    end: int


@dataclass(frozen=True)
class ArenaPlan:
    offsets: dict  # key -> byte offset into the arena
    sizes: dict  # key -> planned (aligned) capacity in bytes
    total: int  # arena bytes (peak of the plan)

    def fits(self, sizes: dict) -> bool:
        """Whether buffers of `sizes` (key -> bytes) fit this plan's capacities."""
        return all(n <= self.sizes.get(k, -1) for k, n in sizes.items())


def plan(buffers: Sequence[Buffer]) -> ArenaPlan:
    """Offsets such that no two buffers with overlapping lifetimes overlap in memory."""
    order = sorted(range(len(buffers)), key=lambda i: (-buffers[i].size, buffers[i].start, i))
    n = len(buffers)
    starts = np.empty(n, np.int64)
    ends = np.empty(n, np.int64)
    offs = np.empty(n, np.int64)
    sizes = np.empty(n, np.int64)
    placed = 0
    offsets: dict = {}
    caps: dict = {}
    total = 0
    for i in order:
        b = buffers[i]
        size = align(max(b.size, 0))
        off = 0
        if size and placed:
            live = (starts[:placed] <= b.end) & (ends[:placed] >= b.start) & (sizes[:placed] > 0)
            if live.any():
                lo, hi = offs[:placed][live], offs[:placed][live] + sizes[:placed][live]
                order_lo = np.argsort(lo, kind="stable")
                for a, z in zip(lo[order_lo].tolist(), hi[order_lo].tolist(), strict=True):
                    if off + size <= a:
                        break
                    off = max(off, z)
        starts[placed], ends[placed], offs[placed], sizes[placed] = b.start, b.end, off, size
        placed += 1
        offsets[b.key] = off
        caps[b.key] = size
        total = max(total, off + size)
    return ArenaPlan(offsets, caps, total)


def lifetimes(inputs: Sequence[Sequence[int]], keep: Sequence[int] = ()) -> list[tuple[int, int]]:
    """(first, last) step of each node's output, from the node list's input lists; `keep` are
    nodes whose outputs must live to the end."""
    n = len(inputs)
    last = list(range(n))
    for i, ins in enumerate(inputs):
        for s in ins:
            last[s] = max(last[s], i)
    for k in keep:
        last[k] = n
    return [(i, last[i]) for i in range(n)]
