"""CPU: every kernel op x dtype renders to CUDA C that NVRTC compiles for sm_90 (no GPU needed),
the kernel cache works, compile errors show the offending lines, and the codegen is exact."""

from __future__ import annotations

import os
import time

import pytest

from luminal.backends.cuda import nvrtc
from luminal.backends.cuda.kernel import ERROR_SLOT, index_c, source
from luminal.backends.cuda.kernels import KERNEL_OPS, KernelAdd, KernelScatter
from luminal.backends.cuda.kernels.io import f32_literal
from luminal.dtype import DType
from luminal.errors import BackendError
from luminal.shape.expr import num, z
from tests.backends.cuda.catalog import CONTIG, DTYPES, MERGED, kernels_for, sources
from tests.backends.cuda.test_pdl import check_syncs

SLOTS = {"n": 0, "s": 1, ERROR_SLOT: 2}


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.value)
def test_every_kernel_compiles_for_sm90(dt, no_cache):
    ops = kernels_for(dt) + (sources() if dt == DType.f32 else [])
    rendered = [op.render(SLOTS) for op in ops]
    names = [ln.name for k in rendered for ln in k.launches]
    assert len(set(names)) == len(names) or len({k.code for k in rendered}) < len(rendered)
    for k in rendered:  # each entry opens with the PDL sync (test_pdl.py): compiled with it below
        check_syncs(k)
    image = nvrtc.compile_cubin(source(rendered), arch="sm_90", name=f"all_{dt.value}.cu")
    assert image[:4] == b"\x7fELF"  # a cubin is an ELF image
    for name in names:
        assert name.encode() in image, f"entry {name} missing from the cubin"


def test_catalog_covers_every_kernel_op():
    seen = {type(op) for dt in DTYPES for op in kernels_for(dt)} | {type(op) for op in sources()}
    assert seen == set(KERNEL_OPS)


def test_sources_do_not_depend_on_graph_position():
    a = KernelAdd(CONTIG.dims, CONTIG.strides, CONTIG.strides, DType.f32).render(SLOTS)
    b = KernelAdd(CONTIG.dims, CONTIG.strides, CONTIG.strides, DType.f32).render(SLOTS)
    c = KernelAdd(CONTIG.dims, CONTIG.strides, CONTIG.strides, DType.f16).render(SLOTS)
    assert a == b and a.code != c.code


def test_dims_are_read_from_the_dims_buffer():
    code = KernelAdd(CONTIG.dims, CONTIG.strides, CONTIG.strides, DType.f32).render(SLOTS).code
    assert "const long long d_s = dims[1];" in code
    with pytest.raises(BackendError, match="dims"):
        KernelAdd(CONTIG.dims, CONTIG.strides, CONTIG.strides, DType.f32).render({"n": 0})


def test_gather_reports_out_of_range_in_the_error_slot():
    from luminal.backends.cuda.kernels import KernelGather

    op = KernelGather((num(4),), (z,), (num(16),), (z,), DType.f32, DType.i32)
    assert "((long long*)dims)[2] = 1;" in op.render(SLOTS).code
    assert "(long long*)dims" not in op.render({"s": 0}).code  # no error slot in the plan: no report


def test_index_math_is_64_bit_and_matches_the_tracker():
    c = index_c(MERGED.dims, MERGED.strides)
    assert "/" in c and "%" in c  # the merged axis keeps its z // 4, z % 4 decomposition
    assert index_c(CONTIG.dims, CONTIG.strides) == "i"  # contiguous folds to the flat index


def test_scratch_only_where_needed():
    sc = KernelScatter(CONTIG.dims, CONTIG.strides, (num(3),), (z,), (z,), DType.f32, DType.i32)
    assert sc.scratch_bytes() != 0 and len(sc.render(SLOTS).launches) == 3
    assert KernelAdd(CONTIG.dims, CONTIG.strides, CONTIG.strides, DType.f32).scratch_bytes() == 0


