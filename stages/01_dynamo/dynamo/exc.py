"""Exceptions of the dynamo stage, and the one way to give up.

Input: a reason, in words a user understands. Output: an ``Unsupported``
exception that ``convert_frame`` turns into an eager fallback (one
``FallbackWarning`` per code object) or, under ``fullgraph=True`` /
``MINIPT2_STRICT=1``, re-raises with the user's source line attached.
Chapter: book/docs/dynamo.md ("Giving up").
"""

from __future__ import annotations

import os
import shlex
import sys
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


def unimplemented(reason: str, location: str | None = None) -> NoReturn:
    """Give up on the current frame. The single exit for "cannot capture this".

    ``location`` is for give-ups outside the interpreter (the cache's recompile
    limit); inside it, the translator fills it in."""
    error = Unsupported(reason)
    error.location = location
    raise error


class ReadsTensorData(Unsupported):
    """An op that reads a tensor's value inside (a Scalar argument given as a 0-d tensor,
    which eager turns into a number with ``.item()``): [Note: constant tensors]."""


class UserErrorInTrace(Exception):
    """The user's own code raised while we executed it on meta tensors.

    # [Note: user errors]
    # A real mistake (shapes that do not broadcast, a missing attribute) must
    # reach the user exactly as eager PyTorch raises it. Instead of re-creating
    # the exception we abandon the capture and run the frame eagerly: the
    # genuine error then comes from the genuine code. If eager happens to
    # succeed (a meta kernel was stricter than the real one), the answer is
    # still right, merely uncompiled, and the error was ours: the frame runs
    # eagerly from then on, with one FallbackWarning that names the error
    # (eval_frame._eager_after_user_error), rather than being traced, and
    # failing, again at every call.
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error
        self.location: str | None = None  # the traced source line that raised, innermost


class FallbackWarning(UserWarning):
    """Emitted once per code object whenever a frame runs eagerly instead of compiled."""


def reproduce_line(qualname: str) -> str:
    """The last line of every give-up message: one command that raises where we gave up.

    # [Note: reproduce]
    # MINIPT2_STRICT=1 turns every fallback into the exception behind it, raised with
    # the user's source line. When this process was started as ``python script.py
    # ...`` or ``python -m package ...`` we print that very command with the variable
    # set; otherwise (a REPL, a notebook, ``python -c``) we say what to do instead.
    """
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if main_spec is not None and main_spec.name:  # python -m package ...
        module = main_spec.name.removesuffix(".__main__")
        return "reproduce: MINIPT2_STRICT=1 python -m " + shlex.join([module, *sys.argv[1:]])
    if sys.argv and sys.argv[0] and os.path.isfile(sys.argv[0]):  # python script.py ...
        return "reproduce: MINIPT2_STRICT=1 python " + shlex.join(sys.argv)
    return (f"reproduce: set MINIPT2_STRICT=1 and call {qualname}() again "
            "to raise at the failing line")


_STAGE_PACKAGES = ("aotautograd", "primtorch", "inductor")


def _stage_of(error: BaseException) -> str:
    """The minipt2 stage an exception came from: its type's package (``inductor.CompileError``),
    else the package of the innermost stage frame in its traceback (an ``AttributeError``
    raised inside ``inductor/ir.py`` is inductor's), else "backend"."""
    module = type(error).__module__.split(".")[0]
    if module in _STAGE_PACKAGES:
        return module
    stage, tb = "backend", error.__traceback__
    while tb is not None:
        package = tb.tb_frame.f_globals.get("__name__", "").split(".")[0]
        stage = package if package in _STAGE_PACKAGES else stage
        tb = tb.tb_next
    return stage


class BackendCompilerFailed(RuntimeError):
    """The backend raised while compiling a captured graph.

    ``stage`` names the minipt2 stage the error came from, guessed from the
    exception's module (``inductor.lowering.LoweringError`` -> "inductor").
    """

    def __init__(self, backend_name: str, error: BaseException) -> None:
        self.stage = _stage_of(error)
        self.error = error
        super().__init__(
            f"backend {backend_name} failed: {type(error).__name__}: {error}"
        )
