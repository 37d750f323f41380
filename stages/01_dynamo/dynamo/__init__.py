"""dynamo: capture Python functions into torch.fx graphs by symbolic bytecode execution.

Input: a Python function (or bound method) and a backend with PyTorch's
contract ``backend(gm: torch.fx.GraphModule, example_inputs: list[Tensor])
-> Callable``. Output: ``optimize(backend)(fn)``, a drop-in replacement for
``fn`` that runs guarded, cached, compiled graphs and falls back to eager
(with a FallbackWarning) where capture is not possible.
Chapter: book/docs/dynamo.md. Modules in data-flow order: README.md.
"""

from . import config
from .convert_frame import CacheEntry
from .eval_frame import ExplainOutput, cache_entries, explain, optimize, reset
from .exc import FallbackWarning, Unsupported, unimplemented
from .guards import Guard
from .shapes import ShapeEnv, mark_dynamic
from .sym_node import SymNode

__all__ = [
    "CacheEntry", "ExplainOutput", "FallbackWarning", "Guard", "ShapeEnv", "SymNode",
    "Unsupported", "cache_entries", "config", "explain", "mark_dynamic", "optimize", "reset",
    "unimplemented",
]
