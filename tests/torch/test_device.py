"""CPU: the torch frontend's device path (luminal/torch/program.py, device.py) on the real CUDA
runtime over the fake driver (tests/backends/cuda/fake_driver.py), whose "device memory" here
includes the torch tensors' own memory: weights and StaticCache tensors bound once by address,
the KV cache updated in place in the torch tensor (no cache bytes moved per step), per-call inputs
and outputs device-to-device, one CUDA-graph build for a decode loop, and the same numbers as eager."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import luminal.torch as lt  # noqa: E402
from luminal.backends.cuda import runtime  # noqa: E402
from luminal.compiled import DeviceArray  # noqa: E402
from luminal.errors import BackendError, InputError  # noqa: E402
from luminal.torch import program  # noqa: E402
from luminal.torch.translate import translate  # noqa: E402
from tests.backends.cuda import fake_driver  # noqa: E402
from tests.models.test_engine import fake_cuda  # noqa: E402, F401  (fixture: the cuda-fake backend)
from tests.torch.test_hf import LM, _close, _decode, _model  # noqa: E402
from tests.torch.util import (  # noqa: E402
    decode_program,
    expected_step_bytes,
    host_scalars,
    nbytes,
    record_programs,
    state_in_place,
    trace,
)


@pytest.fixture
def device_fake(fake_cuda, monkeypatch):  # noqa: F811
    """The fake driver addressing torch CPU memory: bound tensors by their extent, copies by size."""
    regions: dict[int, int] = {}
    fake_mem = fake_driver.mem

    def mem(ptr: int, nbytes: int | None = None) -> np.ndarray:
        try:
            return fake_mem(ptr, nbytes)
        except BackendError:
            for base, n in regions.items():
                if base <= ptr < base + n:
                    nbytes = base + n - ptr if nbytes is None else nbytes
                    break
            if nbytes is None:
                raise
            return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr))

    bind = runtime.Resident.bind_device
    binds: list[tuple[object, str]] = []  # (the Resident table, label) per bind

    def bind_device(self, label, ptr, nbytes):
        regions[int(ptr)] = int(nbytes)
        binds.append((self, label))
        bind(self, label, ptr, nbytes)

    monkeypatch.setattr(fake_driver, "mem", mem)
    monkeypatch.setattr(runtime.Resident, "bind_device", bind_device)
    monkeypatch.setattr(program, "DEVICE_TYPES", ("cuda", "cpu"))
    programs = record_programs(monkeypatch)
    torch._dynamo.reset()
    yield binds, programs
    torch._dynamo.reset()


def _llama(dtype=torch.float32):
    m = _model(lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(**LM)))
    return m.to(dtype)


def test_static_cache_decode_is_device_resident_and_in_place(device_fake):
    binds, programs = device_fake
    m = _llama()
    fast = torch.compile(m, backend="luminal", dynamic=True, options={"backend": "cuda-fake"})
    ids = torch.randint(0, LM["vocab_size"], (1, 5), generator=torch.Generator().manual_seed(5))
    steps = 6
    with torch.no_grad():
        got, got_cache = _decode(fast, m.config, ids, steps=steps)
        want, want_cache = _decode(m, m.config, ids, steps=steps)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        _close(g, w, f"step {k}")
    for lg, lw in zip(got_cache.layers, want_cache.layers, strict=True):
        _close(lg.keys, lw.keys, "key cache")
        _close(lg.values, lw.values, "value cache")

    dec = decode_program(programs)
    model, rt = dec.model, dec.model.stats["runtime"]
    assert rt["runs"] == steps
    assert rt["graph_builds"] == 1, "one CUDA graph for the whole decode loop"
    # every bound tensor is bound once: weights and the cache's tensors by their torch address
    names = [s.name for s in dec.inputs if s.kind == "tensor" and s.persistent]
    res = model._plans[0][1].resident
    assert sorted(n for r, n in binds if r is res) == sorted(names)
    caches = [s.name for s in dec.inputs if s.state and len(s.shape) == 4]
    assert len(caches) == 2 * LM["num_hidden_layers"]
    layer_tensors = [t.data_ptr() for layer in got_cache.layers for t in (layer.keys, layer.values)]
    assert sorted(res.bufs[n].ptr for n in caches) == sorted(layer_tensors), "the caches are the torch tensors"
    # each run re-checks only the bound inputs whose shape has dims: a literal shape was checked at
    # its bind (re-checking ~200 weights' shapes cost ~1.4 ms of host time a token, session 10)
    symbolic = {n for n in names if any(d.dims() for d in model._inputs[n][0])}
    assert set(model._device_shapes) == symbolic and len(symbolic) < len(names), (symbolic, len(names))
    # the KV-cache writes are the in-place scatter, into the bound input (nothing copied back)
    assert set(caches) <= state_in_place(dec)
    # bytes per decode step: the dims record up, nothing down; on the device only the per-call
    # inputs (the token), the small non-in-place state (a position counter) and the logits
    want = expected_step_bytes(dec)
    assert {k: rt[k] for k in want} == want
    per_call = [s for s in dec.inputs if s.kind == "tensor" and not s.persistent]
    assert all(nbytes(s) <= 16 for s in per_call), "per call: the token and scalars only (no cache)"
    # Dynamo's unspecialized floats (RMSNorm eps, attention scaling) are 0-d CPU tensors: fed from
    # the host, never a reason to leave the device path (on a GPU they once sent the whole step there)
    assert host_scalars(dec) and dec.host_fed == host_scalars(dec)
    assert all(p.paths["host"] == 0 for p in programs), "every graph ran on the device path"


def test_cpu_scalars_keep_device_tensors_on_the_device_path(fake_cuda, monkeypatch):  # noqa: F811
    """The GPU decode step's inputs, with "meta" standing for the GPU: device tensors plus 0-d CPU
    float64 tensors (what Dynamo passes for the Python floats a model reads, with dynamic=True).
    Those scalars are fed from the host; they must not send the device tensors down the host path
    (which copies every state tensor -- the KV cache -- through the host each call). A CPU tensor
    that is not a per-call scalar still selects the host path."""
    x, s = torch.ones(2, 3), torch.tensor(0.5, dtype=torch.float64)
    p = program.Program(translate(trace(lambda x, s: x * s, (x, s))), "cuda-fake")
    monkeypatch.setattr(program, "DEVICE_TYPES", ("meta",))
    ran = []

    def path(name):
        return lambda *a: ran.append(name) or {o.name: None for o in p.outputs if o.kind == "tensor"}

    monkeypatch.setattr(p, "_run_device", path("device"))
    monkeypatch.setattr(p, "_run_host", path("host"))
    p(x.to("meta"), s)
    assert ran == ["device"], "a 0-d CPU scalar next to device tensors: the device path"
    p(x, s)
    p(x.to("meta"), s.to("meta"))
    assert ran == ["device", "host", "device"] and p.paths == {"device": 2, "host": 1}


def test_a_new_cache_rebinds_only_the_state(device_fake):
    binds, programs = device_fake
    m = _llama()
    fast = torch.compile(m, backend="luminal", dynamic=True, options={"backend": "cuda-fake"})
    gen = torch.Generator().manual_seed(6)
    with torch.no_grad():
        for n in (4, 6):  # two decode loops, each with its own StaticCache
            ids = torch.randint(0, LM["vocab_size"], (1, n), generator=gen)
            got, _ = _decode(fast, m.config, ids, steps=3)
            want, _ = _decode(m, m.config, ids, steps=3)
            for k, (g, w) in enumerate(zip(got, want, strict=True)):
                _close(g, w, f"prompt {n} step {k}")
    dec = decode_program(programs)
    weights = [s.name for s in dec.inputs if s.kind == "tensor" and s.persistent and not s.state]
    state = [s.name for s in dec.inputs if s.state]
    mine = [n for r, n in binds if r is dec.model._plans[0][1].resident]
    assert all(mine.count(w) == 1 for w in weights), "weights are bound once"
    assert all(mine.count(s) == 2 for s in state), "a new cache object is bound again"
    assert dec.model.stats["runtime"]["graph_builds"] == 2  # new addresses: one rebuild per cache object


def test_bf16_decode_on_the_device_path(device_fake):
    m = _llama(torch.bfloat16)
    fast = torch.compile(m, backend="luminal", dynamic=True, options={"backend": "cuda-fake"})
    ids = torch.randint(0, LM["vocab_size"], (1, 5), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        got, got_cache = _decode(fast, m.config, ids, steps=3)
        want, want_cache = _decode(m, m.config, ids, steps=3)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g, w, rtol=3e-2, atol=3e-2, msg=lambda s, k=k: f"step {k}: {s}")
    for lg, lw in zip(got_cache.layers, want_cache.layers, strict=True):
        torch.testing.assert_close(lg.keys, lw.keys, rtol=3e-2, atol=3e-2)


def test_export_buffer_mutation_is_state_on_the_device_path(device_fake):
    """luminal.torch.compile: a registered buffer updated with index_copy_ is written by the plan in
    the module's own buffer memory (bound by address), and matches eager."""

    class Cache(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("kv", torch.zeros(1, 2, 8, 4))

        def forward(self, x, pos):
            self.kv.index_copy_(2, pos, x)
            return self.kv.sum(2) * 2.0

    eager, mod = Cache(), Cache()
    fast = lt.compile(mod, (torch.ones(1, 2, 1, 4), torch.tensor([0])), backend="cuda-fake")
    ptr = mod.kv.data_ptr()
    gen = torch.Generator().manual_seed(8)
    for pos in (0, 3, 5):
        x, p = torch.randn(1, 2, 1, 4, generator=gen), torch.tensor([pos])
        _close(fast(x, p), eager(x, p), f"pos {pos}")
        _close(mod.kv, eager.kv, f"buffer after pos {pos}")
    assert mod.kv.data_ptr() == ptr
    rt = fast.stats["runtime"]
    assert rt["d2h_bytes"] == 0 and rt["d2d_bytes"] < mod.kv.numel() * 4


def test_device_array_errors(device_fake):
    m = _llama()
    fast = torch.compile(m, backend="luminal", dynamic=True, options={"backend": "cuda-fake"})
    with torch.no_grad():
        fast(input_ids=torch.tensor([[1, 2, 3]]), use_cache=False)
    _, programs = device_fake
    model = programs[-1].model
    weight = next(s.name for s in programs[-1].inputs if s.persistent)
    ids = next(s.name for s in programs[-1].inputs if s.kind == "tensor" and not s.persistent)
    with pytest.raises(InputError, match="bind_device"):
        model.run({ids: np.zeros((1, 3), np.int64), weight: DeviceArray(1 << 20, (1,), np.dtype(np.float32))})
    with pytest.raises(InputError, match="not a persistent input"):
        model.bind_device("nope", DeviceArray(1 << 20, (1,), np.dtype(np.float32)))
    with pytest.raises(InputError, match="shape"):
        model.bind_device(weight, DeviceArray(1 << 20, (3, 3, 3, 3, 3), np.dtype(np.float32)))


def test_export_user_input_mutation_is_state_on_the_device_path(device_fake):
    """luminal.torch.compile: a KV cache passed as an argument and updated with index_copy_
    (torch.export's USER_INPUT_MUTATION) is bound by address and written in place -- not copied
    into the runtime and back each call -- and matches eager."""

    def step(kv, x, pos):
        kv.index_copy_(2, pos, x)
        return kv.sum(2) * 2.0

    kv, ref = torch.zeros(1, 2, 64, 4), torch.zeros(1, 2, 64, 4)
    fast = lt.compile(step, (kv, torch.ones(1, 2, 1, 4), torch.tensor([0])), backend="cuda-fake")
    gen = torch.Generator().manual_seed(9)
    for pos in (0, 3, 5):
        x, p = torch.randn(1, 2, 1, 4, generator=gen), torch.tensor([pos])
        _close(fast(kv, x, p), step(ref, x, p), f"pos {pos}")
        _close(kv, ref, f"cache after pos {pos}")
    rt = fast.stats["runtime"]
    (spec,) = [s for s in fast.program.inputs if s.state]
    assert fast.program.model._plans[0][1].resident.bufs[spec.name].ptr == kv.data_ptr(), "bound by address"
    assert rt["d2h_bytes"] == 0 and rt["d2d_bytes"] < kv.numel() * 4, "the cache is not copied per call"
