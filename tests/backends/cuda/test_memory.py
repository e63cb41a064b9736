"""Arena planner properties: live buffers never overlap, dead space is reused, offsets are aligned
and deterministic, and lifetimes follow the node order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from luminal.backends.cuda.memory import ALIGN, Buffer, lifetimes, plan

buffers = st.lists(
    st.tuples(st.integers(0, 5000), st.integers(0, 40), st.integers(0, 10)).map(lambda t: (t[0], t[1], t[1] + t[2])),
    min_size=1,
    max_size=40,
)


@given(buffers)
def test_live_buffers_never_overlap(specs):
    bufs = [Buffer(k, size, a, b) for k, (size, a, b) in enumerate(specs)]
    p = plan(bufs)
    for x in bufs:
        off = p.offsets[x.key]
        assert off % ALIGN == 0 and p.sizes[x.key] >= x.size and off + p.sizes[x.key] <= p.total
        for y in bufs:
            if x.key < y.key and x.size and y.size and x.start <= y.end and y.start <= x.end:
                oy = p.offsets[y.key]
                assert off + x.size <= oy or oy + y.size <= off, f"{x} and {y} overlap"
    assert p.total <= sum(-(-b.size // ALIGN) * ALIGN for b in bufs)
    assert plan(bufs) == p  # deterministic: same sizes, same offsets (stable pointers)


@given(st.integers(2, 30), st.integers(1, 10_000))
def test_a_chain_reuses_dead_buffers(n, size):
    # node i reads node i-1 only: at most two buffers are live at once
    life = lifetimes([[]] + [[i - 1] for i in range(1, n)])
    p = plan([Buffer(i, size, a, b) for i, (a, b) in enumerate(life)])
    assert p.total == 2 * (-(-size // ALIGN) * ALIGN)


def test_lifetimes_and_kept_outputs():
    life = lifetimes([[], [0], [0, 1], [2]], keep=[1])
    assert life == [(0, 2), (1, 4), (2, 3), (3, 3)]


def test_fits_and_growth():
    p = plan([Buffer("a", 1000, 0, 1), Buffer("b", 10, 1, 2)])
    assert p.fits({"a": 1024, "b": 256}) and not p.fits({"a": 1025}) and not p.fits({"c": 1})
