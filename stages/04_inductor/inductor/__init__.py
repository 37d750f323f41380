"""inductor: prims graph -> loop-level IR -> fused Triton / C++ kernels + a Python wrapper.

Public names:

- ``inductor.compile_fx(gm, example_inputs, *, options=None)``: a dynamo backend (through
  aotautograd and primtorch's decompositions). ``options={"target": "triton"|"cpp"|"fallback"}``.
- ``inductor.compile_fx_inner(prims_gm, example_inputs, *, target=None) -> CompiledGraph``.
- ``inductor.CompileError``: the one exception inductor raises when it gives up.

Chapter: book/docs/inductor.md.
"""

from inductor.compile_fx import CompiledGraph, compile_fx, compile_fx_inner
from inductor.exc import CompileError

__all__ = ["CompileError", "CompiledGraph", "compile_fx", "compile_fx_inner"]
