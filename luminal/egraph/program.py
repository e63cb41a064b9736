"""Program assembly: egglog text for one compile = prelude (sorts, rules) + the HLIR graph as lets.

Prelude order: ruleset declarations (core + backend), base.egg (Expression / EList / DType),
the IR / OpKind / IList sorts generated from the registered ops, expr.egg, interval.egg,
cleanup.egg, then every op's rules. The graph follows as `$`-prefixed global lets in the graph's
topological (creation) order, only the nodes an output depends on, numbered densely so equal
graphs give equal text: `$eN` for expression lists, `$tN` for IR nodes, then `$root`, the
OutputJoin of all outputs. Shapes are computed in Python and passed in: each node's dtype is a
`dtype` fact and each shape list gets its `RowMajor` strides.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from luminal.dtype import DType
from luminal.egraph.registry import OpRegistry, encode_field
from luminal.egraph.rulesets import CORE_RULESETS, Phase, check_rulesets
from luminal.errors import CompileError
from luminal.graph import Graph
from luminal.hlir import Constant, Mul
from luminal.shape.expr import dim, expr
from luminal.shape.tracker import contiguous_strides

HERE = Path(__file__).parent
BASE_FILES = ("base.egg",)
CORE_RULE_FILES = ("expr.egg", "interval.egg", "cleanup.egg", "state.egg")
CHUNK = 2000  # commands per parse_program call


@cache
def _core(name: str) -> str:
    return (HERE / name).read_text()


def prelude(registry: OpRegistry, backend_rulesets: Sequence[str], phases: Sequence[Phase]) -> str:
    """Everything before the graph; validated so every `:ruleset` names a declared ruleset."""
    declared = (*CORE_RULESETS, *[r for r in backend_rulesets if r not in CORE_RULESETS])
    sources = [(f"luminal/egraph/{f}", _core(f)) for f in CORE_RULE_FILES] + registry.rule_sources()
    check_rulesets(declared, sources, phases)
    parts = ["\n".join(f"(ruleset {r})" for r in declared)]
    parts += [_core(f) for f in BASE_FILES]
    parts.append(registry.datatypes())
    parts += [f"; ---- {origin}\n{text}" for origin, text in sources]
    return "\n".join(parts) + "\n"


@dataclass(frozen=True)
class GraphProgram:
    commands: tuple[str, ...]  # one egglog command each
    node_of: dict[int, str]  # HLIR node id -> its let name
    n_nodes: int  # HLIR nodes serialized (the live ones)

    @property
    def text(self) -> str:
        return "\n".join(self.commands) + "\n"

    def chunks(self, size: int = CHUNK) -> list[str]:
        c = self.commands
        return ["\n".join(c[i : i + size]) + "\n" for i in range(0, len(c), size)]


def live_nodes(graph: Graph) -> list[int]:
    """Node ids some output depends on, in topological order."""
    live: set[int] = set()
    stack = list(graph.outputs.values())
    while stack:
        n = stack.pop()
        if n in live:
            continue
        live.add(n)
        stack.extend(graph.nodes[n].inputs)
    return sorted(live)


def _is_shape_field(name: str) -> bool:
    return name == "shape" or name.endswith("_shape")


def serialize_graph(
    graph: Graph, registry: OpRegistry, bounds: Mapping[str, tuple[int, int]] | None = None
) -> GraphProgram:
    """The graph as egglog commands (see module docstring); `bounds` become lower/upper facts."""
    return with_bounds(_serialize(graph, registry), bounds)


def _serialize(graph: Graph, registry: OpRegistry) -> GraphProgram:
    if not graph.outputs:
        raise CompileError("the graph has no outputs: mark at least one tensor with .output(name)")
    cmds: list[str] = []
    elists: dict[tuple, str] = {}
    row_major: list[tuple[str, str]] = []

    def bind_list(items: tuple) -> str:
        name = elists.get(items)
        if name is None:
            name = f"$e{len(elists)}"
            cmds.append(f"(let {name} {encode_field('EList', items, elists)})")
            elists[items] = name
        return name

    names: dict[int, str] = {}
    for i in live_nodes(graph):
        node = graph.nodes[i]
        op = node.op
        if type(op).__name__ not in registry:
            raise CompileError(f"op {type(op).__name__} is not registered with the egglog layer")
        spec = registry.spec(type(op).__name__)
        if isinstance(op, Constant) and op.value == 0.0 and math.copysign(1.0, op.value) < 0:
            term = _negative_zero(op.dtype)  # no -0.0 in egglog: 0.0 * -1.0 is exactly -0.0 in IEEE
        else:
            args = []
            for (fname, sort), v in zip(spec.fields, op.fields(), strict=True):
                if sort == "EList":
                    lst = bind_list(tuple(v))
                    if _is_shape_field(fname):
                        row_major.append((lst, bind_list(contiguous_strides(tuple(v)))))
                    args.append(lst)
                else:
                    args.append(encode_field(sort, v))
            ins = [names[s] for s in node.inputs]
            if len(ins) != spec.n_inputs:
                raise CompileError(f"node {i} ({spec.name}) has {len(ins)} inputs, the op takes {spec.n_inputs}")
            term = _term(spec.name, spec.sort_class, args, ins)
        name = f"$t{len(names)}"
        names[i] = name
        cmds.append(f"(let {name} {term})")
        cmds.append(f"(set (dtype {name}) ({node.dtype.egglog}))")
    for lst, strides in dict.fromkeys(row_major):
        cmds.append(f"(union (RowMajor {lst}) {strides})")
    cmds += state_facts(graph, names)
    outs = [names[o] for o in graph.outputs.values()]
    root = outs[-1]
    for o in reversed(outs[:-1]):
        root = f"(OutputJoin {o} {root})"
    cmds.append(f"(let $root {root})")
    return GraphProgram(tuple(cmds), names, len(names))


def with_bounds(base: GraphProgram, bounds: Mapping[str, tuple[int, int]] | None) -> GraphProgram:
    """`base` (a graph serialized without bounds) with the lower/upper facts of `bounds` appended: the
    program of every bucket from one serialization (the compiler keys and saturates each bucket's)."""
    body = base.text
    facts: list[str] = []
    for d, (lo, hi) in sorted((bounds or {}).items()):
        e = dim(d).to_egglog()
        if e not in body:
            continue  # a dim this graph never mentions (a rolled region): no fact, same text in every bucket
        facts.append(f"(set (lower {e}) {int(lo)})")
        facts.append(f"(set (upper {e}) {int(hi)})")
    return GraphProgram((*base.commands, *facts), base.node_of, base.n_nodes)


def state_facts(graph: Graph, names: Mapping[int, str]) -> list[str]:
    """`(InPlaceState $tN)` for every persistent input that exactly one live node reads, in one
    input slot (luminal/egraph/state.egg): the fact the `buffer_reuse` rules need to update it in place;
    and its `state-rank`, its position among them in label order."""
    reads: dict[int, int] = {}
    for i in names:
        for s in graph.nodes[i].inputs:
            reads[s] = reads.get(s, 0) + 1
    out = []
    for label in sorted(graph.persistent):
        i = graph.inputs[label]
        if i in names and reads.get(i, 0) == 1:
            out.append(f"(InPlaceState {names[i]})")
            out.append(f"(set (state-rank {names[i]}) {len(out) // 2})")
    return out


def _term(name: str, sort_class: str, args: list[str], ins: list[str]) -> str:
    if sort_class == "IR":
        return f"({' '.join([name, *ins, *args])})"
    kind = f"({name}{' ' + ' '.join(args) if args else ''})"
    lst = "(INil)"
    for s in reversed(ins):
        lst = f"(ICons {s} {lst})"
    return f"(Op {kind} {lst})"


def _negative_zero(dt: DType) -> str:
    one = f"(ECons {expr(1).to_egglog()} (ENil))"
    zero = f"(ECons {expr(0).to_egglog()} (ENil))"
    zero_c = f"(Op (Constant 0.0 ({dt.egglog}) 0) (INil))"
    neg1 = f"(Op (Constant -1.0 ({dt.egglog}) 0) (INil))"
    return f"(Op ({Mul.__name__} {one} {zero} {zero}) (ICons {zero_c} (ICons {neg1} (INil))))"
