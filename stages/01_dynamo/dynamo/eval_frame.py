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
#
# [Note: automatic dynamic]
# With ``dynamic=None`` (the default) the first compile of a code object is
# static: every size is a constant of the graph. Each compile also records, per
# tensor source, the sizes it saw (``_frame_state``). When a later call misses
# the cache and compiles again, a dim whose size differs from the recorded one
# becomes symbolic. A decoder fed lengths 4, 5, 6, ... compiles twice: once for
# 4, once with the length symbolic, and the second graph serves every length
# after. ``dynamic=True`` makes input dims symbolic from the start,
# ``dynamic=False`` never. Chapter: book/docs/dynamic-shapes.md.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import linecache
import os
import sys
import sysconfig
import types
import warnings
from collections.abc import Callable
from typing import Any

import torch

from . import config
from .convert_frame import CacheEntry, Frame, compile_or_fallback
from .exc import FallbackWarning, UserErrorInTrace, reproduce_line, unimplemented
from .guards import SNAPSHOTS, Guard, first_failing_guard
from .resume_execution import original_location
from .variables.nn_module import has_hooks

_cache: dict[types.CodeType, list[CacheEntry]] = {}
_skipped: set[types.CodeType] = set()  # gave up on these: always eager, warned once
_limit_warned: set[types.CodeType] = set()
_created: list[CacheEntry] = []  # every entry, in the order compiled (for explain)
_frame_state: dict[types.CodeType, dict[str, tuple]] = {}  # [Note: automatic dynamic]


def optimize(backend: Callable[..., Any], *, fullgraph: bool = False,
             dynamic: bool | None = None) -> Callable[..., Any]:
    """``optimize(backend)(fn)``: a wrapper of ``fn`` that runs captured graphs via ``backend``.
    ``dynamic``: see [Note: automatic dynamic]."""
    if not callable(backend):
        raise TypeError(f"optimize(backend=...) must be callable, got {type(backend).__name__}")
    if not isinstance(fullgraph, bool):
        raise TypeError(f"optimize(fullgraph=...) must be a bool, got {type(fullgraph).__name__}")
    if dynamic not in (None, True, False):
        raise TypeError(f"optimize(dynamic=...) must be None, True or False, got {dynamic!r}")

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        return _wrap(fn, backend, fullgraph, dynamic)

    return decorator


def _wrap(fn: Any, backend: Callable[..., Any], fullgraph: bool,
          dynamic: bool | None = None) -> Callable[..., Any]:
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        func, bound = fn.__func__, (fn.__self__,)  # self travels as the first argument
    elif isinstance(fn, types.FunctionType):
        func, bound = fn, ()
    else:
        raise TypeError(
            f"optimize(...)(fn): fn must be a Python function or method, got {type(fn).__name__}"
        )
    signature = inspect.signature(func, follow_wrapped=False)  # the code's own parameters
    binder = _binder(func, signature)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        frame = _make_frame(func, binder, bound + args, kwargs)
        if frame is None:  # arguments do not bind: let eager raise the TypeError
            return fn(*args, **kwargs)
        return _call(frame, backend, fullgraph, lambda: fn(*args, **kwargs), dynamic)

    wrapper._dynamo_orig_fn = fn  # type: ignore[attr-defined]
    wrapper._dynamo_backend = backend  # type: ignore[attr-defined]
    return wrapper


# [Note: binding arguments]
# Every call turns its arguments into the frame's parameter -> value table, which guards
# and sources read. ``inspect.Signature.bind`` does it for any signature, at ~15 us a call
# on the H200's host: more than the guard check. Most compiled functions (a module's
# ``forward``, the resume functions of graph breaks) take plain positional-or-keyword
# parameters and are called positionally; for those the table is the names zipped with
# the arguments, then the defaults of the parameters not passed. Anything else (keywords,
# ``*args``, keyword-only parameters) goes through ``bind``, which also raises the
# TypeError for arguments that do not fit.
def _binder(func: types.FunctionType, signature: inspect.Signature
            ) -> Callable[[tuple, dict], dict[str, Any]]:
    """``bind(args, kwargs)``: the parameter table of a call; raises TypeError when the
    arguments do not fit. See [Note: binding arguments]."""

    def slow(args: tuple, kwargs: dict) -> dict[str, Any]:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)

    params = list(signature.parameters.values())
    plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if not all(p.kind in plain for p in params):
        return slow
    names = tuple(p.name for p in params)
    defaults = [(i, p.name, p.default) for i, p in enumerate(params)
                if p.default is not inspect.Parameter.empty]
    fewest = len(params) - len(defaults)  # defaults belong to the last parameters

    def fast(args: tuple, kwargs: dict) -> dict[str, Any]:
        if kwargs or not fewest <= len(args) <= len(names):
            return slow(args, kwargs)
        arguments = dict(zip(names, args))
        for i, name, default in defaults:
            if i >= len(args):
                arguments[name] = default
        return arguments

    return fast


