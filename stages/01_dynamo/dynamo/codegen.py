"""The residual: what runs in plain Python after a compiled graph.

Input: the graph's outputs, the frame's namespace, and the trackers of
everything the rest of the call needs (the return value; or, at a graph
break, the value stack and the live locals), plus the recorded side
effects. Output: the real values rebuilt from those trackers; and at a
graph break, the unsupported instruction run for real and the frame
continued by calling its resume function (itself optimized in turn).
PyTorch emits this as bytecode; we run it as Python code, which is the same
work in an order a reader can step through.
Chapter: book/docs/dynamo.md ("Graph breaks and resume functions").
"""

from __future__ import annotations

import dis
import functools
import operator
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .resume_execution import make_resume_code, original_location
from .utils import eval_source
from .variables.base import NullVariable, VariableTracker
from .variables.iter import ListIteratorVariable

PY313 = sys.version_info >= (3, 13)
NULL = object()  # CPython's NULL stack entry, in the residual's real stack


class Residual:
    """Rebuilds real values from trackers after the graph ran (``tracker.reconstruct(rt)``)."""

    def __init__(self, outputs: dict[Any, Any], namespace: dict[str, Any]) -> None:
        self.outputs = outputs  # fx output node -> real tensor
        self.namespace = namespace
        self._memo: dict[int, Any] = {}

    def eval(self, source: str) -> Any:
        return eval_source(source, self.namespace)

    def tensor(self, node: Any) -> Any:
        return self.outputs[node]

    def memo(self, tracker: VariableTracker, build: Callable[[], Any]) -> Any:
        """One real object per mutable object, however many trackers refer to it."""
        key = id(tracker.mutable_local or tracker)
        if key not in self._memo:
            self._memo[key] = build()
        return self._memo[key]


class LoopIterator:
    """A rebuilt ``for``-loop iterator; the resume function receives its remaining items."""

    def __init__(self, items: tuple) -> None:
        self.items = list(items)

    def __iter__(self) -> LoopIterator:
        return self

    def __next__(self) -> Any:
        if not self.items:
            raise StopIteration
        return self.items.pop(0)


def rebuild_stack(stack: list[VariableTracker], rt: Residual) -> list[Any]:
    values = []
    for tracker in stack:
        if isinstance(tracker, NullVariable):
            values.append(NULL)
        elif isinstance(tracker, ListIteratorVariable):
            values.append(LoopIterator(tuple(i.reconstruct(rt) for i in tracker.remaining())))
        else:
            values.append(tracker.reconstruct(rt))
    return values


# --8<-- [start:rebuild-function]
# [Note: the rebuild as one function]
# ``tracker.reconstruct(rt)`` walks the trackers on every call: a method call per tracker, an
# ``isinstance`` chain in ``rebuild_stack``, a ``Residual`` with its dict from graph output
# nodes to tensors, then ``run_instruction`` taking the break's ``CALL`` apart on a list and
# asking ``invoke`` whether the callee is a Python function to compile. Almost all of it is
# fixed by the break point: this slot is graph output 2, that one the constant ``"step"``,
# that one the frame's ``self``, and the callee is ``print``. So the first call of an entry
# writes it down as one Python function, compiled once (PyTorch's Dynamo emits the same
# thing as bytecode into the transformed frame):
#
#     def ___rebuild(outputs, ns, invoke):
#         ___s1 = ___k1            # print
#         ___s2 = ___k2            # "step"
#         ___s3 = ___r3(ns)        # self.sink, read through the source's reader
#         ___s4 = outputs[0]       # h, a live local
#         ___result = ___s1(___s2, file=___s3)
#         return [___result, ___s4]  # the stack after the call, then the live locals
#
# Every value is read before the call, in stack order, as the interpreted path does. A
# callee that is a tensor's method or a value that is not a Python function (``print``,
# ``len``) is called directly; any other goes through ``invoke``, which compiles a user's
# function on its own. A list or tuple the trace built is built once however many slots
# hold it (as ``Residual.memo`` does). Trackers of other kinds, side effects to replay, a
# break instruction other than ``CALL`` or one inside a ``try`` block keep the interpreted
# path (the rebuild alone is still generated where it can be): the function is only a
# faster spelling of it. On the CPU machine (tiny tensors, one thread) a function with a
# ``print`` break went from 38.7 to 27.5 us a call, one with an ``.item()`` branch from
# 36.9 to 28.8 us (eager: 11.7 and 16.0 us).
def is_null_tracker(tracker: VariableTracker) -> bool:
    return isinstance(tracker, NullVariable)


