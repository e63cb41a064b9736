"""Extraction: the serialized e-graph -> choice sets -> one LLIR graph per genome.

A genome picks one e-node in every *searchable* e-class (sorts IR, OpKind, IList, and FExpr /
FList, the bodies of fused ops: a choice there decides what a fused kernel computes inline and
what it reads from a buffer; its leaves become the fused op's inputs). Metadata
classes (Expression, EList, DType, primitives) are decoded to Python values, taking the smallest
term of each class. Skipped: function-table rows (`dtype`, `lower`, ...), unextractable helper
constructors, subsumed nodes, and ops the backend cannot run (the conditional HLIR cleanup of the
Rust original: an op disappears only from the choice, and a class left without any runnable node
makes its users unrunnable in turn). A chosen set can be cyclic even when every choice is legal;
`repair` switches classes on a cycle to their grounded node (one whose children were all
runnable before it in the bottom-up pass), which always yields a DAG.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from luminal.dtype import DType
from luminal.egraph.llir import LLIRGraph, LNode
from luminal.egraph.registry import SCALAR_SORTS, OpRegistry, decode_dtype, decode_scalar
from luminal.errors import CompileError
from luminal.hlir import Input, Output
from luminal.hlir.fexpr import FLeaf, FNode
from luminal.shape.expr import from_egglog as expr_from_egglog

SEARCHABLE = ("IR", "OpKind", "IList", "FExpr", "FList")
EXPR_HEADS = frozenset({"MNum", "MVar", "MIter", "MAdd", "MMul", "MDiv", "MMod", "MMin", "MMax", "MCeilDiv",
                        "MLt", "MGte", "MAnd", "MOr"})  # fmt: skip
DTYPE_HEADS = frozenset(d.egglog for d in DType)
STRUCTURAL = frozenset({"ECons", "ENil", "OutputJoin", "Op", "ICons", "INil", "FIn", "FOp", "FWrap", "FCons", "FNil"})

Genome = list[int]  # per searchable class (dense index): position in that class's runnable nodes


@dataclass
class ENode:
    op: str
    children: tuple[int, ...]  # child class ids
    cls: int


class EGraphView:
    """Dense, filtered view of egglog's serialized JSON for one backend."""

    def __init__(self, data: dict, registry: OpRegistry, runnable: Collection[str]):
        self.registry = registry
        raw_nodes = data["nodes"]
        class_ids: dict[str, int] = {}
        self.class_sort: list[str] = []
        cdata = data.get("class_data", {})

        def cid(name: str) -> int:
            i = class_ids.get(name)
            if i is None:
                i = class_ids[name] = len(self.class_sort)
                self.class_sort.append(cdata.get(name, {}).get("type", name.split("-", 1)[0]))
            return i

        known = STRUCTURAL | EXPR_HEADS | DTYPE_HEADS | set(registry.specs)
        self.nodes: list[ENode] = []
        self.members: dict[int, list[int]] = {}
        self.dtype_of: dict[int, int] = {}  # IR class -> DType class (the `dtype` function table)
        self.prim: dict[int, str] = {}
        for n in raw_nodes.values():
            c = cid(n["eclass"])
            sort = self.class_sort[c]
            if sort in SCALAR_SORTS:
                if not n["children"]:  # a literal; rows of i64-valued functions (lower, upper) are skipped
                    self.prim[c] = n["op"]
                continue
            if n.get("subsumed"):
                continue
            kids = tuple(cid(raw_nodes[k]["eclass"]) for k in n["children"])
            if n["op"] == "dtype" and len(kids) == 1:
                self.dtype_of[kids[0]] = c
                continue
            if n["op"] not in known:
                continue  # function tables and unextractable helpers
            self.members.setdefault(c, []).append(len(self.nodes))
            self.nodes.append(ENode(n["op"], kids, c))
        roots = [cid(r) for r in data.get("root_eclasses", [])]
        if not roots:
            roots = [cid(k) for k, v in cdata.items() if v.get("let") == "$root"]
        if len(roots) != 1:
            raise CompileError(f"serialized e-graph has {len(roots)} root classes, expected one ($root)")
        self.root = roots[0]
        self._runnable = frozenset(runnable)
        self._ground()
        self._meta: dict[int, object] = {}

    # -- runnable nodes and grounded choices (one bottom-up pass) ---------------------------------------
    def _ok_op(self, n: ENode) -> bool:
        sort = self.class_sort[n.cls]
        if sort == "OpKind" or (sort == "IR" and n.op in self.registry.specs):
            return n.op in self._runnable
        return True

    def _ground(self) -> None:
        parents: dict[int, list[int]] = {}
        pending: list[int] = []
        ready: list[int] = []
        for i, n in enumerate(self.nodes):
            if not self._ok_op(n):
                pending.append(-1)
                continue
            kids = {c for c in n.children if c not in self.prim}
            pending.append(len(kids))
            for c in kids:
                parents.setdefault(c, []).append(i)
            if not kids:
                ready.append(i)
        self.rank: dict[int, int] = {}  # class -> order in which it became grounded
        self.grounded: dict[int, int] = {}  # class -> its grounded node
        alive_nodes: set[int] = set()
        q = list(ready)
        while q:
            i = q.pop()
            alive_nodes.add(i)
            c = self.nodes[i].cls
            if c in self.grounded:
                continue
            self.grounded[c] = i
            self.rank[c] = len(self.rank)
            for p in parents.get(c, ()):
                pending[p] -= 1
                if pending[p] == 0:
                    q.append(p)
        if self.root not in self.grounded:
            raise CompileError(
                "no runnable plan in the e-graph: some HLIR op has no implementation this backend can run "
                f"(backend ops: {sorted(self._runnable)})"
            )
        # searchable classes and their runnable members (node alive = every child class grounded)
        self.choices: dict[int, list[int]] = {}
        for c, ms in self.members.items():
            if self.class_sort[c] in SEARCHABLE and c in self.grounded:
                self.choices[c] = [m for m in ms if m in alive_nodes]
        self.classes = sorted(self.choices)
        self.index = {c: k for k, c in enumerate(self.classes)}

    # -- choice sets ---------------------------------------------------------------------------------
    def n_choice_sets(self, cap: int = 1 << 62) -> int:
        out = 1
        for c in self.classes:
            out *= len(self.choices[c])
            if out >= cap:
                return cap
        return out

    def grounded_genome(self) -> Genome:
        return [self.choices[c].index(self.grounded[c]) for c in self.classes]

    def random_genome(self, rng: random.Random) -> Genome:
        return [rng.randrange(len(self.choices[c])) for c in self.classes]

    def preferred_genome(self, prefer: Sequence[str]) -> Genome:
        """Per class, the node whose op (or OpKind) comes first in `prefer`, else the grounded one."""
        rank = {name: r for r, name in enumerate(prefer)}
        g = self.grounded_genome()
        weight = self._op_weights()
        for k, c in enumerate(self.classes):
            ranked = [(rank[op], weight(m), j) for j, m in enumerate(self.choices[c])
                      if (op := self._op_name(m)) in rank]  # fmt: skip
            if ranked:
                g[k] = min(ranked)[2]
        return g

    def _op_weights(self) -> Callable[[int], float]:
        """Ties among a class's equally preferred nodes go to the one with the fewest ops below it: per
        node, 1 for an op plus the least such count of each IR child class (a tree count, shared
        subterms counted again; a fixpoint over cycles). Two equal ops reading equal values differ in
        what computes those values: a copy left by a rule that fired before a bucket's bounds pinned
        a dim (the decode plan's attention output, session 7) costs a launch that the other avoids."""
        inf = float("inf")
        best = dict.fromkeys(self.members, inf)  # every class of the view: IR, lists, kinds, expressions

        def node(m: int) -> float:
            n = self.nodes[m]
            return (n.op == "Op") + sum(best.get(c, 0.0) for c in n.children)

        order = sorted(self.members, key=lambda c: self.rank.get(c, len(self.rank)))
        for _ in range(64):
            changed = False
            for c in order:
                w = min(node(m) for m in self.members[c])
                if w < best[c]:
                    best[c], changed = w, True
            if not changed:
                break
        return node

    def _op_name(self, m: int) -> str:
        n = self.nodes[m]
        if n.op == "Op":
            kinds = self.members.get(n.children[0], [])
            return self.nodes[kinds[0]].op if kinds else n.op
        return n.op

    def chosen(self, g: Genome, c: int) -> ENode:
        return self.nodes[self.choices[c][g[self.index[c]]]]

    def reachable(self, g: Genome) -> list[int]:
        """Searchable classes reachable from the root through the genome's choices."""
        seen = {self.root}
        stack = [self.root]
        while stack:
            c = stack.pop()
            for k in self.chosen(g, c).children:
                if k in self.index and k not in seen:
                    seen.add(k)
                    stack.append(k)
        return sorted(seen)

    def repair(self, g: Genome) -> Genome:
        """Make the chosen set acyclic (see module docstring); returns a repaired copy."""
        g = list(g)
        while True:
            cycle = self._find_cycle(g)
            if cycle is None:
                return g
            bad = [c for c in cycle if self.chosen(g, c) is not self.nodes[self.grounded[c]]]
            if not bad:
                raise CompileError("cycle of grounded choices in the e-graph (extractor invariant broken)")
            c = bad[0]
            g[self.index[c]] = self.choices[c].index(self.grounded[c])

    def _find_cycle(self, g: Genome) -> list[int] | None:
        state: dict[int, int] = {}  # 1 = on stack, 2 = done
        path: list[int] = []
        stack: list[tuple[int, int]] = [(self.root, 0)]
        state[self.root] = 1
        path.append(self.root)
        while stack:
            c, k = stack[-1]
            kids = [x for x in self.chosen(g, c).children if x in self.index]
            if k < len(kids):
                stack[-1] = (c, k + 1)
                x = kids[k]
                s = state.get(x)
                if s == 1:
                    return path[path.index(x) :]
                if s is None:
                    state[x] = 1
                    path.append(x)
                    stack.append((x, 0))
            else:
                stack.pop()
                path.pop()
                state[c] = 2
        return None

    # -- metadata decoding ---------------------------------------------------------------------------
    def value(self, c: int) -> object:
        """Python value of a metadata class: Expression, tuple of Expressions, DType or scalar."""
        if c in self._meta:
            return self._meta[c]
        sort = self.class_sort[c]
        if sort in SCALAR_SORTS:
            v = decode_scalar(sort, self.prim[c])
        else:
            n = self.nodes[self._smallest(c)]
            if sort == "Expression":
                v = expr_from_egglog(n.op, [self.value(k) for k in n.children])
            elif sort == "EList":
                v = () if n.op == "ENil" else (self.value(n.children[0]), *self.value(n.children[1]))  # type: ignore[misc]
            elif sort == "DType":
                v = decode_dtype(n.op)
            else:
                raise CompileError(f"cannot decode a value of sort {sort}")
        self._meta[c] = v
        return v

    def _smallest(self, c: int) -> int:
        if not hasattr(self, "_best"):
            self._best = self._smallest_terms()
        b = self._best.get(c)
        if b is None:
            raise CompileError(f"e-class {c} ({self.class_sort[c]}) has no finite term")
        return b

    def _smallest_terms(self) -> dict[int, int]:
        meta = ("Expression", "EList", "DType")
        parents: dict[int, list[int]] = {}
        pending: dict[int, int] = {}
        heap: list[tuple[int, int]] = []
        for i, n in enumerate(self.nodes):
            if self.class_sort[n.cls] not in meta:
                continue
            kids = {k for k in n.children if k not in self.prim}
            pending[i] = len(kids)
            for k in kids:
                parents.setdefault(k, []).append(i)
            if not kids:
                heapq.heappush(heap, (_weight(n) + len(n.children), i))
        size: dict[int, int] = {}
        best: dict[int, int] = {}
        while heap:
            s, i = heapq.heappop(heap)
            c = self.nodes[i].cls
            if c in best:
                continue
            best[c], size[c] = i, s
            for p in parents.get(c, ()):
                pending[p] -= 1
                if pending[p] == 0:
                    pn = self.nodes[p]
                    heapq.heappush(heap, (_weight(pn) + sum(size.get(k, 1) for k in pn.children), p))
        return best

    # -- genome -> LLIR ------------------------------------------------------------------------------
    def extract(self, g: Genome) -> LLIRGraph:
        """The LLIR graph of an (acyclic) genome, validated."""
        nodes: list[LNode] = []
        built: dict[int, int] = {}
        outputs: dict[str, int] = {}
        order = self._postorder(g)
        for c in order:
            n = self.chosen(g, c)
            if n.op == "OutputJoin" or self.class_sort[c] != "IR":
                continue
            if n.op == "Op":
                kind = self.chosen(g, n.children[0])
                spec = self.registry.spec(kind.op)
                leaves: dict[int, int] = {}  # IR class read by a fused body -> its input position
                vals = [self._field(g, k, leaves, {}) for k in kind.children]
                ins = [built[x] for x in (*self._ilist(g, n.children[1]), *leaves)]
            else:
                spec = self.registry.spec(n.op)
                ins = [built[x] for x in n.children[: spec.n_inputs]]
                vals = [self.value(k) for k in n.children[spec.n_inputs :]]
            op = spec.build(vals)
            in_dt = tuple(nodes[i].dtype for i in ins)
            dt = op.dtype if isinstance(op, Input) else op.out_dtype(in_dt)
            dc = self.dtype_of.get(c)
            if dc is not None and self.value(dc) is not dt:
                raise CompileError(f"dtype mismatch at {spec.name}: egglog says {self.value(dc)}, the op gives {dt}")
            built[c] = len(nodes)
            nodes.append(LNode(op, tuple(ins), dt))
            if isinstance(op, Output):
                if op.label in outputs:
                    raise CompileError(f"output {op.label!r} extracted twice")
                outputs[op.label] = built[c]
        llir = LLIRGraph(nodes, outputs)
        llir.validate()
        return llir

    def _field(self, g: Genome, c: int, leaves: dict[int, int], memo: dict[int, object]) -> object:
        """One field of a chosen op kind: metadata decodes by value; an inline op (sort OpKind),
        argument list (FList) or fused expression (FExpr, luminal/hlir/fexpr.py) follows the
        genome. A body's leaves become the op's inputs, after its IList inputs, numbered by first use."""
        sort = self.class_sort[c]
        if sort == "OpKind":
            kind = self.chosen(g, c)
            return self.registry.spec(kind.op).build([self._field(g, k, leaves, memo) for k in kind.children])
        if sort == "FList":
            out = []
            n = self.chosen(g, c)
            while n.op == "FCons":
                out.append(self._field(g, n.children[0], leaves, memo))
                n = self.chosen(g, n.children[1])
            return tuple(out)
        if sort != "FExpr":
            return self.value(c)
        if c not in memo:
            n = self.chosen(g, c)
            if n.op == "FIn":
                memo[c] = FLeaf(leaves.setdefault(n.children[0], len(leaves)))
            elif n.op == "FOp":
                memo[c] = FNode(
                    self._field(g, n.children[0], leaves, memo), self._field(g, n.children[1], leaves, memo)
                )
            else:  # FWrap
                memo[c] = self._field(g, n.children[0], leaves, memo)
        return memo[c]

    def _ilist(self, g: Genome, c: int) -> list[int]:
        out = []
        n = self.chosen(g, c)
        while n.op == "ICons":
            out.append(n.children[0])
            n = self.chosen(g, n.children[1])
        return out

    def _postorder(self, g: Genome) -> list[int]:
        """Searchable classes in dependency order (inputs in input order), from the root."""
        order: list[int] = []
        done: set[int] = set()
        stack: list[tuple[int, bool]] = [(self.root, False)]
        while stack:
            c, expanded = stack.pop()
            if c in done:
                continue
            if expanded:
                done.add(c)
                order.append(c)
                continue
            stack.append((c, True))
            kids = [k for k in self.chosen(g, c).children if k in self.index]
            for k in reversed(kids):
                if k not in done:
                    stack.append((k, False))
        return order

    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    @property
    def n_classes(self) -> int:
        return len(self.members)


def _weight(n: ENode) -> int:
    """Size of one metadata node when choosing a class's smallest term: a dim symbol costs more than
    a literal, so a dim that bucket bounds pinned to a value decodes as that value."""
    return 2 if n.op == "MVar" else 1
