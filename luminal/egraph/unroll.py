"""Unrolling (the last step of loop rolling, luminal/egraph/roll.py): region plans -> one LLIR graph.

Each kind's plan is instantiated once per window: its per-layer Inputs and Outputs take that window's
labels, its placeholders (`@roll.carry.r`, `@roll.ext.m`) become the node that produces the value in
the region that owns it (the previous window's export, the outer plan's export), the outer plan's
placeholders (`@roll.win.u`) become the window's export. Export Outputs are not emitted. Nodes are
emitted on demand, inputs first, driven by every region's real outputs, so the result is in
dependency order and holds only what some output needs. A node whose every input is *invariant*
(the same value in every window: a node of the outer plan, or itself such a shared node; so also
nodes computed from no input at all, masks and position tables) is made once and shared between
instances, when it writes nothing in place: every instance would compute the same values. A Hugging
Face layer casts the shared rope tables and derives the cache positions again in every layer; the
e-graph of an unrolled graph merges those copies, and so does this. No choice is changed: what
search picked for a region is what runs in each of its windows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from luminal.egraph.llir import LLIRGraph, LNode, _op_text
from luminal.egraph.roll import CARRY, EXT, OUT, VAL, WIN, ext_nodes
from luminal.hlir import Input, Output

if TYPE_CHECKING:
    from luminal.egraph.roll import Rolling


class Unroller:
    """Instantiates region plans into one LLIR graph (module docstring)."""

    def __init__(self, rolling: Rolling, plans: Mapping[str, LLIRGraph]):
        self.r, self.plans = rolling, plans
        self.nodes: list[LNode] = []
        self.outputs: dict[str, int] = {}
        self.inputs: dict[str, int] = {}
        self.memo: dict[tuple, int] = {}
        self.invariant: set[int] = set()  # final nodes whose value is the same in every window
        self.shared: dict[tuple, int] = {}
        self.outs: dict[str, dict[str, int]] = {n: dict(p.outputs) for n, p in plans.items()}
        # per kind plan: label -> offset of the template node that Input/Output came from
        self.label_off: dict[str, dict[str, int]] = {}
        for run in rolling.runs:
            for kind in run.kinds:
                t = run.windows[kind.windows[0]]
                labels = {}
                for r, nid in enumerate(t):
                    op = rolling.graph.nodes[nid].op
                    if isinstance(op, (Input, Output)):
                        labels[op.label] = r
                self.label_off[kind.name] = labels

    def build(self) -> LLIRGraph:
        for ri, run in enumerate(self.r.runs):
            for k in range(len(run.windows)):
                seg = ("w", ri, k)
                plan = self.plans[run.kinds[run.kind_of[k]].name]
                for i, n in enumerate(plan.nodes):
                    if isinstance(n.op, Output) and not n.op.label.startswith(OUT):
                        self._emit((seg, i))
        if "outer" in self.plans:
            for i, n in enumerate(self.plans["outer"].nodes):
                if isinstance(n.op, Output) and not n.op.label.startswith(VAL):
                    self._emit((("o",), i))
        order = {label: k for k, label in enumerate(self.r.graph.outputs)}
        outputs = dict(sorted(self.outputs.items(), key=lambda kv: order.get(kv[0], len(order))))
        llir = LLIRGraph(self.nodes, outputs)
        llir.validate()
        return llir

    def _plan(self, seg: tuple) -> LLIRGraph:
        if seg[0] == "o":
            return self.plans["outer"]
        run = self.r.runs[seg[1]]
        return self.plans[run.kinds[run.kind_of[seg[2]]].name]

    def _value(self, u: int) -> tuple:
        """The (segment, node) whose value is original HLIR node `u`."""
        w = self.r.where.get(u)
        if w is None:
            return (("o",), self.plans["outer"].nodes[self.outs["outer"][f"{VAL}{u}"]].inputs[0])
        seg = ("w", w[0], w[1])
        plan = self._plan(seg)
        run = self.r.runs[w[0]]
        return (seg, plan.nodes[self.outs[run.kinds[run.kind_of[w[1]]].name][f"{OUT}{w[2]}"]].inputs[0])

    def _deps(self, ref: tuple) -> tuple[list[tuple], str | None]:
        """What a node needs emitted first; for a placeholder Input, its value's ref (alias)."""
        seg, i = ref
        n = self._plan(seg).nodes[i]
        if isinstance(n.op, Input):
            label = n.op.label
            if seg[0] == "o":
                if label.startswith(WIN):
                    return [self._value(int(label[len(WIN) :]))], "alias"
                return [], None
            run = self.r.runs[seg[1]]
            k = seg[2]
            kind = run.kinds[run.kind_of[k]]
            if label.startswith(CARRY):
                r = int(label[len(CARRY) :])
                u = run.init[k].get(r)
                return [self._value(u if u is not None else run.windows[k - 1][r])], "alias"
            if label.startswith(EXT):
                m = int(label[len(EXT) :])
                return [self._value(ext_nodes(kind)[m])], "alias"
            return [], None
        return [(seg, j) for j in n.inputs], None

    def _emit(self, ref: tuple) -> int:
        stack = [ref]
        while stack:
            cur = stack[-1]
            if cur in self.memo:
                stack.pop()
                continue
            deps, how = self._deps(cur)
            missing = [d for d in deps if d not in self.memo]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            self.memo[cur] = self.memo[deps[0]] if how == "alias" else self._make(cur, [self.memo[d] for d in deps])
        return self.memo[ref]

    def _label(self, seg: tuple, label: str) -> str:
        if seg[0] == "o":
            return label
        run = self.r.runs[seg[1]]
        kind = run.kinds[run.kind_of[seg[2]]]
        r = self.label_off[kind.name][label]
        return self.r.graph.nodes[run.windows[seg[2]][r]].op.label

    def _make(self, ref: tuple, ins: list[int]) -> int:
        seg, i = ref
        n = self._plan(seg).nodes[i]
        op = n.op
        if isinstance(op, Input):
            label = self._label(seg, op.label)
            if label not in self.inputs:
                self.inputs[label] = self._add(LNode(Input(label, op.dtype), (), n.dtype))
            if seg[0] == "o":
                self.invariant.add(self.inputs[label])
            return self.inputs[label]
        if isinstance(op, Output):
            label = self._label(seg, op.label)
            self.outputs[label] = self._add(LNode(Output(label), tuple(ins), n.dtype))
            return self.outputs[label]
        node = LNode(op, tuple(ins), n.dtype)
        if all(j in self.invariant for j in ins) and not op.inplace and op.alias() is None and not op.also_writes():
            key = (_op_text(op), tuple(ins), n.dtype)
            if key not in self.shared:
                self.shared[key] = self._add(node)
                self.invariant.add(self.shared[key])
            return self.shared[key]
        out = self._add(node)
        if seg[0] == "o":  # the outer plan runs once: its values are the same for every window
            self.invariant.add(out)
        return out

    def _add(self, node: LNode) -> int:
        self.nodes.append(node)
        return len(self.nodes) - 1