class _NotPlain(Exception):
    """A tracker ``rebuild_function`` does not write code for."""


def rebuild_function(trackers: Sequence[VariableTracker], output_nodes: Sequence[Any],
                     call: tuple[int, int, tuple[str, ...]] | None = None
                     ) -> Callable[..., list[Any]] | None:
    """``rebuild(graph_outputs, namespace, invoke)``: the list of what each of ``trackers``
    reconstructs to, or None when one of them is of a kind it does not know
    ([Note: the rebuild as one function]). With ``call``, ``(depth, argc, kw_names)``, the
    trackers are a stack of ``depth`` slots and then the live locals, the break instruction
    is a ``CALL`` of ``argc`` arguments (the last ones named by ``kw_names``), and the call
    is made too: the list is the stack as the call leaves it, then the locals."""
    writer = _RebuildWriter(output_nodes)
    try:
        slots = [writer.value(tracker) for tracker in trackers]
        if call is not None:
            slots = writer.call(trackers, slots, *call)
    except _NotPlain:
        return None
    return writer.function(slots)


class _RebuildWriter:
    """Writes the lines of ``___rebuild``: one expression per tracker, with the values the
    expressions need bound by name (``___k*`` held values, ``___r*`` source readers)."""

    def __init__(self, output_nodes: Sequence[Any]) -> None:
        self.positions = {node: i for i, node in enumerate(output_nodes)}
        self.constants: dict[str, Any] = {"NULL": NULL}
        self.lines: list[str] = []
        self.built: dict[int, str] = {}  # one real list or tuple per traced one
        self.kinds = _reconstruct_kinds()

    def bind(self, prefix: str, value: Any) -> str:
        name = f"___{prefix}{len(self.constants)}"
        self.constants[name] = value
        return name

    def value(self, tracker: VariableTracker) -> str:
        """The expression for what ``tracker.reconstruct`` returns."""
        from .utils import _source_reader

        source_first, value_of, tensor_kind, list_kinds, method_kind = self.kinds
        method = type(tracker).reconstruct
        if isinstance(tracker, NullVariable):
            return "NULL"
        if method in source_first and tracker.source is not None:
            return f"{self.bind('r', _source_reader(tracker.source))}(ns)"
        if method in value_of:
            return self.bind("k", tracker.value)
        if type(tracker) is tensor_kind and tracker.proxy.node in self.positions:
            return f"outputs[{self.positions[tracker.proxy.node]}]"
        if method is method_kind.reconstruct and tracker.name.isidentifier():
            return f"{self.value(tracker.obj)}.{tracker.name}"  # a bound method: ``h.item``
        if type(tracker) in list_kinds:
            key = id(tracker.mutable_local or tracker)
            if key not in self.built:
                items = "".join(f"{self.value(item)}, " for item in tracker.items)
                self.built[key] = f"___v{len(self.built)}"
                self.lines.append(f"{self.built[key]} = " + (
                    f"[{items}]" if tracker.python_class is list else f"({items})"))
            return self.built[key]
        raise _NotPlain

    def plain_callee(self, tracker: VariableTracker) -> bool:
        """Whether the callee is plainly not a Python function of the user's (a tensor's
        method, ``print``, ``len``), which ``invoke`` would call as it is anyway."""
        _, value_of, tensor_kind, _, method_kind = self.kinds
        method = type(tracker).reconstruct
        if method is method_kind.reconstruct:
            return type(tracker.obj) is tensor_kind
        return method in value_of and not isinstance(tracker.value, torch.nn.Module) and \
            not isinstance(getattr(tracker.value, "__func__", tracker.value), types.FunctionType)

    def call(self, trackers: Sequence[VariableTracker], slots: list[str], depth: int,
             argc: int, kw_names: tuple[str, ...]) -> list[str]:
        """Read every value first, in order (as the interpreted path does), then make the
        ``CALL`` on the stack ``trackers[:depth]``; the slots as the call leaves them."""
        for i, slot in enumerate(slots):
            if slot != "NULL":
                self.lines.append(f"___s{i} = {slot}")
                slots[i] = f"___s{i}"
        at, bound = callee_slots(trackers[:depth], argc, is_null_tracker)
        below = min(at, bound)
        args = [*([] if isinstance(trackers[bound], NullVariable) else [slots[bound]]),
                *slots[depth - argc:depth]]
        n = len(args) - len(kw_names)
        words = ", ".join([*args[:n], *(f"{k}={v}" for k, v in zip(kw_names, args[n:]))])
        self.lines.append(f"___result = {slots[at]}({words})" if self.plain_callee(trackers[at])
                          else f"___result = invoke({slots[at]}, {words})")
        return [*slots[:below], "___result", *slots[depth:]]

    def function(self, slots: list[str]) -> Callable[..., list[Any]]:
        text = ("def ___rebuild(outputs, ns, invoke):\n"
                + "".join(f"    {line}\n" for line in self.lines)
                + f"    return [{', '.join(slots)}]\n")
        exec(compile(text, "<dynamo ___rebuild>", "exec"), self.constants)
        rebuild = self.constants["___rebuild"]
        rebuild.source_text = text  # for debugging and the book
        return rebuild


