"""SymNode: the object behind a ``torch.SymInt``, and meta tensors with symbolic sizes.

Input: sympy expressions over the symbols of a ``shapes.ShapeEnv``. Output: ``SymNode``
(ATen and ``torch.SymInt``'s operators call its methods; arithmetic builds expressions, a
value asked for becomes a guard in the environment), ``symbolic_meta`` (a meta tensor whose
dynamic dims are symbols), and helpers to get back to plain numbers (``hint_int``,
``concrete``, ``specialize_all``). Chapter: book/docs/dynamic-shapes.md ("Meta tensors with
symbolic sizes"); see [Note: SymNode] in shapes.py.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import sympy
import torch

from .shapes import FloorDiv, ShapeEnv, SymTypes, negate


def is_symbolic(value: Any) -> bool:
    """A SymInt (or SymBool/SymFloat) whose value is not a known constant."""
    return isinstance(value, SymTypes) and not value.node.is_constant()


def has_symbolic_sizes(t: torch.Tensor) -> bool:
    return any(isinstance(s, torch.SymInt) for s in (*t.shape, *t.stride()))


def find_env(values: Any) -> ShapeEnv | None:
    """The shape environment behind the first symbolic size in a tree of values."""
    for v in torch.utils._pytree.tree_leaves(values):
        if isinstance(v, SymTypes) and isinstance(v.node, SymNode):
            return v.node.env
        if isinstance(v, torch.Tensor):
            for s in (*v.shape, *v.stride()):
                if isinstance(s, torch.SymInt) and isinstance(s.node, SymNode):
                    return s.node.env
    return None


# --------------------------------------------------------------------------- SymNode


def _rel(fn: Any) -> Any:
    def method(self: SymNode, other: SymNode) -> SymNode:
        return SymNode(fn(self.expr, other.expr), self.env, bool)
    return method


def _arith(fn: Any, pytype: type | None = None) -> Any:
    def method(self: SymNode, other: SymNode) -> SymNode:
        kind = pytype or (float if float in (self.pytype, other.pytype) else int)
        return SymNode(sympy.sympify(fn(self.expr, other.expr)), self.env, kind)
    return method


# --8<-- [start:symnode]
class SymNode:
    """The node behind a ``torch.SymInt`` / ``SymBool`` / ``SymFloat``: a sympy expression
    and its Python type; see [Note: SymNode]. ATen and ``torch.SymInt``'s operators call
    the methods below; every method that must return a *value* (``guard_bool``,
    ``guard_int``) asks the environment, which records the guard."""

    def __init__(self, expr: sympy.Basic, env: ShapeEnv, pytype: type) -> None:
        self._expr, self.env, self.pytype = expr, env, pytype

    @property
    def expr(self) -> sympy.Basic:
        return self.env.simplify(self._expr)

    # what kind of number
    def is_int(self) -> bool:
        return self.pytype is int

    def is_float(self) -> bool:
        return self.pytype is float

    def is_bool(self) -> bool:
        return self.pytype is bool

    def is_nested_int(self) -> bool:
        return False

    def is_symbolic(self) -> bool:
        return not self.is_constant()

    def is_constant(self) -> bool:
        # (a float is never reported constant: torch's SymFloat operators cannot unwrap one)
        if self.pytype is float:
            return False
        return self.expr in (sympy.true, sympy.false) or bool(self.expr.is_number)

    def has_hint(self) -> bool:
        return True

    def hint(self) -> Any:
        return self.pytype(self.env.size_hint(self.expr))

    def maybe_as_int(self) -> int | None:
        return int(self.expr) if self.pytype is int and self.expr.is_Integer else None

    def maybe_as_bool(self) -> bool | None:
        return bool(self.expr) if self.expr in (sympy.true, sympy.false) else None

    def wrap_int(self, num: int) -> SymNode:
        return SymNode(sympy.Integer(num), self.env, int)

    def wrap_float(self, num: float) -> SymNode:
        return SymNode(sympy.Float(num), self.env, float)

    def wrap_bool(self, num: bool) -> SymNode:
        return SymNode(sympy.true if num else sympy.false, self.env, bool)

    def clone(self) -> SymNode:
        return self

    # arithmetic builds expressions, no guards
    add, sub, mul = _arith(operator.add), _arith(operator.sub), _arith(operator.mul)
    int_floordiv = floordiv = _arith(FloorDiv, int)
    mod = _arith(sympy.Mod, int)
    int_truediv = truediv = float_truediv = _arith(operator.truediv, float)
    pow_by_natural = _arith(sympy.Pow, int)
    float_pow = pow = _arith(sympy.Pow, float)

    def sym_max(self, other: SymNode) -> SymNode:
        return self._pick(other, sympy.Max, self.expr >= other.expr)

    def sym_min(self, other: SymNode) -> SymNode:
        return self._pick(other, sympy.Min, self.expr <= other.expr)

    def _pick(self, other: SymNode, fn: Any, self_wins: sympy.Basic) -> SymNode:
        """max/min: the winner itself when the ranges decide it (``min(s0, 2**63 - 1)``
        in a slice is ``s0``), else an unevaluated Max/Min."""
        kind = float if float in (self.pytype, other.pytype) else int
        known = self.env.static_value(self_wins)
        if known is not None:
            return SymNode((self if known else other).expr, self.env, kind)
        return SymNode(fn(self.expr, other.expr), self.env, kind)
    eq, ne = _rel(sympy.Eq), _rel(sympy.Ne)
    lt, le, gt, ge = _rel(sympy.Lt), _rel(sympy.Le), _rel(sympy.Gt), _rel(sympy.Ge)
    sym_and, sym_or = _rel(sympy.And), _rel(sympy.Or)

    def neg(self) -> SymNode:
        return SymNode(-self.expr, self.env, self.pytype)

    def pos(self) -> SymNode:
        return self

    def abs(self) -> SymNode:
        return SymNode(sympy.Abs(self.expr), self.env, self.pytype)

    def sym_not(self) -> SymNode:
        return SymNode(negate(self.expr), self.env, bool)

    def sym_float(self) -> SymNode:
        return SymNode(self.expr, self.env, float)

    def sym_int(self) -> SymNode:
        return SymNode(self.expr, self.env, int) if self.pytype is int else \
            self.wrap_int(int(self.guard_float("", 0)))

    def floor(self) -> SymNode:
        return SymNode(sympy.floor(self.expr), self.env, int)

    def ceil(self) -> SymNode:
        return SymNode(sympy.ceiling(self.expr), self.env, int)

    def trunc(self) -> SymNode:
        return self.floor() if self.env.evaluate(self.expr >= 0) else self.ceil()

    def sym_ite(self, then: SymNode, other: SymNode) -> SymNode:
        return then if self.guard_bool("", 0) else other

    # values: here a trace commits to the hint's answer and a guard is recorded
    def guard_bool(self, file: str = "", line: int = 0) -> bool:
        return self.env.evaluate(self.expr)

    def guard_int(self, file: str = "", line: int = 0) -> int:
        return int(self.env.specialize(self.expr))

    def guard_float(self, file: str = "", line: int = 0) -> float:
        return float(self.env.specialize(self.expr))

    expect_true = guard_size_oblivious = guard_bool

    def bool_(self) -> bool:
        return self.guard_bool()

    def int_(self) -> int:
        return self.guard_int()

    def statically_known_true(self, file: str = "", line: int = 0) -> bool:
        return self.env.static_value(self.expr) is True

    def guard_or_false(self, file: str = "", line: int = 0) -> bool:
        known = self.env.static_value(self.expr)
        return False if known is None else known

    def guard_or_true(self, file: str = "", line: int = 0) -> bool:
        known = self.env.static_value(self.expr)
        return True if known is None else known

    # layout questions ATen asks about a whole tensor
    def is_contiguous(self, sizes: Sequence[SymNode], strides: Sequence[SymNode]) -> SymNode:
        return self.wrap_bool(_contiguous(self.env, [n.expr for n in sizes],
                                          [n.expr for n in strides]))

    def is_non_overlapping_and_dense(self, sizes, strides) -> SymNode:
        order = sorted(range(len(sizes)), key=lambda d: self.env.size_hint(strides[d].expr))
        return self.wrap_bool(_contiguous(self.env, [sizes[d].expr for d in reversed(order)],
                                          [strides[d].expr for d in reversed(order)]))

    def is_channels_last_contiguous_2d(self, sizes, strides) -> SymNode:
        return self._contiguous_in(sizes, strides, (0, 2, 3, 1))

    def is_channels_last_contiguous_3d(self, sizes, strides) -> SymNode:
        return self._contiguous_in(sizes, strides, (0, 2, 3, 4, 1))

    def _contiguous_in(self, sizes, strides, order: tuple[int, ...]) -> SymNode:
        """Row-major when the dims are taken in ``order`` (channels-last layouts)."""
        return self.wrap_bool(len(sizes) == len(order) and _contiguous(
            self.env, [sizes[d].expr for d in order], [strides[d].expr for d in order]))

    is_channels_last_strides_2d = is_channels_last_contiguous_2d
    is_channels_last_strides_3d = is_channels_last_contiguous_3d

    # printing
    def str(self) -> str:
        return str(self.expr)

    def _graph_repr(self) -> str:
        return str(self.expr)

    def __str__(self) -> str:
        return str(self.expr)

    def __repr__(self) -> str:
        return f"SymNode({self.expr}, {self.pytype.__name__})"
# --8<-- [end:symnode]


def _contiguous(env: ShapeEnv, sizes: list[sympy.Expr], strides: list[sympy.Expr]) -> bool:
    """Row-major with these sizes? (size-1 dims may have any stride). Asks ``env``."""
    expected: sympy.Expr = sympy.Integer(1)
    for size, stride in reversed(list(zip(sizes, strides))):
        if env.evaluate(sympy.Eq(size, 1)):
            continue
        if not env.evaluate(sympy.Eq(stride, expected)):
            return False
        expected = expected * size
    return True


# --------------------------------------------------------------------------- symbolic tensors


# --8<-- [start:symbolic-meta]
def symbolic_meta(env: ShapeEnv, tensor: torch.Tensor, source: str,
                  dynamic_dims: set[int]) -> torch.Tensor:
    """A meta tensor like ``tensor`` whose ``dynamic_dims`` have symbolic sizes.

    Strides follow the sizes where the real strides do: walking the dims from the
    fastest-moving one, a stride that equals (inner size * inner stride) is written as that
    expression, so a contiguous or transposed input stays so for every size; any other
    stride stays a constant. The strides are guarded (``env.stride_guards``).
    """
    sizes: list[sympy.Expr] = [
        env.create_symbol(n, f"{source}.size()[{d}]") if d in dynamic_dims else sympy.Integer(n)
        for d, n in enumerate(tensor.shape)]
    strides: list[sympy.Expr] = [sympy.Integer(s) for s in tensor.stride()]
    order = sorted(range(tensor.ndim), key=lambda d: (tensor.stride(d), tensor.shape[d]))
    inner: sympy.Expr | None = None
    for d in order:
        if inner is not None and env.size_hint(inner) == tensor.stride(d):
            strides[d] = inner
        inner = sizes[d] * strides[d]
    if any(e.free_symbols for e in strides):
        env.stride_guards.append((source, strides))
    meta = torch.empty_strided([_symint(env, e) for e in sizes],
                               [_symint(env, e) for e in strides],
                               dtype=tensor.dtype, device="meta")
    from .variables.builder import grad_like  # (builder imports this module)

    return grad_like(meta, tensor)  # [Note: an example that is not a leaf]
# --8<-- [end:symbolic-meta]


def _symint(env: ShapeEnv, expr: sympy.Expr) -> torch.SymInt | int:
    return int(expr) if expr.is_Integer else torch.SymInt(SymNode(expr, env, int))


def concrete(t: Any) -> Any:
    """A meta tensor (or number) with every symbolic size replaced by its hint."""
    if isinstance(t, torch.Tensor) and has_symbolic_sizes(t):
        out = torch.empty_strided([hint_int(s) for s in t.shape],
                                  [hint_int(s) for s in t.stride()], dtype=t.dtype,
                                  device=t.device)
        return out.requires_grad_(t.requires_grad)
    if isinstance(t, SymTypes):
        return t.node.hint()
    return t


def hint_int(value: Any) -> int:
    """The traced value of a size (no guard)."""
    if isinstance(value, torch.SymInt) and isinstance(value.node, SymNode):
        return int(value.node.hint())
    return int(value)


def specialize_all(values: Any) -> None:
    """Guard every symbol of these values to its hint: the fallback when a computation
    cannot be done symbolically ([Note: specialization on failure])."""
    for v in torch.utils._pytree.tree_leaves(values):
        items = [v] if isinstance(v, SymTypes) else \
            [*v.shape, *v.stride()] if isinstance(v, torch.Tensor) else []
        for item in items:
            if isinstance(item, SymTypes) and isinstance(item.node, SymNode):
                node = item.node
                for symbol in node.expr.free_symbols:
                    node.env.specialize(symbol)
