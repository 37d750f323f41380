"""eval_frame: intercept calls of an optimized function and serve them from a cache.

Input: a user function or bound method and a backend
(``backend(gm, example_inputs) -> callable``). Output: a wrapper that, on
every call, looks up the per-code-object cache, checks guards, runs the
compiled entry on a hit and compiles a new entry on a miss (up to
``config.recompile_limit``), or runs the original function eagerly.
Chapter: book/docs/dynamo.md ("Catching frames", "Recompilation").

# [Note: catching frames]
# Real TorchDynamo installs a PEP 523 frame-evaluation hook (C code) so it
# sees *every* Python frame, including ones called from inside the compiled
# function. We intercept only the function we were given, by wrapping it:
# no C, same cache-and-guard logic. The cache is keyed by code object, as in
# PyTorch (which stores it on the code object itself), so two wrappers of
# one function share compiled entries when their backend is the same.
#
# [Note: recompile limit]
# Each cache miss adds an entry. After ``config.recompile_limit`` entries a
# miss runs eagerly instead, with one warning naming the guard that failed,
# so a function fed ever-new shapes does not spend its life compiling.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import warnings
from collections.abc import Callable
from typing import Any

import torch

from . import config
from .convert_frame import CacheEntry, Frame, compile_or_fallback
from .exc import FallbackWarning
from .guards import Guard, first_failing_guard

_cache: dict[types.CodeType, list[CacheEntry]] = {}
_skipped: set[types.CodeType] = set()  # gave up on these: always eager, warned once
_limit_warned: set[types.CodeType] = set()


def optimize(backend: Callable[..., Any], *, fullgraph: bool = False) -> Callable[..., Any]:
    """``optimize(backend)(fn)``: a wrapper of ``fn`` that runs captured graphs via ``backend``."""
    if not callable(backend):
        raise TypeError(f"optimize(backend=...) must be callable, got {type(backend).__name__}")
    if not isinstance(fullgraph, bool):
        raise TypeError(f"optimize(fullgraph=...) must be a bool, got {type(fullgraph).__name__}")

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        return _wrap(fn, backend, fullgraph)

    return decorator


def _wrap(fn: Any, backend: Callable[..., Any], fullgraph: bool) -> Callable[..., Any]:
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        func, bound = fn.__func__, (fn.__self__,)  # self travels as the first argument
    elif isinstance(fn, types.FunctionType):
        func, bound = fn, ()
    else:
        raise TypeError(
            f"optimize(...)(fn): fn must be a Python function or method, got {type(fn).__name__}"
        )
    signature = inspect.signature(func)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        frame = _make_frame(func, signature, bound + args, kwargs)
        if frame is None:  # arguments do not bind: let eager raise the TypeError
            return fn(*args, **kwargs)
        return _call(frame, backend, fullgraph, lambda: fn(*args, **kwargs))

    wrapper._dynamo_orig_fn = fn  # type: ignore[attr-defined]
    wrapper._dynamo_backend = backend  # type: ignore[attr-defined]
    return wrapper


def _make_frame(
    func: types.FunctionType, signature: inspect.Signature, args: tuple, kwargs: dict,
) -> Frame | None:
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    closure = {}
    for name, cell in zip(func.__code__.co_freevars, func.__closure__ or ()):
        try:
            closure[name] = cell.cell_contents
        except ValueError:  # an empty cell: reading it is the user's NameError
            pass
    return Frame(func.__code__, func.__globals__, closure, dict(bound.arguments))


# --8<-- [start:cache-lookup]
def _call(
    frame: Frame, backend: Callable[..., Any], fullgraph: bool, run_eagerly: Callable[[], Any],
) -> Any:
    """One call: cache hit -> compiled entry; miss -> compile (within the limit) or eager."""
    code = frame.code
    if code in _skipped:
        return run_eagerly()
    entries = [e for e in _cache.setdefault(code, []) if e.backend is backend]
    for entry in entries:  # oldest first, like PyTorch's cache
        if entry.check(frame):
            return entry.run(frame)
    if len(entries) >= config.recompile_limit:  # [Note: recompile limit]
        _warn_recompile_limit(frame, entries[-1])
        return run_eagerly()
    entry, give_up = compile_or_fallback(frame, backend, fullgraph, code.co_name)
    if give_up:
        _skipped.add(code)
    if entry is None:
        return run_eagerly()
    _cache[code].append(entry)
    return entry.run(frame)
# --8<-- [end:cache-lookup]


def _warn_recompile_limit(frame: Frame, last: CacheEntry) -> None:
    code = frame.code
    if code in _limit_warned:
        return
    _limit_warned.add(code)
    failed = first_failing_guard(last.guards, frame.namespace())
    warnings.warn(
        f'minipt2 stage "dynamo": {code.co_name}() hit the recompile limit '
        f"(config.recompile_limit = {config.recompile_limit}); running it eagerly.\n"
        f"  guard failed: {failed}\n"
        f"  at {code.co_filename}:{code.co_firstlineno}",
        FallbackWarning, stacklevel=4,
    )


def reset() -> None:
    """Forget every compiled entry, fallback decision and warning."""
    _cache.clear()
    _skipped.clear()
    _limit_warned.clear()


def _code_of(fn: Any) -> types.CodeType:
    fn = getattr(fn, "_dynamo_orig_fn", fn)
    func = getattr(fn, "__func__", fn)
    code = getattr(func, "__code__", None)
    if not isinstance(code, types.CodeType):
        raise TypeError(f"expected a Python function or an optimized wrapper, got {fn!r}")
    return code


def cache_entries(fn: Any) -> list[CacheEntry]:
    """The compiled entries of ``fn``'s code object (``fn`` may be the wrapper), oldest first."""
    return list(_cache.get(_code_of(fn), []))


@dataclasses.dataclass
class ExplainOutput:
    """What ``explain`` found: graphs, their ops, their guards, and why capture gave up."""

    graphs: list[torch.fx.GraphModule]
    guards: list[Guard]
    break_reasons: list[str]

    @property
    def graph_count(self) -> int:
        return len(self.graphs)

    @property
    def ops_per_graph(self) -> list[list[str]]:
        return [[str(n.target) for n in gm.graph.nodes if n.op.startswith("call_")]
                for gm in self.graphs]

    def __str__(self) -> str:
        lines = [f"graphs: {self.graph_count}"]
        lines += [f"graph {i} ops: {', '.join(ops)}" for i, ops in enumerate(self.ops_per_graph)]
        lines += [f"break reason: {reason}" for reason in self.break_reasons]
        lines += ["guards:"] + [f"  {guard}" for guard in self.guards]
        return "\n".join(lines)


def explain(fn: Callable[..., Any]) -> Callable[..., ExplainOutput]:
    """``explain(fn)(*args)``: capture ``fn`` once with a recording backend and report."""

    def run(*args: Any, **kwargs: Any) -> ExplainOutput:
        graphs: list[torch.fx.GraphModule] = []

        def recording_backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
            graphs.append(gm)
            return gm.forward

        code = _code_of(fn)
        was_skipped = code in _skipped
        _skipped.discard(code)  # re-trace so the reason is seen again
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", FallbackWarning)
            optimize(recording_backend)(getattr(fn, "_dynamo_orig_fn", fn))(*args, **kwargs)
        if was_skipped:
            _skipped.add(code)
        entries = [e for e in _cache.get(code, []) if e.backend is recording_backend]
        _cache[code] = [e for e in _cache.get(code, []) if e.backend is not recording_backend]
        reasons = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
        guards = [g for e in entries for g in e.guards]
        return ExplainOutput(graphs, guards, reasons)

    return run