@functools.cache
def _reconstruct_kinds() -> tuple[set, set, type, tuple[type, ...], type]:
    """The ``reconstruct`` methods ``rebuild_function`` can write as code: those that read
    the tracker's source when it has one (else do something else); those that return the
    value held (``print``, ``"step"``, a module without a source); the tensor tracker; the
    list and tuple trackers; the bound-method tracker."""
    from .variables.builtin import BuiltinVariable
    from .variables.constant import ConstantVariable
    from .variables.dicts import ConstDictVariable
    from .variables.functions import UserFunctionVariable
    from .variables.lists import BaseListVariable, ListVariable, TupleVariable
    from .variables.misc import MethodVariable, PythonModuleVariable, TypeVariable
    from .variables.nn_module import NNModuleVariable
    from .variables.tensor import TensorVariable
    from .variables.torch import TorchFunctionVariable
    from .variables.user_defined import UserDefinedClassVariable, UserObjectVariable

    source_first = {VariableTracker.reconstruct, TensorVariable.reconstruct,
                    BaseListVariable.reconstruct, ConstDictVariable.reconstruct,
                    UserObjectVariable.reconstruct, NNModuleVariable.reconstruct}
    value_of = {ConstantVariable.reconstruct, BuiltinVariable.reconstruct,
                UserFunctionVariable.reconstruct, PythonModuleVariable.reconstruct,
                TypeVariable.reconstruct, UserDefinedClassVariable.reconstruct,
                TorchFunctionVariable.reconstruct,
                UserObjectVariable.reconstruct, NNModuleVariable.reconstruct}
    return (source_first, value_of, TensorVariable, (ListVariable, TupleVariable),
            MethodVariable)
# --8<-- [end:rebuild-function]


