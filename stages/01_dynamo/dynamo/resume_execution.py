"""Resume functions: a new code object that continues a frame from the middle.

Input: the original code object, the bytecode offset to continue at, the
layout of the value stack there (a value, a NULL, or a loop iterator per
slot) and the names of the live local variables. Output: a code object
whose arguments are the stack values and the live locals; run it and it
picks up exactly where the original frame left off. This module uses no
torch, so it can be tested on any CPython with plain functions.
Chapter: book/docs/dynamo.md ("Graph breaks and resume functions").

# [Note: resume functions]
# After a graph break the compiled graph has run, the unsupported
# instruction has run in Python, and the rest of the frame must continue.
# We cannot jump into the middle of a running frame from Python, so, like
# PyTorch, we make a new function that *starts* in the middle:
#
#     def __resume_at_42_forward(___stack0, ___stack1, x, h):
#         <copy of the original header: MAKE_CELL / COPY_FREE_VARS>
#         RESUME 0
#         LOAD_FAST ___stack0; LOAD_FAST ___stack1; GET_ITER   # rebuild the stack
#         LOAD_FAST ___live_x; STORE_FAST x                    # rebuild the locals
#         JUMP_FORWARD  -> original offset 42
#         <the original bytecode, byte for byte>
#
# The original bytecode is appended unchanged, so its relative jumps stay
# right. Three tables must follow: every local-variable index shifts by the
# number of new arguments (the new names come first: arguments must be the
# first local slots), exception-table offsets shift by the prefix length, and
# the location table gets "no location" entries for the prefix. A loop
# iterator cannot be passed as an object we could trace, so its remaining
# items are passed as a tuple and GET_ITER rebuilds an iterator over them.
#
# Versions: 3.11 added the exception table, the compact location table and
# localsplus indices for cell variables (one index space for locals, cells
# and free variables, which is why one shift fixes all of them); 3.12 added
# LOAD_FAST_CHECK / LOAD_FAST_AND_CLEAR (more local opcodes, same shift);
# 3.13 packs two local indices into one byte for LOAD_FAST_LOAD_FAST and
# friends (4 bits each, shifted separately).
"""

from __future__ import annotations

import dis
import functools
import types
from collections.abc import Iterable

_LOCAL_OPS = set(dis.haslocal) | set(dis.hasfree)
_PAIR_OPS = {dis.opmap[n] for n in ("LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST",
                                    "STORE_FAST_STORE_FAST") if n in dis.opmap}
_HEADER_OPS = {"MAKE_CELL", "COPY_FREE_VARS"}

# The original code object and the prefix length (bytes) of every resume code.
RESUME_ORIGINS: dict[types.CodeType, tuple[types.CodeType, int]] = {}


class CannotResume(Exception):
    """This frame cannot be resumed at this point (the caller falls back to eager)."""


def original_location(code: types.CodeType, offset: int) -> tuple[types.CodeType, int]:
    """Map an offset in a (possibly resume) code object back to the original code."""
    if code in RESUME_ORIGINS:
        orig, shift = RESUME_ORIGINS[code]
        return orig, offset - shift
    return code, offset


def _instr(opname: str, arg: int = 0) -> bytes:
    """One instruction, with EXTENDED_ARG prefixes when ``arg`` needs more than a byte."""
    out = b""
    for shift in (24, 16, 8):
        if arg >> shift:
            out += bytes([dis.opmap["EXTENDED_ARG"], (arg >> shift) & 0xFF])
    return out + bytes([dis.opmap[opname], arg & 0xFF])


def _shift_locals(code: types.CodeType, k: int) -> bytes:
    """The original bytecode with every local/cell/free index moved up by ``k``."""
    raw = bytearray(code.co_code)
    previous = None
    for inst in dis.get_instructions(code):
        if inst.opcode in _LOCAL_OPS or inst.opcode in _PAIR_OPS:
            if previous == "EXTENDED_ARG":
                raise CannotResume("a local variable index above 255")
            if inst.opcode in _PAIR_OPS:
                high, low = (inst.arg >> 4) + k, (inst.arg & 15) + k
                if high > 15 or low > 15:
                    raise CannotResume("a packed local variable index above 15")
                new = (high << 4) | low
            else:
                new = inst.arg + k
            if new > 255:
                raise CannotResume("a local variable index above 255")
            raw[inst.offset + 1] = new
        previous = inst.opname
    return bytes(raw)


