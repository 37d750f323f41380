"""Opcode handlers for containers, unpacking, branches, iteration, functions, ``with``.

Input: the interpreter state of symbolic_convert.InstructionTranslatorBase
(this class is its mixin). Output: the same stack effects as CPython, on
trackers: BUILD_LIST/TUPLE/MAP/SET/STRING/SLICE, LIST_EXTEND/APPEND,
DICT_UPDATE/MERGE, MAP_ADD, SET_ADD/UPDATE, UNPACK_SEQUENCE/EX, GET_ITER,
FOR_ITER/END_FOR, MAKE_FUNCTION, CALL_FUNCTION_EX, BEFORE_WITH,
STORE_SUBSCR, slices, FORMAT_VALUE, CALL_INTRINSIC_1, and the jumps.
Chapter: book/docs/dynamo.md ("The symbolic interpreter", "Control flow").
"""

from __future__ import annotations

import dis
import operator
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from .exc import UserErrorInTrace, unimplemented
from .variables.base import NullVariable, VariableTracker
from .variables.builtin import BuiltinVariable
from .variables.constant import ConstantVariable
from .variables.ctx_manager import AutocastVariable, GradModeVariable, NullContextVariable
from .variables.dicts import ConstDictVariable, SetVariable, as_dict_items, dict_key
from .variables.functions import NestedUserFunctionVariable
from .variables.iter import ListIteratorVariable, get_iter
from .variables.lists import ListVariable, TupleVariable
from .variables.sym_node import SliceVariable, SymNodeVariable
from .variables.tensor import known_index_or_self

if TYPE_CHECKING:
    from .symbolic_convert import InstructionTranslatorBase

PY312 = sys.version_info >= (3, 12)
PY313 = sys.version_info >= (3, 13)


