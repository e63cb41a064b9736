"""Symbolic expressions: construction-time folding never changes a value (property test against the
same tree built unfolded with `raw`), substitution, vectorized evaluation, egglog and C printing."""

from __future__ import annotations

import random
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from luminal.errors import InputError, ShapeError
from luminal.shape import expr as E
from luminal.shape.expr import Expression, ceil_div, fold, maximum, minimum, num, raw, var, z

OPS = ("add", "sub", "mul", "div", "mod", "min", "max", "cdiv", "lt", "ge", "and", "or")
VARS = ("a", "b", "z")

leaves = st.one_of(st.integers(-6, 12).map(lambda n: ("num", n)), st.sampled_from(VARS).map(lambda v: ("var", v)))
trees = st.recursive(leaves, lambda kids: st.tuples(st.sampled_from(OPS), kids, kids), max_leaves=10)

FOLDED = {
    "add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y, "div": lambda x, y: x // y,
    "mod": lambda x, y: x % y, "min": minimum, "max": maximum, "cdiv": ceil_div, "lt": E.lt, "ge": E.ge,
    "and": lambda x, y: x & y, "or": lambda x, y: x | y,
}  # fmt: skip


def build_folded(t) -> Expression:
    if t[0] == "num":
        return num(t[1])
    if t[0] == "var":
        return var(t[1])
    return FOLDED[t[0]](E.expr(build_folded(t[1])), build_folded(t[2]))


def build_raw(t) -> Expression:
    if t[0] == "num":
        return raw("num", t[1])
    if t[0] == "var":
        return raw("var", t[1])
    a, b = build_raw(t[1]), build_raw(t[2])
    if t[0] == "sub":
        return raw("add", a, raw("mul", raw("num", -1), b))
    return raw(t[0], a, b)


def try_folded(t) -> Expression | None:
    """The folded tree (None if folding raises)."""
    try:
        return build_folded(t)
    except ShapeError:
        return None


def value(e: Expression, env: dict) -> int | None:
    """Scalar evaluation, None where a division by zero makes it undefined."""
    try:
        return int(e.evaluate(env))
    except ShapeError:
        return None


envs = st.fixed_dictionaries({"a": st.integers(0, 20), "b": st.integers(0, 20), "z": st.integers(0, 30)})


@given(t=trees, env=envs)
def test_folding_preserves_value(t, env):
    """For non-negative variables (dims and z are), folding never changes the value."""
    r = build_raw(t)
    want = value(r, env)
    assume(want is not None)
    try:
        f = build_folded(t)
    except ShapeError:
        raise AssertionError(f"folding raised on {r}, which evaluates to {want} at {env}") from None
    assert value(f, env) == want, f"raw {r} = {want}, folded {f} = {value(f, env)} at {env}"
    assert value(fold(r), env) == want, f"fold({r}) = {fold(r)}"


@given(t=trees, a=st.integers(0, 20), b=st.integers(0, 20))
def test_vectorized_z_matches_scalar(t, a, b):
    f = try_folded(t)
    assume(f is not None)
    zs = np.arange(25, dtype=np.int64)
    with np.errstate(all="ignore"):
        try:
            vec = np.broadcast_to(np.asarray(f.evaluate({"a": a, "b": b, "z": zs})), zs.shape)
        except ShapeError:
            vec = None
    for k in range(25):
        want = value(f, {"a": a, "b": b, "z": k})
        if want is not None:
            assert vec is not None and int(vec[k]) == want, f"{f} at z={k}: vector {vec}, scalar {want}"


@given(t=trees, s=trees, env=envs)
def test_substitute(t, s, env):
    """e.substitute(a, s) evaluates like e with a := value of s (when that is non-negative)."""
    f, g = try_folded(t), try_folded(s)
    assume(f is not None and g is not None)
    gv = value(g, env)
    assume(gv is not None and gv >= 0)
    want = value(f, {**env, "a": gv})
    assume(want is not None)
    got = value(f.substitute("a", g), env)
    assert got == want, f"({f})[a := {g}] = {f.substitute('a', g)}: {got} != {want}"