def _varint_entries(table: bytes) -> list[list[int]]:
    """Parse the 3.11+ exception table: entries of (start, length, target, depth_lasti)."""
    entries, i = [], 0
    while i < len(table):
        entry = []
        for _ in range(4):
            value = table[i] & 63
            while table[i] & 64:
                i += 1
                value = (value << 6) | (table[i] & 63)
            i += 1
            entry.append(value)
        entries.append(entry)
    return entries


def _varint(value: int, first: bool) -> bytes:
    chunks = [value & 63]
    value >>= 6
    while value:
        chunks.append(value & 63)
        value >>= 6
    chunks.reverse()
    out = bytearray(c | 64 for c in chunks[:-1]) + bytes([chunks[-1]])
    if first:
        out[0] |= 128
    return bytes(out)


def shift_exception_table(table: bytes, units: int) -> bytes:
    """Move every range and handler of an exception table ``units`` code units later."""
    out = b""
    for start, length, target, depth in _varint_entries(table):
        out += _varint(start + units, True) + _varint(length, False)
        out += _varint(target + units, False) + _varint(depth, False)
    return out


def handler_ranges(code: types.CodeType) -> list[tuple[int, int, int]]:
    """(start, end, handler) byte offsets of the exception table (3.11+)."""
    return [(2 * s, 2 * (s + n), 2 * t) for s, n, t, _ in _varint_entries(code.co_exceptiontable)]


def handler_at(code: types.CodeType, offset: int) -> tuple[int, int, bool] | None:
    """The exception handler that catches what the instruction at ``offset`` raises, as
    (handler offset, stack depth to unwind to, whether the offset of the raising instruction
    is pushed too), or None. 3.11+ tables give each instruction its innermost handler."""
    for start, length, target, depth_lasti in _varint_entries(code.co_exceptiontable):
        if 2 * start <= offset < 2 * (start + length):
            return 2 * target, depth_lasti >> 1, bool(depth_lasti & 1)
    return None


def _no_location(units: int) -> bytes:
    """Location-table entries that cover ``units`` code units with "no location"."""
    out = b""
    while units > 0:
        n = min(units, 8)
        out += bytes([0x80 | (15 << 3) | (n - 1)])
        units -= n
    return out


def _localsplus_index(code: types.CodeType) -> dict[str, int]:
    """Name -> index in the frame's local slots (locals, then cells, then free variables)."""
    index = {name: i for i, name in enumerate(code.co_varnames)}
    for inst in dis.get_instructions(code):
        if inst.opcode in dis.hasfree and inst.argval not in index:
            index[inst.argval] = inst.arg
    return index