def _make_frame(
    func: types.FunctionType, bind: Callable[[tuple, dict], dict[str, Any]], args: tuple,
    kwargs: dict,
) -> Frame | None:
    try:
        arguments = bind(args, kwargs)
    except TypeError:
        return None
    closure = {}
    if func.__closure__:
        for name, cell in zip(func.__code__.co_freevars, func.__closure__):
            try:
                closure[name] = cell.cell_contents
            except ValueError:  # an empty cell: reading it is the user's NameError
                pass
    code, renames = _guard_safe_code(func.__code__)
    if renames:
        arguments = {renames.get(name, name): value for name, value in arguments.items()}
    return Frame(code, func.__globals__, closure, arguments, func.__closure__)


# [Note: a local named like a guard's namespace]
# A guard reads the frame's values through names: ``G`` (the globals), ``C`` (the closure),
# ``torch``, ``math``, ``sys``, and each parameter by its own name. So a function with a
# parameter named ``C`` (Mamba's ``selective_scan(hidden_states, dt, A, B, C, ...)``) ran
# eagerly. Names of locals are only names: the bytecode reads a local by its slot. Such a
# function is traced as a copy of its code whose clashing locals are renamed (``C`` becomes
# ``___local_C``), made once per code object, and its arguments are renamed to match; what
# runs eagerly, and what the user sees, is the function as written.
_GUARD_SAFE: dict[types.CodeType, tuple[types.CodeType, dict[str, str]]] = {}


def _guard_safe_code(code: types.CodeType) -> tuple[types.CodeType, dict[str, str]]:
    """``code``, or a copy of it whose locals named like a guard namespace are renamed;
    and the renames (empty when nothing clashes)."""
    found = _GUARD_SAFE.get(code)
    if found is None:
        from .guards import RESERVED_NAMES

        renames = {n: f"___local_{n}" for n in code.co_varnames if n in RESERVED_NAMES}
        if renames:
            found = (code.replace(
                co_varnames=tuple(renames.get(n, n) for n in code.co_varnames),
                co_cellvars=tuple(renames.get(n, n) for n in code.co_cellvars)), renames)
        else:
            found = (code, renames)
        _GUARD_SAFE[code] = found
    return found


# --8<-- [start:cache-lookup]
def _call(
    frame: Frame, backend: Callable[..., Any], fullgraph: bool, run_eagerly: Callable[[], Any],
    dynamic: bool | None = None,
) -> Any:
    """One call: cache hit -> compiled entry; miss -> compile (within the limit) or eager."""
    code = frame.code
    if code in _skipped:
        return run_eagerly()
    for entry in _cache.get(code, ()):  # oldest first, like PyTorch's cache
        if entry.backend is backend:
            inputs = entry.check(frame)  # the graph inputs, or None: a guard failed
            if inputs is not None:
                return entry.run(frame, inputs)
    entries = [e for e in _cache.setdefault(code, []) if e.backend is backend]
    if len(entries) >= config.recompile_limit:  # [Note: recompile limit]
        _recompile_limit_hit(frame, entries[-1])
        return run_eagerly()
    state = _frame_state.setdefault(code, {})  # [Note: automatic dynamic]
    try:
        entry, give_up = compile_or_fallback(frame, backend, fullgraph, code.co_name, dynamic,
                                             state)
    except UserErrorInTrace as e:
        return _eager_after_user_error(frame, run_eagerly, e, fullgraph)
    if give_up:
        _skipped.add(code)
    if entry is None:
        return run_eagerly()
    inputs = entry.check(frame)  # the guards must hold for the very call they came from
    if inputs is None:
        _rejects_own_call(frame, entry)
        return run_eagerly()
    _cache[code].append(entry)
    _created.append(entry)
    outputs = _first_outputs(frame, entry, inputs, fullgraph, run_eagerly)
    if isinstance(outputs, _RanEagerly):
        return outputs.result
    return entry.run(frame, inputs, outputs)
