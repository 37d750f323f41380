"""The virtualized ``ops`` handler: one ``inner_fn``, many meanings.

Input: loop bodies (``inner_fn(index)``) written against ``ops.load``, ``ops.sin``, ...
Output: whatever the handler installed with ``V.set_ops_handler(...)`` makes of those calls:
a printout (``PrintHandler``), the set of buffers read and written (``ReadWritesHandler``), or
Triton / C++ source (the kernels in ``codegen/``).

Chapter: book/docs/inductor.md ("The ops handler").

[Note: ops handler]
An IR node never says *what* its loop body computes in a data structure; it holds a Python
function that, when called with symbolic indices, calls ``ops.<name>(...)``. Which object
answers those calls is decided by whoever runs the function, through ``V.set_ops_handler``.
This is define-by-run: the IR needs no expression tree, and a new backend is a new handler.
The handler API (``load``, ``store``, ``constant``, ``to_dtype``, ``index_expr``, ``where``,
``reduction``, ``store_reduction``, ``masked``, ``indirect_indexing``, ``rand`` and one method
per elementwise prim) is the whole contract between the IR and codegen.

[Note: indirect indexing]
An index expression is normally a function of the loop indices alone, so the scheduler can
tell which element an iteration touches. ``gather``, ``scatter`` and embeddings address
memory with *data*: ``ops.indirect_indexing(value, size)`` turns a loaded int64 value into a
sympy symbol (``indirect0``, ...) that index expressions use like a loop index, so views
(permute, reshape, broadcast) compose with it as they do with any index. Three rules follow.
The scheduler cannot know which element an indirect access touches, so ``can_fuse`` never
takes one for "the element this iteration wrote". A store at an indirect index leaves the
other elements as they were, so it also counts as a read of the buffer it writes (that keeps
it after the buffer's initial copy). And the value must lie in ``[0, size)``: torch raises
otherwise. Our kernels mask every access through an out-of-range index (a load gives 0, a
store is skipped), so a bad index never touches memory outside the tensor; with
``MINIPT2_DEBUG_ASSERTS=1`` they check instead and stop, as torch does (Triton:
``tl.device_assert``; the interpreter and C++: an error naming the index). Negative indices
are errors for these prims, as in torch; ``x[idx]`` wraps them in its decomposition.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Iterator
from typing import Any

import sympy
import torch


# --8<-- [start:ops-handler]
class _Virtualized:
    """A process-wide slot whose current value is swapped with a context manager."""

    def __init__(self, default: Any) -> None:
        self._value = default

    def get(self) -> Any:
        return self._value

    @contextlib.contextmanager
    def set(self, value: Any) -> Iterator[Any]:
        previous, self._value = self._value, value
        try:
            yield value
        finally:
            self._value = previous


class _OpsProxy:
    """``ops.sin(x)`` forwards to ``current_handler.sin(x)``: the call site never changes."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_ops_handler.get(), name)


class _V:
    """The virtualized globals; today only the ops handler."""

    @staticmethod
    def set_ops_handler(handler: Any) -> contextlib.AbstractContextManager:
        return _ops_handler.set(handler)

    @staticmethod
    def get_ops_handler() -> Any:
        return _ops_handler.get()


class _NoHandler:
    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"ops.{name} called with no ops handler set; see [Note: ops handler]")


_ops_handler = _Virtualized(_NoHandler())
ops = _OpsProxy()
V = _V()
# --8<-- [end:ops-handler]

INDIRECT_PREFIX = "indirect"  # the names of symbols that stand for loaded index values


