"""NVRTC in worker processes (luminal/backends/cuda/nvrtc_procs.py) and the kernel cache key: a worker
builds the very cubin the in-process path builds, its errors come back as BackendError naming the
kernel, the pool starts once and restarts after shutdown; a changed prelude or header text is a miss."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from luminal.backends.cuda import nvrtc, nvrtc_procs
from luminal.errors import BackendError, LuminalError


def _kernel(name: str, body: str = "") -> str:
    return f'extern "C" __global__ void {name}(float* x) {{ x[threadIdx.x] = {body or len(name)}.0f; }}'


def _render(codes: list[str]) -> str:
    return "// prelude v1\n" + "\n".join(codes)


@pytest.fixture
def procs(monkeypatch):
    monkeypatch.setenv("LUMINAL_NVRTC_PROCS", "2")
    nvrtc.clear_memory_cache()
    yield
    nvrtc.clear_memory_cache()


def _fresh(monkeypatch, procs: str, cache) -> None:
    monkeypatch.setenv("LUMINAL_NVRTC_PROCS", procs)
    monkeypatch.setenv("LUMINAL_CACHE", str(cache))
    nvrtc.clear_memory_cache()


def test_a_worker_builds_the_same_cubin_as_the_process(tmp_path, monkeypatch):
    src = _render([_kernel("same_a"), _kernel("same_bb")])
    _fresh(monkeypatch, "0", "off")
    here = nvrtc.compile_cubin(src, "sm_90")
    c0 = nvrtc.STATS["compiles"]
    _fresh(monkeypatch, "2", "off")
    there = nvrtc.compile_cubin(src, "sm_90")
    assert nvrtc.STATS["compiles"] == c0 + 1 and nvrtc_procs.running() >= 1
    assert there == here and there[:4] == b"\x7fELF"


def test_a_batch_compiles_in_worker_programs(tmp_path, monkeypatch, procs):
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    names = ["wk_a", "wk_bb", "wk_ccc"]
    codes = [_kernel(n) for n in names]
    p0, b0 = nvrtc.STATS["compiles"], nvrtc.STATS["busy_s"]
    images = nvrtc.compile_units(codes, _render, arch="sm_90")
    assert nvrtc.STATS["compiles"] == p0 + 2  # one program per worker process
    assert nvrtc.STATS["busy_s"] > b0
    for name, code in zip(names, codes, strict=True):
        assert name.encode() in images[code]
    assert nvrtc.prefetch(codes, _render, arch="sm_90") == 0


def test_a_worker_error_is_a_backend_error_naming_the_kernel(tmp_path, monkeypatch, procs):
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    bad = 'extern "C" __global__ void wk_bad(float* x) { x[0] = undeclared_thing; }'
    with pytest.raises(BackendError) as e:
        nvrtc.compile_units([bad], _render, arch="sm_90")
    assert isinstance(e.value, LuminalError)
    assert "wk_bad" in str(e.value) and "undeclared_thing" in str(e.value)
    assert nvrtc.compile_units([_kernel("wk_after")], _render, arch="sm_90")  # the pool still works


def test_the_pool_starts_once_and_restarts_after_shutdown(monkeypatch, procs):
    monkeypatch.setenv("LUMINAL_CACHE", "off")
    nvrtc.compile_cubin(_render([_kernel("once_a")]), "sm_90")
    pool = nvrtc_procs._pool()
    nvrtc.compile_cubin(_render([_kernel("once_b")]), "sm_90")
    assert nvrtc_procs._pool() is pool
    nvrtc_procs.shutdown()
    assert nvrtc_procs.running() == 0
    assert b"once_c" in nvrtc.compile_cubin(_render([_kernel("once_c")]), "sm_90")
    assert nvrtc_procs._pool() is not pool


def test_procs_default_follows_the_cpus(monkeypatch):
    monkeypatch.delenv("LUMINAL_NVRTC_PROCS", raising=False)
    monkeypatch.setattr(nvrtc_procs, "cpus", lambda: 4)
    assert nvrtc_procs.procs() == 0
    monkeypatch.setattr(nvrtc_procs, "cpus", lambda: 12)
    assert nvrtc_procs.procs() == 12 and nvrtc.workers() == 12
    monkeypatch.setattr(nvrtc_procs, "cpus", lambda: 64)
    assert nvrtc_procs.procs() == 16
    monkeypatch.setenv("LUMINAL_NVRTC_PROCS", "0")
    assert nvrtc_procs.procs() == 0
    monkeypatch.setenv("LUMINAL_NVRTC_PROCS", "many")
    with pytest.raises(BackendError):
        nvrtc_procs.procs()


@pytest.mark.parametrize("mode", ["0", "2"])
def test_a_changed_prelude_is_a_miss(tmp_path, monkeypatch, mode):
    """The per-kernel index keys the kernel's own translation unit: the same kernel code around another
    prelude compiles again (before, the index served the image built with the old prelude), in this
    process and through the disk; the old prelude is still a hit."""
    _fresh(monkeypatch, mode, tmp_path)
    a = _kernel("pre_x")

    def render_v2(codes: list[str]) -> str:
        return "// prelude v2\n#define LM_V2 1\n" + "\n".join(codes)

    k0 = nvrtc.STATS["kernels"]
    v1 = nvrtc.compile_units([a], _render, arch="sm_90")[a]
    v2 = nvrtc.compile_units([a], render_v2, arch="sm_90")[a]
    assert nvrtc.STATS["kernels"] == k0 + 2 and v2 is not v1
    nvrtc.clear_memory_cache()  # a new process: the disk index keeps both apart
    assert nvrtc.compile_units([a], render_v2, arch="sm_90")[a] == v2
    assert nvrtc.compile_units([a], _render, arch="sm_90")[a] == v1
    assert nvrtc.STATS["kernels"] == k0 + 2


def test_a_changed_header_set_is_a_miss(tmp_path, monkeypatch):
    """The toolchain digest (headers' names, sizes, mtimes; generator sources) is part of every key."""
    _fresh(monkeypatch, "0", tmp_path)
    src = _render([_kernel("hdr_a")])
    k0 = nvrtc._key(src, "sm_90", nvrtc._options("sm_90"))
    monkeypatch.setattr(nvrtc, "toolchain_digest", lambda: "another-header-set")
    assert nvrtc._key(src, "sm_90", nvrtc._options("sm_90")) != k0


def test_summary_line():
    line = nvrtc.summary({"kernels": 12, "compiles": 3, "memory_hits": 4, "disk_hits": 5, "busy_s": 1.5,
                          "wait_s": 0.5, "compile_cpu_s": 2.0})  # fmt: skip
    assert line.startswith("nvrtc: 12 kernels compiled in 3 programs, 9 cache hits (5 disk), busy 1.50 s wall")
    assert "workers:" in line


def test_a_dead_worker_is_an_error_and_is_replaced(monkeypatch, procs):
    monkeypatch.setenv("LUMINAL_CACHE", "off")
    pool = nvrtc_procs._pool()
    for w in pool.all:  # dead while idle: replaced before its next program, no error
        w.proc.kill()
        w.proc.wait()
    assert b"idle_dead" in nvrtc.compile_cubin(_render([_kernel("idle_dead")]), "sm_90")
    call = nvrtc_procs._Worker.call

    def dies(self, request):
        self.proc.kill()
        self.proc.wait()
        return call(self, request)

    monkeypatch.setattr(nvrtc_procs._Worker, "call", dies)
    with pytest.raises(BackendError, match="died compiling dead_a"):
        nvrtc.compile_cubin(_render([_kernel("dead_a")]), "sm_90", name="dead_a.cu")
    monkeypatch.setattr(nvrtc_procs._Worker, "call", call)
    assert b"dead_b" in nvrtc.compile_cubin(_render([_kernel("dead_b")]), "sm_90")  # a fresh worker took over
    assert nvrtc_procs.running() == 2


def test_a_script_without_a_main_guard_runs_once(tmp_path):
    """Workers are not multiprocessing children: the user's script is not run again in each of them."""
    script = tmp_path / "user.py"
    script.write_text(
        "import os\n"
        "os.environ['LUMINAL_NVRTC_PROCS'] = '2'\n"
        "os.environ['LUMINAL_CACHE'] = 'off'\n"
        "from luminal.backends.cuda import nvrtc\n"
        "print('script ran', flush=True)\n"
        "nvrtc.compile_cubin('extern \"C\" __global__ void g(float* x) { x[0] = 1.0f; }', 'sm_90')\n"
    )
    root = Path(__file__).parents[3]
    env = {**os.environ, "PYTHONPATH": str(root)}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("script ran") == 1


def test_workers_that_cannot_start_fall_back_to_the_process(monkeypatch, procs):
    monkeypatch.setenv("LUMINAL_CACHE", "off")
    nvrtc_procs.shutdown()

    def no_start(self):
        raise OSError("no interpreter")

    monkeypatch.setattr(nvrtc_procs._Worker, "__init__", no_start)
    monkeypatch.setattr(nvrtc_procs, "_BROKEN", [])
    assert b"fallback_a" in nvrtc.compile_cubin(_render([_kernel("fallback_a")]), "sm_90")
    assert not nvrtc_procs.enabled() and "cannot start" in nvrtc_procs._BROKEN[0]
    assert "threads" in nvrtc.summary({})
