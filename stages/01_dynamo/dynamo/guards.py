"""Guards: the conditions under which a compiled graph may be reused.

Input: the real values a frame was called with (tensors, Python constants,
globals), each named by its *source* (a Python expression such as ``x``,
``xs[0]``, ``G['W']``, ``C['scale']``). Output: ``Guard`` objects that print
as readable Python expressions, and one compiled check function per cache
entry that returns True when every guard holds for a new call.
Chapter: book/docs/dynamo.md ("Guards").

# [Note: guards]
# A captured graph bakes in everything the trace learned about its inputs:
# tensor dtype, device, sizes and strides (they decided every meta kernel's
# output), whether autograd is recording, and the value of every Python
# number that steered the trace. A guard restates one such assumption as a
# Python expression over the frame's sources. Before reusing a graph, the
# cache evaluates all of its guards; if one is False, the call is a cache
# miss and dynamo traces again ("recompiles") for the new situation.
#
# Names in guard expressions: function arguments by their own name, globals
# as G['name'], closure variables as C['name'], plus the modules torch, math
# and sys. A guard is therefore an ordinary expression a reader can eval.
"""

from __future__ import annotations

import ast
import builtins
import copy
import dataclasses
import enum
import math
import os
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch

SNAPSHOTS: list[Any] = []  # states a guard compares with: [Note: a deep copy made while tracing]
_ATOMS = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device, type,
          types.FunctionType, types.ModuleType)


