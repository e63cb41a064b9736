"""luminal.torch: the PyTorch 2 frontend (`pip install luminal[torch]`; docs/torch.md).

    import luminal.torch
    fast = luminal.torch.compile(model, (x,), dynamic=True)      # torch.export path
    fast = torch.compile(model, backend="luminal", dynamic=True)  # Dynamo path

Both translate ATen graphs (luminal/torch/translate.py, one op registry) into a luminal Graph.
`import luminal` never imports torch; importing this package does, and registers the backend.
"""

from __future__ import annotations

try:
    import torch
except ImportError as e:  # pragma: no cover - exercised only without torch
    raise ImportError("luminal.torch needs PyTorch: pip install 'luminal[torch]'") from e

from luminal.torch.dynamo import backend, with_options
from luminal.torch.export import CompiledModule, compile, decompositions  # noqa: A004
from luminal.torch.program import COUNTERS as counters
from luminal.torch.translate import UnsupportedOpError


def _register() -> None:
    from torch._dynamo.backends import registry as reg

    # An entry point (torch_dynamo_backends) may be what is importing us: it registers the name itself.
    if "luminal" not in reg._COMPILER_FNS and reg._BACKENDS.get("luminal") is None:
        torch._dynamo.register_backend(backend, name="luminal")


_register()

__all__ = ["compile", "backend", "with_options", "CompiledModule", "UnsupportedOpError", "counters", "decompositions"]
