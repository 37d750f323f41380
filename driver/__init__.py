"""driver: composes the four stages into a compiler shaped like ``torch.compile``.

    import driver
    fast = driver.compile(model)              # dynamo -> aotautograd -> primtorch -> inductor
    torch.compile(model, backend=driver.backend)   # PyTorch's Dynamo, our stages 2-4

Chapter: book/docs/driver.md. The CLI is ``python -m driver`` (see ``driver/cli.py``).
"""

from driver import api
from driver.api import (
    CompiledFunction,
    OptimizedModule,
    compile,
    mark_dynamic,
    reset,
    wait_for_templates,
)
from driver.backends import backend, list_backends, register_backend
from driver.logs import configure_from_environment, set_logs


def explain(fn):
    """``driver.explain(fn)(*args)``: graphs, graph breaks with reasons and source lines,
    guards, ops per graph (dynamo's ``explain``); ``print()`` the result."""
    import dynamo

    return dynamo.explain(fn)


configure_from_environment()

__all__ = [
    "CompiledFunction",
    "api",
    "OptimizedModule",
    "backend",
    "compile",
    "explain",
    "list_backends",
    "mark_dynamic",
    "register_backend",
    "reset",
    "set_logs",
    "wait_for_templates",
]
