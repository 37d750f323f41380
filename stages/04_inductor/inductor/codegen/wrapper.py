"""The wrapper: a readable Python module that runs the compiled graph.

Input: the lowered graph (inputs, outputs, buffers), the scheduler's groups and removed
buffers, and one ``KernelSource`` per fused group.
Output: the source text of a module whose ``call(arg0, arg1, ...)`` allocates buffers
(``empty_strided``, reusing dead ones of the same layout), launches the kernels and library
calls in program order and returns the outputs as a tuple. Kernels, library ops and
constants are not in the text: the loader binds them in the module's namespace by name.

Chapter: book/docs/inductor.md ("The wrapper").
"""

from __future__ import annotations

import math
import re
from typing import Any

import sympy
import torch

from inductor.codegen.last_program import COUNTER, PARTIALS
from inductor.codegen.triton import KernelSource
from inductor.exc import CompileError
from inductor.ir import (
    Buffer,
    ComputedBuffer,
    ExternBuffer,
    FallbackKernel,
    InputBuffer,
    ReinterpretView,
    ScatterBuffer,
    SizeArg,
    contiguous_strides,
)
from inductor.linear import transposed_matrix
from inductor.mm_template import TemplateGroup
from inductor.scheduler import ExternNode, FusedGroup
from inductor.sizevars import is_size_symbol, pexpr, size_symbols

aten = torch.ops.aten

# --8<-- [start:library-functions]
# [Note: torch.mm, not aten.mm.default]
# A library call in the wrapper could call the op overload the graph names
# (``torch.ops.aten.convolution.default``), but an overload parses its arguments against
# the schema in generic code, after a Python ``__call__``: measured on the 2-core CPU
# machine, several microseconds more per call than the generated binding of the same op in
# ``torch`` (``torch.convolution``: 18 us against 10 us for a small convolution, 4.2
# against 1.8 for a small ``mm``). For the ops the benchmark models call at every step,
# whose ``torch`` function takes the overload's arguments in the same order, with the same
# keywords, and resolves to that overload for tensors, the wrapper binds the ``torch``
# function. Every other op is bound to its overload's C entry point (``OpOverload._op``,
# which the overload's ``__call__`` only forwards to): a Python frame less per call, 3-4 us
# of the 2-core CPU machine's time for a ``convolution_backward`` on meta tensors (so that
# only the call is timed; the convnet makes five a step). The comment on the line still
# names the overload.
LIBRARY_FUNCTIONS = {
    aten.mm.default: torch.mm,
    aten.bmm.default: torch.bmm,
    aten.addmm.default: torch.addmm,
    aten.convolution.default: torch.convolution,
}


def library_function(op: Any) -> Any:
    """What the wrapper calls for the library op ``op``: [Note: torch.mm, not aten.mm.default]."""
    if op in LIBRARY_FUNCTIONS:
        return LIBRARY_FUNCTIONS[op]
    return op._op if isinstance(op, torch._ops.OpOverload) else op
# --8<-- [end:library-functions]

PRELUDE = '''import torch

empty_strided = torch.empty_strided
linear = torch.nn.functional.linear


def reinterpret(t, size, stride, offset):
    """A strided view of ``t``'s memory (offset counted from ``t``'s first element)."""
    return t.as_strided(size, stride, t.storage_offset() + offset)


def as_layout(t, size, stride):
    """A library call's result in the layout the kernels were compiled for (copy if not).
    None stays None: an op may leave out a result its meta function describes (cuDNN
    attention's logsumexp when no gradient is wanted)."""
    if t is None or t.stride() == stride and t.shape == size:  # the common case, in C
        return t
    if t.shape == size and all(n == 1 or s == want for n, s, want in zip(size, t.stride(), stride)):
        return t  # strides differ only along dims of size 1, where they mean nothing
    out = empty_strided(size, stride, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out
'''


class Sizes(tuple):
    """Sizes or strides that print as Python source: ``(s0, 64)`` with dynamic shapes (the
    wrapper binds ``s0``, see ``size_bindings``), ``(4, 64)`` without. Equal expressions are
    equal keys, so buffer reuse works with symbolic sizes too."""

    def __repr__(self) -> str:
        items = [pexpr(v) for v in self]
        return f"({', '.join(items)}{',' if len(items) == 1 else ''})"


