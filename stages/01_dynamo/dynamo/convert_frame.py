"""convert_frame: turn one call of a Python function into a compiled cache entry.

Input: a ``Frame`` (code object, globals, closure, bound arguments) and a
backend. Output: a ``CacheEntry`` holding the captured GraphModule, its
guards, the compiled check function, the backend's compiled callable and
what runs after it: rebuilding the return value, replaying side effects,
and at a graph break the unsupported instruction plus a call of the resume
function. When capture fails: the decision to run eagerly, with one
``FallbackWarning`` (or an exception under fullgraph / MINIPT2_STRICT=1).
Chapter: book/docs/dynamo.md ("From frame to cache entry", "Graph breaks").
"""

from __future__ import annotations

import dataclasses
import functools
import types
import warnings
from collections.abc import Callable
from typing import Any

import torch

from . import config
from .codegen import (
    NULL,
    Residual,
    callee_slots,
    is_null_tracker,
    rebuild_function,
    rebuild_stack,
    resume_args,
    resume_plan,
    run_instruction,
)
from .exc import (
    BackendCompilerFailed,
    FallbackWarning,
    Unsupported,
    UserErrorInTrace,
    reproduce_line,
    unimplemented,
)
from .guards import RESERVED_NAMES, Guard, compile_guards
from .output_graph import OutputGraph
from .resume_execution import RESUME_ORIGINS, handler_at, live_locals, original_location
from .side_effects import SideEffects
from .symbolic_convert import BreakPoint, InstructionTranslator, Retrace
from .variables.base import NullVariable, VariableTracker, children


@dataclasses.dataclass
class Frame:
    """What a call looks like from inside: the values a guard or a source may name."""

    code: types.CodeType
    f_globals: dict[str, Any]
    closure: dict[str, Any]  # free variable name -> current cell contents
    arguments: dict[str, Any]  # parameter name -> value, in signature order
    cells: tuple | None = None  # the function's real closure cells

    def namespace(self) -> dict[str, Any]:
        return {"G": self.f_globals, "C": self.closure, **self.arguments}


# [Note: the second call is cheap]
# A frame with a graph break runs its entry's residual on every call: rebuild the stack and
# the live locals, run the instruction, continue in the resume function. The first time a
# break is reached, which resume function that is and which locals it takes have to be
# worked out: the live-locals dataflow over the bytecode, the resume function's code, its
# optimized wrapper. None of it depends on the call's values, only on the break point, the
# offset the frame continues at (an ``if`` on ``.item()`` has two) and the function object
# (its globals and closure cells: the resume function reads the cells), so the entry keeps
# the answer in ``continuations`` and a later call goes straight to the wrapper (nor does
# ``run`` import ``eval_frame`` each time any more: an import statement costs ~3 us even when
# the module is loaded). A three-frame function on tiny CPU tensors went from 82 to 64 us a
# call on the CPU machine. The same holds for a Python callee the break instruction calls
# (compiled on its own): its wrapper is made once per function, not at every call, and
# whether its file belongs to a library is asked once per file; a function whose inlined
# helper breaks went from 72 to 59 us a call, one calling a module that breaks after an
# ``.item()`` branch from 132 to 81 us. Rebuilding a live local from its source (a resume
# function's parameter, mostly) is a dict lookup, not an ``eval`` over a copy of the guard
# globals (``eval_source``): the benchmark's graph_breaks forward, tiny CPU tensors, 129 ->
# 125 us a call. See book/docs/dynamo.md.