# --8<-- [end:cache-lookup]


# [Note: a graph that fails at its first call]
# Compiling can succeed and the compiled code still fail when it first runs: a library call
# that wants its arguments laid out in a way the compiler did not give them (BEiT's
# attention mask on the H200), a kernel the GPU's compiler refuses. Eager would have run,
# so the user's program must not stop there. The first call of a new entry runs its graph
# on its own; if the graph raises, and it cannot have written into its inputs yet (no
# in-place op on an input or a view of one, no running statistics), nothing has happened
# that the user could see: the graph's outputs, side effects and the rest of the frame come
# after it. So the frame runs eagerly. If eager raises too, the error is eager's, the
# user's own (a bool tensor subtracted), and the entry stays; if eager runs, the frame runs
# eagerly from then on, with one warning. A graph that may have written into an input
# before failing re-raises instead: running the frame again would apply the write twice.
# Under ``fullgraph=True`` or ``MINIPT2_STRICT=1`` the error is raised as it is.
# --8<-- [start:first-call]
@dataclasses.dataclass
class _RanEagerly:
    result: Any


def _first_outputs(frame: Frame, entry: CacheEntry, inputs: tuple, fullgraph: bool,
                   run_eagerly: Callable[[], Any]) -> Any:
    """The graph's outputs at the new entry's first call; or, when the graph failed there,
    the frame run eagerly ([Note: a graph that fails at its first call])."""
    if entry.compiled_fn is None:
        return ()
    try:
        return entry.compiled_fn(*inputs)
    except Exception as error:
        if fullgraph or config.strict() or entry.writes_inputs:
            raise
        result = _RanEagerly(run_eagerly())  # eager's own error, if it has one, is raised
        _cache[frame.code].remove(entry)
        first_line = str(error).splitlines()[0] if str(error) else ""
        _eager_from_now_on(frame, "the compiled graph failed at its first call: "
                                  f"{type(error).__name__}: {first_line}")
        return result
# --8<-- [end:first-call]


def _eager_from_now_on(frame: Frame, reason: str) -> None:
    """The frame's code runs eagerly from now on; one warning says why."""
    _skipped.add(frame.code)
    warnings.warn(
        f'minipt2 stage "dynamo" could not compile {frame.code.co_name}(); running it '
        f"eagerly.\n  reason: {reason}\n"
        f"  at {frame.code.co_filename}:{frame.code.co_firstlineno}\n"
        f"  (fullgraph=True or MINIPT2_STRICT=1 raises instead)", FallbackWarning, stacklevel=5)


def _eager_after_user_error(frame: Frame, run_eagerly: Callable[[], Any],
                            error: UserErrorInTrace, fullgraph: bool) -> Any:
    """[Note: user errors]: eager raises the genuine error. If eager succeeds instead, the
    error was the trace's own (a meta kernel stricter than the real one, a Python check the
    trace could not answer), and tracing again at every call would fail the same way at the
    cost of a trace each time: the code runs eagerly from now on, with one warning."""
    result = run_eagerly()
    where = f" (at {error.location})" if error.location else ""
    if fullgraph or config.strict():
        raise RuntimeError(f"{frame.code.co_name}(): tracing raised {error}{where}, which "
                           "eager PyTorch does not raise") from error.error
    _eager_from_now_on(frame, f"tracing raised {error}{where}, which eager PyTorch does not "
                       "raise")
    return result


def _rejects_own_call(frame: Frame, entry: CacheEntry) -> None:
    """A bug of this stage: a guard that is False for the call it was made from. The entry
    could never be used; run eagerly, and say which guard (MINIPT2_STRICT=1 raises)."""
    failed = first_failing_guard(entry.guards, frame.namespace())
    message = f"{frame.code.co_name}(): guard {failed} rejects the call it was made from"
    if config.strict():
        raise AssertionError(message)
    warnings.warn(f'minipt2 stage "dynamo": {message}; running it eagerly.', FallbackWarning,
                  stacklevel=4)


