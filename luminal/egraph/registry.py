"""Op registry: each op class's egglog sort, its rules, and how it is rebuilt from a chosen e-node.

An op (HLIR primitive or backend LLIR op) is a frozen dataclass (luminal/hlir/op.py): the class
name is the egglog constructor, the dataclass fields in order are its arguments, `Op.field_sorts()`
gives their sorts. OpKind ops are wrapped as `(Op (Kind fields..) (ICons in0 (ICons in1 (INil))))`;
IR ops (Input, Output) take their input IR terms first, then their fields.

Rules live with the op: a `RULES` tuple of egglog text on the class, and/or an `.egg` file with the
same stem as the op's module, beside it (luminal/backends/reference/matmul.py -> matmul.egg).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from luminal.dtype import DType
from luminal.dtype import from_egglog as dtype_from_egglog
from luminal.errors import CompileError
from luminal.hlir.op import Op
from luminal.shape.expr import Expression

SCALAR_SORTS = ("i64", "String", "f64", "bool")


@dataclass(frozen=True)
class OpSpec:
    """What the egglog layer knows about one op class."""

    cls: type[Op]
    name: str
    sort_class: str  # "IR" | "OpKind"
    fields: tuple[tuple[str, str], ...]  # (field name, egglog sort)
    n_inputs: int

    @property
    def variant(self) -> str:
        """This op's constructor line inside `(datatype* ...)`."""
        ins = ("IR",) * self.n_inputs if self.sort_class == "IR" else ()
        args = " ".join((*ins, *(s for _, s in self.fields)))
        return f"({self.name}{' ' + args if args else ''})"

    def build(self, values: Sequence[object]) -> Op:
        """The op whose decoded field values are `values` (egglog argument order)."""
        kw = {f: _coerce(s, v) for (f, s), v in zip(self.fields, values, strict=True)}
        try:
            hook = getattr(self.cls, "from_fields", None)  # an op may rebuild itself (e.g. derived fields)
            return hook(**kw) if hook is not None else self.cls(**kw)
        except Exception as e:  # noqa: BLE001 - a malformed e-node is a compiler bug; say which op
            raise CompileError(f"cannot rebuild {self.name} from e-node fields {kw}: {e}") from e


def _coerce(sort: str, v: object) -> object:
    if sort == "EList":
        return tuple(v)  # type: ignore[arg-type]
    return v


class OpRegistry:
    """The ops of one compile: HLIR ops plus the backend's LLIR ops, by egglog constructor name."""

    def __init__(self, ops: Iterable[type[Op]]):
        self.specs: dict[str, OpSpec] = {}
        for cls in ops:
            name = cls.__name__
            if name in self.specs:
                if self.specs[name].cls is not cls:
                    raise CompileError(f"two op classes share the egglog constructor name {name!r}")
                continue
            if not dataclasses.is_dataclass(cls):
                raise CompileError(f"op {name} must be a frozen dataclass (its fields are its egglog sort)")
            n_in = cls.n_inputs if isinstance(cls.n_inputs, int) else 0  # a fused op counts its body's leaves
            self.specs[name] = OpSpec(cls, name, cls.sort_class, tuple(cls.field_sorts()), n_in)

    def __contains__(self, name: str) -> bool:
        return name in self.specs

    def spec(self, name: str) -> OpSpec:
        return self.specs[name]

    def datatypes(self) -> str:
        """The IR / OpKind / IList / FExpr / FList sorts (mutually recursive), built from every
        registered op. FExpr is a value computed inside a fused op (luminal/hlir/fexpr.py): a leaf
        `(FIn ir)` reads a buffer, `(FOp kind args)` computes an op inline, `(FWrap f)` aliases `f`.
        Two helper constructors name FExpr classes for the fusion rules and are never extracted:
        `(FArg ir strides)`, the ways a consumer reading `ir` through `strides` can obtain it, and
        `(FRow ir)`, the ways to obtain `ir` where its position is constant along the consumer's
        innermost axis (so a reduction can be computed once per row)."""
        ir = ["(OutputJoin IR IR)", "(Op OpKind IList)"]
        ir += [s.variant for s in self.specs.values() if s.sort_class == "IR"]
        kinds = [s.variant for s in self.specs.values() if s.sort_class == "OpKind"]
        lines = ["(datatype*", "  (IR " + " ".join(ir) + ")", "  (OpKind " + " ".join(kinds) + ")",
                 "  (IList (ICons IR IList) (INil))", "  (FExpr (FIn IR) (FOp OpKind FList) (FWrap FExpr))",
                 "  (FList (FCons FExpr FList) (FNil)))", "(function dtype (IR) DType :no-merge)",
                 "(constructor FArg (IR EList) FExpr :unextractable)",
                 "(constructor FRow (IR) FExpr :unextractable)"]  # fmt: skip
        return "\n".join(lines)

    def rule_sources(self) -> list[tuple[str, str]]:
        """(origin, text) of every op's rules, each module's .egg file once, in registration order."""
        out: list[tuple[str, str]] = []
        seen: set[str] = set()
        seen_rules: set[int] = set()
        for s in self.specs.values():
            path = rules_file(s.cls)
            if path is not None and str(path) not in seen:
                seen.add(str(path))
                out.append((str(path), _read(path)))
            rules = getattr(s.cls, "RULES", ())
            if rules and id(rules) not in seen_rules:  # inherited RULES count once
                seen_rules.add(id(rules))
                out += [(f"{s.name}.RULES[{i}]", text) for i, text in enumerate(rules)]
        return out


