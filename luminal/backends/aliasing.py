"""Output aliasing shared by the runtimes: which node's bytes live inside which buffer.

An op may declare (`Op.alias()`, luminal/hlir/op.py) that its output is the bytes of input `k`'s
buffer from a byte offset on. Runtimes resolve chains of such nodes to a *root* (a node that owns
a buffer: an Input or a computed node without alias) plus a total byte offset, give aliasing nodes
no storage of their own, and keep the root alive as long as any alias of it is read.

An in-place op (`Op.inplace`) also writes those bytes. That is only safe when nothing else reads
the buffer it overwrites: every node on its chain down to the root must be read by exactly one
node, the next one up the chain. `check_inplace` enforces it for a plan (the `buffer_reuse` rules
only propose in-place ops under that condition; the check catches a rule or extraction bug).
"""

from __future__ import annotations

from collections.abc import Sequence

from luminal.errors import BackendError
from luminal.shape.expr import ZERO, Expression


def alias_roots(nodes: Sequence) -> dict[int, tuple[int, Expression]]:
    """{aliasing node: (root node, byte offset from the root's first byte)}, chains followed."""
    out: dict[int, tuple[int, Expression]] = {}
    for i, n in enumerate(nodes):  # topological order: an input's root is known before its users
        a = n.op.alias()
        if a is None:
            continue
        k, off = a
        if not 0 <= k < len(n.inputs):
            raise BackendError(f"{type(n.op).__name__}.alias() names input {k}; the node has {len(n.inputs)} inputs")
        src = n.inputs[k]
        root, base = out.get(src, (src, ZERO))
        out[i] = (root, base + off)
    return out


def check_inplace(nodes: Sequence) -> None:
    """BackendError when an in-place op would overwrite bytes that another node still reads.

    Paired writes (an op with `also_writes`: KernelScatterPair) are exempt for both buffers they
    write: a plan may take the pair for one cache and the plain in-place scatter (or a copying one)
    for the other, so the pair shares the buffer with that scatter, which writes the same rows with
    the same values (inplace.egg, `scatter-pair`: both compute the same e-class), and with the
    KernelAliasAfter nodes that read the buffer after it."""
    readers: dict[int, int] = {}
    for n in nodes:
        for s in n.inputs:
            readers[s] = readers.get(s, 0) + 1
    for i, n in enumerate(nodes):
        if not n.op.inplace or n.op.also_writes():
            continue
        a = n.op.alias()
        if a is None:
            raise BackendError(f"{type(n.op).__name__} is in-place but declares no alias()")
        j = n.inputs[a[0]]
        if any(nodes[r].op.also_writes() for r in _readers_of(nodes, j)):
            continue
        while True:
            if readers.get(j, 0) != 1:
                raise BackendError(
                    f"node {i} ({type(n.op).__name__}) updates node {j}'s buffer in place, but {readers.get(j, 0)} "
                    "nodes read that buffer (an in-place op must be its only reader)"
                )
            up = nodes[j].op.alias()
            if up is None:
                break
            j = nodes[j].inputs[up[0]]


def _readers_of(nodes: Sequence, j: int) -> list[int]:
    return [r for r, n in enumerate(nodes) if j in n.inputs]


def written_roots(nodes: Sequence, roots: dict[int, tuple[int, Expression]]) -> set[int]:
    """The root buffers some in-place op writes (its alias's, and those of its `also_writes` inputs)."""
    out = set()
    for i, n in enumerate(nodes):
        if n.op.inplace:
            out.add(roots[i][0])
        for k in n.op.also_writes():
            s = n.inputs[k]
            out.add(roots.get(s, (s,))[0])
    return out