# --8<-- [start:resume-code]
def make_resume_code(code: types.CodeType, offset: int, layout: Iterable[str],
                     live: Iterable[str]) -> types.CodeType:
    """A code object continuing ``code`` at ``offset``. See [Note: resume functions].

    ``layout`` has one entry per stack slot, bottom first: "value", "null"
    or "iter"; ``live`` names the locals to restore. The new function takes
    the non-null stack slots, then the live locals, as positional arguments.
    """
    layout, live = tuple(layout), tuple(live)
    stack_args = [f"___stack{i}" for i, kind in enumerate(layout) if kind != "null"]
    new_names = stack_args + [f"___live_{name}" for name in live]
    k = len(new_names)
    slots = _localsplus_index(code)
    prefix = b""
    for inst in dis.get_instructions(code):
        if inst.opname == "RESUME":
            break
        if inst.opname in _HEADER_OPS:  # cells must exist before anything stores into them
            prefix += _instr(inst.opname, inst.arg + (k if inst.opname == "MAKE_CELL" else 0))
    prefix += _instr("RESUME", 0)
    arg = 0
    for kind in layout:
        if kind == "null":
            prefix += _instr("PUSH_NULL")
            continue
        prefix += _instr("LOAD_FAST", arg)
        prefix += _instr("GET_ITER") if kind == "iter" else b""
        arg += 1
    for name in live:
        store = "STORE_DEREF" if name in code.co_cellvars else "STORE_FAST"
        prefix += _instr("LOAD_FAST", arg) + _instr(store, slots[name] + k)
        arg += 1
    jump_at = len(prefix) + 6  # EXTENDED_ARG, EXTENDED_ARG, JUMP_FORWARD
    delta = (jump_at + offset - jump_at) // 2  # target is offset bytes past the prefix end
    prefix += bytes([dis.opmap["EXTENDED_ARG"], (delta >> 16) & 0xFF,
                     dis.opmap["EXTENDED_ARG"], (delta >> 8) & 0xFF,
                     dis.opmap["JUMP_FORWARD"], delta & 0xFF])
    units = len(prefix) // 2
    flags = code.co_flags & ~(0x04 | 0x08)  # no *args / **kwargs
    name = f"__resume_at_{offset}_{code.co_name}"
    resume = code.replace(
        co_argcount=k, co_posonlyargcount=0, co_kwonlyargcount=0, co_flags=flags,
        co_varnames=tuple(new_names) + code.co_varnames, co_nlocals=k + code.co_nlocals,
        co_code=prefix + _shift_locals(code, k), co_stacksize=code.co_stacksize + 2,
        co_exceptiontable=shift_exception_table(code.co_exceptiontable, units),
        co_linetable=_no_location(units) + code.co_linetable, co_name=name,
        co_qualname=name,
    )
    RESUME_ORIGINS[resume] = (code, len(prefix))
    return resume
# --8<-- [end:resume-code]


# Opcodes that read or write a local variable, by the name they touch.
# LOAD_FAST_AND_CLEAR (3.12 comprehensions) only saves a value it restores itself.
_READS = {"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF", "LOAD_CLOSURE", "DELETE_FAST",
          "LOAD_FROM_DICT_OR_DEREF"}
_WRITES = {"STORE_FAST", "STORE_DEREF", "STORE_FAST_MAYBE_NULL"}
_NO_FALLTHROUGH = {"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE",
                   "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP"}


@functools.lru_cache(maxsize=1024)
def live_locals(code: types.CodeType, offset: int) -> frozenset[str]:
    """Locals that some path from ``offset`` reads before writing (backward dataflow).

    Cached: a graph break runs this on every call, to pick the locals handed to the resume
    function, and the dataflow over the whole function's bytecode took about half the host
    time of the graph-break workload's step (H200 host, under cProfile). A code object never
    changes, so neither does the answer."""
    insts = list(dis.get_instructions(code))
    at = {inst.offset: i for i, inst in enumerate(insts)}
    handlers = handler_ranges(code)
    live_in: list[frozenset[str]] = [frozenset()] * len(insts)
    changed = True
    while changed:
        changed = False
        for i in range(len(insts) - 1, -1, -1):
            inst = insts[i]
            out: set[str] = set()
            for succ in _successors(inst, i, insts, at, handlers):
                out |= live_in[succ]
            reads, writes = _uses(inst)
            new = frozenset((out - writes) | reads)
            if new != live_in[i]:
                live_in[i], changed = new, True
    return live_in[at[offset]] if offset in at else frozenset()


def _uses(inst: dis.Instruction) -> tuple[set[str], set[str]]:
    names = inst.argval if isinstance(inst.argval, tuple) else (inst.argval,)
    if inst.opname in _READS or inst.opname == "LOAD_FAST_LOAD_FAST":
        return set(names), set()
    if inst.opname in _WRITES or inst.opname == "STORE_FAST_STORE_FAST":
        return set(), set(names)
    if inst.opname == "STORE_FAST_LOAD_FAST":
        return {names[1]}, {names[0]}
    return set(), set()


def _successors(inst, i, insts, at, handlers) -> list[int]:
    succ = []
    if inst.opname not in _NO_FALLTHROUGH and i + 1 < len(insts):
        succ.append(i + 1)
    if inst.opcode in dis.hasjrel or inst.opcode in dis.hasjabs:
        if inst.argval in at:
            succ.append(at[inst.argval])
    for start, end, handler in handlers:
        if start <= inst.offset < end and handler in at:
            succ.append(at[handler])
    return succ

