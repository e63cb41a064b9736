"""CPU: the cuBLASLt host layer without a GPU -- the library loads through cuda.pathfinder (skipped
when the nvidia-cublas wheel is absent), its C API is declared, failures become BackendError, and
the host ops' fields describe the views the rules matched (their input views, sizes and dims)."""

from __future__ import annotations

import pytest

from luminal.backends.cuda.host import HostOp, host_ops
from luminal.backends.cuda.host.cublaslt import CublasLt, CublasLtAccum, CublasLtBias
from luminal.dtype import DType
from luminal.errors import BackendError
from luminal.shape.expr import num, var, z


def _lib():
    from luminal.backends.cuda.host import lt

    try:
        lt.library()
    except BackendError as e:
        pytest.skip(f"no libcublasLt here: {e}")
    return lt


def test_library_loads_and_reports_its_version():
    lt = _lib()
    assert lt.version() >= 120000


def test_library_errors_are_backend_errors():
    lt = _lib()
    with pytest.raises(BackendError, match="cublasLtMatmulDescCreate"):
        lt.call("cublasLtMatmulDescCreate", None, 12345, 0)  # null out-pointer: invalid value


def test_unsupported_dtype_is_refused_before_any_library_call():
    lt = _lib()
    spec = lt.Spec("N", "N", 4, 4, 4, 4, 4, 1, 0, 0, DType.i32, DType.i32, "32F", "DEFAULT", None, 256)
    with pytest.raises(BackendError, match="no lm.i32"):
        lt.plan(spec, None)


def _op(cls=CublasLt, epilogue="DEFAULT"):
    s = var("s")
    return cls(num(2), s, num(4), num(8), "T", num(8), num(0), "N", num(8), s * 8, DType.bf16, DType.bf16, epilogue)


def test_host_ops_are_registered_and_describe_their_views():
    assert set(host_ops()) == {CublasLt, CublasLtBias, CublasLtAccum}
    op = _op()
    assert isinstance(op, HostOp) and op.dim_names() == frozenset({"s"})
    assert op.out_size().evaluate({"s": 3}) == 2 * 3 * 4
    (a_shape, a_st), (b_shape, b_st) = op.input_views()
    assert a_st == (var("s") * 8 * z, 8 * z, z)  # A row-major (trans_a "N"), batch stride 8 s
    assert b_st == (num(0), z, 8 * z)  # B column-major (trans_b "T"): W^T, broadcast over batch
    assert len(_op(CublasLtBias, "BIAS").input_views()) == 3 and len(_op(CublasLtAccum).input_views()) == 3


def test_spec_maps_luminal_operands_to_the_column_major_swap():
    op = _op()
    spec = op.spec({"s": 5}, [256, 512, 1024])
    assert (spec.rows, spec.cols, spec.k, spec.batch) == (4, 5, 8, 2)  # D' is n x m
    assert (spec.trans_a, spec.ld_a, spec.stride_a) == ("T", 8, 0)  # cuBLAS's A is luminal's B
    assert (spec.trans_b, spec.ld_b, spec.stride_b) == ("N", 8, 40)
    assert spec.align == 8  # D's leading dim n = 4 bf16 = 8 bytes bounds the alignment


def test_f32_is_exact_unless_tf32_is_asked(monkeypatch):
    s = var("s")
    op = CublasLt(num(1), s, num(4), num(8), "T", num(8), num(0), "N", num(8), num(0), DType.f32, DType.f32, "DEFAULT")
    assert op.spec({"s": 2}, [256, 256, 256]).compute == "32F"
    monkeypatch.setenv("LUMINAL_TF32", "1")
    assert op.spec({"s": 2}, [256, 256, 256]).compute == "32F_FAST_TF32"
    assert _op().spec({"s": 2}, [256, 256, 256]).compute == "32F"  # bf16 is unaffected


def test_host_step_reprepares_only_on_change():
    from dataclasses import dataclass

    from luminal.backends.cuda.host import HostStep

    calls = []

    @dataclass(frozen=True)
    class Probe(HostOp):
        m: object

        def prepare(self, env, out_ptr, in_ptrs, stream=None):
            calls.append(("prepare", env["s"], out_ptr))

        def launch(self, stream, out_ptr, in_ptrs, env):
            calls.append(("launch", env["s"], out_ptr, tuple(in_ptrs)))

    step = HostStep(Probe(var("s")))
    assert step.update({"s": 3, "p": 1}, 256, [512], None)
    assert not step.update({"s": 3, "p": 9}, 256, [512], None)  # p is not read by the op
    step.launch(None)
    assert step.update({"s": 4}, 256, [512], None) and step.update({"s": 4}, 768, [512], None)
    step.launch(None)
    assert calls == [("prepare", 3, 256), ("launch", 3, 256, (512,)), ("prepare", 4, 256), ("prepare", 4, 768),
                     ("launch", 4, 768, (512,))]  # fmt: skip
