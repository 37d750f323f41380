"""InstructionTranslator: symbolic execution of one frame's bytecode.

Input: a code object, the frame's globals, closure values and bound
arguments (real values), and an OutputGraph to write into. Output: the
tracker of the value the frame returns, with every tensor operation on the
way recorded as an fx node; or, at an instruction that cannot be traced, a
``BreakPoint`` (stack, locals, reason) from which convert_frame builds a
graph break. Calls of Python functions and modules are traced by an
``InliningInstructionTranslator`` on the same graph. Handlers for
containers, iteration, functions and ``with`` are in opcodes.py.
Chapter: book/docs/dynamo.md ("The symbolic interpreter").

# [Note: symbolic execution]
# CPython runs bytecode on a stack machine: each instruction pops values,
# computes, pushes. We run the same instructions on a stack of
# VariableTrackers. Where CPython would add two tensors, we add a node to
# the graph and push a tracker for its result; where it would add two ints,
# we add them now (constant folding). One method per opcode, named exactly
# like the opcode, so ``dis.dis(fn)`` reads as a table of contents. Loops
# are unrolled: a backward jump simply sends the interpreter back, and every
# iteration appends its own nodes.
"""

from __future__ import annotations

import builtins
import dataclasses
import dis
import linecache
import operator
import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from .exc import Unsupported, UserErrorInTrace, unimplemented
from .opcodes import ContainerOps
from .output_graph import OutputGraph
from .resume_execution import handler_at, handler_ranges, live_locals, original_location
from .variables.base import NullVariable, VariableTracker, transform
from .variables.builder import wrap, wrap_static
from .variables.builtin import BuiltinVariable
from .variables.constant import ConstantVariable, is_literal
from .variables.functions import CellVariable
from .variables.sym_node import is_sym

PY312 = sys.version_info >= (3, 12)
PY313 = sys.version_info >= (3, 13)
MAX_STEPS = 100_000  # per frame: a loop that long is better run eagerly
MAX_INLINE_DEPTH = 32

# --8<-- [start:binary-op]
# BINARY_OP's argrepr is the operator's spelling ("+", "+=", ...), the same
# on 3.11, 3.12 and 3.13, so it names the ``operator`` function directly.
# In-place forms map to operator.iadd etc.: on a tensor ``a += b`` mutates a.
_BINARY_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "@": operator.matmul,
    "&": operator.and_, "|": operator.or_, "^": operator.xor,
    "<<": operator.lshift, ">>": operator.rshift,
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
    "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow,
    "@=": operator.imatmul, "&=": operator.iand, "|=": operator.ior, "^=": operator.ixor,
    "<<=": operator.ilshift, ">>=": operator.irshift,
}


