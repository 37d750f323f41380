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
import operator
import sys
import types
from collections.abc import Callable
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


def _call(stack: list[Any], argc: int, kw_names: tuple[str, ...], invoke: Callable) -> None:
    args = stack[len(stack) - argc:]
    del stack[len(stack) - argc:]
    first, second = stack.pop(-2), stack.pop()
    fn, self_arg = (first, second) if PY313 or first is not NULL else (second, first)
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
