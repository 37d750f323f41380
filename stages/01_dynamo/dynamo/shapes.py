"""Symbolic sizes: the shape environment, our ``SymNode``, and guards on relations.

Input: the sizes of tensor inputs that should not be baked into a graph (``dynamic=True``,
``mark_dynamic``, or a size that changed between calls), each named by its source
(``x.size()[0]``). Output: sympy symbols for them (``s0``) with their hints, the relations
the trace relied on (``s0 > 4``, ``s0 % 2 == 0``), and those relations printed as guards over
the sources. ``sym_node.py`` wraps the symbols into ``torch.SymInt`` and meta tensors.
Later stages import this module: aotautograd traces with the same ``SymInt`` sizes and
inductor prints the same sympy expressions into kernels.
Chapter: book/docs/dynamic-shapes.md.

# [Note: symbolic sizes]
# A dynamic size is a sympy symbol ``s0`` with a *hint*: the value it had in the call being
# traced. Arithmetic on sizes builds expressions (``2*s0``, ``s0 // 2``), which is all a
# graph needs to compute its sizes later from its inputs. Python control flow cannot
# branch on an expression, though: ``if x.shape[0] > 4`` must pick one side. We answer
# with the hint's answer and *record the relation* (``s0 > 4``) as a guard, so the graph
# is reused only for sizes that would have taken the same side. Relations that follow
# from what is known anyway (every size symbol is at least 2, see [Note: 0/1
# specialization]) are answered without a guard.
#
# [Note: SymNode]
# PyTorch lets a Python object stand in for an integer inside ATen: ``torch.SymInt(node)``
# is an int-like whose every operation (``+``, ``<``, ``int()``...), in Python and in the
# C++ of meta kernels alike, calls a method of ``node`` (``add``, ``lt``, ``guard_int``...).
# ``torch.empty_strided(sym_sizes, sym_strides, device="meta")`` then makes a meta tensor
# whose shape functions run on our nodes. Our ``SymNode`` is that object: a sympy
# expression, its Python type, and the environment that knows the hints.
#
# [Note: 0/1 specialization]
# Sizes 0 and 1 are special to PyTorch: a size-1 dim broadcasts, a size-0 tensor is empty,
# and contiguity ignores size-1 dims. A symbol that could be 1 would make every broadcast
# an open question. So a dim that is 0 or 1 when it is made symbolic stays a constant (its
# static size guard stays), and every symbol is known to be at least 2: ``s0 == 1`` is
# False without a guard, and the guard ``2 <= x.size()[0]`` says so for later calls.
#
# [Note: duck sizing]
# Two dynamic dims with the same hint get the *same* symbol (and a guard that they stay
# equal). Most equal sizes in a model are equal for a reason (the batch of ``x`` and of
# ``target``), and one symbol makes ``x + y`` need no broadcast guard. The price: a call
# where they differ recompiles once, with two symbols. PyTorch does the same.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import sympy
import torch

MAX_SIZE = 2**62  # every size symbol is below this: no tensor has that many elements
MARK_ATTR = "_minipt2_dynamic_dims"  # set by mark_dynamic(tensor, dim)
SymTypes = (torch.SymInt, torch.SymBool, torch.SymFloat)


class FloorDiv(sympy.Function):
    """``a // b`` on integers; sympy's ``floor(a / b)`` prints badly in C and in guards."""

    is_integer = True

    @classmethod
    def eval(cls, base: sympy.Expr, divisor: sympy.Expr) -> sympy.Expr | None:
        if divisor == 1:
            return base
        if base == 0:
            return sympy.Integer(0)
        if base.is_Integer and divisor.is_Integer:
            return sympy.Integer(int(base) // int(divisor))
        if divisor.is_Integer and isinstance(base, sympy.Mul) and base.args[0].is_Integer \
                and int(base.args[0]) % int(divisor) == 0:
            return sympy.Mul(sympy.Integer(int(base.args[0]) // int(divisor)), *base.args[1:])
        if isinstance(base, FloorDiv):  # (a // b) // c == a // (b * c) for positive b, c
            return FloorDiv(base.args[0], base.args[1] * divisor)
        if isinstance(base, sympy.Add):  # (q*d + r) // d == q + r // d for integers
            whole = [sympy.cancel(t / divisor) for t in base.args]
            whole = [q if _is_monomial(q) else None for q in whole]
            if any(q is not None for q in whole):
                rest = [t for t, q in zip(base.args, whole) if q is None]
                return sympy.Add(*[q for q in whole if q is not None]) + \
                    FloorDiv(sympy.Add(*rest), divisor)
        common = sympy.gcd(base, divisor)  # (s0*s1) // (2*s0) == s1 // 2 (sizes are positive)
        if common != 1 and common.is_positive:
            return FloorDiv(sympy.cancel(base / common), sympy.cancel(divisor / common))
        return None

    def _eval_is_nonnegative(self) -> bool | None:
        base, divisor = self.args
        if base.is_nonnegative and divisor.is_positive:
            return True
        return None


def _is_monomial(expr: sympy.Expr) -> bool:
    """An integer times a product of non-negative powers of integer symbols (no fraction)."""
    coeff, rest = expr.as_coeff_Mul()
    return coeff.is_Integer and sympy.fraction(rest)[1] == 1 and rest.is_integer is True


def sympify(value: Any) -> sympy.Expr:
    """A size as a sympy expression: ints become Integers, SymInts give their expression."""
    if isinstance(value, SymTypes):
        return value.node.expr
    if isinstance(value, bool):
        return sympy.true if value else sympy.false
    if isinstance(value, int):
        return sympy.Integer(value)
    return sympy.sympify(value)


def mark_dynamic(tensor: torch.Tensor, dim: int | Sequence[int]) -> None:
    """Ask for ``tensor``'s size in ``dim`` to be symbolic from the first compile on (it is
    still specialised if it is 0 or 1: [Note: 0/1 specialization])."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"mark_dynamic: expected a tensor, got {type(tensor).__name__}")
    dims = [dim] if isinstance(dim, int) else list(dim)
    for d in dims:
        if not isinstance(d, int) or not -tensor.ndim <= d < max(tensor.ndim, 1):
            raise ValueError(f"mark_dynamic: dim {d!r} is out of range for a "
                             f"{tensor.ndim}-d tensor")
    marked = set(getattr(tensor, MARK_ATTR, ()))
    setattr(tensor, MARK_ATTR, marked | {d % max(tensor.ndim, 1) for d in dims})


# --------------------------------------------------------------------------- value ranges


def _bounds(expr: sympy.Expr, ranges: dict[sympy.Symbol, tuple[int, int]]) -> tuple:
    """Lower and upper bound of an integer expression, by interval arithmetic over the
    symbols' ranges; ``-inf``/``inf`` where we cannot tell."""
    unknown = (-math.inf, math.inf)
    if expr.is_Integer:
        return int(expr), int(expr)
    if expr.is_Rational:
        return Fraction(expr.p, expr.q), Fraction(expr.p, expr.q)
    if isinstance(expr, sympy.Symbol):
        return ranges.get(expr, unknown)
    if isinstance(expr, sympy.Add):
        lo, hi = 0, 0
        for arg in expr.args:
            a_lo, a_hi = _bounds(arg, ranges)
            lo, hi = lo + a_lo, hi + a_hi
        return lo, hi
    if isinstance(expr, sympy.Mul):
        lo, hi = 1, 1
        for arg in expr.args:
            a_lo, a_hi = _bounds(arg, ranges)
            products = [_times(x, y) for x in (lo, hi) for y in (a_lo, a_hi)]
            lo, hi = min(products), max(products)
        return lo, hi
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and expr.exp >= 0:
        b_lo, b_hi = _bounds(expr.base, ranges)
        if b_lo >= 0:
            return b_lo ** int(expr.exp), b_hi ** int(expr.exp)
    if isinstance(expr, FloorDiv):
        (a_lo, a_hi), (b_lo, b_hi) = _bounds(expr.args[0], ranges), _bounds(expr.args[1], ranges)
        if a_lo >= 0 and b_lo > 0:
            return a_lo // b_hi if b_hi != math.inf else 0, \
                a_hi // b_lo if a_hi != math.inf else math.inf
    if isinstance(expr, sympy.Mod):
        (a_lo, a_hi), (b_lo, b_hi) = _bounds(expr.args[0], ranges), _bounds(expr.args[1], ranges)
        if b_lo > 0:
            if 0 <= a_lo and a_hi < b_lo:
                return a_lo, a_hi
            return 0, b_hi - 1
    if isinstance(expr, (sympy.Max, sympy.Min)):
        pairs = [_bounds(a, ranges) for a in expr.args]
        pick = max if isinstance(expr, sympy.Max) else min
        return pick(p[0] for p in pairs), pick(p[1] for p in pairs)
    return unknown


def _number(symbol: sympy.Symbol) -> int:
    return int(str(symbol)[1:]) if str(symbol)[1:].isdigit() else -1


def _relax(expr: sympy.Expr, upper: bool) -> sympy.Expr:
    """A bound of ``expr`` without floors: ``a // k`` lies in ``[(a - k + 1) / k, a / k]``.
    Lets ``s0 - s0 // 2 >= 0`` be decided (interval arithmetic alone sees two unrelated
    terms)."""
    if isinstance(expr, sympy.Add):
        return sympy.Add(*(_relax(t, upper) for t in expr.args))
    coeff, rest = expr.as_coeff_Mul()
    if isinstance(rest, FloorDiv) and rest.args[1].is_Integer and rest.args[1] > 0:
        a, k = rest.args
        high = upper if coeff > 0 else not upper
        return coeff * (a / k if high else (a - k + 1) / k)
    return expr


def _times(x: float, y: float) -> float:
    return 0 if x == 0 or y == 0 else x * y


_NEGATE = {sympy.Lt: sympy.Ge, sympy.Le: sympy.Gt, sympy.Gt: sympy.Le, sympy.Ge: sympy.Lt,
           sympy.Eq: sympy.Ne, sympy.Ne: sympy.Eq}


def _canonical(rel: sympy.Basic) -> sympy.Basic:
    """One spelling per (in)equality: ``s1 == s0`` and ``s0 == s1`` are the same guard."""
    if isinstance(rel, (sympy.Eq, sympy.Ne)):
        lhs, rhs = sorted(rel.args, key=lambda e: (e.is_number, sympy.default_sort_key(e)))
        return type(rel)(lhs, rhs)
    return rel


def negate(rel: sympy.Basic) -> sympy.Basic:
    if type(rel) in _NEGATE:
        return _NEGATE[type(rel)](*rel.args)
    return sympy.Not(rel)


# --------------------------------------------------------------------------- the environment


@dataclasses.dataclass
class ShapeGuard:
    """A relation the trace relied on; ``expr`` must stay True for the graph to be reused."""

    expr: sympy.Basic


class ShapeEnv:
    """The symbols of one trace: their hints, sources and value ranges, and the guards.

    One environment per dynamo trace; aotautograd and inductor add to the same one (their
    SymInts point back to it), and dynamo prints its guards after the backend compiled.
    """

    def __init__(self, duck_sizing: bool = True) -> None:
        self.hints: dict[sympy.Symbol, int] = {}
        self.sources: dict[sympy.Symbol, list[str]] = {}  # the first names the symbol
        self.ranges: dict[sympy.Symbol, tuple[int, int]] = {}
        self.replacements: dict[sympy.Symbol, sympy.Expr] = {}  # from guards s1 == s0, s0 == 7
        self.guards: dict[sympy.Basic, ShapeGuard] = {}  # in the order they were made
        self.stride_guards: list[tuple[str, list[sympy.Expr]]] = []
        self.zeros: set[sympy.Expr] = set()  # a - b for every guard a == b
        self.duck_sizing = duck_sizing
        self._by_hint: dict[int, sympy.Symbol] = {}

    # ---- making symbols ----------------------------------------------------------------
    # --8<-- [start:create-symbol]
    def create_symbol(self, hint: int, source: str) -> sympy.Expr:
        """The size at ``source`` (now ``hint``) as a symbol; 0 and 1 stay constants
        ([Note: 0/1 specialization]), equal hints share a symbol ([Note: duck sizing])."""
        if hint in (0, 1):
            return sympy.Integer(hint)
        if self.duck_sizing and hint in self._by_hint:
            symbol = self._by_hint[hint]
            self.sources[symbol].append(source)
            return symbol
        symbol = sympy.Symbol(f"s{len(self.hints)}", integer=True, positive=True)
        self.hints[symbol] = hint
        self.sources[symbol] = [source]
        self.ranges[symbol] = (2, MAX_SIZE)
        self._by_hint[hint] = symbol
        return symbol
    # --8<-- [end:create-symbol]

    def create_symint(self, hint: int, source: str) -> torch.SymInt | int:
        from .sym_node import SymNode

        expr = self.create_symbol(hint, source)
        return int(expr) if expr.is_Integer else torch.SymInt(SymNode(expr, self, int))

    # ---- what is known -----------------------------------------------------------------
    def simplify(self, expr: sympy.Basic) -> sympy.Basic:
        if self.replacements and expr.free_symbols & self.replacements.keys():
            expr = expr.xreplace(self.replacements)
        return expr

    def size_hint(self, expr: sympy.Basic) -> Any:
        """The value ``expr`` has in the traced call."""
        hints = {s: sympy.Integer(v) for s, v in self.hints.items()}
        value = self.simplify(sympify(expr)).xreplace(hints)
        if value in (sympy.true, sympy.false):
            return bool(value)
        if value.is_Integer:
            return int(value)
        if value.is_number:
            return float(value)
        raise ValueError(f"no hint for {expr}: unknown symbols {value.free_symbols}")

    def static_value(self, expr: sympy.Basic) -> bool | None:
        """True or False if the relation follows from the value ranges alone, else None."""
        expr = self.simplify(expr)
        if expr in (sympy.true, sympy.false):
            return bool(expr)
        if isinstance(expr, sympy.Not):
            inner = self.static_value(expr.args[0])
            return None if inner is None else not inner
        if isinstance(expr, (sympy.And, sympy.Or)):
            values = [self.static_value(a) for a in expr.args]
            want = isinstance(expr, sympy.Or)
            if want in values:
                return want
            return None if None in values else not want
        if not isinstance(expr, sympy.core.relational.Relational):
            return None
        diff = sympy.expand(expr.lhs - expr.rhs)
        if diff in self.zeros or -diff in self.zeros:
            lo = hi = 0
        else:
            lo, hi = _bounds(diff, self.ranges)
            lo = max(lo, _bounds(sympy.expand(_relax(diff, upper=False)), self.ranges)[0])
            hi = min(hi, _bounds(sympy.expand(_relax(diff, upper=True)), self.ranges)[1])
        decide = {
            sympy.Eq: (lo == hi == 0, lo > 0 or hi < 0),
            sympy.Ne: (lo > 0 or hi < 0, lo == hi == 0),
            sympy.Lt: (hi < 0, lo >= 0), sympy.Le: (hi <= 0, lo > 0),
            sympy.Gt: (lo > 0, hi <= 0), sympy.Ge: (lo >= 0, hi < 0),
        }.get(type(expr))
        if decide is None:
            return None
        return True if decide[0] else False if decide[1] else None

    # --8<-- [start:evaluate]
    def evaluate(self, expr: sympy.Basic) -> bool:
        """Answer a relation the way the traced call answers it, recording a guard unless
        the answer was already known. See [Note: symbolic sizes]."""
        # BEGIN EXERCISE dynamo-shape-guards: answer a relation by its hint, guarding it
        known = self.static_value(expr)
        if known is not None:
            return known
        outcome = bool(self.size_hint(expr))
        guard = _canonical(self.simplify(expr if outcome else negate(expr)))
        if guard not in self.guards:
            self.guards[guard] = ShapeGuard(guard)
            self._refine(guard)
        return outcome
        # END EXERCISE dynamo-shape-guards
    # --8<-- [end:evaluate]

    def specialize(self, expr: sympy.Expr) -> int:
        """``int(size)``: the traced value, and a guard that the size stays exactly it."""
        value = self.size_hint(expr)
        if sympify(expr).free_symbols:
            self.evaluate(sympy.Eq(self.simplify(sympify(expr)), value))
        return value

    def _refine(self, guard: sympy.Basic) -> None:
        """Make a new guard count as known: ``s1 == s0`` and ``s0 == 7`` become
        replacements, ``s0 > 4`` narrows the range of s0."""
        if isinstance(guard, sympy.Eq):
            self.zeros.add(sympy.expand(guard.lhs - guard.rhs))
        if isinstance(guard, sympy.Eq) and isinstance(guard.lhs, sympy.Symbol):
            lhs, rhs = guard.lhs, guard.rhs
            if isinstance(rhs, sympy.Symbol) and _number(rhs) > _number(lhs):
                lhs, rhs = rhs, lhs  # replace the newer symbol by the older one
            if rhs.is_Integer or isinstance(rhs, sympy.Symbol):
                self.replacements[lhs] = rhs
                self.replacements = {s: e.xreplace({lhs: rhs})
                                     for s, e in self.replacements.items()}
            return
        if not isinstance(guard, (sympy.Lt, sympy.Le, sympy.Gt, sympy.Ge)):
            return
        lhs, rhs, rel = guard.lhs, guard.rhs, type(guard)
        if isinstance(rhs, sympy.Symbol) and lhs.is_Integer:  # 4 < s0 -> s0 > 4
            lhs, rhs = rhs, lhs
            rel = {sympy.Lt: sympy.Gt, sympy.Le: sympy.Ge,
                   sympy.Gt: sympy.Lt, sympy.Ge: sympy.Le}[rel]
        if not (isinstance(lhs, sympy.Symbol) and rhs.is_Integer and lhs in self.ranges):
            return
        lo, hi = self.ranges[lhs]
        c = int(rhs)
        lo = max(lo, c + 1) if rel is sympy.Gt else max(lo, c) if rel is sympy.Ge else lo
        hi = min(hi, c - 1) if rel is sympy.Lt else min(hi, c) if rel is sympy.Le else hi
        self.ranges[lhs] = (lo, hi)
        for old in list(self.guards):  # bounds on the symbol that the new one implies
            if old is not guard and self._implied_bound(old, lhs, lo, hi):
                del self.guards[old]

    @staticmethod
    def _implied_bound(rel: sympy.Basic, symbol: sympy.Symbol, lo: int, hi: int) -> bool:
        """``rel`` is ``symbol <op> c`` and follows from ``lo <= symbol <= hi``."""
        if not (isinstance(rel, (sympy.Lt, sympy.Le, sympy.Gt, sympy.Ge))
                and rel.lhs == symbol and rel.rhs.is_Integer):
            return False
        c = int(rel.rhs)
        return {sympy.Lt: hi < c, sympy.Le: hi <= c, sympy.Gt: lo > c,
                sympy.Ge: lo >= c}[type(rel)]

    # ---- guards as Python ----------------------------------------------------------------
    def source_names(self) -> dict[sympy.Symbol, str]:
        return {s: sources[0] for s, sources in self.sources.items()}

    def to_python(self, expr: sympy.Basic) -> str:
        """``expr`` as a Python expression over the frame's sources (``x.size()[0] // 2``)."""
        return python_expr(self.simplify(sympify(expr)), self.source_names())

    # --8<-- [start:produce-guards]
    def produce_guards(self) -> list[tuple[str, str]]:
        """(kind, Python expression) for every guard: equal sizes that share a symbol, the
        lower bound of every symbol, symbolic strides, then the recorded relations."""
        out: list[tuple[str, str]] = []
        names = self.source_names()
        for sources in self.sources.values():
            out += [("SHAPE_EQ", f"{other} == {sources[0]}") for other in sources[1:]]
        out += [("SHAPE_MIN", f"2 <= {names[s]}") for s in self.sources]
        for source, strides in self.stride_guards:
            text = ", ".join(python_expr(self.simplify(s), names) for s in strides)
            comma = "," if len(strides) == 1 else ""
            out.append(("STRIDE", f"{source}.stride() == ({text}{comma})"))
        out += [("SHAPE", python_expr(g.expr, names)) for g in self.guards.values()]
        return out
    # --8<-- [end:produce-guards]

    def bind(self, sizes: dict[sympy.Symbol, int]) -> dict[sympy.Symbol, int]:
        """Symbol values for a call, given the values of some of them (replacements applied
        to the rest): what a runtime needs to evaluate expressions of this trace."""
        out = dict(sizes)
        for symbol, expr in self.replacements.items():
            if symbol not in out:
                out[symbol] = int(expr.xreplace(out))
        return out


# --------------------------------------------------------------------------- printing


_REL_OPS = {sympy.Eq: "==", sympy.Ne: "!=", sympy.Lt: "<", sympy.Le: "<=", sympy.Gt: ">",
            sympy.Ge: ">="}


def python_expr(expr: sympy.Basic, names: dict[sympy.Symbol, str]) -> str:
    """Print a size expression or relation as Python, symbols replaced by ``names``."""
    def p(e: sympy.Basic) -> str:
        return python_expr(e, names)

    if expr is sympy.true or expr is sympy.false:
        return str(bool(expr))
    if isinstance(expr, sympy.Symbol):
        return names.get(expr, str(expr))
    if expr.is_Integer:
        return str(int(expr))
    if expr.is_Rational:
        return f"({expr.p} / {expr.q})"
    if expr.is_Float:
        return repr(float(expr))
    if type(expr) in _REL_OPS:
        return f"{p(expr.lhs)} {_REL_OPS[type(expr)]} {p(expr.rhs)}"
    if isinstance(expr, sympy.Add):
        terms = sorted(expr.args, key=lambda t: (t.is_number, sympy.default_sort_key(t)))
        text = p(terms[0])
        for t in terms[1:]:
            coeff = t.as_coeff_Mul()[0]
            text += f" - {p(-t)}" if coeff.is_negative else f" + {p(t)}"
        return f"({text})" if len(terms) > 1 else text
    if isinstance(expr, sympy.Mul):
        coeff, rest = expr.as_coeff_Mul()
        if coeff == -1:
            return f"-{p(rest)}"
        return "*".join(p(a) if not isinstance(a, sympy.Add) else f"({p(a)})" for a in expr.args)
    def operand(e: sympy.Basic) -> str:  # an operand of //, % or **: parenthesised
        return f"({p(e)})" if isinstance(e, (sympy.Mul, sympy.Pow)) else p(e)

    if isinstance(expr, FloorDiv):
        return f"({operand(expr.args[0])} // {operand(expr.args[1])})"
    if isinstance(expr, sympy.Mod):
        return f"({operand(expr.args[0])} % {operand(expr.args[1])})"
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer:
        return f"{operand(expr.base)}**{int(expr.exp)}"
    if isinstance(expr, (sympy.Max, sympy.Min)):
        return f"{'max' if isinstance(expr, sympy.Max) else 'min'}({', '.join(map(p, expr.args))})"
    if isinstance(expr, (sympy.And, sympy.Or)):
        joiner = " and " if isinstance(expr, sympy.And) else " or "
        return "(" + joiner.join(map(p, expr.args)) + ")"
    if isinstance(expr, sympy.Not):
        return f"not ({p(expr.args[0])})"
    raise NotImplementedError(f"cannot print {expr!r} as a guard")
