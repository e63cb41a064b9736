"""luminal: a pure-Python ML inference compiler (GraphTensor -> HLIR -> egglog -> LLIR -> runtime).

import luminal as lm
g = lm.Graph()
x = g.tensor("x", ("s", 8))
y = (x * 2).sum(axis=1).output("y")
out = g.compile("reference").run({"x": np.ones((3, 8), np.float32)})["y"]
"""

from luminal.dtype import DType, bf16, bool_, f8e4m3, f8e5m2, f16, f32, f64, i8, i16, i32, i64, to_dtype, u8
from luminal.errors import BackendError, CompileError, DTypeError, InputError, LuminalError, ShapeError
from luminal.frontend.indexing import concat, stack, where
from luminal.graph import Graph
from luminal.shape.expr import Expression
from luminal.tensor import GraphTensor

bool = bool_  # noqa: A001 - lm.bool is the public spelling of the dtype
__version__ = "0.1.0"

__all__ = [
    "Graph", "GraphTensor", "Expression", "DType", "to_dtype", "concat", "stack", "where",
    "f32", "f16", "bf16", "f64", "i8", "i16", "i32", "i64", "u8", "bool", "f8e4m3", "f8e5m2",
    "LuminalError", "ShapeError", "DTypeError", "InputError", "CompileError", "BackendError",
]  # fmt: skip