def test_f32_literals_are_exact():
    assert f32_literal(0.1) == "0x1.99999a0000000p-4f"
    assert f32_literal(float("inf")) == "__int_as_float(0x7f800000)"
    assert f32_literal(float("nan")) == "__int_as_float(0x7fc00000)"
    assert f32_literal(-0.0) == "-0x0.0p+0f"


def test_compile_error_shows_log_and_source_line(no_cache):
    src = 'extern "C" __global__ void k(float* out) {\n  out[0] = 1.0f;\n  out[1] = undefined_thing;\n}\n'
    with pytest.raises(BackendError) as e:
        nvrtc.compile_cubin(src, arch="sm_90", name="bad.cu")
    msg = str(e.value)
    assert "undefined_thing" in msg and "bad.cu" in msg
    assert ">    3 |   out[1] = undefined_thing;" in msg


def test_disk_cache_roundtrip(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    nvrtc.clear_memory_cache()
    src = 'extern "C" __global__ void cache_probe(float* out) { out[0] = 2.0f; }\n'
    before = nvrtc.STATS["compiles"]
    a = nvrtc.compile_cubin(src, arch="sm_90")
    files = list((tmp_path / "kernels").glob("*.cubin"))
    assert len(files) == 1 and files[0].read_bytes() == a
    assert not list((tmp_path / "kernels").glob("*.tmp"))  # atomic: no temp file left behind
    nvrtc.clear_memory_cache()
    t = time.perf_counter()
    b = nvrtc.compile_cubin(src, arch="sm_90")
    assert b == a and nvrtc.STATS["compiles"] == before + 1 and time.perf_counter() - t < 0.5
    assert nvrtc.compile_cubin(src, arch="sm_90") is b  # in-process hit
    other = nvrtc.compile_cubin(src, arch="sm_80")  # the arch is part of the key
    assert other != a and nvrtc.STATS["compiles"] == before + 2
    os.chmod(tmp_path / "kernels", 0o500)  # a read-only cache must not break compiling
    try:
        nvrtc.clear_memory_cache()
        assert nvrtc.compile_cubin(src.replace("2.0f", "3.0f"), arch="sm_90")
    finally:
        os.chmod(tmp_path / "kernels", 0o700)


def test_contiguous_elementwise_is_vectorized():
    from luminal.backends.cuda.kernels import KernelCast, KernelExp2

    k = KernelAdd(CONTIG.dims, CONTIG.strides, CONTIG.strides, DType.bf16).render(SLOTS)
    assert "reinterpret_cast<const V0*>(in0)[t]" in k.code and "v[8]" in k.code
    assert k.launches[0].grid == (CONTIG.dims[0] * 8 + 2047) // 2048 or "cdiv" in repr(k.launches[0].grid)
    assert "reinterpret_cast" not in KernelExp2(MERGED.dims, MERGED.strides, DType.f32).render(SLOTS).code
    assert "v[4]" in KernelCast(CONTIG.dims, CONTIG.strides, DType.f32, DType.bf16).render(SLOTS).code


def test_contiguous_rows_reduce_with_vector_loads():
    from luminal.backends.cuda.kernels import KernelMaxReduce, KernelSumReduce
    from luminal.shape.expr import var

    r = var("s")
    vec = KernelSumReduce((r,), num(4096), (z * 4096,), z, DType.bf16).render(SLOTS)
    assert "reinterpret_cast<const VI*>" in vec.code and "v[8]" in vec.code
    assert vec.launches[0].grid == r and vec.launches[0].block == 256  # a block per row
    odd = KernelMaxReduce((r,), num(4100), (z * 4100,), z, DType.bf16).render(SLOTS)  # rows not 16-byte aligned
    assert "reinterpret_cast" not in odd.code
    strided = KernelSumReduce((num(4),), num(4096), (z,), z * 4, DType.f32).render(SLOTS)
    assert "reinterpret_cast" not in strided.code