@dataclasses.dataclass
class CacheEntry:
    """One specialisation of a code object: valid whenever all ``guards`` hold."""

    code: types.CodeType
    graph: torch.fx.GraphModule | None  # None when the trace recorded no operation
    guards: list[Guard]
    compiled_fn: Callable[..., Any] | None
    # all guards compiled into one function that also fetches the placeholders' tensors:
    # the inputs tuple when every guard holds, else None ([Note: compiled guard check])
    check_fn: Callable[..., tuple[Any, ...] | None]
    output_nodes: list[torch.fx.Node]  # graph output i is the value of output_nodes[i]
    output: VariableTracker | None  # the returned structure (None at a graph break)
    side_effects: SideEffects
    backend: Callable[..., Any]
    break_point: BreakPoint | None = None
    resume_offset: int | None = None  # where the frame continues after the break
    dynamic: bool | None = None  # the ``dynamic=`` setting, handed on to resume functions
    # (offset, id of globals, id of closure) -> (optimized resume function, live locals)
    continuations: dict[tuple, tuple] = dataclasses.field(default_factory=dict, repr=False)
    # (id of globals, id of closure) -> (resume function, which rebuilt values it takes):
    # ``plan_resume``, for a break whose call the rebuild function makes
    resumes: dict[tuple, tuple] = dataclasses.field(default_factory=dict, repr=False)

    def check(self, frame: Frame) -> tuple[Any, ...] | None:
        """The graph inputs of ``frame`` if this entry may serve it, else None."""
        return self.check_fn(frame.f_globals, frame.closure, **frame.arguments)

    # --8<-- [start:run-entry]
    def run(self, frame: Frame, inputs: tuple[Any, ...], outputs: Any = None) -> Any:
        """Graph, then side effects, then the return value or the rest of the frame.
        ``inputs``: the graph inputs, as ``check`` fetched them; ``outputs``: the graph's, if
        the caller ran it already."""
        if outputs is None:
            outputs = self.compiled_fn(*inputs) if self.compiled_fn is not None else ()
        rebuild = self.rebuild
        bp = self.break_point
        if rebuild is not None:  # [Note: the rebuild as one function]
            values = rebuild(outputs, frame.namespace(), self.invoke)
            if bp is None:
                return values[0]
            if self.calls_in_rebuild:  # the break's CALL was made too: continue after it
                found = self.resumes.get((id(frame.f_globals), id(frame.cells)))
                if found is None:
                    found = self.plan_resume(frame, values)
                resume, picks = found
                return resume(*[values[i] for i in picks])
            depth = len(bp.stack)
            stack, local_values = values[:depth], dict(zip(bp.live, values[depth:]))
        else:
            rt = Residual(dict(zip(self.output_nodes, outputs)), frame.namespace())
            self.side_effects.replay(rt)
            if bp is None:
                return self.output.reconstruct(rt)
            stack = rebuild_stack(bp.stack, rt)
            local_values = {name: v.reconstruct(rt) for name, v in bp.live.items()}
        if self.handler is None:
            target = run_instruction(bp.inst, stack, bp.kw_names, self.invoke)
        else:  # [Note: a break inside a try block]
            before = list(stack)
            try:
                target = run_instruction(bp.inst, stack, bp.kw_names, self.invoke)
            except BaseException as error:  # noqa: BLE001 - the frame's handler decides
                return self.handle(frame, before, local_values, error)
        offset = self.resume_offset if target is None else target
        resume, live = self.continuation(frame, offset, stack, local_values)
        return resume(*resume_args(stack, local_values, live))
    # --8<-- [end:run-entry]

    @functools.cached_property
    def rebuild(self) -> Callable[[Any, dict[str, Any]], list[Any]] | None:
        """What ``run`` rebuilds after the graph (the return value; or the stack, then the
        live locals), as one generated function; None where the interpreted path is kept:
        side effects to replay, or a tracker ``rebuild_function`` does not know."""
        if not self.side_effects.is_empty():
            return None
        bp = self.break_point
        if bp is None:
            return rebuild_function([self.output], self.output_nodes)
        trackers = [*bp.stack, *bp.live.values()]
        if self.calls_in_rebuild:
            found = rebuild_function(trackers, self.output_nodes,
                                     (len(bp.stack), bp.inst.arg, bp.kw_names))
            if found is not None:
                return found
            self.calls_in_rebuild = False
        return rebuild_function(trackers, self.output_nodes)

    def plan_resume(self, frame: Frame, values: list[Any]) -> tuple[Callable[..., Any], list]:
        """(the resume function after the break's call, which of the rebuild's values it
        takes, in order: the stack but its NULLs, then the live locals it reads), found once
        per function object like ``continuation``."""
        bp = self.break_point
        depth = len(bp.stack) - bp.inst.arg - 1  # the stack after the call
        stack, local_values = values[:depth], dict(zip(bp.live, values[depth:]))
        resume, live = self.continuation(frame, self.resume_offset, stack, local_values)
        names = list(bp.live)
        picks = [i for i, value in enumerate(stack) if value is not NULL]
        picks += [depth + names.index(name) for name in live]
        found = self.resumes[(id(frame.f_globals), id(frame.cells))] = (resume, picks)
        return found

    @functools.cached_property
    def calls_in_rebuild(self) -> bool:
        """Whether the rebuild function makes the break's call as well: a ``CALL`` outside
        any ``try`` block (where an error must reach the frame's handler)."""
        return self.break_point.inst.opname == "CALL" and self.handler is None

    @functools.cached_property
    def writes_inputs(self) -> bool:
        """Whether the graph may write into one of its inputs ([Note: a graph that fails at
        its first call]): an in-place op, a ``setitem``, ``inplace=True`` or a normalization
        that updates running statistics, on an input or a view of one."""
        if self.graph is None:
            return False
        return any(_may_write_input(node) for node in self.graph.graph.nodes)

    @functools.cached_property
    def handler(self) -> tuple[int, int, bool] | None:
        """The except/finally/with handler around the break instruction, in the original
        code's offsets, or None."""
        return handler_at(*original_location(self.code, self.break_point.inst.offset))

    # --8<-- [start:break-in-try]
    # [Note: a break inside a try block]
    # A break can fall inside ``try:`` or ``with``: HuggingFace runs every model's forward
    # inside ``try: ... finally: reset the output collector``. The resume function copies
    # the original bytecode with its exception table, so from the next instruction on,
    # Python's own handlers apply. Only the break instruction itself runs outside the
    # user's code, here; if it raises, the frame continues where CPython would jump: at the
    # handler, with the stack cut to the handler's depth, the offset of the raising
    # instruction pushed when the table says so, and the exception on top. That
    # continuation is a resume function too, at the handler's offset, run as plain Python
    # (the error path needs no graph). The ``finally`` or ``except`` body then runs as in
    # eager, and re-raises or carries on.
    def handle(self, frame: Frame, stack: list[Any], local_values: dict[str, Any],
               error: BaseException) -> Any:
        code, offset = original_location(self.code, self.break_point.inst.offset)
        target, depth, lasti = self.handler
        stack = [*stack[:depth], *([0] if lasti else []), error]
        fn, live = resume_plan(code, target, stack, local_values, live_locals,
                               frame.f_globals, frame.cells)
        if lasti:  # where RERAISE puts the frame back: the instruction that raised
            stack[depth] = (RESUME_ORIGINS[fn.__code__][1] + offset) // 2
        return fn(*resume_args(stack, local_values, live))
    # --8<-- [end:break-in-try]

    def invoke(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """A call the graph could not hold: a Python callee is compiled on its own."""
        return _eval_frame().invoke_optimized(fn, self.backend, args, kwargs, self.dynamic)

    def continuation(self, frame: Frame, offset: int, stack: list[Any],
                     local_values: dict[str, Any]) -> tuple[Callable[..., Any], tuple[str, ...]]:
        """(the resume function at ``offset``, optimized; the live locals it takes), made at
        the first call that gets there ([Note: the second call is cheap]). Keyed by the
        function's globals and closure too: closures of one code object share entries."""
        key = (offset, id(frame.f_globals), id(frame.cells))
        found = self.continuations.get(key)
        if found is None:
            fn, live = resume_plan(self.code, offset, stack, local_values, live_locals,
                                   frame.f_globals, frame.cells)
            resume = _eval_frame().optimized(fn, self.backend, self.dynamic)
            found = self.continuations[key] = (resume, live)  # (keeps fn, and so the ids, alive)
        return found


_VIEWS = frozenset({"getitem", "view", "reshape", "transpose", "permute", "expand", "narrow",
                    "select", "unsqueeze", "squeeze", "flatten", "t", "as_strided", "view_as",
                    "unflatten", "movedim", "swapaxes", "detach", "contiguous", "unbind",
                    "split", "chunk", "diagonal", "expand_as", "real", "imag", "getattr"})
_RUNNING_STATS = frozenset({"batch_norm", "instance_norm"})
_AUGMENTED = frozenset({"iadd", "isub", "imul", "imatmul", "itruediv", "ifloordiv", "imod",
                        "ipow", "iand", "ior", "ixor", "ilshift", "irshift"})  # x += y


def _target_name(node: torch.fx.Node) -> str:
    return node.target if isinstance(node.target, str) else \
        getattr(node.target, "__name__", "")


def _reaches_input(node: Any) -> bool:
    """Is ``node`` a graph input, or a view of one (through view-making ops only)?"""
    while isinstance(node, torch.fx.Node):
        if node.op in ("placeholder", "get_attr"):
            return True
        if node.op not in ("call_function", "call_method") or \
                _target_name(node) not in _VIEWS or not node.args:
            return False
        node = node.args[0]
    return False


def _may_write_input(node: torch.fx.Node) -> bool:
    if node.op not in ("call_function", "call_method", "call_module"):
        return False
    name = _target_name(node)
    writes = (name in ("setitem", "__setitem__") or node.kwargs.get("inplace") is True
              or (name.endswith("_") and not name.startswith("_")) or name in _AUGMENTED
              or name.strip("_") in _AUGMENTED or "out" in node.kwargs)
    if name in _RUNNING_STATS or node.op == "call_module":
        return True  # running statistics, or a module we cannot see into: assume it writes
    return writes and any(_reaches_input(a) for a in node.all_input_nodes)


@functools.cache
def _eval_frame() -> types.ModuleType:
    """eval_frame, which imports this module (so it cannot be imported at the top); cached,
    since an import statement costs microseconds even when the module is loaded."""
    from . import eval_frame

    return eval_frame


def reconstructable(value: VariableTracker) -> bool:
    """Can the residual code rebuild this value's real object after the graph?"""
    if value.source is not None or isinstance(value, NullVariable):
        return True
    if type(value).reconstruct is VariableTracker.reconstruct:
        return False
    return all(reconstructable(child) for child in children(value))


def convert_frame(frame: Frame, backend: Callable[..., Any], allow_breaks: bool = False,
                  dynamic: bool | None = None, frame_state: dict | None = None) -> CacheEntry:
    """Trace ``frame`` into a graph, compile it with ``backend``, package the result.

    ``dynamic`` and ``frame_state`` (the sizes earlier compiles of this code saw) decide
    which input sizes are symbolic; see [Note: automatic dynamic] in eval_frame.py. A
    backend that names ops it could not handle gets a graph without them ([Note: ops kept
    out of the graph] in config.py), where graph breaks are allowed.
    """
    while True:
        try:
            return _convert_once(frame, backend, allow_breaks, dynamic, frame_state)
        except BackendCompilerFailed as failed:
            ops = set(getattr(failed.__cause__, "eager_ops", ())) - config.eager_ops
            if not ops or not allow_breaks:
                raise
            config.eager_ops.update(ops)


def _convert_once(frame: Frame, backend: Callable[..., Any], allow_breaks: bool,
                  dynamic: bool | None, frame_state: dict | None) -> CacheEntry:
    clash = RESERVED_NAMES & set(frame.arguments)
    if clash:
        unimplemented(f"a parameter named {sorted(clash)[0]!r} shadows a name guards use")
    planned = None
    while True:  # [Note: a break inside a callee is traced again], [Note: a tensor made a leaf]
        output = OutputGraph(frame.code.co_name)
        output.root_globals = frame.f_globals
        output.dynamic = dynamic
        output.frame_state = frame_state if frame_state is not None else {}
        tracer = InstructionTranslator(frame.code, frame.f_globals, frame.closure,
                                       frame.arguments, output, allow_breaks, planned)
        try:
            return_value = tracer.run()
        except Retrace as again:
            planned = again
            continue
        bp = tracer.break_point
        values = [*bp.stack, *bp.live.values()] if bp else [return_value]
        values += output.side_effects.values()
        escaped = output.escaping_leaf(values)  # [Note: a tensor made a leaf]
        if escaped is None:
            break
        reason, planned_break = escaped
        if planned_break is None or planned is not None:
            unimplemented(f"{reason}, and the frame cannot break where it was made",
                          tracer.location())
        planned = planned_break
    try:
        for value in values:
            if not reconstructable(value):
                what = "returning" if bp is None else "keeping alive across a graph break"
                unimplemented(f"{what} {value}, which cannot be rebuilt outside the graph")
        graph, output_nodes = output.compile_subgraph(values)
    except Unsupported as e:
        e.location = e.location or tracer.location()
        raise
    params = list(frame.arguments)
    compiled_fn = None
    if graph is not None and _read_only_by_the_break(bp, output_nodes, output.side_effects):
        compiled_fn = _without_grad(_compile_without_grad(backend, graph, output.example_inputs))
    elif graph is not None:
        compiled_fn = _compile(backend, graph, output.example_inputs)
    guards = output.guard_list()  # after the backend: it may have added shape guards
    resume_offset = None
    if bp is not None:
        index = tracer.offset_to_index[bp.inst.offset]
        resume_offset = tracer.instructions[index + 1].offset
    return CacheEntry(
        code=frame.code, graph=graph, guards=guards, compiled_fn=compiled_fn,
        check_fn=compile_guards(guards, params, output.input_sources, frame.namespace()),
        output_nodes=output_nodes, output=return_value, side_effects=output.side_effects,
        backend=backend, break_point=bp, resume_offset=resume_offset, dynamic=dynamic,
    )


# --8<-- [start:read-only-by-the-break]
# [Note: a graph whose outputs only feed .item()]
# ``if h.mean().item() > 0:`` breaks the graph at ``.item()``; the graph before it computes the
# mean, which requires grad when ``h`` does, so the backend gets a training graph: an
# ``autograd.Function`` with a backward graph, saved tensors and the Function's per-call cost
# (on the H200's host, inside the benchmark's graph_breaks step, about 45 us of a frame's
# host time went to aotautograd's training runtime around two small kernels). Yet nothing
# can ever ask for that gradient: the mean's only use is the break's ``.item()``, which
# returns a Python number, and after the call the tensor is gone. When every output of the
# graph is such a tensor (read only as the callee ``t.item()`` or ``t.tolist()`` of a break
# ``CALL``, in no other stack slot, live local or side effect), the graph runs with grad
# mode off, compiled that way too: aotautograd serves its inference entry, one compiled
# call and no Function. Eager records a node for the mean that is dropped with the tensor;
# here it is never made, which no program can observe.
_READ_ONLY_METHODS = frozenset({"item", "tolist"})


def _read_only_by_the_break(bp: BreakPoint | None, output_nodes: list[torch.fx.Node],
                            side_effects: SideEffects) -> bool:
    """Whether every graph output is only read by the break's call as ``t.item()`` or
    ``t.tolist()``, so that no gradient can ever flow through it ([Note: a graph whose
    outputs only feed .item()])."""
    from .variables.misc import MethodVariable
    from .variables.tensor import TensorVariable

    if (bp is None or bp.inst.opname != "CALL" or bp.inst.arg != 0 or not output_nodes
            or not side_effects.is_empty() or len(bp.stack) < 2):
        return False
    at, self_slot = callee_slots(bp.stack, 0, is_null_tracker)
    callee, bound = bp.stack[at], bp.stack[self_slot]
    if not (isinstance(bound, NullVariable) and type(callee) is MethodVariable
            and callee.name in _READ_ONLY_METHODS
            and type(callee.obj) is TensorVariable and callee.obj.source is None):
        return False
    read = callee.obj.proxy.node
    if any(node is not read for node in output_nodes):
        return False

    def mentions(value: VariableTracker) -> bool:
        if isinstance(value, TensorVariable) and value.proxy.node is read:
            return True
        return any(mentions(child) for child in children(value))

    others = [v for v in [*bp.stack, *bp.live.values()] if v is not callee]
    return not any(mentions(v) for v in others)
# --8<-- [end:read-only-by-the-break]


def _compile_without_grad(backend: Callable[..., Any], graph: torch.fx.GraphModule,
                          example_inputs: list) -> Callable[..., Any]:
    with torch.no_grad():
        return _compile(backend, graph, example_inputs)


def _without_grad(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` called with grad mode off (and the caller's mode restored after)."""
    set_grad_enabled, is_grad_enabled = torch._C._set_grad_enabled, torch.is_grad_enabled

    def run(*args: Any) -> Any:
        prior = is_grad_enabled()
        set_grad_enabled(False)
        try:
            return fn(*args)
        finally:
            set_grad_enabled(prior)

    run.__wrapped__ = fn  # type: ignore[attr-defined]
    return run


def _compile(backend: Callable[..., Any], graph: torch.fx.GraphModule, example_inputs: list
             ) -> Callable[..., Any]:
    try:
        compiled_fn = backend(graph, list(example_inputs))
        if not callable(compiled_fn):
            raise TypeError(f"the backend returned {type(compiled_fn).__name__}, not a callable")
    except Exception as e:
        raise BackendCompilerFailed(getattr(backend, "__name__", repr(backend)), e) from e
    return compiled_fn


def compile_or_fallback(
    frame: Frame, backend: Callable[..., Any], fullgraph: bool, name: str,
    dynamic: bool | None = None, frame_state: dict | None = None,
) -> tuple[CacheEntry | None, bool]:
    """Apply the error policy around ``convert_frame``.

    Returns (entry, give_up): entry is None when the frame must run eagerly
    this time; give_up means "and for good" (the warning was issued, one per
    code object). See [Note: user errors] for why a user error gives no entry
    and no warning.
    """
    strict = fullgraph or config.strict()
    try:
        return convert_frame(frame, backend, not strict, dynamic, frame_state), False
    except UserErrorInTrace:
        raise  # the caller runs the frame eagerly: [Note: user errors]
    except (Unsupported, BackendCompilerFailed) as e:
        if strict:
            raise
        error: Exception = e
    except Exception as e:  # a bug in this stage must not break a working program
        if strict:
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
        f"  (fullgraph=True or MINIPT2_STRICT=1 raises instead)\n"
        f"  {reproduce_line(original_location(code, 0)[0].co_qualname)}"
    )
