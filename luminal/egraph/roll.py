"""Loop rolling: a stack of repeated layers is saturated and searched once per kind of layer, then unrolled.

Detection (`detect`) works on the HLIR graph before any egglog. *Free* nodes (Constant, Iota and what
is computed from them alone: masks, position tables) are pure functions of the dims; they are left out
of the search for structure and copied into whichever region reads them (the e-graph hash-conses the
copies). The other nodes, in creation order, are one signature sequence (op and fields with Input /
Output labels erased, dtype, input count); the repeated run that covers most nodes gives the period
P (one layer) and the number of windows. The window start within the run is the rotation that carries
the fewest values from one window to the next (a transformer block carries only its residual stream,
so the matmul and residual add of one block fall in the same window and its epilogue rules fire).

Each window gets a canonical form: per node, its signature and, per input, where it comes from: the
same window at offset r, the previous window at offset r (a *carry*), a free subgraph (by structural
hash) or one node outside (an *external*: rope tables, the embedding output). Windows with equal forms
are one *kind* (Gemma's sliding and global layers differ in their free mask: two kinds); the first
window matches a kind whose carries it reads from outside (the carry's initial value).

Regions (`Rolling.regions`): one *body* graph per kind, built from one instance: placeholders (plain,
non-persistent Inputs labelled `@roll.carry.r` / `@roll.ext.m`) for what it reads from outside, its
per-layer inputs and outputs under that instance's labels (so facts about them, such as a KV cache's
input/output aliasing, hold as in the full graph), and an export Output `@roll.out.r` for every value
another region reads. The *outer* graph is everything else (prefix, suffix) with placeholders
`@roll.win.u` for window values it reads and exports `@roll.val.u` for values windows read. Each
region is saturated, searched and cached on its own: the cost grows with the number of kinds, not with
depth. `unroll` (luminal/egraph/unroll.py) instantiates each kind's plan once per window (per-layer
labels renamed, placeholders bound to the producing region's node, input-free pure nodes shared) into
one LLIR graph, in dependency order from the outputs. A graph without repetition is not rolled (`detect` returns None).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from luminal.egraph.llir import LLIRGraph, _op_text
from luminal.graph import Graph, Node
from luminal.hlir import Input, Output

log = logging.getLogger(__name__)
MIN_BODY = 8  # nodes (not free) a window needs to be worth rolling
MIN_WINDOWS = 2
MAX_RUNS = 4  # separate repeated runs rolled in one graph (e.g. an encoder stack and a decoder stack)
CARRY, EXT, OUT, WIN, VAL = "@roll.carry.", "@roll.ext.", "@roll.out.", "@roll.win.", "@roll.val."
Ref = tuple  # ("i", r) same window | ("p", r) previous window | ("f", hash) free | ("x", node) external


@dataclass
class Kind:
    """One kind of layer: the canonical form of its windows and the windows that are instances of it."""

    form: tuple
    windows: list[int] = field(default_factory=list)  # indices into Run.windows, ascending
    exports: set[int] = field(default_factory=set)  # offsets other regions read
    name: str = ""


@dataclass
class Run:
    """A stack of windows of `period` nodes each (node ids, creation order)."""

    windows: list[list[int]]
    kinds: list[Kind] = field(default_factory=list)
    kind_of: list[int] = field(default_factory=list)  # window -> kind index
    init: list[dict[int, int]] = field(default_factory=list)  # window -> {carry offset: outside node}

    @property
    def period(self) -> int:
        return len(self.windows[0])


@dataclass
class Rolling:
    graph: Graph
    runs: list[Run]
    where: dict[int, tuple[int, int, int]]  # node -> (run, window, offset)
    free: set[int]  # free nodes (module docstring)

    # -- regions --------------------------------------------------------------------------------------
    def regions(self) -> list[tuple[str, Graph]]:
        """(name, graph) of the outer region (if it computes anything) and of every body."""
        out = []
        outer = self._outer()
        if outer is not None:
            out.append(("outer", outer))
        for ri, run in enumerate(self.runs):
            for kind in run.kinds:
                out.append((kind.name, self._body(ri, run, kind)))
        return out

    def summary(self) -> list[dict]:
        return [{"body": k.name, "layers": len(k.windows), "nodes": run.period}
                for run in self.runs for k in run.kinds]  # fmt: skip

    def _outer(self) -> Graph | None:
        g, src = self.graph, self.graph.nodes
        new = Graph()
        m: dict[int, int] = {}
        placeholders: dict[int, int] = {}
        for i, n in enumerate(src):
            if i in self.where:
                continue
            ins = []
            for u in n.inputs:
                if u in self.where:
                    if u not in placeholders:
                        placeholders[u] = _placeholder(new, f"{WIN}{u}", src[u])
                    ins.append(placeholders[u])
                else:
                    ins.append(m[u])
            m[i] = _copy(new, g, n, ins)
        for i in sorted(self._read_by_windows()):
            _export(new, f"{VAL}{i}", m[i], src[i])
        return new if new.outputs else None

    def _read_by_windows(self) -> set[int]:
        src = self.graph.nodes
        return {u for i in self.where for u in src[i].inputs if u not in self.where and u not in self.free}

    def _body(self, ri: int, run: Run, kind: Kind) -> Graph:
        g, src = self.graph, self.graph.nodes
        t = kind.windows[0]
        win = run.windows[t]
        new = Graph()
        m: dict[int, int] = {}
        free_m: dict[int, int] = {}
        ph: dict[Ref, int] = {}
        ext_n = 0
        for j, nid in enumerate(win):
            n = src[nid]
            ins = []
            for u, ref in zip(n.inputs, kind.form[j][1], strict=True):
                if ref[0] == "i":
                    ins.append(m[win[ref[1]]])
                elif ref[0] == "f":
                    ins.append(_copy_free(new, g, u, free_m))
                else:
                    if ref not in ph:
                        if ref[0] == "p":
                            label = f"{CARRY}{ref[1]}"
                        else:
                            label, ext_n = f"{EXT}{ext_n}", ext_n + 1
                        ph[ref] = _placeholder(new, label, src[u])
                    ins.append(ph[ref])
            m[nid] = _copy(new, g, n, ins)
        for r in sorted(kind.exports):
            _export(new, f"{OUT}{r}", m[win[r]], src[win[r]])
        return new

    # -- unrolling ------------------------------------------------------------------------------------
    def unroll(self, plans: Mapping[str, LLIRGraph]) -> LLIRGraph:
        """One LLIR graph from the regions' plans (see module docstring)."""
        from luminal.egraph.unroll import Unroller

        return Unroller(self, plans).build()


