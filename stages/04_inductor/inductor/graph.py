"""GraphLowering: run the prims graph with IR values instead of tensors.

Input: an FX GraphModule of prims (and extern/fallback aten ops), and example inputs.
Output: ``graph_inputs`` (``InputBuffer`` per placeholder, with the example's real strides, or
symbolic ones from its ``meta["val"]``; ``SizeArg`` for an int input),
``operations`` (``ComputedBuffer`` and ``FallbackKernel`` objects in program order) and
``graph_outputs`` (buffers, or ``None`` for non-tensor outputs).

Chapter: book/docs/inductor.md ("GraphLowering").

This is an ``fx.Interpreter``: each node's lowering runs on the IR values of its inputs, so
the graph is "executed" once, symbolically, and what it leaves behind is the loop-level IR.
It is also where values are realized into buffers; see [Note: realize].
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
import torch.fx
from aotautograd.proxy_tensor import on_device
from primtorch import prims

from inductor import sizevars
from inductor.exc import CompileError
from inductor.ir import (
    Buffer,
    ComputedBuffer,
    ExternBuffer,
    FallbackKernel,
    FixedLayout,
    FlexibleLayout,
    InputBuffer,
    IRNode,
    Layout,
    Loops,
    Pointwise,
    Reduction,
    Scatter,
    ScatterBuffer,
    SizeArg,
    as_view,
    contiguous_strides,
    elements_per,
    index_vars,
    padded_rows_layout,
    sympify_all,
    sympify_size,
)
from inductor.lowering import lowerings
from inductor.split_reduction import split_reduction
from inductor.virtualized import ReadWritesHandler, V

RECOMPUTE_OPS = 30  # the most ops a value read from one narrower buffer is recomputed with
SMALL_READ = 16  # a read of a buffer this many times smaller than the value is not counted


def is_cheap(value: Pointwise, buffer_of: Callable[[str], Buffer | None]) -> bool:
    """A body worth recomputing per user rather than storing: at most one load and one op
    (constants are free), or [Note: recompute rather than store wider]. ``buffer_of``: the
    graph's buffer of a name (None where unknown)."""
    handler = ReadWritesHandler()
    with V.set_ops_handler(handler):
        value.inner_fn(index_vars(value.ranges))
    if len(handler.reads) <= 1 and handler.op_count <= 1:
        return True
    if handler.op_count > RECOMPUTE_OPS or "indirect" in handler.op_names:
        return False
    read = [buffer_of(name) for name in {name for name, _ in handler.reads}]
    numel = sympy.Mul(*value.ranges)
    wide = read if len(read) == 1 else [b for b in read if not _much_smaller(b, numel)]
    if len(wide) != 1 or wide[0] is None:
        return False
    if value.dtype.itemsize > wide[0].get_dtype().itemsize:
        return True
    small = [b for b in read if b is not wide[0]]  # [Note: a value and its own statistics]
    return (bool(small) and set(handler.op_names) <= AFFINE
            and all(_statistic_of(b, wide[0]) for b in small))


AFFINE = {"add", "sub", "mul", "div", "neg", "to_dtype", "constant"}


def _statistic_of(buffer: Buffer | None, source: Buffer) -> bool:
    """Whether ``buffer`` is a reduction whose body reads ``source`` (a row's max of it)."""
    data = getattr(buffer, "data", None)
    if not isinstance(data, Reduction):
        return False
    handler = ReadWritesHandler()
    with V.set_ops_handler(handler):
        data.inner_fn(index_vars(data.ranges), index_vars(data.reduction_ranges, "r"))
    return source.name in {name for name, _ in handler.reads}


def _much_smaller(buffer: Buffer | None, numel: sympy.Expr) -> bool:
    """Whether ``buffer`` is known to hold at most 1/SMALL_READ as many elements as ``numel``
    (a per-row statistic read by a value over the rows): its reads cost next to nothing."""
    if buffer is None:
        return False
    ratio = sympy.simplify(numel - SMALL_READ * buffer.numel())
    return bool(ratio.is_nonnegative)