def binary_op(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
    """BINARY_OP: pop b, pop a, push a <op> b (a graph node if a tensor is involved)."""
    fn = _BINARY_OPS.get(inst.argrepr)
    if fn is None:
        unimplemented(f"binary operator {inst.argrepr!r} is not supported yet")
    b, a = self.pop(), self.pop()
    if inst.argrepr.endswith("=") and _immutable(a):
        # ``n += t`` on an int (or a size): ints have no ``__iadd__``, so Python computes
        # ``n + t`` and rebinds ``n``; a graph node must not spell it as an in-place write
        fn = _BINARY_OPS[inst.argrepr[:-1]]
    self.push(BuiltinVariable(fn).call_function(self, [a, b], {}))


CATCHABLE = (KeyError, AttributeError, ImportError)  # [Note: except blocks in traced code]


@dataclasses.dataclass(frozen=True, eq=False)
class ExceptionVariable(VariableTracker):
    """An exception the trace raised and a handler of the traced code caught."""

    value: BaseException
    trace_error: UserErrorInTrace

    def python_type(self) -> type:
        return type(self.value)

    def reconstruct(self, rt: Any) -> Any:
        return self.value


def _immutable(value: VariableTracker) -> bool:
    """A number, string or tuple (a constant or a symbolic size): ``a op= b`` is ``a op b``."""
    if is_sym(value):
        return True
    return value.is_python_constant() and isinstance(
        value.as_python_constant(), (int, float, complex, str, bytes, tuple, frozenset))
# --8<-- [end:binary-op]

COMPARE_OPS = {
    "<": operator.lt, "<=": operator.le, "==": operator.eq,
    "!=": operator.ne, ">": operator.gt, ">=": operator.ge,
}


def stack_op(fn: Callable[..., Any], nargs: int) -> Callable[..., None]:
    """A handler that pops ``nargs`` values, applies ``fn`` symbolically, pushes the result."""

    def handler(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        args = self.popn(nargs)
        self.push(BuiltinVariable(fn).call_function(self, args, {}))

    return handler


def _nop(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
    pass


class InstructionTranslatorBase(ContainerOps):
    """Executes one frame on trackers. See [Note: symbolic execution]."""

    def __init__(
        self, code: types.CodeType, f_globals: dict[str, Any],
        symbolic_locals: dict[str, VariableTracker], output: OutputGraph,
        parent: InstructionTranslatorBase | None = None,
    ) -> None:
        self.code = code
        self.f_globals = f_globals
        self.output = output
        self.parent = parent
        self.instructions = list(dis.get_instructions(code))
        self.offset_to_index = {inst.offset: i for i, inst in enumerate(self.instructions)}
        self.ip = 0
        self.steps = 0
        self.current_inst: dis.Instruction | None = None
        self.lineno = code.co_firstlineno
        self.stack: list[VariableTracker] = []
        self.kw_names: tuple[str, ...] = ()
        self.return_value: VariableTracker | None = None
        self.symbolic_locals = symbolic_locals

    def run(self) -> VariableTracker:
        """Execute until RETURN; the location of any give-up is attached to it."""
        try:
            while self.return_value is None:
                self.step()
        except Unsupported as e:
            if e.location is None:
                e.location = self.location()
            raise
        return self.return_value

    # --8<-- [start:opcode-dispatch]
    def step(self) -> None:
        """Execute one instruction by calling the method named like its opcode."""
        inst = self.instructions[self.ip]
        self.ip += 1
        self.steps += 1
        if self.steps > MAX_STEPS:
            unimplemented(f"more than {MAX_STEPS} instructions in one frame (a long loop)")
        self.current_inst = inst
        if inst.positions is not None and inst.positions.lineno is not None:
            self.lineno = inst.positions.lineno
        self.output.location = self.location()
        handler = getattr(self, inst.opname, None)
        if handler is None:
            unimplemented(f"opcode {inst.opname} is not supported yet")
        try:
            handler(inst)
        except UserErrorInTrace as error:  # [Note: except blocks in traced code]
            if not self.raise_into_handler(inst, error):
                error.location = error.location or self.location()
                raise
    # --8<-- [end:opcode-dispatch]

    def location(self) -> str:
        """``file:line: source text`` of the instruction being executed."""
        text = linecache.getline(self.code.co_filename, self.lineno).strip()
        return f"{self.code.co_filename}:{self.lineno}: {text}"

    # -- the value stack --------------------------------------------------------
    def push(self, value: VariableTracker) -> None:
        self.stack.append(value)

    def pop(self) -> VariableTracker:
        return self.stack.pop()

    def popn(self, n: int) -> list[VariableTracker]:
        if n == 0:
            return []
        values = self.stack[-n:]
        del self.stack[-n:]
        return values

    def push_with_null(self, value: VariableTracker) -> None:
        """Push a callable with its NULL marker: NULL below it before 3.13, above from 3.13."""
        if PY313:
            self.stack.extend([value, NullVariable()])
        else:
            self.stack.extend([NullVariable(), value])

    # -- mutation (see [Note: immutable trackers]) ------------------------------------
    def replace_all(self, old: VariableTracker, new: VariableTracker) -> None:
        """Swap every version of ``old``'s object for ``new``, in every frame being traced.
        A tracker without a ``mutable_local`` token (a tensor the frame computed) is its
        object's only version: it is swapped where it is found itself."""
        token = old.mutable_local

        def swap(value: VariableTracker) -> VariableTracker:
            if token is None:
                return new if value is old else value
            return new if value.mutable_local is token else value

        tx: InstructionTranslatorBase | None = self
        while tx is not None:
            tx.stack[:] = [transform(v, swap) for v in tx.stack]
            tx.symbolic_locals = {k: transform(v, swap) for k, v in tx.symbolic_locals.items()}
            tx = tx.parent
        self.output.side_effects.apply(lambda v: transform(v, swap))
        self.output.side_effects.track_mutation(new)

    def break_at_root_step(self, reason: str) -> Retrace | None:
        """A break at the root frame's current step (the call that led here, inside a callee),
        to trace again with should the trace's end find it needed; None where the root frame
        could not break there."""
        root = self
        while root.parent is not None:
            root = root.parent
        inst = root.current_inst
        if not getattr(root, "allow_breaks", False) or inst is None \
                or inst.opname not in RESUMABLE or root._cannot_resume(inst):
            return None
        return Retrace(inst.offset, root.visits[inst.offset], reason)

    def store_attr(self, obj: VariableTracker, name: str, value: VariableTracker) -> None:
        store = getattr(obj, "store_attr", None)
        if store is None:
            unimplemented(f"setting attribute .{name} on {obj}")
        store(self, name, value)

    # --8<-- [start:except-blocks]
    # [Note: except blocks in traced code]
    # Libraries probe with exceptions: ``Mapping.get`` is ``try: return self[key]`` /
    # ``except KeyError: return default``, and HuggingFace's attention registry is such a
    # mapping, asked for every layer. A lookup that fails while we trace raises
    # ``UserErrorInTrace``, which used to end the trace as a user error: the whole model ran
    # eagerly. Now the instruction that raised looks up its handler in the code's exception
    # table, as CPython's own loop does: the stack unwinds to the handler's depth, the
    # exception is pushed, and tracing goes on at the handler, whose ``except`` clauses are
    # ordinary instructions (PUSH_EXC_INFO, CHECK_EXC_MATCH, POP_EXCEPT); a handler that
    # re-raises gives the error back. Only lookup errors are caught this way (KeyError,
    # AttributeError, ImportError): those come from Python containers and attributes, never
    # from a tensor op, whose meta kernel may raise where the real one would not, so an
    # ``except RuntimeError`` could take a branch eager does not. The graph then assumes the
    # key or attribute is missing, so that absence is guarded where it is found (a dict's
    # keys, ``not hasattr(obj, 'name')``, ``'KEY' not in ___environ``).
    def raise_into_handler(self, inst: dis.Instruction, error: UserErrorInTrace) -> bool:
        """Continue at the handler of ``inst`` with ``error`` pushed; False if there is none
        (or the error is not a lookup error, or the handler is a ``with`` block's)."""
        if not isinstance(error.error, CATCHABLE):
            return False
        found = handler_at(self.code, inst.offset)
        if found is None:
            return False
        target, depth, push_offset = found
        handler_index = self.offset_to_index[target]
        if self.instructions[handler_index].opname != "PUSH_EXC_INFO" or any(
                i.opname == "WITH_EXCEPT_START"
                for i in self.instructions[handler_index:handler_index + 4]):
            return False
        del self.stack[depth:]
        if push_offset:
            self.push(ConstantVariable(inst.offset))
        self.push(ExceptionVariable(error.error, error))
        self.ip = handler_index
        return True

    def PUSH_EXC_INFO(self, inst: dis.Instruction) -> None:
        error = self.pop()
        self.push(ConstantVariable(None))  # the exception being handled before: none
        self.push(error)

    def CHECK_EXC_MATCH(self, inst: dis.Instruction) -> None:
        kinds = self.pop().as_python_constant()
        self.push(ConstantVariable(isinstance(self.stack[-1].value, kinds)))

    def POP_EXCEPT(self, inst: dis.Instruction) -> None:
        self.pop()

    def RERAISE(self, inst: dis.Instruction) -> None:
        error = self.stack[-1]
        if isinstance(error, ExceptionVariable):
            raise error.trace_error  # not ours to handle: eager raises it
        unimplemented("re-raising an exception the trace did not raise")
    # --8<-- [end:except-blocks]

    def enter_grad_mode(self, enabled: bool) -> None:
        """Switch grad mode in the graph and, for the example values, for real."""
        self.output.create_op("call_function", torch._C._set_grad_enabled,
                              [ConstantVariable(enabled)], {})

    # -- no-ops and stack shuffles (one-line table entries) ------------------------
    NOP = RESUME = CACHE = PRECALL = EXTENDED_ARG = MAKE_CELL = COPY_FREE_VARS = _nop

    def POP_TOP(self, inst: dis.Instruction) -> None:
        self.pop()

    def PUSH_NULL(self, inst: dis.Instruction) -> None:
        self.push(NullVariable())

    def COPY(self, inst: dis.Instruction) -> None:
        self.push(self.stack[-inst.arg])

    def SWAP(self, inst: dis.Instruction) -> None:
        self.stack[-1], self.stack[-inst.arg] = self.stack[-inst.arg], self.stack[-1]

    # -- locals, constants, globals, closures ----------------------------------
    def LOAD_FAST(self, inst: dis.Instruction) -> None:
        self._load_local(inst.argval)

    LOAD_FAST_CHECK = LOAD_FAST  # 3.12: the same, plus an unbound check we do anyway

    def _load_local(self, name: str) -> None:
        if name not in self.symbolic_locals:
            error = UnboundLocalError(f"local variable {name!r} referenced before assignment")
            raise UserErrorInTrace(error)
        self.push(self.symbolic_locals[name])

    def LOAD_FAST_AND_CLEAR(self, inst: dis.Instruction) -> None:
        self.push(self.symbolic_locals.pop(inst.argval, NullVariable()))

    def STORE_FAST(self, inst: dis.Instruction) -> None:
        value = self.pop()
        if isinstance(value, NullVariable):  # restoring a cleared local (3.12 comprehensions)
            self.symbolic_locals.pop(inst.argval, None)
        else:
            self.symbolic_locals[inst.argval] = value

    STORE_FAST_MAYBE_NULL = STORE_FAST

    def DELETE_FAST(self, inst: dis.Instruction) -> None:
        self.symbolic_locals.pop(inst.argval, None)

    # 3.13 superinstructions: argval is the pair of names.
    def LOAD_FAST_LOAD_FAST(self, inst: dis.Instruction) -> None:
        for name in inst.argval:
            self._load_local(name)

    def STORE_FAST_LOAD_FAST(self, inst: dis.Instruction) -> None:
        self.symbolic_locals[inst.argval[0]] = self.pop()
        self._load_local(inst.argval[1])

    def STORE_FAST_STORE_FAST(self, inst: dis.Instruction) -> None:
        self.symbolic_locals[inst.argval[0]] = self.pop()
        self.symbolic_locals[inst.argval[1]] = self.pop()

    def LOAD_CONST(self, inst: dis.Instruction) -> None:
        self.push(self._constant(inst.argval))

    def _constant(self, value: Any) -> VariableTracker:
        if isinstance(value, types.CodeType):
            return ConstantVariable(value)  # consumed by MAKE_FUNCTION
        if not is_literal(value):
            unimplemented(f"constant of type {type(value).__name__}")
        return ConstantVariable(value)

    def LOAD_GLOBAL(self, inst: dis.Instruction) -> None:
        value = self.load_global(inst.argval)
        if inst.arg & 1:  # 3.11+: the low bit asks for a NULL beside the value
            self.push_with_null(value)
        else:
            self.push(value)

    def load_global(self, name: str) -> VariableTracker:
        pending = self.output.side_effects.pending_global(self.f_globals, name)
        if pending is not None:
            return pending
        if name in self.f_globals:
            source = self.output.global_source(self.f_globals, name)
            if source is None:
                return wrap_static(self.f_globals[name], strict=True)
            return wrap(self.output, self.f_globals[name], source)
        if hasattr(builtins, name):  # builtins are not guarded (rebinding them is rare)
            return wrap_static(getattr(builtins, name))
        raise UserErrorInTrace(NameError(f"name {name!r} is not defined"))

    # [Note: imports inside a function]
    # ``import torch`` or ``from .utils import helper`` in a function body runs the import
    # at trace time, as the call would: the module comes out of ``sys.modules`` (importing
    # it the first time if need be, which is what eager's first call does too) and is a
    # static value, like a builtin, not guarded: rebinding a loaded module is rare.
    def IMPORT_NAME(self, inst: dis.Instruction) -> None:
        fromlist, level = self.pop(), self.pop()
        try:
            module = __import__(inst.argval, self.f_globals, None,
                                fromlist.as_python_constant(), level.as_python_constant())
        except ImportError as e:
            raise UserErrorInTrace(e) from e
        self.push(wrap_static(module, strict=True))

    def IMPORT_FROM(self, inst: dis.Instruction) -> None:
        module = self.stack[-1]  # stays for the next IMPORT_FROM; a POP_TOP drops it
        self.push(module.var_getattr(self, inst.argval))

    def STORE_GLOBAL(self, inst: dis.Instruction) -> None:
        self.output.side_effects.store_global(self.f_globals, inst.argval, self.pop())

    def LOAD_DEREF(self, inst: dis.Instruction) -> None:
        self.push(self.read_cell(inst.argval))

    def STORE_DEREF(self, inst: dis.Instruction) -> None:
        self.write_cell(inst.argval, self.pop())

    def LOAD_CLOSURE(self, inst: dis.Instruction) -> None:
        self.push(CellVariable(self, inst.argval))

    def read_cell(self, name: str) -> VariableTracker:
        if name in self.symbolic_locals:
            return self.symbolic_locals[name]
        error = NameError(f"free variable {name!r} referenced before assignment")
        raise UserErrorInTrace(error)

    def write_cell(self, name: str, value: VariableTracker) -> None:
        if name in self.code.co_freevars:
            unimplemented(f"assigning to the nonlocal variable {name!r}")
        self.symbolic_locals[name] = value

    # -- attributes and calls ---------------------------------------------------
    def LOAD_ATTR(self, inst: dis.Instruction) -> None:
        obj = self.pop()
        value = obj.var_getattr(self, inst.argval)
        if PY312 and inst.arg & 1:  # 3.12+: the low bit marks a method load
            self.push_with_null(value)
        else:
            self.push(value)

    def LOAD_METHOD(self, inst: dis.Instruction) -> None:  # 3.11
        obj = self.pop()
        self.push_with_null(obj.var_getattr(self, inst.argval))

    def LOAD_SUPER_ATTR(self, inst: dis.Instruction) -> None:  # 3.12: super().name
        from .variables.misc import SuperVariable

        obj, cls, _super = self.pop(), self.pop(), self.pop()
        value = SuperVariable(cls.as_python_constant(), obj).var_getattr(self, inst.argval)
        if inst.arg & 1:
            self.push_with_null(value)
        else:
            self.push(value)

    def STORE_ATTR(self, inst: dis.Instruction) -> None:
        obj, value = self.pop(), self.pop()
        self.store_attr(obj, inst.argval, value)

    def KW_NAMES(self, inst: dis.Instruction) -> None:  # 3.11, 3.12
        self.kw_names = self.code.co_consts[inst.arg]

    def CALL(self, inst: dis.Instruction) -> None:
        kw_names, self.kw_names = self.kw_names, ()
        self._call(inst.arg, kw_names)

    def CALL_KW(self, inst: dis.Instruction) -> None:  # 3.13: the names are on the stack
        self._call(inst.arg, self.pop().as_python_constant())

    def _call(self, argc: int, kw_names: tuple[str, ...]) -> None:
        """Stack: [NULL, fn, *args] before 3.13, [fn, NULL, *args] from 3.13."""
        args = self.popn(argc)
        first, second = self.popn(2)
        if PY313 or not isinstance(first, NullVariable):
            fn, self_arg = first, second
        else:
            fn, self_arg = second, first
        if not isinstance(self_arg, NullVariable):
            args = [self_arg, *args]
        n_kw = len(kw_names)
        kwargs = dict(zip(kw_names, args[len(args) - n_kw:]))
        positional = args[: len(args) - n_kw]
        self.push(self.call(fn, positional, kwargs))

    def call(self, fn: VariableTracker, args: list[VariableTracker],
             kwargs: dict[str, VariableTracker]) -> VariableTracker:
        return fn.call_function(self, args, kwargs)

    # -- operators ----------------------------------------------------------------
    BINARY_OP = binary_op
    UNARY_NEGATIVE = stack_op(operator.neg, 1)
    UNARY_POSITIVE = stack_op(operator.pos, 1)  # 3.11; 3.12 uses CALL_INTRINSIC_1
    UNARY_INVERT = stack_op(operator.invert, 1)
    UNARY_NOT = stack_op(operator.not_, 1)
    BINARY_SUBSCR = stack_op(operator.getitem, 2)
    DELETE_SUBSCR = stack_op(operator.delitem, 2)

    def COMPARE_OP(self, inst: dis.Instruction) -> None:
        """COMPARE_OP: pop b, pop a, push ``a <cmp> b`` (``inst.argval`` spells the operator)."""
        # BEGIN EXERCISE dynamo-compare-op: pop two trackers and push their comparison
        # 3.13 spells a compare feeding a branch "bool(<)"; the operator is the same.
        symbol = inst.argval.removeprefix("bool(").removesuffix(")")
        b, a = self.pop(), self.pop()
        self.push(BuiltinVariable(COMPARE_OPS[symbol]).call_function(self, [a, b], {}))
        # END EXERCISE dynamo-compare-op

    def IS_OP(self, inst: dis.Instruction) -> None:
        b, a = self.pop(), self.pop()
        fn = operator.is_not if inst.arg else operator.is_
        self.push(BuiltinVariable(fn).call_function(self, [a, b], {}))

    def CONTAINS_OP(self, inst: dis.Instruction) -> None:
        container, item = self.pop(), self.pop()
        found = BuiltinVariable(operator.contains).call_function(self, [container, item], {})
        self.push(ConstantVariable(found.truth(self) != bool(inst.arg)))

    def TO_BOOL(self, inst: dis.Instruction) -> None:  # 3.13
        self.push(ConstantVariable(self.pop().truth(self)))

    # -- returning and raising ------------------------------------------------------
    def RETURN_VALUE(self, inst: dis.Instruction) -> None:
        self.return_value = self.pop()

    def RETURN_CONST(self, inst: dis.Instruction) -> None:  # 3.12+
        self.return_value = self._constant(inst.argval)

    def RAISE_VARARGS(self, inst: dis.Instruction) -> None:
        unimplemented("raising an exception inside a compiled frame")


@dataclasses.dataclass
class BreakPoint:
    """Where and why the root frame stopped tracing: see convert_frame.compile_break."""

    inst: dis.Instruction
    reason: str
    location: str
    stack: list[VariableTracker]
    live: dict[str, VariableTracker]
    kw_names: tuple[str, ...]


class _StopTracing(Exception):
    pass


# --8<-- [start:retrace]
# [Note: a break inside a callee is traced again]
# A graph break inside an inlined function (``nn.GRU.forward`` calling the weak references
# it keeps to its weights) rewinds the root frame to the call instruction and breaks there:
# the callee runs eagerly. Rewinding restores the stack, the locals, the side effects and
# the graph's nodes, but not what the attempt learned about the inputs: every guard it
# installed (a GRU's weight names, the types of its weak references, the metadata of each
# weight it read) and every input it made a placeholder stay, and each later call checks
# and fetches them for nothing, about thirty guards for a GRU. So when the abandoned step
# had added guards or inputs, the frame is traced again from the start with the break
# decided in advance (``Retrace``): the second trace never enters the callee. The break is
# named by the instruction's offset and by how many times the trace had reached it, since
# an unrolled loop reaches one instruction several times.
class Retrace(Exception):
    """Trace the frame again, breaking at the ``visit``-th execution of ``offset``."""

    def __init__(self, offset: int, visit: int, reason: str) -> None:
        super().__init__(reason)
        self.offset, self.visit, self.reason = offset, visit, reason
# --8<-- [end:retrace]


# Instructions at which a graph break can resume: codegen.run_instruction runs them.
RESUMABLE = frozenset({
    "CALL", "CALL_KW", "CALL_FUNCTION_EX", "BINARY_OP", "COMPARE_OP", "BINARY_SUBSCR",
    "CONTAINS_OP", "UNARY_NOT", "UNARY_NEGATIVE", "UNARY_INVERT", "TO_BOOL", "LOAD_ATTR",
    "LOAD_METHOD", "STORE_ATTR", "STORE_SUBSCR", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE",
    "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE",
    "POP_JUMP_BACKWARD_IF_TRUE", "BUILD_SLICE", "BINARY_SLICE", "STORE_SLICE",
})


class InstructionTranslator(InstructionTranslatorBase):
    """The root frame: wraps the real arguments and may stop at a graph break."""

    def __init__(
        self, code: types.CodeType, f_globals: dict[str, Any], closure: dict[str, Any],
        arguments: dict[str, Any], output: OutputGraph, allow_breaks: bool = False,
        planned_break: Retrace | None = None,
    ) -> None:
        # Arguments are wrapped up front, in signature order, so the graph's
        # placeholders follow the order of the function's tensor parameters.
        # A resume function's numbers stay symbolic: [Note: numbers across a graph break].
        sym = code.co_name.startswith("__resume_at_")
        # A comprehension's iterator is the local ``.0`` of its code, which ``inspect`` (and
        # so the frame, the guards and the sources) calls ``implicit0``: a name that is an
        # identifier. The local gets the code's name, the source the frame's.
        names = list(arguments)
        symbolic_locals = {
            (name if name in code.co_varnames else code.co_varnames[names.index(name)]):
            wrap(output, value, name, sym_numbers=sym) for name, value in arguments.items()}
        super().__init__(code, f_globals, symbolic_locals, output)
        self.closure = closure
        self.allow_breaks = allow_breaks
        self.planned_break = planned_break  # [Note: a break inside a callee is traced again]
        self.visits: dict[int, int] = {}  # offset -> how many times a step reached it
        self.break_point: BreakPoint | None = None
        self.initial_grad_mode = torch.is_grad_enabled()

    def run(self) -> VariableTracker | None:
        try:
            return super().run()
        except _StopTracing:
            return None
        finally:
            torch._C._set_grad_enabled(self.initial_grad_mode)
            while self.output.autocast_modes:  # a give-up inside an autocast block
                torch.amp._exit_autocast(self.output.autocast_modes.pop())

    def read_cell(self, name: str) -> VariableTracker:
        if name in self.code.co_freevars and name not in self.symbolic_locals:
            if name not in self.closure:
                raise UserErrorInTrace(NameError(f"free variable {name!r} is empty"))
            self.symbolic_locals[name] = wrap(self.output, self.closure[name], f"C[{name!r}]")
        return super().read_cell(name)

    def step(self) -> None:
        inst = self.instructions[self.ip]
        if not self.allow_breaks or inst.opname not in RESUMABLE:
            return super().step()
        visit = self.visits[inst.offset] = self.visits.get(inst.offset, 0) + 1
        planned = self.planned_break
        if planned is not None and (planned.offset, planned.visit) == (inst.offset, visit):
            self.current_inst = inst
            self._break_at(inst, planned.reason)
        checkpoint = self._checkpoint()
        try:
            super().step()
        except Unsupported as e:
            learned = (len(self.output.guards), len(self.output.input_sources))
            self._restore(checkpoint)
            self.current_inst = inst
            why_not = self._cannot_resume(inst)
            if why_not:
                e.reason = f"{e.reason} (a graph break {why_not} is not supported)"
                raise
            if learned != checkpoint[-1] and planned is None:
                raise Retrace(inst.offset, visit, e.reason) from e
            self._break_at(inst, e.reason)

    def _checkpoint(self) -> tuple:
        nodes = list(self.output.graph.nodes)
        return (self.ip, list(self.stack), dict(self.symbolic_locals), self.kw_names,
                nodes[-1] if nodes else None, self.output.side_effects.snapshot(),
                torch.is_grad_enabled(), self.lineno,
                (len(self.output.guards), len(self.output.input_sources)))

    def _restore(self, checkpoint: tuple) -> None:
        ip, stack, local_vars, kw_names, last_node, effects, grad, lineno, _ = checkpoint
        self.ip, self.stack, self.symbolic_locals, self.kw_names = ip, stack, local_vars, kw_names
        self.output.side_effects.restore(effects)
        self.output.erase_nodes_after(last_node)
        torch._C._set_grad_enabled(grad)
        self.lineno = lineno

    def _cannot_resume(self, inst: dis.Instruction) -> str | None:
        if self.output.autocast_modes:  # the resume function would start outside autocast
            return "inside an autocast region"
        for start, end, handler in handler_ranges(self.code):
            if start <= inst.offset < end:
                # A try or with block's handler starts with PUSH_EXC_INFO: the resume
                # function keeps the exception table, and an exception from the break
                # instruction itself is handed to the handler ([Note: a break inside a
                # try block]). On 3.12 the other kind is an inlined comprehension's, which
                # restores the loop variable (PEP 709).
                if self.instructions[self.offset_to_index[handler]].opname == "PUSH_EXC_INFO":
                    continue
                return "inside a list/dict/set comprehension (inlined on Python 3.12+)"
        if torch.is_grad_enabled() != self.initial_grad_mode:
            return "while grad mode is switched"
        return None

    def _break_at(self, inst: dis.Instruction, reason: str) -> None:
        index = self.offset_to_index[inst.offset]
        successors = [self.instructions[index + 1].offset]
        if "JUMP" in inst.opname:
            successors.append(inst.argval)
        orig_code, orig_offset = original_location(self.code, inst.offset)
        live: set[str] = set()
        for offset in successors:
            live |= live_locals(orig_code, original_location(self.code, offset)[1])
        handler = handler_at(orig_code, orig_offset)
        if handler is not None:  # what the except/finally block reads, should the call raise
            live |= live_locals(orig_code, handler[0])
        live -= set(self.code.co_freevars)
        kept = {name: v for name, v in self.symbolic_locals.items() if name in live}
        self.break_point = BreakPoint(inst, reason, self.location(), list(self.stack), kept,
                                      self.kw_names)
        raise _StopTracing


class InliningInstructionTranslator(InstructionTranslatorBase):
    """A called Python function, traced into the caller's graph ([Note: closures])."""

    def __init__(
        self, parent: InstructionTranslatorBase, code: types.CodeType,
        f_globals: dict[str, Any], bound: dict[str, VariableTracker], cells: dict[str, Any],
        fn_source: str | None,
    ) -> None:
        depth, tx = 0, parent
        while tx is not None:
            depth, tx = depth + 1, tx.parent
        if depth > MAX_INLINE_DEPTH:
            unimplemented(f"calls nested more than {MAX_INLINE_DEPTH} deep (recursion?)")
        super().__init__(code, f_globals, dict(bound), parent.output, parent)
        self.cells = cells
        self.fn_source = fn_source
        self.generated: list[VariableTracker] = []  # what a generator yielded

    def RETURN_GENERATOR(self, inst: dis.Instruction) -> None:
        self.push(ConstantVariable(None))  # popped right away; the body runs next

    def YIELD_VALUE(self, inst: dis.Instruction) -> None:
        self.generated.append(self.pop())
        self.push(ConstantVariable(None))  # the value send() would deliver

    def read_cell(self, name: str) -> VariableTracker:
        if name in self.symbolic_locals or name not in self.cells:
            return super().read_cell(name)
        cell = self.cells[name]
        if isinstance(cell, CellVariable):
            return cell.tx.read_cell(cell.name)
        try:
            value = cell.cell_contents
        except ValueError:
            raise UserErrorInTrace(NameError(f"free variable {name!r} is empty")) from None
        if self.fn_source is None:
            return wrap_static(value, strict=True)
        index = self.code.co_freevars.index(name)
        return wrap(self.output, value, f"{self.fn_source}.__closure__[{index}].cell_contents")

    def write_cell(self, name: str, value: VariableTracker) -> None:
        cell = self.cells.get(name)
        if isinstance(cell, CellVariable):
            cell.tx.write_cell(cell.name, value)
        else:
            super().write_cell(name, value)

    def step(self) -> None:
        try:
            super().step()
        except Unsupported as e:
            if e.location is None:
                e.location = self.location()
            raise
