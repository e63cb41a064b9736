"""docs/torch.md's op table is the registry's; `import luminal` does not import torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from luminal.torch import registry  # noqa: E402

DOC = Path(__file__).resolve().parents[2] / "docs" / "torch.md"


def test_doc_table_is_the_registry():
    text = DOC.read_text()
    table = text.split(registry.TABLE_BEGIN, 1)[1].split(registry.TABLE_END, 1)[0].strip()
    assert table == registry.op_table().strip(), "docs/torch.md is stale: run python -m luminal.torch.registry"


def test_import_luminal_does_not_import_torch():
    code = "import sys, luminal, luminal.graph, luminal.compiled; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=DOC.parents[1])


def test_entry_point_names_the_backend():
    """pyproject's torch_dynamo_backends entry point (found by torch without `import luminal.torch`)."""
    import importlib
    import tomllib

    import luminal.torch as lt

    eps = tomllib.loads((DOC.parents[1] / "pyproject.toml").read_text())["project"]["entry-points"]
    mod, attr = eps["torch_dynamo_backends"]["luminal"].split(":")
    assert getattr(importlib.import_module(mod), attr) is lt.backend
