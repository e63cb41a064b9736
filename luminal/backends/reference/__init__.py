"""The NumPy reference backend: the semantic oracle every other backend is checked against."""

from luminal.backends.reference.executor import ReferenceExecutor

__all__ = ["ReferenceExecutor"]
