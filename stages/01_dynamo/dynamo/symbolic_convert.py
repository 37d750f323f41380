"""InstructionTranslator: symbolic execution of one frame's bytecode.

Input: a code object, the frame's globals, closure values and bound
arguments (real values), and an OutputGraph to write into. Output: the
tracker of the value the frame returns, with every tensor operation on the
way recorded as an fx node. Straight-line code only in this first cut:
any opcode without a handler gives up through ``unimplemented``.
Chapter: book/docs/dynamo.md ("The symbolic interpreter").

# [Note: symbolic execution]
# CPython runs bytecode on a stack machine: each instruction pops values,
# computes, pushes. We run the same instructions on a stack of
# VariableTrackers. Where CPython would add two tensors, we add a node to
# the graph and push a tracker for its result; where it would add two ints,
# we add them now (constant folding). One method per opcode, named exactly
# like the opcode, so ``dis.dis(fn)`` reads as a table of contents.
"""

from __future__ import annotations

import builtins
import dis
import linecache
import operator
import sys
import types
from collections.abc import Callable
from typing import Any

from .exc import Unsupported, UserErrorInTrace, unimplemented
from .output_graph import OutputGraph
from .variables.base import NullVariable, VariableTracker
from .variables.builder import wrap, wrap_static
from .variables.builtin import BuiltinVariable
from .variables.constant import ConstantVariable, is_literal
from .variables.lists import ListVariable, TupleVariable
from .variables.tensor import TensorVariable

PY312 = sys.version_info >= (3, 12)
PY313 = sys.version_info >= (3, 13)

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


def binary_op(self: InstructionTranslator, inst: dis.Instruction) -> None:
    """BINARY_OP: pop b, pop a, push a <op> b (a graph node if a tensor is involved)."""
    fn = _BINARY_OPS.get(inst.argrepr)
    if fn is None:
        unimplemented(f"binary operator {inst.argrepr!r} is not supported yet")
    b, a = self.pop(), self.pop()
    self.push(BuiltinVariable(fn).call_function(self, [a, b], {}))
# --8<-- [end:binary-op]

_COMPARE_OPS = {
    "<": operator.lt, "<=": operator.le, "==": operator.eq,
    "!=": operator.ne, ">": operator.gt, ">=": operator.ge,
}


def stack_op(fn: Callable[..., Any], nargs: int) -> Callable[..., None]:
    """A handler that pops ``nargs`` values, applies ``fn`` symbolically, pushes the result."""

    def handler(self: InstructionTranslator, inst: dis.Instruction) -> None:
        args = self.popn(nargs)
        self.push(BuiltinVariable(fn).call_function(self, args, {}))

    return handler


def _nop(self: InstructionTranslator, inst: dis.Instruction) -> None:
    pass


