"""Exceptions of the dynamo stage, and the one way to give up.

Input: a reason, in words a user understands. Output: an ``Unsupported``
exception that ``convert_frame`` turns into an eager fallback (one
``FallbackWarning`` per code object) or, under ``fullgraph=True`` /
``MINIPT2_STRICT=1``, re-raises with the user's source line attached.
Chapter: book/docs/dynamo.md ("Giving up").
"""

from __future__ import annotations

from typing import NoReturn


class Unsupported(RuntimeError):
    """Symbolic execution met something this stage cannot capture.

    ``reason`` is the plain-words cause; ``location`` ("file:line: source")
    is filled in by the instruction translator when the exception passes
    through its dispatch loop, so every message points at user code.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.location: str | None = None

    def __str__(self) -> str:
        if self.location is None:
            return self.reason
        return f"{self.reason}\n  at {self.location}"


def unimplemented(reason: str) -> NoReturn:
    """Give up on the current frame. The single exit for "cannot capture this"."""
    raise Unsupported(reason)


class UserErrorInTrace(Exception):
    """The user's own code raised while we executed it on meta tensors.

    # [Note: user errors]
    # A real mistake (shapes that do not broadcast, a missing attribute) must
    # reach the user exactly as eager PyTorch raises it. Instead of re-creating
    # the exception we abandon the capture and run the frame eagerly: the
    # genuine error then comes from the genuine code. If eager happens to
    # succeed (a meta kernel was stricter than the real one), the answer is
    # still right, merely uncompiled.
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


class FallbackWarning(UserWarning):
    """Emitted once per code object whenever a frame runs eagerly instead of compiled."""


class BackendCompilerFailed(RuntimeError):
    """The backend raised while compiling a captured graph.

    ``stage`` names the minipt2 stage the error came from, guessed from the
    exception's module (``inductor.lowering.LoweringError`` -> "inductor").
    """

    def __init__(self, backend_name: str, error: BaseException) -> None:
        module = type(error).__module__.split(".")[0]
        self.stage = "backend" if module in ("builtins", "__main__") else module
        self.error = error
        super().__init__(
            f"backend {backend_name} failed: {type(error).__name__}: {error}"
        )