def test_folds_to_normal_form():
    s, n = var("s"), var("n")
    assert s + 0 is s and s * 1 is s and (s * 0) is num(0) and (s - s) is num(0)
    assert s + s is s * 2 and (s + 3) + 4 is s + 7 and num(3) + num(4) is num(7)
    assert (z // 4) * 4 + z % 4 is z  # merge-dims identity
    assert (z // n) * n + z % n is z
    assert (s * 6) // 3 is s * 2 and (s * n * 6) // s is n * 6
    assert (z % 8) % 4 is z % 4 and (z // 2) // 3 is z // 6
    assert minimum(s, E.INF) is s and maximum(s, 0) is s and ceil_div(7, 2) is num(4) and ceil_div(-7, 2) is num(-3)
    assert s + 1 is 1 + s and hash(s * n) == hash(n * s)


def test_truncating_semantics():
    assert (num(-7) // 2).value == -3 and (num(-7) % 2).value == -1 and (num(7) % -2).value == 1
    x = var("x")
    assert (x // 2).evaluate({"x": -7}) == -3 and (x % 2).evaluate({"x": -7}) == -1
    assert ceil_div(x, 2).evaluate({"x": -7}) == -3 and ceil_div(x, 2).evaluate({"x": 7}) == 4


def test_errors():
    with pytest.raises(InputError, match="no value for dim 'seq'"):
        (var("seq") + 1).evaluate({"s": 3})
    # a literal zero divisor folds to 0: it only arises indexing an empty view (module docstring)
    assert var("s") // 0 is num(0) and z % 0 is num(0) and ceil_div(var("s"), 0) is num(0)
    with pytest.raises(ShapeError, match="bad dim symbol"):
        var("1x")
    with pytest.raises(ShapeError, match="reserved"):
        E.dim("z")
    with pytest.raises(TypeError, match="truth value"):
        bool(var("s") + 1)
    with pytest.raises(ShapeError, match="symbolic"):
        _ = (var("s") + 1).value


def test_zero_divisor_semantics():
    """A zero divisor only arises indexing an empty view (module docstring): a literal one folds to 0
    (size-0 dims never raise while the graph is built), a symbolic one that is 0 for a run raises in
    a scalar evaluation (a size or a launch grid: a real error there) and is silent in a vectorized
    one (an index grid, empty whenever its divisor is 0)."""
    s, t = var("s"), var("t")
    for e in (s // 0, z % 0, ceil_div(s, 0), (s + 3) // 0, (z * 4 + s) % 0, num(7) // 0, num(-7) % 0):
        assert e is num(0), e
    assert (s * 0 + t) // (s - s) is num(0)  # a divisor that folds to 0 on the way
    for e in (s // t, s % t, ceil_div(s, t)):
        with pytest.raises(ShapeError, match="division by zero while evaluating a shape expression"):
            e.evaluate({"s": 5, "t": 0})
        assert e.evaluate({"s": 5, "t": 2}) == {"div": 2, "mod": 1, "cdiv": 3}[e.op]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning either
        for e in (z // t, z % t, ceil_div(z, t), (z // t) * t + z % t):
            assert e.evaluate({"t": 0, "z": np.arange(0, dtype=np.int64)}).shape == (0,)
            assert e.evaluate({"t": 0, "z": np.arange(5, dtype=np.int64)}).shape == (5,)
            np.testing.assert_array_equal(
                e.evaluate({"t": 3, "z": np.arange(7)}), [value(e, {"t": 3, "z": k}) for k in range(7)]
            )


# -- egglog printing ------------------------------------------------------------------------------
def _sexpr(text: str):
    toks = text.replace("(", " ( ").replace(")", " ) ").split()
    pos = 0

    def go():
        nonlocal pos
        t = toks[pos]
        pos += 1
        if t != "(":
            return t[1:-1] if t.startswith('"') else int(t)
        head, args = toks[pos], []
        pos += 1
        while toks[pos] != ")":
            args.append(go())
        pos += 1
        return E.from_egglog(head, args)

    out = go()
    assert pos == len(toks)
    return out


@given(t=trees, env=envs)
def test_egglog_round_trip(t, env):
    f = try_folded(t)
    assume(f is not None)
    text = f.to_egglog()
    assert '"z"' not in text  # the index variable prints as (MIter)
    back = _sexpr(text)
    assert value(back, env) == value(f, env), f"{f} -> {text} -> {back}"


def test_egglog_text_parses_in_egglog():
    eb = pytest.importorskip("egglog.bindings")
    sort = ("(datatype Expression (MNum i64) (MVar String) (MIter) (MAdd Expression Expression) "
            "(MSub Expression Expression) (MMul Expression Expression) (MDiv Expression Expression) "
            "(MMod Expression Expression) (MMin Expression Expression) (MMax Expression Expression) "
            "(MCeilDiv Expression Expression) (MLt Expression Expression) (MGte Expression Expression) "
            "(MAnd Expression Expression) (MOr Expression Expression))")  # fmt: skip
    rng = random.Random(0)
    es = [e for e in (try_folded(_random_tree(rng, 4)) for _ in range(80)) if e is not None]
    lets = [f"(let e{i} {e.to_egglog()})" for i, e in enumerate(es)]
    eg = eb.EGraph()
    eg.run_program(*eg.parse_program(sort + "\n" + "\n".join(lets)))


# -- C printing -----------------------------------------------------------------------------------
def _random_tree(rng: random.Random, depth: int):
    if depth == 0 or rng.random() < 0.25:
        return ("num", rng.randint(-6, 12)) if rng.random() < 0.4 else ("var", rng.choice(VARS))
    return (rng.choice(OPS), _random_tree(rng, depth - 1), _random_tree(rng, depth - 1))


def test_c_printing_compiles_and_agrees():
    """300 random expressions printed to C, compiled with gcc, evaluated at 20 points each."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    rng = random.Random(1234)
    exprs, points = [], [{"a": rng.randint(0, 20), "b": rng.randint(0, 20), "z": rng.randint(0, 30)} for _ in range(20)]
    while len(exprs) < 300:
        e = try_folded(_random_tree(rng, 4))
        if e is None:
            continue
        vals = [value(e, p) for p in points]
        if all(v is not None for v in vals):
            exprs.append((e, vals))
    name = {"a": "const_a", "b": "const_b", "z": "const_z"}.__getitem__
    body = "\n".join(f'    printf("%lld\\n", (long long)({e.to_c(name)}));' for e, _ in exprs)
    src = f"""#include <stdio.h>
#include <stdlib.h>
static long long min(long long x, long long y) {{ return x < y ? x : y; }}
static long long max(long long x, long long y) {{ return x > y ? x : y; }}
int main(int argc, char **argv) {{
    long long const_a = atoll(argv[1]), const_b = atoll(argv[2]), const_z = atoll(argv[3]);
{body}
    return 0;
}}
"""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        with open(f"{d}/e.c", "w") as f:
            f.write(src)
        subprocess.run([cc, "-O0", "-w", "-o", f"{d}/e", f"{d}/e.c"], check=True, capture_output=True)
        for k, p in enumerate(points):
            out = subprocess.run([f"{d}/e", str(p["a"]), str(p["b"]), str(p["z"])], check=True, capture_output=True,
                                 text=True).stdout.split()  # fmt: skip
            for (e, vals), got in zip(exprs, out, strict=True):
                assert int(got) == vals[k], f"C of {e} = {e.to_c(name)} gives {got}, Python {vals[k]} at {p}"