def _recompile_limit_hit(frame: Frame, last: CacheEntry) -> None:
    """Warn once (or, under MINIPT2_STRICT=1, raise) naming the guard that failed."""
    code = frame.code
    failed = first_failing_guard(last.guards, frame.namespace())
    limit = f"{code.co_name}() hit the recompile limit " \
            f"(config.recompile_limit = {config.recompile_limit})"
    text = linecache.getline(code.co_filename, code.co_firstlineno).strip()
    where = f"{code.co_filename}:{code.co_firstlineno}: {text}"
    if config.strict():
        unimplemented(f"{limit}; guard failed: {failed}", where)
    if code in _limit_warned:
        return
    _limit_warned.add(code)
    qualname = original_location(code, 0)[0].co_qualname
    warnings.warn(
        f'minipt2 stage "dynamo": {limit}; running it eagerly.\n'
        f"  guard failed: {failed}\n"
        f"  at {where}\n"
        f"  {reproduce_line(qualname)}",
        FallbackWarning, stacklevel=4,
    )


def reset() -> None:
    """Forget every compiled entry, fallback decision and warning."""
    _cache.clear()
    _skipped.clear()
    _limit_warned.clear()
    _created.clear()
    _wrappers.clear()
    _frame_state.clear()
    SNAPSHOTS.clear()  # only the guards of the entries just forgotten read them
    config.eager_ops.clear()  # [Note: ops kept out of the graph]


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


_wrappers: dict[tuple[types.FunctionType, int, bool | None], Callable[..., Any]] = {}


def optimized(fn: types.FunctionType, backend: Callable[..., Any],
              dynamic: bool | None = None) -> Callable[..., Any]:
    """The optimized wrapper of a resume function, or of a callee that broke the graph, with
    the same backend: one per function object (not per code object: each closure of a code
    object has its own resume function reading its own cells)."""
    key = (fn, id(backend), dynamic)
    if key not in _wrappers:
        _wrappers[key] = _wrap(fn, backend, False, dynamic)
    return _wrappers[key]


def _is_library(func: types.FunctionType) -> bool:
    """Code that is not the user's model: see [Note: what counts as a library]."""
    return _is_library_file(func.__code__.co_filename)


# --8<-- [start:library]
# [Note: what counts as a library]
# A call that broke the graph is compiled on its own when it is the user's code, and run as
# is when it is a library's: the standard library, torch (its functions are what graphs are
# made of, not models), the packages a compiler itself is built from (triton, sympy, numpy)
# and the test runners. Other installed packages are the user's models: torchvision's
# ResNet or a transformers model sits in ``site-packages`` like torch does, but its
# ``forward`` is exactly what the user asked to compile. Treating all of ``site-packages``
# as a library (as this check once did) ran a whole HuggingFace model eagerly behind its
# first graph break, with no warning and no graph. PyTorch's Dynamo draws the same line
# with its lists of skipped files.
SKIPPED_PACKAGES = ("torch", "triton", "sympy", "numpy", "mpmath", "_pytest", "pytest",
                    "pluggy", "hypothesis", "typing_extensions", "dynamo", "aotautograd",
                    "primtorch", "inductor", "driver")
# --8<-- [end:library]


def _package_roots() -> list[str]:
    """The folders of the skipped packages that are loaded (one that is not loaded has no
    code running yet; each file is asked about once, when its code is first called)."""
    roots = []
    for name in SKIPPED_PACKAGES:
        file = getattr(sys.modules.get(name), "__file__", None)
        if file and os.path.basename(file).startswith("__init__."):  # a package: its folder
            roots.append(os.path.join(os.path.dirname(os.path.abspath(file)), ""))
        elif file:  # a module of one file (typing_extensions.py): that file
            roots.append(os.path.abspath(file))
    return roots


@functools.cache
def _is_library_file(filename: str) -> bool:
    if filename.startswith("<"):  # frozen modules, exec'd and generated code
        return True
    path = os.path.abspath(filename)
    if path.startswith(tuple(_package_roots())):
        return True
    installed = any(f"{os.sep}{d}{os.sep}" in path for d in ("site-packages", "dist-packages"))
    stdlib = tuple(os.path.join(sysconfig.get_paths()[k], "") for k in ("stdlib", "platstdlib"))
    return not installed and path.startswith(stdlib)