def same_state(value: Any, snapshot: Any) -> bool:
    """``value`` and ``snapshot`` have the same type and equal state, compared through dicts,
    sequences and instance ``__dict__``s, read past any custom attribute lookup (the guard of
    a copy made while tracing)."""
    if type(value) is not type(snapshot):
        return False
    if isinstance(value, _ATOMS):
        return value == snapshot
    if isinstance(value, dict):
        return value.keys() == snapshot.keys() and all(
            same_state(v, snapshot[k]) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return len(value) == len(snapshot) and all(map(same_state, value, snapshot))
    try:
        state = object.__getattribute__(value, "__dict__")
    except AttributeError:
        return value == snapshot
    return same_state(state, object.__getattribute__(snapshot, "__dict__"))


def is_plain(value: Any) -> bool:
    """Atoms, and dicts, lists and tuples of plain values: what ``==`` compares exactly."""
    if isinstance(value, _ATOMS):
        return True
    if type(value) is dict:
        return all(is_plain(k) and is_plain(v) for k, v in value.items())
    if type(value) in (list, tuple):
        return all(map(is_plain, value))
    return False


def same_plain_state(value: Any, snapshot: tuple[type, dict]) -> bool:
    """``same_state`` for an object whose copied ``__dict__`` was plain (``is_plain``): one
    dict comparison, in C (a configuration: about 1 us against 25 for the walk)."""
    return type(value) is snapshot[0] and \
        object.__getattribute__(value, "__dict__") == snapshot[1]


# Names every guard expression may use besides the frame's own sources.
GUARD_GLOBALS: dict[str, Any] = {"torch": torch, "math": math, "sys": sys,
                                 "___environ": os.environ,  # [Note: environment variables]
                                 "___same_state": same_state,  # (and the next two:
                                 "___same_plain_state": same_plain_state,  # a copy's guard)
                                 "___snapshots": SNAPSHOTS}
RESERVED_NAMES = frozenset({"G", "C", *GUARD_GLOBALS})


@dataclasses.dataclass(frozen=True)
class Guard:
    """One assumption: ``expr`` is a Python expression that must evaluate to True."""

    source: str  # the value this guard is about, e.g. "x"
    kind: str  # TYPE, DTYPE, DEVICE, SIZE, STRIDE, REQUIRES_GRAD, NDIM, VALUE, ID, ...
    expr: str  # e.g. "x.size() == (8, 8)"

    def __str__(self) -> str:
        return self.expr


def literal(value: Any) -> str:
    """A Python expression that evaluates to ``value`` (only for trusted constant kinds).

    Strings go through repr(), so a user-controlled string can never escape
    the literal it is embedded in.
    """
    if isinstance(value, torch.dtype):
        return str(value)  # "torch.float32"
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"  # inf, -inf (nan is guarded by math.isnan)
    if isinstance(value, (tuple, list)):
        inner = ", ".join(literal(v) for v in value)
        if isinstance(value, list):
            return f"[{inner}]"
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return repr(value)
    if type(value) is slice:  # a slice a graph break hands on ([Note: slice bounds that ...])
        return f"slice({literal(value.start)}, {literal(value.stop)}, {literal(value.step)})"
    raise TypeError(f"no literal form for {type(value).__name__}")


# --8<-- [start:tensor-guards]
def make_tensor_guards(source: str, tensor: torch.Tensor) -> list[Guard]:
    """Guards that pin down everything a trace may have learned from a tensor input.

    The trace ran on a meta tensor with the same type, dtype, device, sizes,
    strides and requires_grad as ``tensor``; a new input may reuse the graph
    only if it agrees on all of them. The type guard comes first so that the
    compiled check short-circuits before asking a non-tensor for ``.dtype``.
    """
    # BEGIN EXERCISE dynamo-tensor-guards: return the guards that pin a tensor input's metadata
    def guard(kind: str, expr: str) -> Guard:
        return Guard(source, kind, expr)

    type_path = "torch.nn.Parameter" if type(tensor) is torch.nn.Parameter else "torch.Tensor"
    return [
        guard("TYPE", f"type({source}) is {type_path}"),
        guard("DTYPE", f"{source}.dtype == {literal(tensor.dtype)}"),
        guard("DEVICE", f"{source}.device == {literal(tensor.device)}"),
        guard("NDIM", f"{source}.ndim == {tensor.ndim}"),
        guard("SIZE", f"{source}.size() == {literal(tuple(tensor.size()))}"),
        guard("STRIDE", f"{source}.stride() == {literal(tuple(tensor.stride()))}"),
        guard("REQUIRES_GRAD", f"{source}.requires_grad == {tensor.requires_grad}"),
    ]
    # END EXERCISE dynamo-tensor-guards
# --8<-- [end:tensor-guards]


def make_dynamic_tensor_guards(source: str, tensor: torch.Tensor,
                               example: torch.Tensor) -> list[Guard]:
    """The guards of a tensor input with symbolic dims (``example`` has SymInt sizes):
    as ``make_tensor_guards``, but only the static sizes are pinned, one by one. What the
    trace assumed about the symbolic ones (their lower bound, equal sizes, symbolic strides,
    relations) is printed by the ShapeEnv after the backend compiled
    (book/docs/dynamic-shapes.md)."""
    type_path = "torch.nn.Parameter" if type(tensor) is torch.nn.Parameter else "torch.Tensor"
    guards = [
        Guard(source, "TYPE", f"type({source}) is {type_path}"),
        Guard(source, "DTYPE", f"{source}.dtype == {literal(tensor.dtype)}"),
        Guard(source, "DEVICE", f"{source}.device == {literal(tensor.device)}"),
        Guard(source, "NDIM", f"{source}.ndim == {tensor.ndim}"),
    ]
    guards += [Guard(source, "SIZE", f"{source}.size()[{d}] == {n}")
               for d, n in enumerate(example.shape) if isinstance(n, int)]
    if all(isinstance(s, int) for s in example.stride()):
        guards.append(Guard(source, "STRIDE",
                            f"{source}.stride() == {literal(tuple(tensor.stride()))}"))
    guards.append(Guard(source, "REQUIRES_GRAD",
                        f"{source}.requires_grad == {tensor.requires_grad}"))
    return guards


def make_constant_guards(source: str, value: Any) -> list[Guard]:
    """A Python constant was specialised into the graph: guard its type and value.

    The type guard matters because ``1 == 1.0 == True`` in Python, yet
    ``x * 1`` and ``x * 1.0`` give different dtypes for an integer tensor.
    """
    if value is None:
        return [Guard(source, "VALUE", f"{source} is None")]
    if isinstance(value, enum.Enum):
        # [Note: enum members]: timm's ``Format.NHWC`` is a ``str`` too, and its repr,
        # ``<Format.NHWC: 'NHWC'>``, is no expression (an internal error: Swin and Visformer
        # ran eagerly). A member is a singleton, named through its class.
        path = python_path(type(value))
        if path is None:
            raise TypeError(f"no name for the enum {type(value).__qualname__}")
        return [Guard(source, "ID", f"{source} is {path}[{value.name!r}]")]
    guards = [Guard(source, "TYPE", f"type({source}) is {_type_expr(value)}")]
    if isinstance(value, float) and math.isnan(value):
        return guards + [Guard(source, "VALUE", f"math.isnan({source})")]
    if type(value).__module__ == "numpy":  # [Note: numpy scalars are constants]
        value = value.item()  # np.int64(8) == 8, and the type guard says which it is
    return guards + [Guard(source, "VALUE", f"{source} == {literal(value)}")]


def _type_expr(value: Any) -> str:
    if isinstance(value, torch.dtype):
        return "torch.dtype"
    if isinstance(value, torch.device):
        return "torch.device"
    if isinstance(value, torch.Size):
        return "torch.Size"
    if type(value).__module__ != "builtins":  # numpy.int64: sys.modules['numpy'].int64
        path = python_path(type(value))
        if path is None:
            raise TypeError(f"no name for the type {type(value).__qualname__}")
        return path
    return type(value).__name__  # a builtin: int, float, bool, str, complex, tuple


def python_path(obj: Any) -> str | None:
    """An expression naming ``obj`` through its module (``torch.nn.functional.relu``), if any."""
    if isinstance(obj, type(sys)):
        is_torch = obj.__name__ == "torch" or obj.__name__.startswith("torch.")
        return obj.__name__ if is_torch else f"sys.modules[{obj.__name__!r}]"
    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(name, str) or "<" in name:
        return None
    found = sys.modules.get(module)
    for part in name.split("."):
        found = getattr(found, part, None)
    if found is not obj:
        return None
    if module == "torch" or module.startswith("torch."):
        # torch is in the guard namespace, and ``torch.nn.functional.relu`` reads naturally;
        # but a package may shadow a submodule with a function of the same name
        # (``torch._higher_order_ops.associative_scan``), so the dotted path must lead there
        walked: Any = torch
        for part in f"{module}.{name}".split(".")[1:]:
            walked = getattr(walked, part, None)
        if walked is obj:
            return f"{module}.{name}"
    return f"sys.modules[{module!r}].{name}"


def make_identity_guard(source: str, obj: Any) -> Guard:
    """``source`` must still be this very object (a module, a function, a class)."""
    path = python_path(obj)
    if path is not None:
        return Guard(source, "ID", f"{source} is {path}")
    return Guard(source, "ID", f"id({source}) == {id(obj)}")





def make_type_guard(source: str, obj: Any) -> Guard:
    """``source`` must still be an instance of exactly ``type(obj)``."""
    cls = type(obj)
    path = python_path(cls)
    if cls.__module__ == "builtins" and getattr(builtins, cls.__name__, None) is cls:
        path = cls.__name__
    if path is not None:
        return Guard(source, "TYPE", f"type({source}) is {path}")
    return Guard(source, "TYPE", f"id(type({source})) == {id(cls)}")


def make_grad_mode_guard() -> Guard:
    """Whether autograd records decided the example values' requires_grad."""
    enabled = torch.is_grad_enabled()
    return Guard("torch", "GRAD_MODE", f"{'' if enabled else 'not '}torch.is_grad_enabled()")


def make_autocast_guard() -> Guard:
    """Whether autocast was on when tracing began, and with which dtype, for each device
    type that can run here: it decided the example values' dtypes and, for a backend
    that traces further (aotautograd), the casts written into its graph."""
    devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    terms = []
    for device in devices:
        enabled = f"torch.is_autocast_enabled({device!r})"
        if torch.is_autocast_enabled(device):
            dtype = torch.get_autocast_dtype(device)
            terms.append(f"{enabled} and torch.get_autocast_dtype({device!r}) == {dtype}")
        else:
            terms.append(f"not {enabled}")
    return Guard("torch", "AUTOCAST", " and ".join(terms))


# --8<-- [start:compile-guards]
def compile_guards(guards: Sequence[Guard], params: Sequence[str],
                   input_sources: Sequence[str] = (),
                   example: dict[str, Any] | None = None) -> Callable[..., tuple | None]:
    """One function per cache entry: ``check(G, C, *params)`` is the tuple of the graph's
    inputs (fetched by ``input_sources``) when every guard holds, and None otherwise.
    ``example``: the namespace of the call being compiled (``G``, ``C`` and the
    arguments), which tells where a module attribute lives. See [Note: compiled guard check]
    for how the function is built and why it is fast."""
    implied = _implied_by_size(guards)
    checked = [ast.parse(g.expr, mode="eval").body for g in guards if g.expr not in implied]
    inputs = [ast.parse(source, mode="eval").body for source in input_sources]
    pinned = {g.source for g in guards if g.kind in ("ID", "TYPE")}  # their class is fixed
    gen = _CheckCodegen(params, checked + inputs, pinned, _Examples(example))
    for tree in checked:
        gen.add_guard(tree)
    inputs = [gen.rewrite(tree, fetch=True) for tree in inputs]
    gen.flush()
    returned = "".join(f"{ast.unparse(node)}, " for node in inputs)
    signature = ", ".join(["G", "C", *params])
    text = (f"def ___check_guards({signature}):\n    try:\n"
            + "".join(f"        {line}\n" for line in gen.lines or ["pass"])
            + "    except Exception:  # a source that no longer resolves: a miss\n"
            + "        return None\n"
            + f"    return ({returned})\n")
    namespace = {**GUARD_GLOBALS, **gen.constants}
    exec(compile(text, "<dynamo ___check_guards>", "exec"), namespace)
    fn = namespace["___check_guards"]
    fn.source_text = text  # kept for debugging and the book
    return fn
# --8<-- [end:compile-guards]


# [Note: compiled guard check]
# The cache checks an entry's guards on every call, so the check is the price of a cache hit;
# a GPT of 12 blocks has ~1,700 guards. Evaluated one by one, each walking its source from
# ``self`` again, they cost milliseconds. Instead every entry gets one generated Python
# function, made with ``compile()`` once, that checks the guards in their printed order and
# returns the graph inputs (``fn.source_text`` shows it):
#
#     def ___check_guards(G, C, self, idx):
#         try:
#             ___s0 = torch.Tensor
#             if not (not torch.is_grad_enabled()
#                 and type(self) is ___s1 ...
#                 and type(idx) is ___s0 and ...):
#                 return None
#             ___s2 = self.__dict__
#             if not ('h' not in ___s2 and 'h' not in ___s2['_parameters'] and ...):
#                 return None
#             ___s3 = ___s2['_modules']['h']                 # self.h
#             ...
#             ___s9 = ___s8['_parameters']['weight']          # self.h[0].ln_1.weight
#             if not (type(___s9) is ___s5 and ___s9.dtype == ___s6 and ...):
#                 return None
#         except Exception:  # a source that no longer resolves: a miss
#             return None
#         return (idx, ___s9, ...)
#
# What makes it cheap, without dropping a single guard:
# - Every source is fetched once, into a local shared by the guards that read it, by the
#   sources below it and by the graph inputs (returned by the check: fetching them again
#   would walk the module tree a second time). A source is fetched right before the first
#   guard that reads it, so a type guard still runs before ``.dtype`` is asked of a value.
# - Module state is read from the module's tables (``_parameters``, ``_buffers``,
#   ``_modules``), not through ``nn.Module.__getattr__``, which Python calls only after a
#   normal lookup failed with an AttributeError (~1 us per read). See ``_read``.
# - Constants are made once: ``torch.device('cpu')`` when the function is made,
#   ``torch.float32`` / ``torch.nn.Parameter`` once per call, not once per guard.
# - A guard implied by another is left out of the generated code (never out of the printed
#   list): ``x.ndim == 2`` when ``x.size() == (8, 8)`` is checked too.
# What may change between two calls, and which guard sees it: a parameter replaced (the
# table holds another tensor, whose guards are checked; a tied weight's ALIAS guard fails),
# a submodule replaced (its type guard, and the guards on what the trace read from it),
# ``requires_grad`` flipped or ``.data`` swapped for another shape, dtype or device (tensor
# guards, read again on every call), an attribute changed (``training``, ``eps``: value
# guards), a block appended to a ModuleList (its length guard). Nothing is remembered from
# one call to the next; only reads *within* a call are shared. A source that raises (a
# block deleted) makes the call a miss, as ``first_failing_guard`` reports it. Assumed, as
# everywhere in dynamo (a method's code is not guarded either): classes are not changed
# after compiling.


class _CheckCodegen:
    """Builds the body of ``___check_guards``: fetch statements and guard groups, in order.

    A *source chain* is a parameter (or ``G``, ``C``, ``torch``...) followed by attribute
    reads and constant subscripts (``self.h[0].attn``), or a tensor's ``.size()`` /
    ``.stride()``: reading it has no effect, so its value can be kept in a local (``___s3``).
    A chain gets a local when it is *shared*: read by two guards, or the parent of two
    different chains (``self.h[0]`` of ``self.h[0].ln_1`` and ``self.h[0].attn``).
    """

    def __init__(self, params: Sequence[str], trees: Sequence[ast.expr], pinned: set[str],
                 example: Callable[[str], Any]) -> None:
        self.fetched: dict[str, str] = {name: name for name in ("G", "C", *GUARD_GLOBALS)}
        self.fetched.update({name: name for name in params})  # chain -> local holding it
        self.shared = _shared_chains(trees, set(self.fetched))
        self.lines: list[str] = []
        self.group: list[str] = []  # guards to check together, joined by ``and``
        self.constants: dict[str, Any] = {}  # name in the generated code -> value
        self.count = 0  # locals made so far
        self.pinned = pinned  # sources with an identity guard
        self.example = example  # source -> its value in the call being compiled

    def add_guard(self, expr: ast.expr) -> None:
        text = ast.unparse(self.rewrite(expr, fetch=True))  # may flush the current group
        self.group.append(text)

    def flush(self) -> None:
        """Check the guards collected so far (before anything else is fetched)."""
        if self.group:
            self.lines.append("if not (" + "\n            and ".join(self.group) + "):")
            self.lines.append("    return None")
            self.group = []

    def rewrite(self, node: ast.expr, fetch: bool) -> ast.expr:
        """``node`` reading fetched locals instead of chains. With ``fetch``, a shared chain
        not fetched yet is fetched now; without it (inside the second operand of ``and``,
        ``or``, ``if``, which may never be evaluated) nothing new is fetched."""
        constant = self._constant(node)
        if constant is not None:
            return constant
        text = _chain_text(node, self.fetched)
        if text is not None and text in self.fetched:
            return ast.Name(self.fetched[text], ast.Load())
        if text is not None and fetch and (text in self.shared or self._in_tables(node)):
            parent = self.rewrite(_chain_parent(node), fetch=True)
            if _chain_root(node) not in ("torch", "math"):  # torch.float32 is always safe
                self.flush()  # the guards before this fetch decide whether it may be read
            code = self._read(node, parent)
            local = f"___s{self.count}"
            self.count += 1
            self.lines.append(f"{local} = {code}")
            self.fetched[text] = local
            return ast.Name(local, ast.Load())
        conditional = isinstance(node, (ast.BoolOp, ast.IfExp))
        return _map_children(node, lambda child, first: self.rewrite(
            child, fetch and (first or not conditional) and not isinstance(node, ast.Lambda)))

    # --8<-- [start:module-tables]
    def _in_tables(self, node: ast.expr) -> str | None:
        """The table (``_parameters``, ``_buffers``, ``_modules``) in which
        ``nn.Module.__getattr__`` finds ``node`` (``owner.weight``, ``module_list[3]``), if
        ``owner`` is a module whose class the guards pin (by type or identity); else None."""
        if not isinstance(node, (ast.Attribute, ast.Subscript)):
            return None
        owner_text = ast.unparse(_chain_parent(node))
        if owner_text not in self.pinned:
            return None
        owner = self.example(owner_text)
        if not isinstance(owner, torch.nn.Module):
            return None
        if isinstance(node, ast.Subscript):  # ModuleList keys are always '0' ... 'n-1'
            index = node.slice.value
            ok = type(owner) is torch.nn.ModuleList and type(index) is int and index >= 0
            return "_modules" if ok and str(index) in owner._modules else None
        if (type(owner).__getattr__ is not torch.nn.Module.__getattr__
                or node.attr in owner.__dict__ or hasattr(type(owner), node.attr)):
            return None  # found before __getattr__ is asked
        return next((t for t in _TABLES if node.attr in owner.__dict__[t]), None)

    def _read(self, node: ast.expr, parent: ast.Name) -> str:
        """The code that reads ``node`` from its parent's local. A module's parameter, buffer
        or submodule is read from the module's table, as ``nn.Module.__getattr__`` would
        find it, without first failing a normal lookup (a raised and caught AttributeError:
        1 us per read). The lookup order is kept by checking, before the read, that the name
        is in no place Python or ``__getattr__`` looks first; the module's own class is
        pinned by its type guard, checked before."""
        table = self._in_tables(node)
        if table is None:
            return ast.unparse(_with_parent(node, parent))
        owner_dict = f"{parent.id}.__dict__"
        if owner_dict not in self.fetched:
            self.fetched[owner_dict] = f"___s{self.count}"
            self.count += 1
            self.lines.append(f"{self.fetched[owner_dict]} = {owner_dict}")
        tables = self.fetched[owner_dict]
        if isinstance(node, ast.Subscript):
            return f"{tables}['_modules'][{str(node.slice.value)!r}]"
        name = node.attr
        earlier = _TABLES[:_TABLES.index(table)]
        self.group += [f"{name!r} not in {tables}",
                       *(f"{name!r} not in {tables}[{t!r}]" for t in earlier)]
        self.flush()
        return f"{tables}[{table!r}][{name!r}]"
    # --8<-- [end:module-tables]

    def _constant(self, node: ast.expr) -> ast.expr | None:
        """``torch.device('cpu')``, ``float('inf')``: made once, bound by name."""
        if not (isinstance(node, ast.Call) and not node.keywords and len(node.args) == 1
                and isinstance(node.args[0], ast.Constant)
                and ast.unparse(node.func) in ("torch.device", "float")):
            return None
        text = ast.unparse(node)
        name = "___" + "".join(c if c.isalnum() else "_" for c in text).strip("_")
        self.constants[name] = eval(text, dict(GUARD_GLOBALS))
        return ast.Name(name, ast.Load())


class _Examples:
    """``examples(source)``: the value of ``source`` in the call being compiled (None if
    unknown), each evaluated once."""

    def __init__(self, namespace: dict[str, Any] | None) -> None:
        self.namespace = namespace
        self.values: dict[str, Any] = {}

    def __call__(self, source: str) -> Any:
        if self.namespace is None:
            return None
        if source not in self.values:
            try:
                self.values[source] = eval(source, dict(GUARD_GLOBALS), dict(self.namespace))
            except Exception:
                self.values[source] = None
        return self.values[source]


_TABLES = ("_parameters", "_buffers", "_modules")  # nn.Module.__getattr__ looks in this order
_PURE_METHODS = ("size", "stride")  # tensor metadata: reading it twice gives the same


def _chain_text(node: ast.expr, roots: Any) -> str | None:
    """The text of ``node`` (as ``ast.unparse`` writes it) if it is a source chain starting
    at one of ``roots``, else None. Built link by link: unparsing every prefix of every
    chain again was a tenth of a GPT-2 training step's compile time."""
    if isinstance(node, ast.Name):
        return node.id if node.id in roots else None
    if isinstance(node, ast.Attribute):
        link = f".{node.attr}"
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        link = f"[{ast.unparse(node.slice)}]"
    elif (isinstance(node, ast.Call) and not node.args and not node.keywords
          and isinstance(node.func, ast.Attribute) and node.func.attr in _PURE_METHODS):
        link = f".{node.func.attr}()"
    else:
        return None
    parent = _chain_text(_chain_parent(node), roots)
    return None if parent is None else parent + link


def _chain_root(node: ast.expr) -> str:
    while not isinstance(node, ast.Name):
        node = _chain_parent(node)
    return node.id


def _chain_parent(node: ast.expr) -> ast.expr:
    return node.func.value if isinstance(node, ast.Call) else node.value


def _with_parent(node: ast.expr, parent: ast.expr) -> ast.expr:
    if isinstance(node, ast.Call):
        return ast.Call(ast.Attribute(parent, node.func.attr, ast.Load()), [], [])
    if isinstance(node, ast.Attribute):
        return ast.Attribute(parent, node.attr, ast.Load())
    return ast.Subscript(parent, node.slice, ast.Load())


def _shared_chains(trees: Sequence[ast.expr], roots: set[str]) -> set[str]:
    """The chains read by two guards (or inputs), or that are the parent of two chains."""
    uses: dict[str, int] = {}
    children: dict[str, set[str]] = {}
    for tree in trees:
        for node in _outermost_chains(tree, roots):
            text = _chain_text(node, roots)
            uses[text] = uses.get(text, 0) + 1
            while not isinstance(node, ast.Name):
                parent = _chain_parent(node)
                children.setdefault(_chain_text(parent, roots), set()).add(text)
                node, text = parent, _chain_text(parent, roots)
    return {c for c in {*uses, *children}
            if uses.get(c, 0) + len(children.get(c, ())) >= 2}


def _outermost_chains(node: ast.expr, roots: set[str]) -> list[ast.expr]:
    if _chain_text(node, roots) is not None:
        return [node]
    return [chain for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr)
            for chain in _outermost_chains(child, roots)]