def _placeholder(g: Graph, label: str, like: Node) -> int:
    nid = g.add(Input(label, like.dtype), (), like.dtype, like.size)
    g.inputs[label] = nid
    g.input_shapes[label] = (like.size,)
    return nid


def _export(g: Graph, label: str, nid: int, like: Node) -> None:
    out = g.add(Output(label), (nid,), like.dtype, like.size)
    g.outputs[label] = out
    g.output_shapes[label] = (like.size,)


def _copy(new: Graph, g: Graph, n: Node, ins: list[int]) -> int:
    nid = new.add(n.op, ins, n.dtype, n.size)
    if isinstance(n.op, Input):
        new.inputs[n.op.label] = nid
        new.input_shapes[n.op.label] = g.input_shapes[n.op.label]
        if n.op.label in g.persistent:
            new.persistent.add(n.op.label)
    elif isinstance(n.op, Output):
        new.outputs[n.op.label] = nid
        new.output_shapes[n.op.label] = g.output_shapes[n.op.label]
    return nid


def _copy_free(new: Graph, g: Graph, u: int, memo: dict[int, int]) -> int:
    stack = [u]
    while stack:
        v = stack[-1]
        if v in memo:
            stack.pop()
            continue
        missing = [w for w in g.nodes[v].inputs if w not in memo]
        if missing:
            stack.extend(missing)
            continue
        stack.pop()
        memo[v] = _copy(new, g, g.nodes[v], [memo[w] for w in g.nodes[v].inputs])
    return memo[u]


# -- detection ----------------------------------------------------------------------------------------
def free_nodes(graph: Graph) -> set[int]:
    """Nodes computed from no Input at all (Constant, Iota and what is built from them alone)."""
    free: set[int] = set()
    for i, n in enumerate(graph.nodes):
        if not isinstance(n.op, (Input, Output)) and all(s in free for s in n.inputs):
            free.add(i)
    return free


def _signature(graph: Graph, n: Node) -> str:
    op = n.op
    if isinstance(op, Input):
        shape = tuple(str(d) for d in graph.input_shapes[op.label])
        return f"Input {op.dtype.value} {shape} {op.label in graph.persistent}"
    if isinstance(op, Output):
        return f"Output {n.dtype.value}"
    return f"{_op_text(op)} {n.dtype.value} {len(n.inputs)}"


