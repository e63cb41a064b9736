"""Typed errors raised by every layer of luminal: graph building, compiling, running."""

from __future__ import annotations


class LuminalError(Exception):
    """Base class of every error luminal raises on purpose."""


class ShapeError(LuminalError, ValueError):
    """Shapes that do not fit an op (raised at graph-build time where possible)."""


class DTypeError(LuminalError, TypeError):
    """A dtype an op does not support, or two dtypes that do not agree."""


class InputError(LuminalError, ValueError):
    """Bad data handed to `model.run`: missing, extra, mis-shaped or mis-typed inputs, unknown dims."""


class CompileError(LuminalError, RuntimeError):
    """The compiler could not turn a graph into a plan (e-graph, extraction, search)."""


class BackendError(LuminalError, RuntimeError):
    """A backend cannot be used or failed while running (no GPU, driver or library errors)."""