def invoke_optimized(fn: Any, backend: Callable[..., Any], args: tuple, kwargs: dict,
                     dynamic: bool | None = None) -> Any:
    """Run a call that broke the graph. A user's Python function or module is compiled on
    its own (like PyTorch's frame hook would catch its frame); anything else runs as is.
    Its optimized wrapper is made once per function ([Note: the second call is cheap]); a
    method's ``self`` is passed as its first argument, so no wrapper keeps an instance alive."""
    target = fn
    if isinstance(fn, torch.nn.Module) and type(fn).__call__ is torch.nn.Module.__call__:
        target = fn if has_hooks(fn) else fn.forward
    func = getattr(target, "__func__", target)
    if not isinstance(func, types.FunctionType) or _is_library(func) or \
            func.__code__.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE):
        return fn(*args, **kwargs)
    if func is not target:  # a bound method
        args = (target.__self__, *args)
    return optimized(func, backend, dynamic)(*args, **kwargs)


@dataclasses.dataclass
class GraphBreak:
    """One graph break: why, and where in the user's code."""

    reason: str
    location: str

    def __str__(self) -> str:
        return f"{self.reason}\n  at {self.location}"


@dataclasses.dataclass
class ExplainOutput:
    """What ``explain`` found: graphs, their ops, their guards, graph breaks and fallbacks."""

    graphs: list[torch.fx.GraphModule]
    guards: list[Guard]
    break_reasons: list[str]  # every graph break and eager fallback, as text
    breaks: list[GraphBreak] = dataclasses.field(default_factory=list)
    fallbacks: list[str] = dataclasses.field(default_factory=list)
    guards_per_graph: list[list[Guard]] = dataclasses.field(default_factory=list)

    @property
    def graph_count(self) -> int:
        return len(self.graphs)

    @property
    def graph_break_count(self) -> int:
        return len(self.breaks)

    @property
    def ops_per_graph(self) -> list[list[str]]:
        return [[_op_name(n) for n in gm.graph.nodes if n.op.startswith("call_")]
                for gm in self.graphs]

    def __str__(self) -> str:
        ops = self.ops_per_graph
        lines = [f"graphs: {self.graph_count}, graph breaks: {self.graph_break_count}, "
                 f"ops: {sum(len(o) for o in ops)}"]
        if self.breaks:
            lines.append("Break reasons:")
            for i, brk in enumerate(self.breaks, 1):
                lines += [f"  {i}. {brk.reason}", f"     at {brk.location}"]
        if self.fallbacks:
            lines.append("Eager fallbacks:")
            lines += ["  " + line for f in self.fallbacks for line in f.splitlines()]
        for i, names in enumerate(ops):
            lines.append(f"Graph {i}: {len(names)} ops: {', '.join(names)}")
        lines.append("Guards:")
        lines += [f"  {guard}" for guard in _unique(self.guards)]
        return "\n".join(lines)


def _op_name(node: torch.fx.Node) -> str:
    if node.op == "call_method":
        return f".{node.target}"
    return getattr(node.target, "__name__", str(node.target))


def _unique(guards: list[Guard]) -> list[Guard]:
    return list({g.expr: g for g in guards}.values())


# --8<-- [start:explain]
def explain(fn: Callable[..., Any]) -> Callable[..., ExplainOutput]:
    """``explain(fn)(*args)``: run ``fn`` once through dynamo with a recording backend and
    report graphs, graph breaks (reason and source line), guards and ops per graph.
    ``str(report)`` is the human-readable form (``python -m driver explain`` prints it)."""

    def run(*args: Any, **kwargs: Any) -> ExplainOutput:
        graphs: list[torch.fx.GraphModule] = []

        def recording_backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
            graphs.append(gm)
            return gm.forward

        target = getattr(fn, "_dynamo_orig_fn", fn)
        if isinstance(target, torch.nn.Module):
            target = target.forward
        code = _code_of(target)
        was_skipped = code in _skipped
        _skipped.discard(code)  # re-trace so the reason is seen again
        start = len(_created)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", FallbackWarning)
            optimize(recording_backend)(target)(*args, **kwargs)
        if was_skipped:
            _skipped.add(code)
        entries = [e for e in _created[start:] if e.backend is recording_backend]
        for key in list(_cache):  # the report's entries must not serve later calls
            _cache[key] = [e for e in _cache[key] if e.backend is not recording_backend]
        del _created[start:]
        fallbacks = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
        breaks = [GraphBreak(e.break_point.reason, e.break_point.location)
                  for e in entries if e.break_point is not None]
        return ExplainOutput(
            graphs, [g for e in entries for g in e.guards],
            [str(b) for b in breaks] + fallbacks, breaks, fallbacks,
            [e.guards for e in entries if e.graph is not None])

    return run
# --8<-- [end:explain]