class InstructionTranslator:
    """Executes one frame on trackers. See [Note: symbolic execution]."""

    def __init__(
        self, code: types.CodeType, f_globals: dict[str, Any], closure: dict[str, Any],
        arguments: dict[str, Any], output: OutputGraph,
    ) -> None:
        self.code = code
        self.f_globals = f_globals
        self.closure = closure
        self.output = output
        self.instructions = list(dis.get_instructions(code))
        self.offset_to_index = {inst.offset: i for i, inst in enumerate(self.instructions)}
        self.ip = 0
        self.current_inst: dis.Instruction | None = None
        self.lineno = code.co_firstlineno
        self.stack: list[VariableTracker] = []
        self.kw_names: tuple[str, ...] = ()
        self.return_value: VariableTracker | None = None
        self.globals_cache: dict[str, VariableTracker] = {}
        # Arguments are wrapped up front, in signature order, so the graph's
        # placeholders follow the order of the function's tensor parameters.
        self.symbolic_locals: dict[str, VariableTracker] = {
            name: wrap(output, value, name) for name, value in arguments.items()
        }

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
        self.current_inst = inst
        if inst.positions is not None and inst.positions.lineno is not None:
            self.lineno = inst.positions.lineno
        self.output.location = self.location()
        handler = getattr(self, inst.opname, None)
        if handler is None:
            unimplemented(f"opcode {inst.opname} is not supported yet")
        handler(inst)
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
            unimplemented("defining a nested function or lambda is not supported yet")
        if not is_literal(value):
            unimplemented(f"constant of type {type(value).__name__}")
        return ConstantVariable(value)

    def LOAD_GLOBAL(self, inst: dis.Instruction) -> None:
        value = self._load_global(inst.argval)
        if inst.arg & 1:  # 3.11+: the low bit asks for a NULL beside the value
            self.push_with_null(value)
        else:
            self.push(value)

    def _load_global(self, name: str) -> VariableTracker:
        if name in self.globals_cache:
            return self.globals_cache[name]
        if name in self.f_globals:
            value = wrap(self.output, self.f_globals[name], f"G[{name!r}]")
        elif hasattr(builtins, name):  # builtins are not guarded (rebinding them is rare)
            value = wrap_static(getattr(builtins, name))
        else:
            raise UserErrorInTrace(NameError(f"name {name!r} is not defined"))
        self.globals_cache[name] = value
        return value

    def LOAD_DEREF(self, inst: dis.Instruction) -> None:
        name = inst.argval
        if name not in self.symbolic_locals:
            if name not in self.closure:
                error = NameError(f"free variable {name!r} referenced before assignment")
                raise UserErrorInTrace(error)
            self.symbolic_locals[name] = wrap(self.output, self.closure[name], f"C[{name!r}]")
        self.push(self.symbolic_locals[name])

    def STORE_DEREF(self, inst: dis.Instruction) -> None:
        if inst.argval in self.code.co_freevars:
            unimplemented(f"assigning to the nonlocal variable {inst.argval!r}")
        self.symbolic_locals[inst.argval] = self.pop()

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

    def KW_NAMES(self, inst: dis.Instruction) -> None:  # 3.11, 3.12
        self.kw_names = self.code.co_consts[inst.arg]

    def CALL(self, inst: dis.Instruction) -> None:
        kw_names, self.kw_names = self.kw_names, ()
        self._call(inst.arg, kw_names)

    def CALL_KW(self, inst: dis.Instruction) -> None:  # 3.13: the names are on the stack
        self._call(inst.arg, self.pop().as_python_constant())

    def _call(self, argc: int, kw_names: tuple[str, ...]) -> None:
        """Stack: [NULL, fn, *args] before 3.13, [fn, NULL, *args] from 3.13.

        Where CPython puts a bound method's ``self`` instead of NULL, we never
        do (our LOAD_ATTR pushes a bound MethodVariable), but we accept it.
        """
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
        self.push(fn.call_function(self, positional, kwargs))

    # -- operators ----------------------------------------------------------------
    BINARY_OP = binary_op
    UNARY_NEGATIVE = stack_op(operator.neg, 1)
    UNARY_POSITIVE = stack_op(operator.pos, 1)  # 3.11; 3.12 uses CALL_INTRINSIC_1
    UNARY_INVERT = stack_op(operator.invert, 1)
    UNARY_NOT = stack_op(operator.not_, 1)
    BINARY_SUBSCR = stack_op(operator.getitem, 2)

    def CALL_INTRINSIC_1(self, inst: dis.Instruction) -> None:  # 3.12+
        if inst.argrepr != "INTRINSIC_UNARY_POSITIVE":
            unimplemented(f"intrinsic {inst.argrepr} is not supported yet")
        self.UNARY_POSITIVE(inst)

    def COMPARE_OP(self, inst: dis.Instruction) -> None:
        # 3.13 spells a compare feeding a branch "bool(<)"; the operator is the same.
        symbol = inst.argval.removeprefix("bool(").removesuffix(")")
        b, a = self.pop(), self.pop()
        self.push(BuiltinVariable(_COMPARE_OPS[symbol]).call_function(self, [a, b], {}))

    def IS_OP(self, inst: dis.Instruction) -> None:
        b, a = self.pop(), self.pop()
        fn = operator.is_not if inst.arg else operator.is_
        self.push(BuiltinVariable(fn).call_function(self, [a, b], {}))

    def TO_BOOL(self, inst: dis.Instruction) -> None:  # 3.13
        value = self.pop()
        if not value.is_python_constant():
            unimplemented(f"truth value of {value} (data-dependent control flow)")
        self.push(ConstantVariable(bool(value.as_python_constant())))

    # -- containers and subscripts ----------------------------------------------
    def BUILD_TUPLE(self, inst: dis.Instruction) -> None:
        self.push(TupleVariable(tuple(self.popn(inst.arg))))

    def BUILD_LIST(self, inst: dis.Instruction) -> None:
        self.push(ListVariable(tuple(self.popn(inst.arg))))

    def LIST_EXTEND(self, inst: dis.Instruction) -> None:
        # The list was built by BUILD_LIST just before; nothing else refers to
        # it yet, so replacing it on the stack is the same as extending it.
        items = self.pop().unpack(self)
        target = self.stack[-inst.arg]
        self.stack[-inst.arg] = ListVariable(target.items + tuple(items))

    def LIST_TO_TUPLE(self, inst: dis.Instruction) -> None:
        self.push(TupleVariable(tuple(self.pop().unpack(self))))

    def BUILD_SLICE(self, inst: dis.Instruction) -> None:
        self.push(self._slice(*self.popn(inst.arg)))

    def BINARY_SLICE(self, inst: dis.Instruction) -> None:  # 3.12: obj[start:stop]
        stop, start, obj = self.pop(), self.pop(), self.pop()
        getitem = BuiltinVariable(operator.getitem)
        self.push(getitem.call_function(self, [obj, self._slice(start, stop)], {}))

    def _slice(self, *parts: VariableTracker) -> VariableTracker:
        if not all(p.is_python_constant() for p in parts):
            unimplemented("slice bounds that are not constants")
        return ConstantVariable(slice(*(p.as_python_constant() for p in parts)))

    def STORE_SUBSCR(self, inst: dis.Instruction) -> None:
        key, container, value = self.pop(), self.pop(), self.pop()
        self._setitem(container, key, value)

    def STORE_SLICE(self, inst: dis.Instruction) -> None:  # 3.12: obj[start:stop] = value
        stop, start, container, value = self.pop(), self.pop(), self.pop(), self.pop()
        self._setitem(container, self._slice(start, stop), value)

    def _setitem(self, container: VariableTracker, key: VariableTracker,
                 value: VariableTracker) -> None:
        if not isinstance(container, TensorVariable):
            unimplemented(f"item assignment on {container} is not supported yet")
        self.output.create_op(
            "call_function", operator.setitem, [container, key, value], {})

    def UNPACK_SEQUENCE(self, inst: dis.Instruction) -> None:
        items = self.pop().unpack(self)
        if len(items) != inst.arg:
            error = ValueError(f"expected {inst.arg} values to unpack, got {len(items)}")
            raise UserErrorInTrace(error)
        self.stack.extend(reversed(items))

    # -- branches on constants ----------------------------------------------------
    # A condition known at trace time (a specialised argument, a shape) picks
    # its branch now; the other branch is simply never traced. Conditions on
    # tensor data need a graph break: [Note: data-dependent].
    def _jump_if(self, inst: dis.Instruction, test: Callable[[Any], bool]) -> None:
        value = self.pop()
        if not value.is_python_constant():
            unimplemented(f"branching on {value} (data-dependent control flow)")
        if test(value.as_python_constant()):
            self.jump_to(inst.argval)

    def jump_to(self, offset: int) -> None:
        self.ip = self.offset_to_index[offset]

    def POP_JUMP_IF_FALSE(self, inst: dis.Instruction) -> None:
        self._jump_if(inst, lambda v: not v)

    def POP_JUMP_IF_TRUE(self, inst: dis.Instruction) -> None:
        self._jump_if(inst, bool)

    def POP_JUMP_IF_NONE(self, inst: dis.Instruction) -> None:
        self._jump_if(inst, lambda v: v is None)

    def POP_JUMP_IF_NOT_NONE(self, inst: dis.Instruction) -> None:
        self._jump_if(inst, lambda v: v is not None)

    # 3.11 spells the direction into the name; only forward jumps (no loops yet).
    POP_JUMP_FORWARD_IF_FALSE = POP_JUMP_IF_FALSE
    POP_JUMP_FORWARD_IF_TRUE = POP_JUMP_IF_TRUE
    POP_JUMP_FORWARD_IF_NONE = POP_JUMP_IF_NONE
    POP_JUMP_FORWARD_IF_NOT_NONE = POP_JUMP_IF_NOT_NONE

    def JUMP_FORWARD(self, inst: dis.Instruction) -> None:
        self.jump_to(inst.argval)

    # -- returning ----------------------------------------------------------------
    def RETURN_VALUE(self, inst: dis.Instruction) -> None:
        self.return_value = self.pop()

    def RETURN_CONST(self, inst: dis.Instruction) -> None:  # 3.12+
        self.return_value = self._constant(inst.argval)