# --8<-- [start:store-wider]
# [Note: recompute rather than store wider]
# A value with several users is stored once and read by each (``realize``), unless its body
# is trivial. One more kind is recomputed instead: a value computed from a single buffer that
# is narrower than the value itself, as when bfloat16 is upcast to float32 for the math.
# GPT-2's tanh GELU is the case. Its backward, for each layer, needs ``x * x`` and
# ``tanh(...)`` of the saved pre-activation ``x`` (bfloat16), in two kernels on either side
# of a matmul; stored, each is a float32 tensor written once and read once: 8 bytes per
# element per value, where reading ``x`` again costs 2 (and nothing, in a kernel that reads
# ``x`` anyway). Up to ``RECOMPUTE_OPS`` ops are repeated per user: kernels that are limited
# by memory have the arithmetic to spare. A gather (an indirect load) is never repeated.
# Reads of buffers at least ``SMALL_READ`` times smaller than the value do not count against
# "a single buffer": a normalization's ``(x - mean) * rstd`` reads one statistic per row
# (or per channel) besides ``x``, from cache. GPT-2's layer norm backward had stored it in
# float32 for the weight gradient's column sum; recomputed, that kernel reads ``x`` instead.
#
# [Note: store the narrow value]
# The mirror case: a value that is stored, and is only the upcast of a narrower one, is
# stored narrow. A bfloat16 model's loss gradient reaches layer norm's backward as
# ``convert_element_type(dy, float32)``, read by the row kernel (the input gradient) and by
# the column sums (the weight gradient): realized as it comes, a float32 tensor. Stored
# before the cast, it is a bfloat16 one, half the bytes written and read, and each reader
# upcasts as it loads; the values are the same, since ``dy`` was rounded to bfloat16 before
# the cast. (The MLP's [4096, 4096] layer norm backward wrote and read 64 MiB less.)
#
# [Note: a value and its own statistics]
# One more kind at any width: arithmetic on ``x`` and reductions of ``x`` itself, such as
# ``x`` minus its row's max (not ``(x - mean) * rstd``: rstd is an rsqrt, and only
# arithmetic counts here). Its users are the reductions' own kernel (which
# reads ``x`` anyway) and whatever follows; stored, it is a write and a read of a whole
# tensor where reading ``x`` again costs the read alone. A float32 cross-entropy stored
# ``x - max`` (1.6 GB for GPT-2's logits) only for the kernel that gathers each row's target
# entry, which now computes its few entries from the logits. Only arithmetic: a softmax's
# ``exp(x - max)`` is kept for its division (the C++ loops keep the row's exps in a scratch).
# A value with a vector of another tensor (a bias) is not one of these: stored once, it is
# what a matrix multiply reads.
# --8<-- [end:store-wider]


def _aligned_args() -> dict[Any, int]:
    """Library ops and the position of the argument whose strides they want aligned:
    memory-efficient attention's mask, forward and backward ([Note: a library call's
    strides])."""
    aten = torch.ops.aten
    found = {}
    for name, position in [("_scaled_dot_product_efficient_attention", 3),
                           ("_scaled_dot_product_efficient_attention_backward", 4)]:
        if hasattr(aten, name):
            found[getattr(aten, name).default] = position
    return found


ALIGNED_ARGS = _aligned_args()


# --8<-- [start:any-strides]
# [Note: library calls that read any strides]
# A prim's value is row-major: the shape prims (``permute``, ``reshape``...) copy in eager
# (primtorch's ``prims.py``: "Shape prims return fresh row-major tensors"), and the trace's
# meta tensors say so. So when an autograd formula asks
# ``grad.contiguous()`` before calling an ATen kernel that assumes contiguous memory (weight
# norm's backward does: ``_weight_norm_interface_backward(grad.contiguous(), ...)``), the
# trace sees a row-major value, records no copy, and the graph hands the kernel a
# ``permute``'s value. Inductor passes such a value as a strided view of the buffer it was
# read from ([Note: views into library calls]); for weight norm's backward that gave wrong
# gradients with no error (``nn.utils.parametrizations.weight_norm``, found by a sweep of
# patterns outside the suite). So a view goes only to the calls below, which read any
# strides (cuBLAS takes a transposed operand as is; convolutions and attention choose their
# kernel by layout); every other library call gets a row-major argument, as the trace
# said, copied where it is not.
def _any_strides() -> frozenset[Any]:
    aten = torch.ops.aten
    names = ["mm", "addmm", "bmm", "baddbmm", "_grouped_mm", "convolution",
             "convolution_backward", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_flash_attention_backward",
             "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_efficient_attention_backward",
             "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward",
             "_scaled_dot_product_flash_attention_for_cpu",
             "_scaled_dot_product_flash_attention_for_cpu_backward"]
    return frozenset(getattr(aten, n).default for n in names if hasattr(aten, n))


ANY_STRIDES = _any_strides()
# --8<-- [end:any-strides]


def is_row_major(layout: Layout) -> bool:
    """Whether ``layout``'s strides are its sizes' row-major ones (a dim of size 1 may have
    any); False where symbols leave it unknown."""
    row_major = contiguous_strides(layout.size)
    return all(sympy.Eq(size, 1) is sympy.true or sympy.Eq(stride, want) is sympy.true
               for size, stride, want in zip(layout.size, layout.stride, row_major))