def _free_hashes(graph: Graph, free: set[int], sigs: list[str]) -> dict[int, str]:
    h: dict[int, str] = {}
    for i in sorted(free):
        n = graph.nodes[i]
        text = sigs[i] + "|" + ",".join(h[u] for u in n.inputs)
        h[i] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return h


def detect(graph: Graph) -> Rolling | None:
    """The repeated runs of `graph` (see module docstring), or None when nothing repeats."""
    free = free_nodes(graph)
    seq = _sequence(graph, free)
    if len(seq) < MIN_BODY * MIN_WINDOWS:
        return None
    sigs = [_signature(graph, n) for n in graph.nodes]
    ids: dict[str, int] = {}
    sig = np.array([ids.setdefault(sigs[i], len(ids)) for i in seq], np.int64)
    spans: list[tuple[int, int, int]] = []  # (start, length, period) in seq positions
    todo = [(0, len(seq))]
    while todo and len(spans) < MAX_RUNS:
        lo, hi = max(todo, key=lambda t: t[1] - t[0])
        todo.remove((lo, hi))
        found = _best_run(sig, lo, hi)
        if found is None:
            continue
        start, length, period = found
        spans.append(found)
        todo += [(lo, start), (start + length, hi)]
    if not spans:
        return None
    fh = _free_hashes(graph, free, sigs)
    runs: list[Run] = []
    where: dict[int, tuple[int, int, int]] = {}
    for start, length, period in sorted(spans):
        s0 = _rotation(graph, seq, start, length, period)
        n_win = (start + length - s0) // period
        windows = [seq[s0 + k * period : s0 + (k + 1) * period] for k in range(n_win)]
        if len(windows) < MIN_WINDOWS:
            continue
        ri = len(runs)
        for k, w in enumerate(windows):
            for r, nid in enumerate(w):
                where[nid] = (ri, k, r)
        runs.append(Run(windows))
    if not runs:
        return None
    rolling = Rolling(graph, runs, where, free)
    for ri, run in enumerate(runs):
        _classify(graph, rolling, ri, run, free, fh, sigs)
    _exports(graph, rolling, free)
    if all(len(k.windows) < 2 for run in runs for k in run.kinds):
        return None  # nothing actually repeats
    return rolling


def _sequence(graph: Graph, free: set[int]) -> list[int]:
    """The nodes that are not free, in creation order, except that an Output follows the value it
    marks: a graph that marks its per-layer outputs after the whole stack (a translated FX graph's
    state outputs, luminal/torch/translate.py) still has each layer's outputs in that layer's
    window, where facts about them (a KV cache's input/output aliasing) hold."""
    marks: dict[int, list[int]] = {}
    for i, n in enumerate(graph.nodes):
        if isinstance(n.op, Output) and n.inputs[0] not in free:
            marks.setdefault(n.inputs[0], []).append(i)
    moved = {o for outs in marks.values() for o in outs}
    seq = []
    for i in range(len(graph.nodes)):
        if i not in free and i not in moved:
            seq.append(i)
            seq.extend(marks.get(i, ()))
    return seq


