"""The tensor-core prefill kernel's tilings (kernels/attention_prefill.py, attention_decode.PrefillSchedule):
how a schedule resolves for an op (GQA packing, m-tiles, shared memory, grid), that every schedule the
bench sweeps computes attention on the CPU (g++ emulation of the fragment maps, attention_emu.py) over
odd sizes, masks, dtypes and head dims, with grids pinned at bucket bounds, and that ptxas fits them in
255 registers. GPU runs of every schedule: test_attention_kernels.py::test_prefill_schedules_on_the_gpu."""

from __future__ import annotations

import pytest

from luminal.backends.cuda import nvrtc
from luminal.backends.cuda.kernel import source
from luminal.backends.cuda.kernels import attention_prefill as pre
from luminal.backends.cuda.kernels.attention_decode import PREFILL_SCHEDULES, DecodeVariant, PrefillSchedule
from luminal.dtype import DType
from tests.backends.cuda.test_attention_kernels import (
    SLOTS,
    expected,
    inputs,
    make_op,
    make_rope_op,
    needs_gxx,
    rope_inputs,
)
from tests.helpers import assert_matches

FA2 = PrefillSchedule(tiles=2, lpt=True)  # 4 warps x 32 rows of one head
PACKED = PrefillSchedule(tiles=2, pack=4, lpt=True)  # 4 heads x 32 rows


def _tiling(schedule: PrefillSchedule, **kw) -> pre.Tiling:
    return pre.tiling(make_op(**kw).spec(DecodeVariant(prefill=schedule)))


def test_tiling_resolves_per_op():
    t = _tiling(PACKED, n_kv=8, groups=4, hd=128)
    assert (t.warps, t.tiles, t.pack, t.bm, t.rows, t.q_shared) == (4, 2, 4, 128, 32, True)
    assert _tiling(PACKED, groups=2).pack == 2 and _tiling(PACKED, groups=3).pack == 1  # a power of 2 dividing groups
    assert _tiling(PrefillSchedule(warps=2, pack=4), groups=4).pack == 2  # ... and the warps
    assert _tiling(FA2, hd=256).tiles == 1  # two (16 x 256) f32 accumulators would not fit in registers
    assert _tiling(PrefillSchedule(), hd=128).rows == 64


@pytest.mark.parametrize(
    ("schedule", "hd", "shared"),
    [
        (PrefillSchedule(), 128, 0),
        (FA2, 64, 0),
        (FA2, 128, (128 + 2 * 64) * 136 * 2),
        (FA2, 256, 0),
        (PrefillSchedule(syncs=1), 128, 4 * 64 * 136 * 2),
        (PrefillSchedule(tiles=2, syncs=1), 128, (128 + 4 * 64) * 136 * 2),
        (PrefillSchedule(syncs=1), 64, 0),
    ],
    ids=[
        "default",
        "fa2-hd64",
        "fa2-hd128",
        "fa2-hd256",
        "double-buffered",
        "fa2-double-buffered",
        "double-buffered-hd64",
    ],
)
def test_launch_declares_dynamic_shared_memory_past_48k(schedule, hd, shared):
    """Shared memory past 48 KB is dynamic: the launch carries its size (driver.Module.function opts
    the function in); within 48 KB it stays static (Launch.shared 0)."""
    op = make_op(n_kv=8, groups=4, hd=hd)
    (ln,) = [ln for ln in op.render(SLOTS, DecodeVariant(prefill=schedule)).launches if ln.name.endswith("_pre")]
    assert ln.shared == shared
    assert pre.shared_bytes(op.spec(DecodeVariant(prefill=schedule))) <= 227 << 10  # the H200's per-block limit


def test_grid_covers_every_row_block_of_every_packed_head():
    op = make_op(n_kv=8, groups=4, hd=128)
    for schedule, per_head in ((PrefillSchedule(), 64), (FA2, 128), (PACKED, 32)):
        kern = op.render(SLOTS, DecodeVariant(prefill=schedule))
        (ln,) = [ln for ln in kern.launches if ln.name.endswith("_pre")]
        heads = 32 // _tiling(schedule, n_kv=8, groups=4, hd=128).pack
        assert ln.grid.evaluate({"s": 2048, "p": 0}) == heads * 2048 // per_head, schedule.name
        assert ln.block == 32 * schedule.warps


