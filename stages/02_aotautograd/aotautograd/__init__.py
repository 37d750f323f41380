"""aotautograd: trace a captured program down to aten ops (decomposing them to prims on the
way) and hand the resulting graph to a compiler.

Public names:

- ``aotautograd.trace(fn, example_inputs, decompositions=None) -> GraphModule``: our make_fx.
- ``aotautograd.aot_module_simplified(gm, example_inputs, fw_compiler, bw_compiler=None,
  decompositions=None, partitioner="min_cut") -> callable``: dynamo's backend contract;
  training (joint forward/backward graphs, partitioned) when autograd would record the call.
- ``aotautograd.default_partition`` / ``aotautograd.min_cut_rematerialization_partition``:
  the partitioners (a ``Program`` -> a ``Partition``).
- ``aotautograd.AOTUnsupported``: raised when the stage gives up.
- ``aotautograd.TracerTensor``: the stand-in tensor the tracer runs the program on.

Chapter: book/docs/aotautograd.md.
"""

from aotautograd.aot_autograd import aot_module_simplified
from aotautograd.exc import AOTUnsupported
from aotautograd.partitioners import default_partition, min_cut_rematerialization_partition
from aotautograd.proxy_tensor import TracerTensor, trace

__all__ = ["AOTUnsupported", "TracerTensor", "aot_module_simplified", "default_partition",
           "min_cut_rematerialization_partition", "trace"]