def _best_run(sig: np.ndarray, lo: int, hi: int) -> tuple[int, int, int] | None:
    """(start, length, period) of the run of repeated windows covering most positions in [lo, hi)."""
    s = sig[lo:hi]
    n = len(s)
    best = None
    for p in range(MIN_BODY, n // MIN_WINDOWS + 1):
        eq = s[:-p] == s[p:]
        # a run of L equal positions covers at most L + p, and needs L >= (MIN_WINDOWS - 1) * p: with
        # `hits` equal positions in all, skip a period that cannot reach MIN_WINDOWS or beat `best`
        hits = int(np.count_nonzero(eq))
        if hits < max(1, (MIN_WINDOWS - 1) * p) or (best is not None and hits + p <= best[0]):
            continue
        d = np.diff(np.concatenate(([0], eq.astype(np.int8), [0])))
        starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
        j = int(np.argmax(ends - starts))
        length = int(ends[j] - starts[j]) + p
        cover = (length // p) * p
        if length // p >= MIN_WINDOWS and (best is None or cover > best[0]):
            best = (cover, lo + int(starts[j]), length, p)
    return None if best is None else best[1:]


def _rotation(graph: Graph, seq: list[int], start: int, length: int, period: int) -> int:
    """The window start in [start, start + length - n*period] that carries the fewest values (then
    whose first window reads the fewest values from the run before it). A cut that carries two values
    inside a layer (an attention's P*V product and the residual) and one that carries the residual
    alone could tie on their sum: an HF llama's windows were cut inside the attention (session 9)."""
    n_win = length // period
    best, best_cost = start, None
    for s0 in range(start, start + length - n_win * period + 1):
        w0 = set(seq[s0 : s0 + period])
        earlier = set(seq[start:s0])
        carried = {u for i in seq[s0 + period : s0 + 2 * period] for u in graph.nodes[i].inputs if u in w0}
        cost = (len(carried), sum(1 for i in w0 for u in graph.nodes[i].inputs if u in earlier))
        if best_cost is None or cost < best_cost:
            best, best_cost = s0, cost
    return best


def _form(
    graph: Graph, rolling: Rolling, ri: int, k: int, free: set[int], fh: dict[int, str], sigs: list[str]
) -> tuple:
    out = []
    for nid in rolling.runs[ri].windows[k]:
        n = graph.nodes[nid]
        refs = []
        for u in n.inputs:
            if u in free:
                refs.append(("f", fh[u]))
                continue
            w = rolling.where.get(u)
            if w is not None and w[0] == ri and w[1] == k:
                refs.append(("i", w[2]))
            elif w is not None and w[0] == ri and w[1] == k - 1:
                refs.append(("p", w[2]))
            else:
                refs.append(("x", u))
        out.append((sigs[nid], tuple(refs)))
    return tuple(out)


def _match(template: tuple, form: tuple) -> dict[int, int] | None:
    """Carry initial values {offset: node} if `form` is `template` with some carries read from
    outside, else None."""
    if template == form:
        return {}
    init: dict[int, int] = {}
    for (s1, r1), (s2, r2) in zip(template, form, strict=True):
        if s1 != s2 or len(r1) != len(r2):
            return None
        for a, b in zip(r1, r2, strict=True):
            if a == b:
                continue
            if a[0] == "p" and b[0] == "x" and init.setdefault(a[1], b[1]) == b[1]:
                continue
            return None
    return init


def _classify(
    graph: Graph, rolling: Rolling, ri: int, run: Run, free: set[int], fh: dict[int, str], sigs: list[str]
) -> None:
    n = len(run.windows)
    run.kind_of = [-1] * n
    run.init = [{} for _ in range(n)]
    for k in [*range(1, n), 0]:  # later windows first: their carries are visible as such
        form = _form(graph, rolling, ri, k, free, fh, sigs)
        for ki, kind in enumerate(run.kinds):
            init = _match(kind.form, form)
            if init is not None:
                run.kind_of[k], run.init[k] = ki, init
                kind.windows.append(k)
                break
        else:
            run.kind_of[k] = len(run.kinds)
            run.kinds.append(Kind(form, [k]))
    for ki, kind in enumerate(run.kinds):
        kind.windows.sort()
        kind.form = _form(graph, rolling, ri, kind.windows[0], free, fh, sigs)
        if kind.windows[0] == 0 and len(kind.windows) > 1:
            kind.form = _form(graph, rolling, ri, kind.windows[1], free, fh, sigs)
        kind.name = f"body{ri}.{ki}" if len(rolling.runs) > 1 else f"body{ki}"


def _exports(graph: Graph, rolling: Rolling, free: set[int]) -> None:
    """Offsets of each kind that another region (next window, outer graph, far windows) reads."""
    for i, n in enumerate(graph.nodes):
        wi = rolling.where.get(i)
        for u in n.inputs:
            wu = rolling.where.get(u)
            if wu is None or u in free or (wi is not None and wi[:2] == wu[:2]):
                continue
            run = rolling.runs[wu[0]]
            run.kinds[run.kind_of[wu[1]]].exports.add(wu[2])
    # a window reads its kind's carries from its predecessor, whatever kind that one is
    for run in rolling.runs:
        for k in range(1, len(run.windows)):
            kind = run.kinds[run.kind_of[k]]
            for _, refs in kind.form:
                for ref in refs:
                    if ref[0] == "p" and ref[1] not in run.init[k]:
                        run.kinds[run.kind_of[k - 1]].exports.add(ref[1])


def ext_nodes(kind: Kind) -> list[int]:
    """The outside nodes a kind reads, in first-use order (the numbering of its `@roll.ext.m`)."""
    seen: dict[int, None] = {}
    for _, refs in kind.form:
        for ref in refs:
            if ref[0] == "x":
                seen.setdefault(ref[1], None)
    return list(seen)
