"""aotautograd: trace a captured program down to aten ops (decomposing them to prims on the
way) and hand the resulting graph to a compiler.

Public names:

- ``aotautograd.trace(fn, example_inputs, decompositions=None) -> GraphModule``: our make_fx.
- ``aotautograd.aot_module_simplified(gm, example_inputs, fw_compiler, bw_compiler=None,
  decompositions=None) -> callable``: dynamo's backend contract (inference only for now).
- ``aotautograd.AOTUnsupported``: raised when the stage gives up.
- ``aotautograd.TracerTensor``: the stand-in tensor the tracer runs the program on.

Chapter: book/docs/aotautograd.md.
"""

from aotautograd.aot_autograd import aot_module_simplified
from aotautograd.exc import AOTUnsupported
from aotautograd.proxy_tensor import TracerTensor, trace

__all__ = ["AOTUnsupported", "TracerTensor", "aot_module_simplified", "trace"]
