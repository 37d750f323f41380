"""Linear layers as aten's ``linear``: a transposed weight without a view from Python, and a
bias that would fuse into nothing added by the matrix multiply itself.

Input: the scheduler's groups (``ExternNode`` library calls and ``FusedGroup`` kernels).
Output: the same groups, where ``mm(x, w.t())`` followed by a kernel that only adds a bias
has become one ``addmm(b, x, w.t())`` call, which the wrapper prints as ``linear(x, w, b)``.
Chapter: book/docs/performance.md ("The Python between launches").

# --8<-- [start:note]
[Note: linear]
A Linear layer reaches inductor as ``mm(x, w.t())`` and a bias add: the weight is a view of
a graph input, which the wrapper made with ``as_strided`` from Python (about 3 us a call
on a 2-core CPU machine; 48 calls per GPT-2 decode step). aten's ``linear(x, w)`` is the
same cuBLAS call with the transpose made in C++, so the wrapper prints it for a weight that
is exactly the transpose of a whole row-major matrix (``transposed_matrix``); any other
view keeps ``reinterpret``.

The bias add usually fuses into the next kernel (GELU, a residual add and layer norm). When
it does not, because what reads the sum is a library call (the attention's q, k and v are
views of the projection's output), it is a kernel of its own that reads the product once
more: one launch and one allocation per layer. Then the scheduler folds the two into
``addmm(b, x, w.t())``, printed ``linear(x, w, b)``: cuBLAS adds the bias as it writes the
product. The kernel must be the next group after the matrix multiply, hold one node whose
body is exactly ``product + bias`` (casts aside) over the product's elements in order with
the bias along the last dim, and be the product's only reader. In bfloat16 the sum is then
rounded once instead of twice, as eager's own ``linear`` does.

In training the sum is also needed on its own: the activation's backward reads the
pre-activation, so the forward stores it. The kernel that fused the bias add into GELU then
reads the product and writes two tensors, the sum and the activation; with the bias folded
into ``addmm``, cuBLAS writes the sum and the kernel only reads it and writes the
activation: one tensor less per layer (on GPT-2's [8192, 3072] MLP in bfloat16, 48 MiB).
So a kernel with more nodes gives up its bias add too, when that node is stored anyway and
is the only one in the kernel to read the product; the rest of the kernel reads the sum
from memory. Where the sum lives only inside its kernel (inference) nothing is saved, and
the plain ``mm`` stays: cuBLAS's bias epilogue costs about a microsecond more per call.
# --8<-- [end:note]
"""

from __future__ import annotations

from typing import Any

import sympy
import torch

from inductor.ir import ExternBuffer, FallbackKernel, ReinterpretView, index_vars, view_index
from inductor.virtualized import INDIRECT_PREFIX, V, indirect_symbol

aten = torch.ops.aten


def transposed_matrix(view: Any) -> str | None:
    """The name of the row-major 2-D buffer that ``view`` transposes whole, or None."""
    if not isinstance(view, ReinterpretView) or view.offset != 0:
        return None
    base, layout = view.base.layout, view.layout
    if len(base.size) != 2 or len(layout.size) != 2:
        return None
    rows, cols = base.size
    if (list(base.stride) == [cols, 1] and list(layout.size) == [cols, rows]
            and list(layout.stride) == [1, cols]):
        return view.name
    return None


class _Tree:
    """An ops handler that returns each op as a tuple, so a body can be compared with a
    pattern: ``("add", ("load", "buf4", i), ("load", "arg6", j))``. Casts are
    ``("to_dtype", x, dtype)``; anything else is ``("other", name)``."""

    stored: tuple | None = None

    def load(self, name: str, index: sympy.Expr) -> tuple:
        return ("load", name, index)

    def add(self, a: Any, b: Any) -> tuple:
        return ("add", a, b)

    def to_dtype(self, x: Any, dtype: torch.dtype, *args: Any, **kwargs: Any) -> tuple:
        return ("to_dtype", x, dtype)

    def store(self, name: str, index: sympy.Expr, value: Any, mode: Any = None) -> None:
        self.stored = (name, index, value, mode)

    def indirect_indexing(self, value: Any, size: Any) -> sympy.Symbol:
        """A symbol, as addresses need one: a body that reads through a loaded index (a
        gather before the add, as MobileBERT's embeddings have) is never a bias add, and
        its address no longer matches the product's."""
        return indirect_symbol(f"{INDIRECT_PREFIX}0")

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: ("other", name)


def _uncast(value: Any, dtypes: set[torch.dtype]) -> Any:
    """``value`` without casts to any of ``dtypes``."""
    while isinstance(value, tuple) and value[0] == "to_dtype" and value[2] in dtypes:
        value = value[1]
    return value