def indirect_symbol(name: str) -> sympy.Symbol:
    """The symbol for a loaded index value; see [Note: indirect indexing]."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


def is_indirect(index: Any) -> bool:
    """Whether ``index`` depends on a loaded value (data), not only on loop indices."""
    return any(s.name.startswith(INDIRECT_PREFIX) for s in sympy.sympify(index).free_symbols)


@functools.lru_cache(maxsize=1 << 14, typed=True)
def _text(value: Any) -> str:
    """``str(value)``, memoized: sympy prints an index like ``98304*i0 + 768*i1 + i2`` in
    about a millisecond (it sorts the terms), and a graph's loop bodies print the same few
    dozen indices thousands of times."""
    return str(value)


class PrintHandler:
    """Records each ``ops`` call as a line ``tmpN = ops.name(args)``; used for ``loop_ir``.

    Every op returns the name of its temporary, so nested calls print as a flat SSA listing.
    """

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._counter = itertools.count()
        self._indirect = itertools.count()

    def _emit(self, text: str) -> str:
        name = f"tmp{next(self._counter)}"
        self.lines.append(f"{name} = {text}")
        return name

    def load(self, name: str, index: sympy.Expr) -> str:
        return self._emit(f"ops.load({name}, {_text(index)})")

    def store(self, name: str, index: sympy.Expr, value: str, mode: str | None = None) -> None:
        how = f", {mode!r}" if mode else ""
        self.lines.append(f"ops.store({name}, {_text(index)}, {value}{how})")

    def masked(self, mask: str, body: Any, other: Any) -> str:
        start = len(self.lines)
        value = body()
        self.lines[start:] = ["    " + line for line in self.lines[start:]]
        return self._emit(f"ops.masked({mask}, {value}, {other!r})")

    def indirect_indexing(self, value: str, size: Any) -> sympy.Symbol:
        name = f"{INDIRECT_PREFIX}{next(self._indirect)}"
        self.lines.append(f"{name} = ops.indirect_indexing({value}, {size})")
        return indirect_symbol(name)

    def store_reduction(self, name: str, index: sympy.Expr, value: str) -> None:
        self.lines.append(f"ops.store_reduction({name}, {_text(index)}, {value})")

    def reduction(self, dtype: torch.dtype, reduction_type: str, value: str,
                  first: Any = None) -> str:
        return self._emit(f"ops.reduction({dtype}, {reduction_type!r}, {value})")

    def constant(self, value: Any, dtype: torch.dtype) -> str:
        return self._emit(f"ops.constant({value!r}, {dtype})")

    def index_expr(self, expr: sympy.Expr, dtype: torch.dtype) -> str:
        return self._emit(f"ops.index_expr({_text(expr)}, {dtype})")

    def to_dtype(self, x: str, dtype: torch.dtype) -> str:
        return self._emit(f"ops.to_dtype({x}, {dtype})")

    def __getattr__(self, name: str) -> Any:
        return lambda *args: self._emit(f"ops.{name}({', '.join(map(str, args))})")


class ReadWritesHandler:
    """Collects ``(buffer, index)`` pairs read and written, and every index expression used.

    The scheduler uses the reads and writes for dependencies and fusion legality; codegen uses
    ``indices`` to decide which loop dimensions can be collapsed into one.
    """

    def __init__(self) -> None:
        self.reads: list[tuple[str, sympy.Expr]] = []
        self.writes: list[tuple[str, sympy.Expr]] = []
        self.indices: list[sympy.Expr] = []
        self.op_names: list[str] = []
        self.op_count = 0
        self._indirect = itertools.count()

    def load(self, name: str, index: sympy.Expr) -> None:
        self.reads.append((name, index))
        self.indices.append(index)

    def store(self, name: str, index: sympy.Expr, value: Any, mode: str | None = None) -> None:
        self.writes.append((name, index))
        self.indices.append(index)
        if is_indirect(index):  # the other elements stay: a read of the buffer too
            self.reads.append((name, index))
            self.op_names.append("scatter_add" if mode == "atomic_add" else "scatter")

    def masked(self, mask: Any, body: Any, other: Any) -> None:
        body()

    def indirect_indexing(self, value: Any, size: Any) -> sympy.Symbol:
        self.op_names.append("indirect")
        return indirect_symbol(f"{INDIRECT_PREFIX}{next(self._indirect)}")

    def store_reduction(self, name: str, index: sympy.Expr, value: Any) -> None:
        self.store(name, index, value)

    def reduction(self, dtype: torch.dtype, reduction_type: str, value: Any,
                  first: Any = None) -> None:
        self.op_count += 1
        self.op_names.append({"max": "amax", "min": "amin"}.get(reduction_type,
                                                                 reduction_type))

    def index_expr(self, expr: sympy.Expr, dtype: torch.dtype) -> None:
        self.indices.append(expr)

    def constant(self, value: Any, dtype: torch.dtype) -> None:
        self.op_names.append("constant")  # free: not counted in op_count

    def __getattr__(self, name: str) -> Any:
        def count(*args: Any) -> None:
            self.op_count += 1
            self.op_names.append(name)

        return count