# (op kwargs, s, p): GQA packing (groups 4 / 2 / 1), several row blocks, causal with past, a window,
# cross-attention, soft-capping, a negative scale (the scale cannot fold into exp2), head dims 64-256
CASES = {
    "bf16-hd64-g4-s70-window": (dict(groups=4, window=21), 70, 13),
    "bf16-hd128-g4-s40-past": (dict(groups=4, hd=128), 40, 100),
    "f16-hd128-g2-s17-cross": (dict(dt=DType.f16, hd=128, causal=False, t=77), 17, 0),
    "f16-hd64-s12-negative-scale": (dict(dt=DType.f16, scale=-0.2), 12, 5),
    "bf16-hd256-g1-s33-softcap": (dict(hd=256, n_kv=1, groups=1, softcap=0.5, scale=3.0), 33, 40),
}


@needs_gxx
@pytest.mark.parametrize("schedule", PREFILL_SCHEDULES, ids=lambda s: s.name)
def test_prefill_schedules_compute_attention_on_cpu(schedule, tmp_path):
    from tests.backends.cuda.attention_emu import Emulated

    variant = DecodeVariant(prefill=schedule)
    ops = {name: make_op(**kw) for name, (kw, _, _) in CASES.items()}
    rope = make_rope_op(groups=4)  # q rotated as it is loaded: the scalar Q path (into shared memory at 2 m-tiles)
    emu = Emulated([*ops.values(), rope], SLOTS, tmp_path, variant)
    for name, (_, s, p) in CASES.items():
        op, env = ops[name], {"s": s, "p": p}
        q, k, v = inputs(op, env, seed=len(name))
        assert_matches(emu.run(op, q, k, v, env=env), expected(op, q, k, v, env), op.dtype, 1.0, name)
    # a grid pinned at the bucket's bounds (runtime.py): the blocks past the live row blocks exit
    op, env = ops["bf16-hd64-g4-s70-window"], {"s": 70, "p": 13}
    q, k, v = inputs(op, env, seed=3)
    got = emu.run(op, q, k, v, env=env, grid_env={"s": 200, "p": 13})
    assert_matches(got, expected(op, q, k, v, env), op.dtype, 1.0, "pinned grid")
    env = {"s": 19, "p": 30}
    ins = rope_inputs(rope, env, seed=2)
    want = rope.reference(list(ins), (rope.dtype,) * 3 + (DType.f32,) * 2, env)
    assert_matches(emu.run(rope, *ins, env=env), want, rope.dtype, 1.0, "rope")


def test_prefill_schedules_fit_their_registers(no_cache):
    """ptxas (sm_90): every schedule at head_dims 64 / 128 / 256 in <= 255 registers; one m-tile per
    warp spills at most a few words (ptxas holds some head_dim-64 kernels to 128 registers: 24 bytes),
    two (a 32 x 128 f32 accumulator and 32 x 64 scores: 192 registers) at most a few running sums
    (measured 0-152 bytes, session 7: 188-212 before the ldmatrix addresses became immediate offsets
    from per-lane bases)."""
    from tests.backends.cuda.test_gemv import ptxas_usage

    cases = [
        (s, hd, dt) for s in PREFILL_SCHEDULES for hd, dt in ((64, DType.bf16), (128, DType.f16), (256, DType.bf16))
    ]
    kernels = [make_op(n_kv=8, groups=4, hd=hd, dt=dt).render(SLOTS, DecodeVariant(prefill=s)) for s, hd, dt in cases]
    usage = ptxas_usage(kernels)
    for (schedule, hd, _), kern in zip(cases, kernels, strict=True):
        (ln,) = [ln for ln in kern.launches if ln.name.endswith("_pre")]
        regs, spill = usage[ln.name]
        tiles = _tiling(schedule, n_kv=8, groups=4, hd=hd).tiles
        assert regs <= 255 and spill <= (32 if tiles == 1 else 192), (schedule.name, hd, regs, spill)
    assert nvrtc.compile_cubin(source(kernels), arch="sm_90")[:4] == b"\x7fELF"
