"""SizeVars: what inductor knows about symbolic sizes, and the symbols a kernel takes.

Input: the ``ShapeEnv`` behind the prims graph's symbolic sizes (dynamo made it; the
placeholders' ``meta["val"]`` carry SymInts that point to it), or none for a static graph.
Output: ``hint(expr)`` (the traced value: for heuristics such as block sizes, which are
right for any size), ``known_below(expr, bound)`` (a decision that must hold for every size
the graph will see: statically known, or made true by a guard), ``size_symbols(exprs)`` (the
symbols a kernel must receive as arguments) and ``pexpr(expr)`` (a size as Python source, for
the wrapper). Chapter: book/docs/dynamic-shapes.md ("Symbolic sizes in kernels").

[Note: sizes as kernel arguments]
With dynamic shapes a kernel's loop bounds, masks and index arithmetic contain size symbols
(``x0 % s0``, ``xnumel = 32*s0``). A kernel takes every symbol it uses as a scalar argument
(Triton: a plain int, not ``tl.constexpr``, so one compiled kernel serves every value; C++:
``int64_t``); the wrapper reads them from its inputs (``s0 = arg0.size(1)``) and passes
them. Choices that only affect speed (block sizes, whether to parallelise) look at the
hints; choices that affect correctness hold for every size: a persistent reduction needs
the whole row in one block, so a symbolic row length gets a looped reduction; 32-bit
indexing is used only if the largest index is known to fit, by a guard if need be
(``64*s0 < 2**31``), which joins dynamo's guards.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import sympy
import torch
from dynamo.shapes import ShapeEnv, python_expr
from dynamo.sym_node import find_env


def is_size_symbol(symbol: Any) -> bool:
    """Size symbols are dynamo's ``s0, s1, ...``; loop indices are ``x0``, ``i1``, ``r0``..."""
    name = getattr(symbol, "name", "")
    return isinstance(symbol, sympy.Symbol) and name[:1] == "s" and name[1:].isdigit()


def size_symbols(exprs: Iterable[Any]) -> list[sympy.Symbol]:
    """The size symbols in ``exprs``, in a stable order (s0, s1, ...)."""
    found = set()
    for e in exprs:
        found |= {s for s in sympy.sympify(e).free_symbols if is_size_symbol(s)}
    return sorted(found, key=lambda s: int(s.name[1:]))


def pexpr(expr: Any) -> str:
    """A size expression as Python source over the bound symbols (``64*s0``, ``(s0 // 2)``)."""
    return python_expr(sympy.sympify(expr), {})


class SizeVars:
    """The sizes of one compiled graph; static graphs have ``env`` None."""

    def __init__(self, env: ShapeEnv | None = None) -> None:
        self.env = env

    def simplify(self, expr: Any) -> sympy.Expr:
        expr = sympy.sympify(expr)
        return self.env.simplify(expr) if self.env is not None else expr

    def hint(self, expr: Any) -> int:
        """The value at the traced sizes (for heuristics only)."""
        expr = sympy.sympify(expr)
        if not expr.free_symbols:
            return int(expr)
        if self.env is None:
            raise ValueError(f"no hint for {expr}: the graph has no shape environment")
        return int(self.env.size_hint(expr))

    def is_static(self, expr: Any) -> bool:
        return not size_symbols([self.simplify(expr)])

    def evaluate(self, relation: Any) -> bool:
        """A relation between sizes, as the traced sizes answer it (a guard if it was not
        known; usually the trace already made that guard)."""
        relation = self.simplify(relation)
        if relation in (sympy.true, sympy.false):
            return bool(relation)
        if self.env is None:
            raise ValueError(f"cannot decide {relation} without a shape environment")
        return self.env.evaluate(relation)

    # --8<-- [start:known-below]
    def known_below(self, expr: Any, bound: int) -> bool:
        """Is ``expr < bound`` for every size this graph will run with? True if the value
        ranges say so, or once a guard on one symbol makes it so: for an extent that grows
        with a single size ``s0``, the guard ``s0 <= 2**k``, the largest power of two at
        least the hint that keeps ``expr`` below ``bound`` (one readable guard serves many
        kernels). False when unsure (several symbols, or the traced sizes already too big):
        the caller takes the safe choice (int64 indexing)."""
        expr = self.simplify(expr)
        if not expr.free_symbols:
            return int(expr) < bound
        if self.env is None:
            return False
        known = self.env.static_value(sympy.Lt(expr, bound))
        if known is not None:
            return known
        symbols = list(expr.free_symbols)
        if len(symbols) != 1 or not _grows_with(expr, symbols[0]):
            return False
        symbol, hint = symbols[0], self.env.size_hint(symbols[0])
        limit = 1 << max(0, hint - 1).bit_length()  # the next power of two >= the hint
        if int(expr.subs(symbol, limit)) >= bound:
            return False
        while int(expr.subs(symbol, limit * 2)) < bound:
            limit *= 2
        return self.env.evaluate(sympy.Le(symbol, limit))
    # --8<-- [end:known-below]


def _grows_with(expr: sympy.Expr, symbol: sympy.Symbol) -> bool:
    """A polynomial in ``symbol`` with non-negative coefficients (so bigger sizes give bigger
    values, and a bound on the symbol bounds the expression)."""
    try:
        return all(c >= 0 for c in sympy.Poly(sympy.expand(expr), symbol).coeffs())
    except sympy.PolynomialError:
        return False


_current = [SizeVars()]


def current() -> SizeVars:
    """The SizeVars of the graph being compiled (a static one outside ``use``)."""
    return _current[-1]


@contextlib.contextmanager
def use(sizevars: SizeVars) -> Iterator[SizeVars]:
    """Make ``sizevars`` current while one graph is compiled."""
    _current.append(sizevars)
    try:
        yield sizevars
    finally:
        _current.pop()


def for_graph(compile_fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator for ``compile(gm, ...)``: compile with the SizeVars of ``gm``'s shape
    environment (the one its placeholders' symbolic ``meta["val"]`` point to) current."""

    @functools.wraps(compile_fn)
    def compile_with_sizes(gm: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
        vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
        with use(SizeVars(find_env(vals))):
            return compile_fn(gm, *args, **kwargs)

    return compile_with_sizes
