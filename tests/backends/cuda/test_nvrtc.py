"""NVRTC's per-kernel cache (luminal/backends/cuda/nvrtc.py `compile_units`): a kernel compiled once, in
any batch, is never compiled again, in this process or (through the disk index) in another."""

from __future__ import annotations

import pytest

from luminal.backends.cuda import nvrtc


@pytest.fixture(autouse=True)
def _threads(monkeypatch):
    """These tests pin the in-process threads (LUMINAL_NVRTC_THREADS); worker processes: test_nvrtc_procs.py."""
    monkeypatch.setenv("LUMINAL_NVRTC_PROCS", "0")


def _kernel(name: str) -> str:
    return f'extern "C" __global__ void {name}(float* x) {{ x[threadIdx.x] = {len(name)}.0f; }}'


def _render(codes: list[str]) -> str:
    return "\n".join(codes)


def test_each_kernel_compiles_once_whatever_batch_it_comes_in(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    monkeypatch.setenv("LUMINAL_NVRTC_THREADS", "1")  # one program per batch
    nvrtc.clear_memory_cache()
    a, b, c = _kernel("unit_a"), _kernel("unit_bb"), _kernel("unit_ccc")
    k0, p0 = nvrtc.STATS["kernels"], nvrtc.STATS["compiles"]
    first = nvrtc.compile_units([a, b], _render, arch="sm_90")
    assert nvrtc.STATS["compiles"] == p0 + 1 and nvrtc.STATS["kernels"] == k0 + 2  # one program, both kernels
    assert first[a] is first[b] and first[a][:4] == b"\x7fELF" and b"unit_bb" in first[b]
    second = nvrtc.compile_units([b, c], _render, arch="sm_90")  # b is known: only c is compiled
    assert nvrtc.STATS["kernels"] == k0 + 3 and second[b] is first[b] and b"unit_ccc" in second[c]
    nvrtc.clear_memory_cache()  # a new process: only the disk remembers
    hits = nvrtc.STATS["disk_hits"]
    third = nvrtc.compile_units([c, a], _render, arch="sm_90")  # a grouping never compiled together
    assert nvrtc.STATS["kernels"] == k0 + 3 and nvrtc.STATS["disk_hits"] == hits + 2
    assert b"unit_a" in third[a] and b"unit_ccc" in third[c]


def test_without_a_cache_dir_kernels_are_reused_in_process(monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE", "off")
    nvrtc.clear_memory_cache()
    a = _kernel("unit_nocache")
    k0 = nvrtc.STATS["kernels"]
    img = nvrtc.compile_units([a, a], _render, arch="sm_90")[a]
    assert nvrtc.compile_units([a], _render, arch="sm_90")[a] is img and nvrtc.STATS["kernels"] == k0 + 1


def test_a_batch_compiles_as_parallel_programs_each_kernel_in_its_image(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    monkeypatch.setenv("LUMINAL_NVRTC_THREADS", "2")
    nvrtc.clear_memory_cache()
    names = ["par_a", "par_bb", "par_ccc"]
    codes = [_kernel(n) for n in names]
    p0 = nvrtc.STATS["compiles"]
    images = nvrtc.compile_units(codes, _render, arch="sm_90")
    assert nvrtc.STATS["compiles"] == p0 + 2  # two programs for two threads
    for name, code in zip(names, codes, strict=True):
        assert name.encode() in images[code]
    assert len({id(i) for i in images.values()}) == 2


def test_groups_are_balanced_and_keep_order():
    codes = ["a" * 50, "b" * 10, "c" * 40, "d" * 20]
    groups = nvrtc._groups(codes, 2)
    assert sorted(c for g in groups for c in g) == sorted(codes)
    assert sorted(sum(map(len, g)) for g in groups) == [60, 60]
    assert all(g == sorted(g, key=codes.index) for g in groups)
    assert nvrtc._groups(codes, 8) == [[c] for c in sorted(codes, key=len, reverse=True)]


def test_runtime_loads_one_module_per_image_through_the_index(tmp_path, monkeypatch):
    """runtime.load_kernels compiles through compile_units: kernels of one program share a module, a
    kernel loaded before is not compiled or loaded again, and a new batch compiles only what is new."""
    from luminal.backends.cuda import runtime
    from luminal.backends.cuda.kernel import Kernel, Launch

    loaded: list[bytes] = []

    class StubModule:
        def __init__(self, image: bytes):
            loaded.append(image)
            self.image = image

    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    monkeypatch.setenv("LUMINAL_NVRTC_THREADS", "1")
    monkeypatch.setattr(runtime.driver, "Module", StubModule)
    monkeypatch.setattr(runtime, "_MODULES", {})
    nvrtc.clear_memory_cache()
    ks = [Kernel(_kernel(n), (Launch(n, 1, 32),), frozenset()) for n in ("rt_a", "rt_bb", "rt_ccc")]
    k0 = nvrtc.STATS["kernels"]
    mods = runtime.load_kernels(ks[:2])
    assert len(loaded) == 1 and mods[ks[0].code] is mods[ks[1].code] and b"rt_bb" in loaded[0]
    again = runtime.load_kernels(ks)  # a and bb are loaded: only ccc is compiled, in a module of its own
    assert nvrtc.STATS["kernels"] == k0 + 3 and len(loaded) == 2 and b"rt_ccc" in loaded[1]
    assert again[ks[0].code] is mods[ks[0].code] and again[ks[2].code] is not mods[ks[0].code]


def test_prefetched_kernels_are_compiled_once_and_waited_for(tmp_path, monkeypatch):
    """`prefetch` compiles in the background; compile_units then waits for those kernels instead of
    compiling them again, and compiles only what was not prefetched. A kernel whose prefetch failed is
    compiled again with its batch (so the error, if any, is its batch's)."""
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    monkeypatch.setenv("LUMINAL_NVRTC_THREADS", "2")
    nvrtc.clear_memory_cache()
    a, b, c = _kernel("pre_a"), _kernel("pre_bb"), _kernel("pre_ccc")
    k0, w0 = nvrtc.STATS["kernels"], nvrtc.STATS["wait_s"]
    assert nvrtc.prefetch([a, b], _render, arch="sm_90") == 2
    assert nvrtc.prefetch([a, b], _render, arch="sm_90") == 0  # under way: not started twice
    images = nvrtc.compile_units([a, b, c], _render, arch="sm_90")
    assert nvrtc.STATS["kernels"] == k0 + 3  # a and b once (ahead), c with the batch
    assert b"pre_a" in images[a] and b"pre_bb" in images[b] and b"pre_ccc" in images[c]
    assert nvrtc.STATS["wait_s"] > w0 and not nvrtc._PENDING
    assert nvrtc.prefetch([a, b, c], _render, arch="sm_90") == 0  # compiled: nothing to start
    bad = 'extern "C" __global__ void pre_bad(float* x) { x[0] = undeclared; }'
    assert nvrtc.prefetch([bad], _render, arch="sm_90") == 1
    try:
        nvrtc.compile_units([bad], _render, arch="sm_90")
    except Exception as e:  # noqa: BLE001 - the batch's own compile reports the error
        assert "undeclared" in str(e)
    else:
        raise AssertionError("a kernel that does not compile must fail its batch")
    nvrtc.clear_memory_cache()