def _map_children(node: ast.expr, fn: Callable[[ast.expr, bool], ast.expr]) -> ast.expr:
    """A copy of ``node`` with ``fn(child, is_first)`` applied to each child expression, in
    evaluation order (of ``a and b`` only the first is sure to be evaluated)."""
    node = copy.copy(node)
    first = True
    for field, value in ast.iter_fields(node):
        if isinstance(value, ast.expr):
            setattr(node, field, fn(value, first))
            first = False
        elif isinstance(value, list):
            items = []
            for item in value:
                items.append(fn(item, first) if isinstance(item, ast.expr) else item)
                first = first and not isinstance(item, ast.expr)
            setattr(node, field, items)
    return node


def _implied_by_size(guards: Sequence[Guard]) -> set[str]:
    """``x.ndim == 2`` guards that a ``x.size() == (8, 8)`` guard of the same list implies:
    left out of the generated code (not of the printed list)."""
    sizes = set()
    for guard in guards:
        if guard.kind != "SIZE":  # parsing every guard took 20 ms of a 12-layer GPT's compile
            continue
        tree = ast.parse(guard.expr, mode="eval").body
        if isinstance(tree, ast.Compare) and isinstance(tree.comparators[0], ast.Tuple):
            sizes.add(f"{guard.source}.ndim == {len(tree.comparators[0].elts)}")
    return {g.expr for g in guards if g.kind == "NDIM" and g.expr in sizes}


def first_failing_guard(guards: Sequence[Guard], namespace: dict[str, Any]) -> Guard | None:
    """The first guard that is False (or raises) for ``namespace``; used in messages only."""
    for guard in guards:
        try:
            if not eval(guard.expr, dict(GUARD_GLOBALS), dict(namespace)):
                return guard
        except Exception:
            return guard
    return None