def rules_file(cls: type) -> Path | None:
    """The `.egg` file with the same stem as the module defining `cls`, if there is one."""
    mod = sys.modules.get(cls.__module__)
    f = getattr(mod, "__file__", None)
    if not f:
        return None
    p = Path(f).with_suffix(".egg")
    return p if p.exists() else None


@cache
def _read(path: Path) -> str:
    return path.read_text()


# -- field values -> egglog text ----------------------------------------------------------------------
def encode_field(sort: str, v: object, elist: dict[tuple, str] | None = None) -> str:
    """The egglog term of one field value. `elist` maps already-bound lists to their global let."""
    if sort == "EList":
        t = tuple(v)  # type: ignore[arg-type]
        if elist is not None and t in elist:
            return elist[t]
        return elist_term(t)
    if sort == "Expression":
        return v.to_egglog()  # type: ignore[union-attr]
    if sort == "DType":
        return f"({v.egglog})"  # type: ignore[union-attr]
    if sort == "i64":
        return str(int(v))  # type: ignore[call-overload]
    if sort == "String":
        return string_literal(str(v))
    if sort == "f64":
        return float_literal(float(v))  # type: ignore[arg-type]
    if sort == "bool":
        return "true" if v else "false"
    raise CompileError(f"no egglog encoding for sort {sort!r}")


def elist_term(items: Sequence[Expression]) -> str:
    out = "(ENil)"
    for e in reversed(items):
        out = f"(ECons {e.to_egglog()} {out})"
    return out


def string_literal(s: str) -> str:
    if any(c in s for c in '"\\\n\r\t') or not s.isprintable():
        raise CompileError(f"label {s!r} contains quotes, backslashes or control characters; rename it")
    return f'"{s}"'


# egglog has no literal for inf / NaN but evaluates f64 arithmetic in actions; -0.0 and 0.0 are one
# value there (OrderedFloat), so the serializer spells a negative zero constant as 0.0 * -1.0.
_INF = "(* 1e308 10.0)"
_SPECIAL = {"inf": _INF, "-inf": "(* -1e308 10.0)", "nan": f"(- {_INF} {_INF})"}


def float_literal(x: float) -> str:
    """Exact egglog f64 text: `repr` is the shortest string that parses back to the same double."""
    if math.isnan(x):
        return _SPECIAL["nan"]
    if math.isinf(x):
        return _SPECIAL["inf" if x > 0 else "-inf"]
    if x == 0.0 and math.copysign(1.0, x) < 0:
        raise CompileError("-0.0 has no egglog f64 value (it equals 0.0 there); the serializer must spell it")
    r = repr(x)
    return r if any(c in r for c in ".e") else r + ".0"


# -- egglog text of a decoded primitive ------------------------------------------------------------
def decode_scalar(sort: str, text: str) -> object:
    if sort == "i64":
        return int(text)
    if sort == "String":
        return text[1:-1]
    if sort == "f64":
        return float(text)  # egglog prints inf, -inf, NaN and shortest round-trip digits
    if sort == "bool":
        return text == "true"
    raise CompileError(f"not a scalar sort: {sort!r}")


def decode_dtype(name: str) -> DType:
    return dtype_from_egglog(name)