def _sizes(values: list[sympy.Expr]) -> tuple:
    if all(sympy.sympify(v).is_Integer for v in values):
        return tuple(int(v) for v in values)
    return Sizes(sympy.sympify(v) for v in values)


def launch_grid(kernel: Any) -> str:
    """The grid a Triton launch is written with, ``(x, y, z)`` programs, one per XBLOCK
    elements (per YBLOCK x XBLOCK tile): numbers when the sizes are static (worked out here,
    once), else the ceiling division over the size symbols, ``((s0 + 1023) // 1024, 1, 1)``,
    evaluated by the launch line itself rather than by a lambda at every launch."""
    blocks = [kernel.launch["XBLOCK"], kernel.launch.get("YBLOCK", 1)]
    programs = [str(-(-int(n) // block)) if isinstance(n, (int, sympy.Integer)) else
                f"({pexpr(n)} + {block - 1}) // {block}" if block > 1 else pexpr(n)
                for n, block in zip(kernel.grid_args(), blocks)]
    return f"({programs[0]}, {programs[1] if len(programs) > 1 else 1}, 1)"


# --8<-- [start:whole-buffer]
# [Note: a view that is its whole buffer]
# A library call is handed a view of a buffer as ``reinterpret(buf, size, stride, offset)``,
# an ``as_strided`` at every call: 4 to 8 us of host time each inside a training step on the
# H200 host. Often the view is the buffer itself, in the very layout it has: the weight of a
# ``Linear`` without its own ``linear`` line, an activation read whole by ``mm``. Then the
# buffer is passed as it is (of the graph break benchmark's five ``reinterpret`` calls a
# step, two were such; one of the convnet's two); sizes are compared as expressions, so a
# symbolic size equal on both sides counts.
def whole_buffer(view: ReinterpretView) -> bool:
    """Whether ``view`` is its base's memory exactly as the base lays it out: no offset, the
    same dtype, sizes and strides."""
    base = view.base
    return (isinstance(base, Buffer) and not isinstance(base, ReinterpretView)
            and sympy.sympify(view.offset) == 0 and base.get_dtype() == view.get_dtype()
            and list(base.layout.size) == list(view.layout.size)
            and list(base.layout.stride) == list(view.layout.stride))
# --8<-- [end:whole-buffer]


# --8<-- [start:fresh-results]
# [Note: a view that is its whole buffer, transposed]
# The other common view is a whole row-major matrix transposed: the backward of every
# ``Linear`` multiplies the transposed gradient by the input (``mm(g.t(), x)``), that of a
# batched product (attention) a batch of transposed matrices. It is printed ``g.t()`` or
# ``g.transpose(-2, -1)``, the view made in C++, instead of ``reinterpret``'s
# ``as_strided`` from Python: the graph break benchmark's backward makes three a step.
#
# [Note: results whose layout the library fixes]
# Every library result goes through ``as_layout``, which compares its strides with the
# ones the kernels were compiled for, since a library may pick its own (cuDNN's
# convolutions do). A matrix multiply never does: ``mm``, ``addmm``, ``bmm`` and
# ``baddbmm`` write into a new row-major tensor. Where the compiled layout is row-major
# too, the check is left out: a Python call and two C calls per product, six in each
# training step of the graph break benchmark's backward.
def last_two_swapped(view: ReinterpretView) -> bool:
    """Whether ``view`` is its whole row-major base (2-D or more) with the last two dims
    swapped: no offset, the same dtype."""
    base = view.base
    if not isinstance(base, Buffer) or isinstance(base, ReinterpretView):
        return False
    size, stride = list(base.layout.size), list(base.layout.stride)
    if (len(size) < 2 or sympy.sympify(view.offset) != 0 or base.get_dtype() != view.get_dtype()
            or stride != list(contiguous_strides(size))):
        return False
    swap = [*range(len(size) - 2), len(size) - 1, len(size) - 2]
    return (list(view.layout.size) == [size[i] for i in swap]
            and list(view.layout.stride) == [stride[i] for i in swap])


FRESH_ROW_MAJOR = {aten.mm.default, aten.addmm.default, aten.bmm.default,
                   aten.baddbmm.default}
# the products whose ``torch`` function takes ``out=`` ([Note: library results in dead buffers])
OUT_VARIANTS = {aten.mm.default, aten.addmm.default, aten.bmm.default}


def pool_key(layout: Any) -> tuple:
    """What a dead buffer must match to be reused: sizes and strides (ints, or printable
    expressions with dynamic shapes), dtype, device (as a string)."""
    return (_sizes(layout.size), _sizes(layout.stride), layout.dtype, str(layout.device))


def layout_fixed_by_library(kernel: FallbackKernel, out: Buffer) -> bool:
    """Whether ``kernel``'s result ``out`` needs no ``as_layout``: see [Note: results whose
    layout the library fixes]."""
    return (kernel.op in FRESH_ROW_MAJOR and not kernel.kwargs
            and list(out.layout.stride) == list(contiguous_strides(out.layout.size)))
# --8<-- [end:fresh-results]


def literal(value: Any, constants: dict[str, Any]) -> str:
    """Python source for a constant argument; anything unusual goes into the namespace
    (bound by name), so no user-controlled text is ever pasted into code."""
    if value is None or isinstance(value, (bool, int)):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f"float('{value}')"
    if isinstance(value, torch.dtype):
        return str(value)  # "torch.float32"
    if isinstance(value, ReinterpretView):  # [Note: views into library calls]
        if whole_buffer(value):  # [Note: a view that is its whole buffer]
            return value.name
        if last_two_swapped(value):  # [Note: a view that is its whole buffer, transposed]
            return f"{value.name}.t()" if len(value.layout.size) == 2 else \
                f"{value.name}.transpose(-2, -1)"
        layout = value.layout
        return (f"reinterpret({value.name}, {_sizes(layout.size)}, {_sizes(layout.stride)}, "
                f"{pexpr(value.offset)})")
    if isinstance(value, Buffer):
        return value.name
    if isinstance(value, sympy.Expr):  # a size: an int, or an expression of bound symbols
        return pexpr(value)
    if isinstance(value, (list, tuple)):
        items = [literal(v, constants) for v in value]
        return f"[{', '.join(items)}]" if isinstance(value, list) else \
            f"({', '.join(items)}{',' if len(items) == 1 else ''})"
    name = f"const{len(constants)}"
    constants[name] = value
    return name


# --8<-- [start:wrapper]
class WrapperCodeGen:
    """Prints the ``call`` function: allocations, launches, frees, return."""

    def __init__(self, graph: Any, groups: list, removed: set[str],
                 kernels: dict[int, KernelSource], target: str,
                 tuned: frozenset[str] = frozenset(),
                 inplace: dict[str, str] | None = None) -> None:
        self.graph, self.groups, self.removed = graph, groups, removed
        self.inplace = inplace or {}  # buffer -> the input it is written into (inplace.py)
        self.kernels, self.target = kernels, target
        self.tuned = tuned if target == "triton" else frozenset()  # [Note: autotuning]
        self.constants: dict[str, Any] = {}  # extra names the loader must bind
        self.devices: dict[str, str] = {}  # module-level name -> device (``device_name``)
        self.lines: list[str] = []
        self.sites: dict[tuple[str, str], str] = {}  # (kernel, grid sizes options) -> name
        self.pool: dict[tuple, list[str]] = {}  # layout -> dead buffers to reuse
        self.on_gpu: bool | None = None  # does any buffer live on a GPU (``check_devices``)
        self.outputs = {o.name for o in graph.graph_outputs if isinstance(o, Buffer)}
        # [Note: library results in dead buffers]: what a library call that may return a
        # view of its inputs reads is never reused; products' inputs and results may be
        externs = [g.kernel for g in groups if isinstance(g, ExternNode)]
        self.extern_read = {n for k in externs if k.op not in FRESH_ROW_MAJOR
                            for n in k.input_names()}
        self.fresh = {o.name for k in externs for o in k.buffers()
                      if layout_fixed_by_library(k, o)}

    def generate(self) -> str:
        args = ", ".join(b.name for b in self.graph.graph_inputs)
        self.lines = [f"def call({args}):", *self.size_bindings()]
        last_use = self.last_uses()
        finishing = [k for k in self.kernels.values() if COUNTER in k.args]
        if finishing:  # [Note: the last program finishes]
            device = self.device_name(str(finishing[0].finishes.device))
            counters, slots = max(k.counters for k in finishing), max(k.scratch for k in finishing)
            self.lines.append(f"    {COUNTER}, {PARTIALS} = last_program_scratch({device}, "
                              f"{counters}, {slots})")
        for step, group in enumerate(self.groups):
            if isinstance(group, FusedGroup):
                if step in self.kernels:  # (else its kernel's last program is the one before)
                    self.kernel_call(step, group)
            else:
                self.extern_call(group.kernel)
            for name in sorted(n for n, s in last_use.items() if s == step):
                self.free(name)
        outs = [literal(o, self.constants) for o in self.graph.graph_outputs]
        self.lines.append(f"    return ({', '.join(outs)}{',' if len(outs) == 1 else ''})")
        header = [f"# Wrapper generated by minipt2 inductor (target: {self.target}).",
                  "# Runs the compiled graph: allocate, launch kernels in order, return.",
                  "# Chapter: book/docs/inductor.md. Kernels and library ops are bound by name."]
        devices = [f"{name} = torch.device({device!r})" for name, device in self.devices.items()]
        sites = [f"{name} = bind_launch({kernel}, {fixed})"
                 for (kernel, fixed), name in self.sites.items()]
        if sites:  # [Note: launch sites]
            sites = ["from inductor.launcher import bind_launch", "", *sites]
        if any(COUNTER in k.args for k in self.kernels.values()):
            sites = ["from inductor.launcher import last_program_scratch", *sites]
        return "\n".join([*header, PRELUDE, *devices, *sites, "", ""] + self.lines) + "\n"

    def kernel_call(self, step: int, group: FusedGroup) -> None:
        kernel = self.kernels[step]
        if self.target == "triton":
            self.check_devices(kernel)
        finished = kernel.finishes.nodes if kernel.finishes is not None else []
        for node in [*group.nodes, *finished]:  # a ScatterBuffer writes memory its copy allocated
            if (node.name in kernel.args and node.name not in self.removed
                    and not isinstance(node.buffer, ScatterBuffer)):
                if node.name in self.inplace:  # [Note: writing an input in place]
                    self.lines.append(f"    {node.name} = {self.inplace[node.name]}  "
                                      "# the input's new value, written in place")
                else:
                    self.allocate(node.buffer)
        if isinstance(group, TemplateGroup) and group.mm.outputs[0].name in kernel.args:
            self.allocate(group.mm.outputs[0])  # a template's product, read elsewhere too
        args = ", ".join([*kernel.args, *map(pexpr, kernel.size_args())])
        kernel_sizes = [pexpr(s) for s in kernel.size_vars]  # C++: after the pointers
        if kernel.name in self.tuned:
            self.lines.append(f"    {kernel.name}.run({args})  # autotuned over "
                              f"{len(kernel.configs)} configs")
        elif self.target == "triton":
            launch = ", ".join(f"{k}={v}" for k, v in kernel.launch.items())
            sizes = kernel.size_args()
            if all(isinstance(s, (int, sympy.Integer)) for s in sizes):  # [Note: launch sites]
                site = self.launch_site(kernel.name, f"{launch_grid(kernel)}, "
                                        f"{_sizes(sizes)}, {launch}")
                self.lines.append(f"    {site}({', '.join(kernel.args)})")
            else:
                self.lines.append(f"    {kernel.name}[{launch_grid(kernel)}]({args}, {launch})")
        else:
            ptrs = [f"{a}.data_ptr()" for a in kernel.args]
            self.lines.append(f"    {kernel.name}({', '.join(ptrs + kernel_sizes)})")
# --8<-- [end:wrapper]

    def check_devices(self, kernel: KernelSource) -> None:
        """A Triton kernel of a GPU graph must not touch a CPU buffer (a 0-dim CPU tensor
        made in the traced code, and what is computed from it, is traced on the CPU): its
        launch would fail on a host pointer. Such a graph runs op by op instead."""
        if self.on_gpu is None:
            self.on_gpu = any(str(b.layout.device).startswith("cuda")
                              for b in self.graph.buffer_by_name.values())
        if not self.on_gpu:
            return  # a CPU graph (the interpreter runs its kernels on host memory)
        for name in kernel.args:
            buffer = self.graph_buffer(name)
            if buffer is not None and str(buffer.layout.device) == "cpu":
                raise CompileError(f"kernel {kernel.name} would read or write the CPU buffer "
                                   f"{name} from the GPU")

    def launch_site(self, kernel: str, fixed: str) -> str:
        """The name bound to ``bind_launch(kernel, <fixed>)`` at the wrapper's top, one per
        distinct (kernel, grid, sizes, options); see [Note: launch sites]."""
        key = (kernel, fixed)
        if key not in self.sites:
            count = sum(1 for k, _ in self.sites if k == kernel)
            self.sites[key] = f"{kernel}_launch{count or ''}"
        return self.sites[key]

    def extern_call(self, kernel: FallbackKernel) -> None:
        if self.linear_call(kernel):
            return
        self.constants[kernel.name] = library_function(kernel.op)
        args = [literal(a, self.constants) for a in kernel.args]
        args += [f"{k}={literal(v, self.constants)}" for k, v in kernel.kwargs.items()
                 if k.isidentifier()]
        dead = self.dead_buffer_for(kernel)
        if dead is not None:  # [Note: library results in dead buffers]
            (out,) = kernel.outputs
            self.lines.append(f"    {out.name} = {kernel.name}({', '.join(args)}, out={dead}); "
                              f"del {dead}  # {kernel.op}, into a dead buffer")
            return
        outs = ", ".join("_" if o is None else o.name for o in kernel.outputs)
        outs = outs + "," if kernel.multi_output and len(kernel.outputs) == 1 else outs
        self.lines.append(f"    {outs} = {kernel.name}({', '.join(args)})  # {kernel.op}")
        for out in kernel.buffers():
            if layout_fixed_by_library(kernel, out):
                continue
            size, stride = _sizes(out.layout.size), _sizes(out.layout.stride)
            self.lines.append(f"    {out.name} = as_layout({out.name}, {size}, {stride})")

    # --8<-- [start:dead-buffers]
    # [Note: library results in dead buffers]
    # ``mm``, ``addmm`` and ``bmm`` allocate their result themselves, and those results, and
    # the buffers a product reads, were never reused: a library call may return a view of
    # its input (``aten.t``, ``aten.view`` as fallbacks), and a buffer aliased by a live
    # result must not be written again. A product returns a new tensor, never a view, so
    # what only products read can be reused after its last use like any buffer of ours,
    # and so can a product's row-major result; and a product whose result has the layout of
    # a dead buffer writes into it (``torch.mm(a, b, out=buf3)``). On the CPU that is
    # memory whose pages are already mapped: a fresh megabyte from the allocator costs 256
    # page faults when first written.
    def dead_buffer_for(self, kernel: FallbackKernel) -> str | None:
        """A dead buffer ``kernel`` can write its result into (``out=``), taken from the
        pool; None where it allocates its own ([Note: library results in dead buffers])."""
        if kernel.op not in OUT_VARIANTS or kernel.multi_output or len(kernel.outputs) != 1:
            return None
        out = kernel.outputs[0]
        if out is None or not layout_fixed_by_library(kernel, out):
            return None
        key = pool_key(out.layout)
        return self.pool[key].pop() if self.pool.get(key) else None
    # --8<-- [end:dead-buffers]

    # --8<-- [start:linear]
    def linear_call(self, kernel: FallbackKernel) -> bool:
        """``mm(x, w.t())`` and ``addmm(b, x, w.t())`` with ``w`` a whole row-major matrix,
        printed as ``linear(x, w)`` and ``linear(x, w, b)``: the same cuBLAS calls, with
        the transpose made in C++; see [Note: linear] (inductor/linear.py)."""
        if kernel.kwargs or kernel.op not in (aten.mm.default, aten.addmm.default):
            return False
        bias = kernel.args[:1] if kernel.op is aten.addmm.default else []
        x, view = kernel.args[len(bias):]
        weight = transposed_matrix(view)
        if weight is None:
            return False
        (out,) = kernel.outputs
        args = ", ".join([literal(x, self.constants), weight, *(b.name for b in bias)])
        size = _sizes(out.layout.size)
        shape = "" if len(size) == 2 else f".view({size})"  # a folded bias add's 3-D result
        self.lines.append(f"    {out.name} = linear({args}){shape}  # {kernel.op}")
        if list(out.layout.stride) != list(contiguous_strides(out.layout.size)):
            self.lines.append(f"    {out.name} = as_layout({out.name}, {size}, "
                              f"{_sizes(out.layout.stride)})")
        return True
    # --8<-- [end:linear]

    def allocate(self, buffer: ComputedBuffer) -> None:
        """Print the line that gives ``buffer`` memory: a dead buffer of the same layout from
        ``self.pool`` if there is one (memory planning), else a new ``empty_strided``."""
        # BEGIN EXERCISE inductor-reuse-buffer: allocate a buffer, reusing a dead one
        key = pool_key(buffer.layout)
        if self.pool.get(key):
            old = self.pool[key].pop()
            self.lines.append(f"    {buffer.name} = {old}; del {old}  # reuse")
            return
        self.lines.append(f"    {buffer.name} = empty_strided({key[0]}, {key[1]}, "
                          f"device={self.device_name(key[3])}, dtype={key[2]})")
        # END EXERCISE inductor-reuse-buffer

    def device_name(self, device: str) -> str:
        """The module-level name the wrapper gives ``device`` (``device_cuda_0``, defined
        once as ``torch.device('cuda:0')``): an allocation that built its ``torch.device``
        anew paid about 0.7 us for it on the H200's host, and a convnet step makes 85."""
        name = "device_" + re.sub(r"\W", "_", device)
        self.devices[name] = device
        return name

    def free(self, name: str) -> None:
        buffer = self.graph_buffer(name)
        if name in self.outputs or isinstance(buffer, InputBuffer) or name in self.removed:
            return
        if (isinstance(buffer, ComputedBuffer) or name in self.fresh) and \
                name not in self.extern_read:
            self.pool.setdefault(pool_key(buffer.layout), []).append(name)
        elif isinstance(buffer, (ComputedBuffer, ExternBuffer)):
            self.lines.append(f"    del {name}")

    # --8<-- [start:size-bindings]
    def size_bindings(self) -> list[str]:
        """``s0 = arg0.size(1)``: every size symbol the graph uses, read from the first input
        that has it as a dim (or from a size argument). See [Note: sizes as kernel
        arguments]."""
        # BEGIN EXERCISE inductor-size-bindings: read every size symbol from the inputs
        lines, bound = [], set()
        for arg in self.graph.graph_inputs:
            if isinstance(arg, SizeArg):
                dims = [(arg.expr, arg.name)]
            else:
                dims = [(size, f"{arg.name}.size({d})") for d, size in enumerate(arg.layout.size)]
            for size, read in dims:
                if is_size_symbol(size) and size not in bound:
                    bound.add(size)
                    lines.append(f"    {size} = {read}")
        missing = [s for s in self.used_symbols() if s not in bound]
        if missing:
            raise CompileError(f"size {missing[0]} is not a dim of any input, so the wrapper "
                               "cannot compute it")
        return lines
        # END EXERCISE inductor-size-bindings
    # --8<-- [end:size-bindings]

    def used_symbols(self) -> list[sympy.Symbol]:
        exprs = [e for b in self.graph.buffer_by_name.values()
                 for e in (*b.layout.size, *b.layout.stride)]
        exprs += [e for k in self.kernels.values() for e in k.size_args()]
        exprs += [o for o in self.graph.graph_outputs if isinstance(o, sympy.Expr)]
        exprs += [a for g in self.groups if isinstance(g, ExternNode) for a in
                  torch.utils._pytree.tree_leaves((g.kernel.args, g.kernel.kwargs))
                  if isinstance(a, sympy.Expr)]
        return size_symbols(exprs)

    def graph_buffer(self, name: str) -> Buffer | None:
        return self.graph.buffer_by_name.get(name)

    def last_uses(self) -> dict[str, int]:
        """Buffer name -> the last step that reads or writes it."""
        last: dict[str, int] = {}
        for step, group in enumerate(self.groups):
            if isinstance(group, FusedGroup):
                names = self.kernels[step].args if step in self.kernels else []  # (finished
            else:  # by the kernel before: [Note: the last program finishes])
                names = group.kernel.input_names() + [o.name for o in group.kernel.buffers()]
            for name in names:
                last[name] = step
        return last


# --8<-- [start:fallback-wrapper]
def fallback_wrapper_source(num_inputs: int) -> str:
    """The fallback target: run the prims graph op by op (prims have eager kernels)."""
    args = ", ".join(f"arg{i}" for i in range(num_inputs))
    return "\n".join([
        "# Wrapper generated by minipt2 inductor (target: fallback): no kernels, the prims",
        "# graph runs op by op on the inputs' device. Chapter: book/docs/inductor.md.",
        "",
        f"def call({args}):",
        f"    out = prims_graph({args})",
        "    return tuple(out) if isinstance(out, (list, tuple)) else (out,)",
    ]) + "\n"
# --8<-- [end:fallback-wrapper]