def has_aligned_rows(buffer: Buffer, align_bytes: int = 16) -> bool:
    """Whether every stride of ``buffer`` but the last is a multiple of ``align_bytes`` (a
    dim of size 1 may have any). An argument in ``ALIGNED_ARGS`` that is already in memory,
    a graph input or a value stored for another reader, is copied into padded rows when it
    is not ([Note: a library call's strides] in ir.py): memory-efficient attention raises on
    such a mask, where eager, which pads, runs. (BEiT's, strides (.., 289, 17, 1) on the
    H200, came by the op-by-op path: [Note: a library call's strides, op by op].)"""
    try:
        return rows_aligned(buffer.layout.size, buffer.layout.stride, buffer.get_dtype(),
                            align_bytes)
    except TypeError:  # symbolic sizes or strides: copy, to be safe
        return False


def rows_aligned(size: Sequence, stride: Sequence, dtype: torch.dtype,
                 align_bytes: int = 16) -> bool:
    """Every stride but the last a multiple of ``align_bytes`` (a dim of size 1 may have
    any): the rule ``has_aligned_rows`` and ``with_aligned_rows`` share. The last size and
    stride are not read; a symbolic one among the others raises TypeError."""
    per_row = elements_per(align_bytes, dtype)
    return all(int(n) == 1 or int(st) % per_row == 0 for n, st in zip(size[:-1], stride[:-1]))


