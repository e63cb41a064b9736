"""HLIR: the 15 primitive ops (+ Input, Output, Constant) every frontend op decomposes into."""

from luminal.hlir.elementwise import Add, Exp2, LessThan, Log2, Mod, Mul, Recip, Sin, Sqrt
from luminal.hlir.indexing import Gather, Scatter
from luminal.hlir.io import Cast, Constant, Input, Iota, Output
from luminal.hlir.op import Op
from luminal.hlir.reduce import MaxReduce, SumReduce

PRIMITIVES = (Log2, Exp2, Sin, Sqrt, Recip, Add, Mul, Mod, LessThan, SumReduce, MaxReduce, Iota, Gather, Scatter, Cast)
HLIR_OPS = (Input, Output, Constant, *PRIMITIVES)

__all__ = [op.__name__ for op in HLIR_OPS] + ["HLIR_OPS", "PRIMITIVES", "Op"]