def bias_of(node: Any, product: ExternBuffer) -> str | None:
    """The bias ``node`` adds to ``product``, if its body is exactly that; else None."""
    buffer = node.buffer
    layout = buffer.layout
    if buffer.is_reduction() or not layout.is_contiguous() or layout.dtype != product.get_dtype():
        return None
    handler = _Tree()
    index = index_vars(layout.size)
    with V.set_ops_handler(handler):
        buffer.run_body(index)
    if handler.stored is None or handler.stored[3] is not None:
        return None
    _, at, value, _ = handler.stored
    casts = {torch.float32, layout.dtype}
    value = _uncast(value, casts)
    if not (isinstance(value, tuple) and value[0] == "add"):
        return None
    loads = [_uncast(v, casts) for v in value[1:]]
    if not all(isinstance(v, tuple) and v[0] == "load" for v in loads):
        return None
    if loads[1][1] == product.name:
        loads.reverse()
    (_, name, product_at), (_, bias, bias_at) = loads
    product_at, bias_at = (view_index(i, index, layout.size) for i in (product_at, bias_at))
    _, cols = product.layout.size
    last = index[-1]
    if (name != product.name or sympy.expand(product_at - at) != 0 or bias_at != last
            or layout.size[-1] != cols or list(product.layout.stride) != [cols, 1]):
        return None
    return bias


def fold_bias_adds(groups: list, output_names: set[str], log: list[str],
                   buffers: dict[str, Any], removed: set[str]) -> list:
    """``groups`` with each (``mm(x, w.t())``, bias-add kernel) pair that qualifies replaced
    by one ``addmm`` library call; see [Note: linear]. ``buffers``: the graph's, by name;
    ``removed``: the buffers that live only inside their kernel (a kernel of several nodes
    gives up its bias add only when that node is stored anyway)."""
    from inductor.scheduler import ExternNode, FusedGroup, reader_counts

    readers = reader_counts(groups)
    out: list = []
    for group in groups:
        previous = out[-1] if out else None
        if type(group) is FusedGroup and isinstance(previous, ExternNode):  # (not a template)
            node, rest = _bias_node(group, previous.kernel, removed)
            folded = None if node is None else _fold(previous.kernel, node, readers,
                                                     output_names, buffers)
            if folded is not None:
                out[-1] = ExternNode(folded)
                x, view = previous.kernel.args
                log.append(f"{node.name} = {x.name} @ {view.name}.t() + "
                           f"{folded.args[0].name}: the bias add folded into the library "
                           f"call (linear)" + (f"; {', '.join(n.name for n in rest)} read it"
                                               if rest else ""))
                if rest:
                    out.append(FusedGroup(rest))
                continue
        out.append(group)
    return out


def _bias_node(group: Any, mm: FallbackKernel, removed: set[str]) -> tuple[Any, list]:
    """(the node of ``group`` that may become the library call's bias add, the others): the
    group's only node, or the only one reading the product, stored, and not adding a bias
    the group itself computes. (None, []) when there is none."""
    if len(group.nodes) == 1:
        return group.nodes[0], []
    product = mm.outputs[0] if len(mm.outputs) == 1 else None
    if product is None:
        return None, []
    readers = [n for n in group.nodes if any(name == product.name for name, _ in n.reads)]
    if len(readers) != 1 or readers[0].name in removed or readers[0].is_reduction():
        return None, []
    node = readers[0]
    written = {n.name for n in group.nodes}
    if any(name in written for name, _ in node.reads):
        return None, []  # a bias computed in this kernel would not exist before the call
    return node, [n for n in group.nodes if n is not node]


def _fold(mm: FallbackKernel, node: Any, readers: dict[str, int], output_names: set[str],
          buffers: dict[str, Any]) -> FallbackKernel | None:
    if mm.op is not aten.mm.default or mm.kwargs or transposed_matrix(mm.args[1]) is None:
        return None
    (product,) = mm.outputs
    if product is None or product.name in output_names or readers.get(product.name) != 1:
        return None
    bias = bias_of(node, product)
    if bias is None:
        return None
    bias_buffer = buffers.get(bias)
    if (bias_buffer is None or len(bias_buffer.layout.size) != 1
            or list(bias_buffer.layout.stride) != [1]
            or bias_buffer.get_dtype() != product.get_dtype()):
        return None
    result = ExternBuffer(node.name, node.buffer.layout)
    return FallbackKernel(mm.name, aten.addmm.default, [bias_buffer, *mm.args], {}, [result])

