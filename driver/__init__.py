"""driver: composes the four stages into a compiler shaped like ``torch.compile``.

    import driver
    fast = driver.compile(model)              # dynamo -> aotautograd -> primtorch -> inductor
    torch.compile(model, backend=driver.backend)   # PyTorch's Dynamo, our stages 2-4

Chapter: book/docs/driver.md. The CLI is ``python -m driver`` (see ``driver/cli.py``).
"""

from driver.api import CompiledFunction, OptimizedModule, compile, reset
from driver.backends import backend, list_backends, register_backend

__all__ = [
    "CompiledFunction",
    "OptimizedModule",
    "backend",
    "compile",
    "list_backends",
    "register_backend",
    "reset",
]
