"""Backends by name: what runs a graph that dynamo captured.

Input: a name (or a callable) given to ``driver.compile(..., backend=)``.
Output: a callable with the dynamo backend contract,
``backend(gm: torch.fx.GraphModule, example_inputs: list[Tensor]) -> Callable``.

Chapter: book/docs/driver.md. The names are PyTorch's, so that a reader can swap one stage
for PyTorch's own and localise a bug to one stage:

==================  ==================================================================
``eager``           dynamo only: run the captured FX graph as it is
``aot_eager``       + aotautograd and primtorch: trace to prims, run them op by op
``inductor``        + inductor: loop IR, fusion, Triton / C++ kernels (the default)
``torch-inductor``  our dynamo feeding PyTorch's own Inductor (see ``driver/swap.py``)
==================  ==================================================================
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Backend = Callable[[torch.fx.GraphModule, list], Callable]

# --8<-- [start:backend-registry]
BACKENDS: dict[str, Callable[[dict], Backend]] = {}


def register_backend(name: str):
    """Register ``factory(options) -> backend`` under ``name`` (one registry, a plain dict).
    ``options`` are the user's ``options`` plus ``"mode"``, as ``driver.compile`` got it."""

    def decorate(factory):
        BACKENDS[name] = factory
        return factory

    return decorate


@register_backend("eager")
def _eager(options: dict) -> Backend:
    def eager_backend(gm, example_inputs):
        return gm.forward

    return eager_backend


@register_backend("aot_eager")
def _aot_eager(options: dict) -> Backend:
    def aot_eager_backend(gm, example_inputs):
        import aotautograd
        import primtorch

        def run_prims_graph(prims_gm, inputs):
            return prims_gm.forward

        return aotautograd.aot_module_simplified(
            gm, example_inputs, fw_compiler=run_prims_graph,
            decompositions=primtorch.decomposition_table,
        )

    return aot_eager_backend


@register_backend("inductor")
def _inductor(options: dict) -> Backend:
    def inductor_backend(gm, example_inputs):
        import inductor

        return inductor.compile_fx(gm, example_inputs, options=options)

    return inductor_backend


@register_backend("torch-inductor")
def _torch_inductor(options: dict) -> Backend:
    from driver import swap

    return swap.torch_inductor_backend
# --8<-- [end:backend-registry]


def list_backends() -> list[str]:
    """The backend names ``driver.compile`` accepts (any callable is accepted too)."""
    return sorted(BACKENDS)


def lookup_backend(backend: str | Backend, options: dict) -> Backend:
    if callable(backend):
        return backend
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a name or a callable, got {type(backend).__name__}")
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is unknown; choose one of {list_backends()} "
                         "or pass a callable backend(gm, example_inputs)")
    return BACKENDS[backend](options)


def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """A ``torch.compile`` backend that runs our stages 2-4 on PyTorch's Dynamo graph:
    ``torch.compile(model, backend=driver.backend)``."""
    import inductor

    return inductor.compile_fx(gm, list(example_inputs))