class ContainerOps:
    """Mixin of InstructionTranslatorBase; ``self`` is the translator."""

    # -- building containers -------------------------------------------------------------
    def BUILD_TUPLE(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        self.push(TupleVariable(tuple(self.popn(inst.arg))))

    def BUILD_LIST(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        self.push(ListVariable(tuple(self.popn(inst.arg))))

    def BUILD_SET(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        self.push(SetVariable(tuple(self.popn(inst.arg))))

    def BUILD_MAP(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        flat = self.popn(2 * inst.arg)
        self.push(ConstDictVariable({dict_key(k): v for k, v in zip(flat[::2], flat[1::2])}))

    def BUILD_CONST_KEY_MAP(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        keys = self.pop().as_python_constant()
        self.push(ConstDictVariable(dict(zip(keys, self.popn(inst.arg)))))

    def _extend_in_place(self: InstructionTranslatorBase, depth: int, extra: tuple,
                         kind: str) -> None:
        # The container was built just before and is only on the stack, so a new
        # version in its place is the same as mutating it. It is only on the stack in a
        # resume function too (a comprehension that broke hands its list on as ``___stack0``),
        # but there it has a source, which the new version must not keep: rebuilt from its
        # source after the graph, the list would come back without what was added.
        target = self.stack[-depth]
        if kind == "dict":
            self.stack[-depth] = target.clone(items={**target.items, **dict(extra)},
                                              source=None)
        else:
            self.stack[-depth] = target.clone(items=target.items + extra, source=None)

    def LIST_EXTEND(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        items = tuple(get_iter(self, self.pop()).unpack(self))
        self._extend_in_place(inst.arg, items, "list")

    def LIST_APPEND(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        self._extend_in_place(inst.arg, (self.pop(),), "list")

    def SET_ADD(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        self._extend_in_place(inst.arg, (self.pop(),), "set")

    def SET_UPDATE(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        self._extend_in_place(inst.arg, tuple(get_iter(self, self.pop()).unpack(self)), "set")

    def DICT_UPDATE(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        items = as_dict_items(self, self.pop())
        self._extend_in_place(inst.arg, tuple(items.items()), "dict")

    DICT_MERGE = DICT_UPDATE

    def MAP_ADD(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        key, value = self.popn(2)
        self._extend_in_place(inst.arg, ((dict_key(key), value),), "dict")

    def LIST_TO_TUPLE(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        self.push(TupleVariable(tuple(self.pop().unpack(self))))

    # -- strings ---------------------------------------------------------------------------
    def FORMAT_VALUE(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        spec = self.pop().as_python_constant() if inst.arg & 0x04 else ""
        value = self.pop()
        if not value.is_python_constant() and not isinstance(value, SymNodeVariable):
            unimplemented(f"formatting {value} into a string")  # (a size is specialised)
        convert = {1: str, 2: repr, 3: ascii}.get(inst.arg & 3, lambda v: v)
        self.push(ConstantVariable(format(convert(value.as_python_constant()), spec)))

    def BUILD_STRING(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        parts = self.popn(inst.arg)
        self.push(ConstantVariable("".join(p.as_python_constant() for p in parts)))

    # -- subscripts and slices -----------------------------------------------------------
    def BUILD_SLICE(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        self.push(self._slice(*self.popn(inst.arg)))

    def BINARY_SLICE(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:  # 3.12
        stop, start, obj = self.pop(), self.pop(), self.pop()
        getitem = BuiltinVariable(operator.getitem)
        self.push(getitem.call_function(self, [obj, self._slice(start, stop)], {}))

    def _slice(self, *parts: VariableTracker) -> VariableTracker:
        parts = tuple(known_index_or_self(p) for p in parts)  # [Note: constant tensors]
        if any(isinstance(p, SymNodeVariable) for p in parts) and all(
                p.is_python_constant() or isinstance(p, SymNodeVariable) for p in parts):
            return SliceVariable(tuple(parts))  # x[:, :n] with a symbolic n
        if not all(p.is_python_constant() for p in parts):
            unimplemented("slice bounds that are not constants")
        return ConstantVariable(slice(*(p.as_python_constant() for p in parts)))

    def STORE_SUBSCR(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        key, container, value = self.pop(), self.pop(), self.pop()
        BuiltinVariable(operator.setitem).call_function(self, [container, key, value], {})

    def STORE_SLICE(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:  # 3.12
        stop, start, container, value = self.pop(), self.pop(), self.pop(), self.pop()
        key = self._slice(start, stop)
        BuiltinVariable(operator.setitem).call_function(self, [container, key, value], {})

    # -- unpacking -------------------------------------------------------------------------
    def UNPACK_SEQUENCE(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        items = get_iter(self, self.pop()).unpack(self)
        if len(items) != inst.arg:
            error = ValueError(f"expected {inst.arg} values to unpack, got {len(items)}")
            raise UserErrorInTrace(error)
        self.stack.extend(reversed(items))

    def UNPACK_EX(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        before, after = inst.arg & 0xFF, inst.arg >> 8
        items = get_iter(self, self.pop()).unpack(self)
        if len(items) < before + after:
            raise UserErrorInTrace(ValueError("not enough values to unpack"))
        rest = ListVariable(tuple(items[before:len(items) - after]))
        ordered = [*items[:before], rest, *items[len(items) - after:]]
        self.stack.extend(reversed(ordered))

    # -- iteration (loops are unrolled) --------------------------------------------------------
    def GET_ITER(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        self.push(get_iter(self, self.pop()))

    def FOR_ITER(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        iterator = self.stack[-1]
        if not isinstance(iterator, ListIteratorVariable):
            unimplemented(f"iterating over {iterator}")
        item = iterator.next_item(self)
        if item is not None:
            self.push(item)
            return
        # Exhausted. 3.11 pops the iterator and jumps past the loop; 3.12+ jump to
        # END_FOR, which pops the iterator and a value (3.12) or a value (3.13,
        # followed by POP_TOP): push a stand-in for that value and run it.
        if PY312:
            self.push(NullVariable())
        else:
            self.pop()
        self.jump_to(inst.argval)

    def END_FOR(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        self.popn(1 if PY313 else 2)

    # -- functions --------------------------------------------------------------------------
    def MAKE_FUNCTION(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        flags = 0 if PY313 else inst.arg  # 3.13: SET_FUNCTION_ATTRIBUTE follows instead
        code = self.pop()
        closure = self.pop().unpack(self) if flags & 0x08 else ()
        self.pop() if flags & 0x04 else None  # annotations: not needed to run it
        kwdefaults = as_dict_items(self, self.pop()) if flags & 0x02 else {}
        defaults = self.pop().unpack(self) if flags & 0x01 else ()
        self.push(NestedUserFunctionVariable(
            code.as_python_constant(), self.f_globals, tuple(defaults), dict(kwdefaults),
            tuple(closure)))

    def SET_FUNCTION_ATTRIBUTE(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        fn, value = self.pop(), self.pop()  # 3.13: attributes are set one by one
        field = {0x01: "defaults", 0x02: "kwdefaults", 0x08: "closure"}.get(inst.arg)
        if field == "kwdefaults":
            fn = fn.clone(kwdefaults=as_dict_items(self, value))
        elif field is not None:
            fn = fn.clone(**{field: tuple(value.unpack(self))})
        self.push(fn)

    def CALL_FUNCTION_EX(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        kwargs = as_dict_items(self, self.pop()) if inst.arg & 1 else {}
        args = get_iter(self, self.pop()).unpack(self)
        first, second = self.popn(2)
        fn = first if PY313 or not isinstance(first, NullVariable) else second
        if not PY313 and not isinstance(first, NullVariable):
            args = [second, *args]  # pragma: no cover - our stack never holds a bound self
        self.push(self.call(fn, list(args), {str(k): v for k, v in kwargs.items()}))

    def CALL_INTRINSIC_1(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        if inst.argrepr == "INTRINSIC_UNARY_POSITIVE":
            return self.UNARY_POSITIVE(inst)
        if inst.argrepr == "INTRINSIC_LIST_TO_TUPLE":
            return self.LIST_TO_TUPLE(inst)
        unimplemented(f"intrinsic {inst.argrepr} is not supported yet")

    # -- branches ----------------------------------------------------------------------
    # A condition known at trace time (a specialised argument, a shape) picks
    # its branch now; the other branch is simply never traced. A condition on
    # tensor data has no value at trace time: ``truth`` gives up, and the root
    # frame turns that into a graph break at this jump. [Note: data-dependent]
    def _jump_if(self: InstructionTranslatorBase, inst: dis.Instruction,
                 test: Callable[[VariableTracker], bool]) -> None:
        value = self.stack[-1]
        taken = test(value)
        self.pop()
        if taken:
            self.jump_to(inst.argval)

    def jump_to(self: InstructionTranslatorBase, offset: int) -> None:
        self.ip = self.offset_to_index[offset]

    def POP_JUMP_IF_FALSE(self, inst: dis.Instruction) -> None:
        self._jump_if(inst, lambda v: not v.truth(self))

    def POP_JUMP_IF_TRUE(self, inst: dis.Instruction) -> None:
        self._jump_if(inst, lambda v: v.truth(self))

    def POP_JUMP_IF_NONE(self, inst: dis.Instruction) -> None:
        self._jump_if(inst, lambda v: _is_none(self, v))

    def POP_JUMP_IF_NOT_NONE(self, inst: dis.Instruction) -> None:
        self._jump_if(inst, lambda v: not _is_none(self, v))

    # 3.11 spells the direction into the name.
    POP_JUMP_FORWARD_IF_FALSE = POP_JUMP_BACKWARD_IF_FALSE = POP_JUMP_IF_FALSE
    POP_JUMP_FORWARD_IF_TRUE = POP_JUMP_BACKWARD_IF_TRUE = POP_JUMP_IF_TRUE
    POP_JUMP_FORWARD_IF_NONE = POP_JUMP_BACKWARD_IF_NONE = POP_JUMP_IF_NONE
    POP_JUMP_FORWARD_IF_NOT_NONE = POP_JUMP_BACKWARD_IF_NOT_NONE = POP_JUMP_IF_NOT_NONE

    def JUMP_IF_FALSE_OR_POP(self, inst: dis.Instruction) -> None:  # 3.11
        if not self.stack[-1].truth(self):
            self.jump_to(inst.argval)
        else:
            self.pop()

    def JUMP_IF_TRUE_OR_POP(self, inst: dis.Instruction) -> None:  # 3.11
        if self.stack[-1].truth(self):
            self.jump_to(inst.argval)
        else:
            self.pop()

    def JUMP_FORWARD(self, inst: dis.Instruction) -> None:
        self.jump_to(inst.argval)

    JUMP_BACKWARD = JUMP_BACKWARD_NO_INTERRUPT = JUMP = JUMP_NO_INTERRUPT = JUMP_FORWARD

    # -- with ------------------------------------------------------------------------------
    def BEFORE_WITH(self: InstructionTranslatorBase, inst: dis.Instruction) -> None:
        manager = self.pop()
        if not isinstance(manager, (GradModeVariable, AutocastVariable, NullContextVariable)):
            unimplemented(f"`with` on {manager} (only grad-mode, autocast and null context "
                          "managers)")
        exit_fn = manager.enter(self)
        self.push(exit_fn)
        self.push(manager.target())  # what `as` binds


def _is_none(tx: InstructionTranslatorBase, value: VariableTracker) -> bool:
    if isinstance(value, ConstantVariable):
        return value.value is None
    return value.is_python_constant() and value.as_python_constant() is None