# --8<-- [start:aligned-op-by-op]
def with_aligned_rows(t: torch.Tensor, align_bytes: int = 16) -> torch.Tensor:
    """``t`` itself when every stride but the last is a multiple of ``align_bytes`` (a dim of
    size 1 may have any), else a copy of it in padded rows: a view of a padded buffer, as
    eager's ATen makes one. For the op-by-op path, where each prim returns a row-major tensor
    ([Note: a library call's strides, op by op])."""
    if rows_aligned(list(t.shape), list(t.stride()), t.dtype, align_bytes):
        return t
    per_row, last = elements_per(align_bytes, t.dtype), t.shape[-1]
    padded = t.new_empty(*t.shape[:-1], -(-last // per_row) * per_row)[..., :last]
    return padded.copy_(t)


def align_library_args(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Route each ``ALIGNED_ARGS`` argument of ``gm`` through ``with_aligned_rows``.

    [Note: a library call's strides, op by op]
    The fallback target runs the prims graph as it is, and a prim's eager kernel returns a
    fresh row-major tensor: ``slice`` copies. ATen's own attention pads a (17, 17) mask to
    (17, 24) and slices it back, a view with rows of 24; traced, that is ``cat`` with zeros
    and then ``slice``, which op by op hands memory-efficient attention a (2, 4, 17, 17)
    mask of strides (1156, 289, 17, 1). The kernel refused it on the H200 (BEiT, whose
    relative-position index is a CPU tensor, which sends its graph down this path), so here
    each such argument is checked at run time and copied into padded rows when it needs to."""
    changed = False
    for node in list(gm.graph.nodes):
        position = ALIGNED_ARGS.get(node.target)
        if position is None or position >= len(node.args) \
                or not isinstance(node.args[position], torch.fx.Node):
            continue
        with gm.graph.inserting_before(node):
            aligned = gm.graph.call_function(with_aligned_rows, (node.args[position],))
        node.update_arg(position, aligned)
        changed = True
    if changed:
        gm.recompile()
    return gm
# --8<-- [end:aligned-op-by-op]


# --8<-- [start:depthwise-channels-last]
# [Note: depthwise convolutions read channels-last]
# Which kernel runs a convolution is ATen's choice, and it looks at the memory format of what
# it is given. A depthwise convolution (one filter per channel: ``groups`` equal to the input
# channels) on a GPU goes to cuDNN when its input is channels-last, and, for most kernel sizes,
# to ATen's own depthwise kernels when it is row-major (NCHW). ConvNeXt's 7x7 depthwise
# convolutions read the residual sum of the block before, and in eager that sum is
# channels-last: the block's last Linear ran over (N, H, W, C) and was permuted back, and the
# sum follows that layout. Inductor computes the sum in its own kernel and, as for every
# buffer, chose row-major: on the H200 the 18 depthwise convolutions of a ConvNeXt-T
# training step (batch 32, bfloat16) then took 137 us forward and 510 us backward each,
# against cuDNN's 41 and 68 in eager, and the whole step ran at 0.70x eager's speed.
#
# So on a GPU, a 4-d value that a depthwise convolution reads (forward: its input; backward:
# the output's gradient and the input), when inductor computes it, is stored channels-last:
# strides (H*W*C, 1, W*C, C). The value's other readers are kernels like any other (they
# index through the buffer's strides), and the LayerNorm that ConvNeXt applies over C next
# now reads its rows contiguously. Other convolutions keep their row-major inputs: for them
# ATen picks cuDNN in either layout, and the BatchNorm statistics that follow a ResNet's
# convolutions are reductions over N, H and W, which a channels-last layout would make
# strided. A value that is a view of another buffer is handed over as that view, as before.
CHANNELS_LAST_DEVICES = ("cuda",)  # (tests add "cpu" to run the rule under the interpreter)


def depthwise_inputs(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """The nodes whose values a depthwise convolution reads (forward: the input; backward:
    the output's gradient and the input)."""
    # BEGIN EXERCISE inductor-depthwise-layout: find what the depthwise convolutions read
    aten = torch.ops.aten
    found: set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        if node.target is aten.convolution.default and len(node.args) > 8:
            reads, weight, transposed, groups = node.args[:1], node.args[1], node.args[6], \
                node.args[8]
        elif node.target is aten.convolution_backward.default and len(node.args) > 9:
            reads, weight, transposed, groups = node.args[:2], node.args[2], node.args[7], \
                node.args[9]
        else:
            continue
        w = weight.meta.get("val") if isinstance(weight, torch.fx.Node) else None
        if (not transposed and isinstance(groups, int) and groups > 1
                and isinstance(w, torch.Tensor) and w.ndim == 4 and w.shape[1] == 1):
            found.update(r for r in reads if isinstance(r, torch.fx.Node))
    return found
    # END EXERCISE inductor-depthwise-layout


def channels_last_layout(value: Pointwise | Reduction) -> FixedLayout:
    """``value``'s (N, C, H, W) elements stored channel-fastest: strides (H*W*C, 1, W*C, C)."""
    n, c, h, w = value.ranges
    return FixedLayout(value.device, value.dtype, list(value.ranges), [h * w * c, 1, w * c, c])
# --8<-- [end:depthwise-channels-last]


# --8<-- [start:convolution-result-layout]
# [Note: a convolution's result layout on a GPU]
# PyTorch's meta function for a convolution always answers row-major: a meta tensor has no
# device, and the layout of the result is the choice of the kernel that will run. On a GPU
# that is cuDNN, for almost every convolution, and cuDNN hands back channels-last results
# (the output forward; the input's and the weight's gradients backward) whenever the input
# or the weight *looks* channels-last by ATen's rule (``suggest_memory_format``), unless they
# are float64. So once inputs are channels-last ([Note: depthwise convolutions read
# channels-last]), every result the kernels after a convolution were compiled for was wrong,
# and the wrapper's ``as_layout`` copied it into the expected layout: 57 copies in a
# ShuffleNet-v2 training step. ``convolution_result_layout`` says what cuDNN will do instead;
# ``as_layout`` still checks every result at run time, so a convolution that runs elsewhere
# (ATen's own depthwise kernels take row-major inputs only) costs a copy, never a wrong value.
def looks_channels_last(size: Sequence[int], stride: Sequence[int]) -> bool:
    """ATen's ``suggest_memory_format`` for a 4-d tensor: whether its strides are ordered
    C, W, H, N from the fastest, a size-1 dim matching either way, ties going to row-major."""
    if len(size) != 4 or stride[1] == 0:
        return False
    smallest = 0
    for d in (1, 3, 2, 0):
        if size[d] == 0 or stride[d] < smallest or (d == 0 and smallest == stride[1]):
            return False
        smallest = stride[d] * max(size[d], 1)
    return True


def convolution_result_layout(target: Any, val: Any, meta_args: Any,
                              device: torch.device) -> Any:
    """``val``, a convolution's (or its backward's) meta result, in the layout cuDNN returns
    on a GPU; any other op's result as it is."""
    aten = torch.ops.aten
    if device.type != "cuda" or target not in (aten.convolution.default,
                                               aten.convolution_backward.default):
        return val
    forward = target is aten.convolution.default
    x, weight = (meta_args[0], meta_args[1]) if forward else (meta_args[1], meta_args[2])
    if (not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor)
            or weight.ndim != 4 or torch.float64 in (x.dtype, weight.dtype)
            or not any(looks_channels_last(t.shape, t.stride()) for t in (x, weight))):
        return val

    def channels_last(t: Any) -> Any:
        return t.to(memory_format=torch.channels_last) if isinstance(t, torch.Tensor) \
            and t.ndim == 4 else t
    return channels_last(val) if forward else (channels_last(val[0]), channels_last(val[1]),
                                               *val[2:])
# --8<-- [end:convolution-result-layout]


class GraphLowering(torch.fx.Interpreter):
    """Lowers a prims graph to loop-level IR (see the module docstring)."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> None:
        super().__init__(gm, garbage_collect_values=False)
        self.example_inputs = list(example_inputs)
        self.graph_inputs: list[InputBuffer | SizeArg] = []
        self.operations: list[ComputedBuffer | FallbackKernel] = []
        self.graph_outputs: list[Any] = []
        self.buffer_count = 0
        self.fallback_count = 0
        self.current_node: torch.fx.Node | None = None
        self.buffer_by_name: dict[str, Buffer] = {}
        self.produced_by: dict[int, torch.fx.Node] = {}  # id(IR value) -> the node it came from
        self.origins: dict[str, list[torch.fx.Node]] = {}  # buffer -> the nodes it computes
        self.node_order: dict[torch.fx.Node, int] = {}
        # [Note: depthwise convolutions read channels-last]
        self.channels_last = (depthwise_inputs(gm) if self.device().type in CHANNELS_LAST_DEVICES
                              else set())

    def register(self, buffer: Buffer) -> Buffer:
        self.buffer_by_name[buffer.name] = buffer
        return buffer

    def new_name(self) -> str:
        self.buffer_count += 1
        return f"buf{self.buffer_count - 1}"

    def realize(self, value: Any, layout: Layout | None = None) -> Any:
        """Give a Pointwise or Reduction value memory of its own (row-major unless ``layout``
        says otherwise); buffers and non-IR values pass through."""
        if not isinstance(value, (Pointwise, Reduction)):
            return value
        root = self.produced_by.get(id(value), self.current_node)
        if layout is None and len(value.ranges) == 4 and root in self.channels_last:
            layout = channels_last_layout(value)  # [Note: depthwise convolutions read ...]
        layout = layout or FlexibleLayout(value.device, value.dtype, value.ranges)
        buffer = self.register(ComputedBuffer(self.new_name(), layout, value))
        self.operations.append(buffer)
        self.origins[buffer.name] = self.inlined_nodes(root) if root is not None else []
        return buffer

    def inlined_nodes(self, root: torch.fx.Node) -> list[torch.fx.Node]:
        """The prims-graph nodes whose bodies a buffer computed at ``root`` holds: ``root`` and
        every producer reached through values that were inlined, not stored (kernel headers
        name them)."""
        seen, stack = {root}, [root]
        while stack:
            for user_input in stack.pop().all_input_nodes:
                value = self.env.get(user_input)
                if (user_input not in seen and user_input.op == "call_function"
                        and not isinstance(value, (Buffer, list, tuple))):
                    seen.add(user_input)
                    stack.append(user_input)
        if len(self.node_order) != len(self.module.graph.nodes):
            self.node_order = {node: i for i, node in enumerate(self.module.graph.nodes)}
        return sorted(seen, key=self.node_order.__getitem__)

    def realize_or_view(self, value: Any) -> Any:
        """A library call's argument: a strided view of an existing buffer if ``value`` is
        one (no copy; [Note: views into library calls]), else realized."""
        view = as_view(value, self.buffer_by_name) if isinstance(value, Pointwise) else None
        return view if view is not None else self.realize(value)

    def realize_row_major(self, value: Any) -> Any:
        """A library call's argument in row-major strides, as the trace gave it ([Note:
        library calls that read any strides]): a view only if it is row-major, a buffer
        inductor laid out otherwise copied."""
        if isinstance(value, Pointwise):
            view = as_view(value, self.buffer_by_name)
            if view is not None and is_row_major(view.layout):
                return view
            return self.realize(value, FixedLayout(value.device, value.dtype,
                                                   list(value.ranges),
                                                   contiguous_strides(value.ranges)))
        if isinstance(value, ComputedBuffer) and not is_row_major(value.layout):
            copy = Pointwise(value.get_device(), value.get_dtype(), value.make_loader(),
                             list(value.get_size()))
            return self.realize_row_major(copy)
        return self.realize(value) if isinstance(value, IRNode) else value

    def library_args(self, target: Any, args: Any, kwargs: Any) -> tuple[Any, Any]:
        """``realize_or_view`` over a library call's arguments; an argument the call wants
        aligned gets padded rows if inductor computes it ([Note: a library call's
        strides])."""
        aligned = ALIGNED_ARGS.get(target)
        if aligned is not None and aligned < len(args) and isinstance(
                args[aligned], (Pointwise, Reduction)):
            args = list(args)
            args[aligned] = self.realize(args[aligned], padded_rows_layout(args[aligned]))
        elif (aligned is not None and aligned < len(args) and isinstance(args[aligned], Buffer)
              and not has_aligned_rows(args[aligned])):  # a graph input or a stored value
            args = list(args)
            copy = Pointwise(args[aligned].get_device(), args[aligned].get_dtype(),
                             args[aligned].make_loader(), list(args[aligned].get_size()))
            args[aligned] = self.realize(copy, padded_rows_layout(copy))
        tree_map = torch.utils._pytree.tree_map
        # (a call that wants aligned rows reads strides: [Note: a library call's strides])
        argument = (self.realize_or_view if target in ANY_STRIDES or aligned is not None
                    else self.realize_row_major)
        return tree_map(argument, args), tree_map(argument, kwargs)

    def run_node(self, n: torch.fx.Node) -> Any:
        self.current_node = n
        result = super().run_node(n)
        if isinstance(result, (Pointwise, Reduction)):
            self.produced_by[id(result)] = n
        many_users = len(n.users) > 1
        if isinstance(result, Reduction):
            # always realized: see Reduction's docstring; [Note: split reductions]
            result = self.realize(split_reduction(result, self.realize) or result)
        elif isinstance(result, Pointwise) and many_users and not is_cheap(
                result, self.buffer_by_name.get):
            narrow = self.narrow_source(n, result)
            if narrow is not None:  # [Note: store the narrow value]
                self.env[narrow] = self.realize(self.env[narrow])
                result = super().run_node(n)  # now one load and one cast: recomputed per user
                self.produced_by[id(result)] = n
            else:
                result = self.realize(result)  # [Note: realize]
        elif isinstance(result, Scatter):
            result = self.realize_scatter(result)
        return result

    def narrow_source(self, n: torch.fx.Node, result: Pointwise) -> torch.fx.Node | None:
        """The node whose value ``n`` only widens (a floating-point upcast of a value not yet
        stored), or None; see [Note: store the narrow value]."""
        if n.target is not prims.convert_element_type or not n.args:
            return None
        source = n.args[0]
        value = self.env.get(source) if isinstance(source, torch.fx.Node) else None
        if (not isinstance(value, Pointwise) or not value.dtype.is_floating_point
                or not result.dtype.is_floating_point
                or value.dtype.itemsize >= result.dtype.itemsize):
            return None
        return source

    def realize_scatter(self, value: Scatter) -> Buffer:
        """A scatter is two loops over one new buffer: a copy of ``value.base``, then the
        loop that writes into it (``ScatterBuffer``, same name; see ``ir.Scatter``)."""
        copy = Pointwise(value.device, value.dtype, value.base.make_loader(),
                         list(value.base.get_size()))
        buffer = self.realize(copy)
        loop = FlexibleLayout(value.device, value.dtype, value.ranges)
        self.operations.append(ScatterBuffer(buffer.name, loop, value, buffer.layout))
        return buffer

    def placeholder(self, target: str, args: Any, kwargs: Any) -> Any:
        """An input buffer with the example's strides; with dynamic shapes, the sizes and
        strides of the placeholder's symbolic ``meta["val"]`` (book/docs/dynamic-shapes.md).
        A size input (an int; a SymInt when traced) is a ``SizeArg``."""
        example = self.example_inputs[len(self.graph_inputs)]
        val = self.current_node.meta.get("val") if self.current_node is not None else None
        name = f"arg{len(self.graph_inputs)}"
        if isinstance(val, torch.SymInt) and isinstance(example, int):
            self.graph_inputs.append(SizeArg(name, sympify_size(val)))
            return sympify_size(val)
        if example is None or isinstance(example, int):  # a result of a library call
            # saved for backward, left out (None) or a number (cuDNN attention's max_q):
            self.graph_inputs.append(SizeArg(name, sympy.Integer(0)))  # binds no size,
            return example  # the library call that takes it gets the traced value
        if not isinstance(example, torch.Tensor):
            raise CompileError(f"graph input {target!r} is not a tensor ({type(example)})")
        shaped = val if isinstance(val, torch.Tensor) and val.ndim == example.ndim else example
        layout = FixedLayout(example.device, example.dtype, sympify_all(shaped.shape),
                             sympify_all(shaped.stride()))
        buffer = self.register(InputBuffer(name, layout))
        self.graph_inputs.append(buffer)
        return buffer

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        if target is operator.getitem and isinstance(args[0], (list, tuple)):
            return args[0][args[1]]
        val = self.current_node.meta.get("val") if self.current_node is not None else None
        if isinstance(val, torch.SymInt):  # size arithmetic: [Note: sizes in the graph]
            return sympify_size(val)
        if touches_complex(val, args, kwargs):  # [Note: complex numbers]
            return self.fallback(target, args, kwargs)
        lowering = lowerings.get(target)
        if lowering is not None:
            result = lowering(*args, **kwargs)
            if result is not None and not self.on_other_device(result):
                return result
        return self.fallback(target, args, kwargs)

    def on_other_device(self, value: Any) -> bool:
        """A value computed on another device than the graph's kernels run on: a 0-dim CPU
        tensor in a CUDA graph (``y[mask] = 0.0`` makes one, and its backward another). A
        Triton kernel cannot write CPU memory: such a value is a library call."""
        device = value.device if isinstance(value, Loops) else None  # Scatter's too
        return device is not None and device.type != self.device().type

    def fallback(self, target: Any, args: Any, kwargs: Any) -> Any:
        """Run ``target`` as a library call on realized inputs: correct for any op."""
        args, kwargs = self.library_args(target, args, kwargs)
        home = self.result_device(args, kwargs)
        val = self.current_node.meta.get("val") if self.current_node is not None else None
        if val is None or (not has_symbols(val) and takes_buffers(target, args, kwargs)):
            try:  # [Note: what a library call returns]
                meta_args, meta_kwargs = to_meta(args), to_meta(kwargs)
                val = on_device(target, target(*meta_args, **meta_kwargs), home,
                                meta_args, meta_kwargs)
                val = convolution_result_layout(target, val, meta_args, home)
            except Exception:
                if val is None:
                    raise
        many = isinstance(val, (list, tuple))
        # An op may return None in a slot (convolution_backward without the bias gradient),
        # or a number (cuDNN attention's max_q and max_k): no buffer for those.
        outputs = [
            None if not isinstance(v, torch.Tensor) else
            ExternBuffer(self.new_name(), FixedLayout(v.device if v.device.type != "meta"
                                                      else home, v.dtype,
                                                      sympify_all(v.shape),
                                                      sympify_all(v.stride())))
            for v in (val if many else [val])
        ]
        for out in outputs:
            if out is not None:
                self.register(out)
        name = f"fallback_{self.fallback_count}"
        self.fallback_count += 1
        self.operations.append(FallbackKernel(name, target, list(args), dict(kwargs), outputs,
                                              multi_output=many))
        # a number the op returned is what it will return at run time too, since it is a
        # function of the sizes: the traced value (a size expression if symbolic) serves
        values = [o if o is not None or isinstance(v, torch.Tensor) or v is None else
                  sympify_size(v) if isinstance(v, torch.SymInt) else v
                  for o, v in zip(outputs, val if many else [val])]
        return values if many else values[0]

    def result_device(self, args: Any, kwargs: Any) -> torch.device:
        """Where a library call's result lives, which its meta value cannot say.

        [Note: where a library call's result lives]
        The op's own ``device`` argument, if it has one (``torch.rand([])`` in BART's layer
        drop makes a CPU tensor in a GPU graph); else, as in eager, its tensors' device,
        any other than the CPU before the CPU (a CPU scalar beside CUDA tensors gives a CUDA
        result); else, for an op of numbers alone, the graph's device. The graph's device
        alone was wrong for a chain of CPU ops in a GPU graph: BEiT builds its relative
        position index from CPU ``arange``s, each op of the chain a library call (no Triton
        kernel may touch host memory), but each result was labeled CUDA, so the next op's
        loop looked like the graph's own and became a Triton kernel reading host memory;
        the wrapper caught it and the whole graph ran op by op."""
        given = kwargs.get("device")
        if isinstance(given, (torch.device, str)):
            return torch.device(given)
        devices = [leaf.get_device() for leaf in torch.utils._pytree.tree_leaves((args, kwargs))
                   if isinstance(leaf, (Buffer, Loops))]
        return next((d for d in devices if d.type != "cpu"), devices[0] if devices
                    else self.device())

    def device(self) -> torch.device:
        """Where the kernels run: the first input's device; for a graph without tensor
        inputs, its factories' ([Note: a graph without inputs] in compile_fx.py)."""
        tensors = [t for t in self.example_inputs if isinstance(t, torch.Tensor)]
        return tensors[0].device if tensors else self.factory_device

    @functools.cached_property
    def factory_device(self) -> torch.device:
        from inductor.compile_fx import factory_device  # (compile_fx imports this module)

        return factory_device(self.module)

    def output(self, target: str, args: Any, kwargs: Any) -> Any:
        outs = args[0] if isinstance(args[0], (list, tuple)) else [args[0]]
        taken = {o.name for o in outs if isinstance(o, Buffer)}
        self.graph_outputs = [self.realize(self.whole_buffer(o, taken) or o)
                              if isinstance(o, IRNode) else o for o in outs]
        return self.graph_outputs

    def whole_buffer(self, value: IRNode, taken: set[str]) -> Buffer | None:
        """The buffer an output is, element for element, in that buffer's own layout, or None.

        [Note: an output that is a whole buffer]
        Decompositions leave views that undo each other: a Linear's weight gradient comes
        out of the backward as ``permute(permute(mm(...)))``. Realizing such an output would
        copy the library call's result into a new buffer of the same layout: a kernel that
        only moves memory (three of them per mlp_train step, 32 MiB each in bfloat16). When
        the view is the whole of a buffer made in this graph, in that buffer's strides, the
        output is that buffer. Not a graph input (an output must not alias an input it did
        not alias in eager), and not a buffer another output already is (two gradients must
        not share memory)."""
        view = as_view(value, self.buffer_by_name) if isinstance(value, Pointwise) else None
        if view is None or view.name in taken:
            return None
        base = view.base
        if (isinstance(base, InputBuffer) or view.offset != 0
                or list(view.layout.size) != list(base.layout.size)
                or list(view.layout.stride) != list(base.layout.stride)):
            return None
        taken.add(base.name)
        return base


# [Note: what a library call returns]
# The traced graph records each op's result (``meta["val"]``), but with the strides its
# inputs had when it was traced; inductor hands a library call views of its own buffers,
# whose strides may differ, and many ops lay out their result after their inputs'. cuDNN
# attention returns ``out`` (and, backward, ``dq``, ``dk``, ``dv``) in the stride order of
# ``q``: in GPT-2, [B, T, H, D] memory viewed as [B, H, T, D], where the traced value said
# row-major [B, H, T, D]. The wrapper's ``as_layout`` then copied every one of them into the
# layout it was told to expect (48 copies, 0.9 ms of a bfloat16 step on the H200), for the
# next kernel to permute back. So a static-shaped call is run once more on meta tensors of
# the buffers it will really get, and its result's layout is the one the kernels are compiled
# for; ``as_layout`` still checks at run time, for an op whose meta function and real kernel
# disagree. With symbolic sizes the traced value stays (its sizes are the symbols).
def has_symbols(tree: Any) -> bool:
    """Whether any tensor in ``tree`` has a symbolic size or stride."""
    leaves = torch.utils._pytree.tree_leaves(tree)
    return any(isinstance(x, torch.SymInt) for t in leaves if isinstance(t, torch.Tensor)
               for x in (*t.shape, *t.stride())) or any(isinstance(x, torch.SymInt)
                                                         for x in leaves)


# --8<-- [start:complex-numbers]
# [Note: complex numbers]
# Our kernels compute in real types: the printers have no complex64. An op that reads or
# makes a complex tensor (rotary embeddings written with ``torch.view_as_complex``, as
# LLaMA's reference code does) is a library call instead, and the real ops around it are
# still fused: ``view_as_real`` hands its result to a kernel like any library call's.
def touches_complex(val: Any, args: Any, kwargs: Any) -> bool:
    """Whether the op's result or any buffer it reads has a complex dtype."""
    leaves = torch.utils._pytree.tree_leaves((val, args, kwargs))
    return any((x.layout.dtype if isinstance(x, Buffer) else x.dtype).is_complex
               for x in leaves if isinstance(x, (Buffer, torch.Tensor)))
# --8<-- [end:complex-numbers]


def takes_buffers(target: Any, args: Any, kwargs: Any) -> bool:
    """Whether ``target`` is given a buffer, so that meta tensors stand in for every tensor
    it gets. (An op of devices and numbers alone, such as the seed prim, would run for real:
    it draws from the generator.)"""
    leaves = torch.utils._pytree.tree_leaves((args, kwargs))
    return any(isinstance(x, Buffer) for x in leaves)  # (a view is a Buffer too)


def to_meta(tree: Any) -> Any:
    """Buffers as meta tensors of their layout, for running an op to learn its output."""

    def convert(x: Any) -> Any:
        if isinstance(x, Buffer):  # (at the traced sizes, if they are symbolic)
            hint = sizevars.current().hint
            return torch.empty_strided([hint(s) for s in x.layout.size],
                                       [hint(s) for s in x.layout.stride],
                                       dtype=x.layout.dtype, device="meta")
        if isinstance(x, sympy.Expr):
            return sizevars.current().hint(x)
        return x

    return torch.utils._pytree.tree_map(convert, tree)
