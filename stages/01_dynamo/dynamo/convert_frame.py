"""convert_frame: turn one call of a Python function into a compiled cache entry.

Input: a ``Frame`` (code object, globals, closure values, bound arguments)
and a backend. Output: a ``CacheEntry`` holding the captured GraphModule,
its guards, the compiled check function and the backend's compiled
callable; or, when capture fails, the decision to run eagerly, with one
``FallbackWarning`` (or an exception under fullgraph / MINIPT2_STRICT=1).
Chapter: book/docs/dynamo.md ("From frame to cache entry").
"""

from __future__ import annotations

import dataclasses
import types
import warnings
from collections.abc import Callable
from typing import Any

import torch

from . import config
from .exc import (
    BackendCompilerFailed,
    FallbackWarning,
    Unsupported,
    UserErrorInTrace,
    unimplemented,
)
from .guards import RESERVED_NAMES, Guard, compile_guards, make_frame_function
from .output_graph import OutputGraph
from .symbolic_convert import InstructionTranslator
from .variables.base import VariableTracker


@dataclasses.dataclass
class Frame:
    """What a call looks like from inside: the values a guard or a source may name."""

    code: types.CodeType
    f_globals: dict[str, Any]
    closure: dict[str, Any]  # free variable name -> current cell contents
    arguments: dict[str, Any]  # parameter name -> value, in signature order

    def namespace(self) -> dict[str, Any]:
        return {"G": self.f_globals, "C": self.closure, **self.arguments}


@dataclasses.dataclass
class CacheEntry:
    """One specialisation of a code object: valid whenever all ``guards`` hold."""

    code: types.CodeType
    graph: torch.fx.GraphModule
    guards: list[Guard]
    compiled_fn: Callable[..., Any]
    check_fn: Callable[..., bool]  # all guards, compiled into one function
    inputs_fn: Callable[..., tuple[Any, ...]]  # fetches the placeholders' tensors
    output: VariableTracker  # the returned structure, rebuilt around graph outputs
    backend: Callable[..., Any]

    def check(self, frame: Frame) -> bool:
        return self.check_fn(frame.f_globals, frame.closure, **frame.arguments)

    def run(self, frame: Frame) -> Any:
        inputs = self.inputs_fn(frame.f_globals, frame.closure, **frame.arguments)
        outputs = self.compiled_fn(*inputs)
        return self.output.reconstruct(iter(outputs), frame.namespace())


def convert_frame(frame: Frame, backend: Callable[..., Any]) -> CacheEntry:
    """Trace ``frame`` into a graph, compile it with ``backend``, package the result."""
    clash = RESERVED_NAMES & set(frame.arguments)
    if clash:
        unimplemented(f"a parameter named {sorted(clash)[0]!r} shadows a name guards use")
    output = OutputGraph(frame.code.co_name)
    tracer = InstructionTranslator(
        frame.code, frame.f_globals, frame.closure, frame.arguments, output)
    return_value = tracer.run()
    try:
        graph = output.compile_subgraph(return_value)
    except Unsupported as e:
        e.location = e.location or tracer.location()
        raise
    guards = output.guard_list()
    params = list(frame.arguments)
    sources = "".join(f"{source}, " for source in output.input_sources)
    try:
        compiled_fn = backend(graph, list(output.example_inputs))
        if not callable(compiled_fn):
            raise TypeError(f"the backend returned {type(compiled_fn).__name__}, not a callable")
    except Exception as e:
        raise BackendCompilerFailed(getattr(backend, "__name__", repr(backend)), e) from e
    return CacheEntry(
        code=frame.code, graph=graph, guards=guards, compiled_fn=compiled_fn,
        check_fn=compile_guards(guards, params),
        inputs_fn=make_frame_function("___graph_inputs", params, f"({sources})"),
        output=return_value, backend=backend,
    )


def compile_or_fallback(
    frame: Frame, backend: Callable[..., Any], fullgraph: bool, name: str,
) -> tuple[CacheEntry | None, bool]:
    """Apply the error policy around ``convert_frame``.

    Returns (entry, give_up): entry is None when the frame must run eagerly
    this time; give_up means "and for good" (the warning was issued, one per
    code object). See [Note: user errors] for why a user error gives no entry
    and no warning.
    """
    try:
        return convert_frame(frame, backend), False
    except UserErrorInTrace:
        return None, False
    except (Unsupported, BackendCompilerFailed) as e:
        if fullgraph or config.strict():
            raise
        error: Exception = e
    except Exception as e:  # a bug in this stage must not break a working program
        if fullgraph or config.strict():
            raise
        error = e
    warnings.warn(_fallback_message(frame, name, error), FallbackWarning, stacklevel=4)
    return None, True


def _fallback_message(frame: Frame, name: str, error: Exception) -> str:
    code = frame.code
    where = f"{code.co_filename}:{code.co_firstlineno}"
    if isinstance(error, Unsupported):
        stage, reason = "dynamo", error.reason
        where = error.location or where
    elif isinstance(error, BackendCompilerFailed):
        stage, reason = error.stage, str(error)
    else:
        stage, reason = "dynamo", f"internal error: {type(error).__name__}: {error}"
    return (
        f'minipt2 stage "{stage}" could not compile {name}(); running it eagerly.\n'
        f"  reason: {reason}\n"
        f"  at {where}\n"
        f"  (fullgraph=True or MINIPT2_STRICT=1 raises instead)"
    )
