"""LUMINAL_PROFILE=1: a per-op table of one step of a plan, so the next bottleneck is visible.

The runtime calls `step_table` on a plan's first run (before the real launch: an eager replay
writes only what the run itself then writes, so state is unchanged). Each node's launches are
timed with CUDA events in an eager replay (after one warm-up replay); bytes moved are the extents
of the views the node reads plus the bytes it writes; `% roofline` is the time those bytes take at
the copy bandwidth (COPY_BW) over the measured time. The graph replay of the whole step is timed
too (launch overheads included), so the table shows both where the time goes and how much of it is
between kernels.
"""

from __future__ import annotations

import logging

import numpy as np

from luminal.hlir import Input

log = logging.getLogger("luminal.profile")
COPY_BW = 4.25e12  # bytes/s: H200 device-to-device copy, measured (docs/perf.md)
TOP = 30  # rows shown; the rest are summed into one line
HEADER = f"  {'node':>5} {'op':<24}{'launches':>9}{'time us':>10}{'% step':>8}{'MB':>10}{'% roofline':>11}"


def node_bytes(ex, i: int) -> int:
    """Bytes node i moves at the current dims: the extents of the views it reads, plus what it writes
    (an in-place update reads its index and source views and writes as much as its source holds)."""
    from luminal.backends.cuda.backend import view_extent

    n = ex.nodes[i]
    skip = n.op.alias()[0] if n.op.inplace else None
    reads = [view_extent(sh, st, ex._env) * ex.nodes[n.inputs[k]].dtype.itemsize
             for k, sh, st in n.op.input_reads() if k != skip]  # fmt: skip
    return sum(reads) + (reads[-1] if n.op.inplace and reads else ex._bytes(i))


def step_table(ex, label: str = "") -> str:
    """Time every step of `ex`'s plan (eager, CUDA events) at its current dims; the table as text."""
    drv = ex._driver()
    stream = ex.dev.stream
    ex._execute_eager()  # warm-up (host ops prepared, caches hot)
    evs = [(drv.Event(), drv.Event()) for _ in ex.steps]
    for (a, b), k in zip(evs, range(len(ex.steps)), strict=True):
        a.record(stream)
        ex._launch_step(k)
        b.record(stream)
    g0, g1 = drv.Event(), drv.Event()
    if ex._graph is not None:
        g0.record(stream)
        ex._graph.launch(stream)
        g1.record(stream)
    ex.dev.synchronize()
    per: dict[int, list[float]] = {}
    for (a, b), s in zip(evs, ex.steps, strict=True):
        per.setdefault(s.node, []).append(b.elapsed_ms(a) * 1e-3)
    total = sum(sum(v) for v in per.values()) or float("nan")
    graph_s = g1.elapsed_ms(g0) * 1e-3 if ex._graph is not None else float("nan")
    rows = []
    for i, ts in per.items():
        t = sum(ts)
        nbytes = node_bytes(ex, i)
        rows.append((t, i, type(ex.nodes[i].op).__name__, len(ts), nbytes))
    rows.sort(reverse=True)
    all_bytes = sum(r[4] for r in rows)
    dims = ", ".join(f"{d}={v}" for d, v in sorted(ex._env.items()))
    launches = sum(len(v) for v in per.values())
    out = [f"step profile {label}[{dims}]: {launches} launches, eager {total * 1e6:.1f} us (sum of per-node "
           f"CUDA events), graph replay {graph_s * 1e6:.1f} us, {all_bytes / 1e6:.2f} MB moved = "
           f"{100 * all_bytes / COPY_BW / graph_s:.1f}% of the copy roofline", HEADER]  # fmt: skip
    for t, i, name, launches, nbytes in rows[:TOP]:
        roof = 100 * nbytes / COPY_BW / t if t > 0 else float("nan")
        out.append(f"  {i:>5} {name:<24}{launches:>9}{t * 1e6:>10.1f}{100 * t / total:>8.1f}{nbytes / 1e6:>10.4g}"
                   f"{roof:>11.1f}")  # fmt: skip
    if len(rows) > TOP:
        rest = rows[TOP:]
        t = sum(r[0] for r in rest)
        out.append(f"  {'':>5} {f'({len(rest)} more nodes)':<24}{sum(r[3] for r in rest):>9}{t * 1e6:>10.1f}"
                   f"{100 * t / total:>8.1f}{sum(r[4] for r in rest) / 1e6:>10.4g}")  # fmt: skip
    inputs = sum(1 for n in ex.nodes if isinstance(n.op, Input))
    out.append(f"  ({inputs} inputs; {np.mean([len(v) for v in per.values()]):.2f} launches per node)")
    return "\n".join(out)