# -- running the one instruction the graph could not hold ------------------------------------
_BINARY = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "@": operator.matmul,
    "&": operator.and_, "|": operator.or_, "^": operator.xor, "<<": operator.lshift,
    ">>": operator.rshift, "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul,
    "/=": operator.itruediv, "//=": operator.ifloordiv, "%=": operator.imod,
    "**=": operator.ipow, "@=": operator.imatmul,
}
_COMPARE = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
            ">": operator.gt, ">=": operator.ge}


def callee_slots(stack: Sequence[Any], argc: int, is_null: Callable[[Any], bool]
                 ) -> tuple[int, int]:
    """(the callee's slot, the slot of its ``self`` or NULL) for a ``CALL`` of ``argc``
    arguments on ``stack``: 3.13 pushes the callable, then NULL or ``self``; 3.11 and 3.12
    push NULL and the callable, or the method and ``self``."""
    below = len(stack) - argc - 2
    if PY313 or not is_null(stack[below]):
        return below, below + 1
    return below + 1, below


def _call(stack: list[Any], argc: int, kw_names: tuple[str, ...], invoke: Callable) -> None:
    at, bound = callee_slots(stack, argc, lambda value: value is NULL)
    fn, self_arg = stack[at], stack[bound]
    args = stack[len(stack) - argc:]
    del stack[len(stack) - argc - 2:]
    if self_arg is not NULL:
        args = [self_arg, *args]
    n = len(args) - len(kw_names)
    stack.append(invoke(fn, *args[:n], **dict(zip(kw_names, args[n:]))))


def run_instruction(inst: dis.Instruction, stack: list[Any], kw_names: tuple[str, ...],
                    invoke: Callable[..., Any]) -> int | None:
    """Execute ``inst`` on a real stack. Returns the jump target, or None to fall through.

    Calls go through ``invoke(fn, *args, **kwargs)``, which compiles a Python
    callee on its own (its frame gets graphs and breaks of its own).
    """
    name = inst.opname
    if name == "CALL":
        _call(stack, inst.arg, kw_names, invoke)
    elif name == "CALL_KW":
        names = stack.pop()
        _call(stack, inst.arg, names, invoke)
    elif name == "CALL_FUNCTION_EX":
        kwargs = stack.pop() if inst.arg & 1 else {}
        args = stack.pop()
        first, second = stack.pop(-2), stack.pop()
        fn = first if PY313 or first is not NULL else second
        stack.append(invoke(fn, *args, **kwargs))
    elif "JUMP" in name:
        value = stack.pop()
        return inst.argval if bool(value) == ("TRUE" in name) else None
    elif name == "TO_BOOL":
        stack.append(bool(stack.pop()))
    elif name == "BINARY_OP":
        b, a = stack.pop(), stack.pop()
        stack.append(_BINARY[inst.argrepr](a, b))
    elif name == "COMPARE_OP":
        b, a = stack.pop(), stack.pop()
        stack.append(_COMPARE[inst.argval.removeprefix("bool(").removesuffix(")")](a, b))
    else:
        _run_simple(inst, stack)
    return None


def _run_simple(inst: dis.Instruction, stack: list[Any]) -> None:
    name = inst.opname
    if name == "BINARY_SUBSCR":
        key, obj = stack.pop(), stack.pop()
        stack.append(obj[key])
    elif name == "CONTAINS_OP":
        container, item = stack.pop(), stack.pop()
        stack.append((item in container) != bool(inst.arg))
    elif name in ("UNARY_NOT", "UNARY_NEGATIVE", "UNARY_INVERT"):
        fn = {"UNARY_NOT": operator.not_, "UNARY_NEGATIVE": operator.neg,
              "UNARY_INVERT": operator.invert}[name]
        stack.append(fn(stack.pop()))
    elif name in ("LOAD_ATTR", "LOAD_METHOD"):
        value = getattr(stack.pop(), inst.argval)
        method = name == "LOAD_METHOD" or (sys.version_info >= (3, 12) and inst.arg & 1)
        stack.extend(([value, NULL] if PY313 else [NULL, value]) if method else [value])
    elif name == "STORE_ATTR":
        obj, value = stack.pop(), stack.pop()
        setattr(obj, inst.argval, value)
    elif name == "STORE_SUBSCR":
        key, obj, value = stack.pop(), stack.pop(), stack.pop()
        obj[key] = value
    elif name == "BUILD_SLICE":  # [Note: slice bounds that are tensors]
        parts = [_as_bound(stack.pop()) for _ in range(inst.arg)][::-1]
        stack.append(slice(*parts))
    elif name == "BINARY_SLICE":  # 3.12: container[start:stop]
        stop, start, obj = stack.pop(), stack.pop(), stack.pop()
        stack.append(obj[start:stop])
    elif name == "STORE_SLICE":  # 3.12: container[start:stop] = value
        stop, start, obj, value = stack.pop(), stack.pop(), stack.pop(), stack.pop()
        obj[start:stop] = value
    else:  # pragma: no cover - RESUMABLE and this function are kept in step
        raise NotImplementedError(inst.opname)


# [Note: slice bounds that are tensors]
# DeBERTa slices its relative embeddings with bounds computed as 0-d tensors
# (``rel[m - span : m + span]``, ``span = torch.tensor(...)``). A slice's bounds are numbers
# in the graph, so the trace stops there: a graph break at the slice instruction. The break
# runs it for real: Python 3.12's ``BINARY_SLICE`` slices the container at once; 3.11 builds
# the slice object first (``BUILD_SLICE``), and then its tensor bounds become the numbers
# ``operator.index`` makes of them, which is what slicing does with them anyway, so the
# resumed frame gets a slice of numbers it can guard. Before, the function ran eagerly.
def _as_bound(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.ndim == 0 and not value.is_floating_point():
        return operator.index(value)
    return value


# -- continuing the frame ------------------------------------------------------------------------
_resume_functions: dict[tuple, types.FunctionType] = {}


def resume_function(code: types.CodeType, offset: int, layout: tuple[str, ...],
                    live: tuple[str, ...], f_globals: dict, closure: tuple | None
                    ) -> types.FunctionType:
    """The (cached) function continuing ``code`` at ``offset``: [Note: resume functions].
    One per closure too: two closures of one code object (``make(2)``, ``make(3)``) read
    their own cells after the break. The cached function keeps ``f_globals`` and
    ``closure`` alive, so their ids in the key cannot be reused while it is cached."""
    key = (code, offset, layout, live, id(f_globals), id(closure))
    if key not in _resume_functions:
        resume = make_resume_code(code, offset, layout, live)
        _resume_functions[key] = types.FunctionType(resume, f_globals, resume.co_name,
                                                    None, closure)
    return _resume_functions[key]


def resume_plan(code: types.CodeType, offset: int, stack: list[Any], local_names: Any,
                live_at: Callable[[types.CodeType, int], Any], f_globals: dict,
                closure: tuple | None) -> tuple[types.FunctionType, tuple[str, ...]]:
    """How ``code`` continues at ``offset`` after a break: the resume function and the live
    locals it takes, in order. Both are fixed for a break point and a function object, so
    the cache entry asks once ([Note: the second call is cheap])."""
    orig, orig_offset = original_location(code, offset)
    layout = tuple("null" if value is NULL else "iter" if isinstance(value, LoopIterator)
                   else "value" for value in stack)
    live = tuple(sorted(n for n in live_at(orig, orig_offset) if n in local_names))
    return resume_function(orig, orig_offset, layout, live, f_globals, closure), live


def resume_args(stack: list[Any], local_values: dict[str, Any], live: tuple[str, ...]
                ) -> list[Any]:
    """The resume function's arguments: the stack (a loop iterator as its remaining items,
    no NULLs), then the live locals."""
    args = [tuple(value.items) if isinstance(value, LoopIterator) else value
            for value in stack if value is not NULL]
    args.extend(local_values[name] for name in live)
    return args
