"""compile_fx: the inductor entry points, and the pipeline they run.

Input: ``compile_fx(gm, example_inputs)``: a torch-level FX graph (the dynamo backend
contract); it goes through ``aotautograd.aot_module_simplified`` with primtorch's
decompositions, which hands a prims graph to ``compile_fx_inner``.
``compile_fx_inner(prims_gm, example_inputs, target=...)``: a prims graph whose inputs are
flat tensors.
Output: a callable taking the flat tensor arguments and returning a tuple, with
``.artifacts`` (ordered: prims_graph, loop_ir, fusion, kernels/<name>, wrapper) and
``.kernel_count``.

Chapter: book/docs/inductor.md ("The pipeline").

The pipeline, one line per stage:
GraphLowering (prims -> loop IR) -> Scheduler (fusion groups) -> one printer per group
(Triton or C++ kernel source) -> code cache (load) -> WrapperCodeGen (the ``call`` module).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import operator
import os
import time
import warnings
from collections.abc import Callable, MutableMapping
from typing import Any

import sympy
import torch
import torch.fx

from inductor import mm_template, sizevars
from inductor.autotune import Autotuner, can_time, default_reduction_configs
from inductor.codecache import CppCodeCache, TritonCodeCache, exec_python_source
from inductor.codegen.cpp import generate_cpp_kernel
from inductor.codegen.last_program import COUNTER, PARTIALS, finished_by_last_program
from inductor.codegen.triton import KernelSource, generate_triton_kernel, interpreting
from inductor.codegen.triton_template import generate_mm_template
from inductor.codegen.wrapper import WrapperCodeGen, fallback_wrapper_source
from inductor.constant_folding import fold_constants
from inductor.cudagraphs import CudaGraphRunner, wants_cudagraphs
from inductor.exc import CompileError
from inductor.graph import GraphLowering, align_library_args
from inductor.inplace import inplace_writes
from inductor.ir import Buffer, ComputedBuffer
from inductor.later import build_later
from inductor.launcher import Launcher, LaunchSite, precompile
from inductor.linear import fold_bias_adds
from inductor.mm_template import TemplateGroup, use_templates
from inductor.scheduler import FusedGroup, Scheduler

TARGETS = ("triton", "cpp", "fallback")
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
AUTOTUNE_MODES = ("max-autotune", "max-autotune-no-cudagraphs")  # [Note: autotuning]


# --8<-- [start:artifacts]
# [Note: texts printed when read]
# Every compile files one text per stage (``artifacts``): the CLI prints them, the logs and
# the debug folder write them, the tests read them. Most compiles are never asked for one,
# and printing an FX graph of thousands of nodes as Python takes a good part of a second:
# a 12-layer GPT's forward, backward and joint graphs took 0.19 s of a 3.2 s first call
# with warm caches on the 2-core CPU machine. So a graph's text is filed as the function
# that prints it, and printed at its first read, once. The graphs are not changed after
# they are filed (the op-by-op path, which inserts alignment copies, prints first).
class Artifacts(MutableMapping):
    """A stage text per key, in the order filed; ``later(key, make)`` files ``make()``,
    called at the first read. ``copy()`` shares the texts not yet printed."""

    def __init__(self, items: Any = ()) -> None:
        self._items: dict[str, Any] = dict(items._items if isinstance(items, Artifacts)
                                           else items)

    def later(self, key: str, make: Callable[[], str]) -> None:
        self._items[key] = _Printed(make)

    def share(self, key: str, other: Artifacts, other_key: str) -> None:
        """File ``other``'s entry (printed or not) under ``key``: printed once for both."""
        self._items[key] = (other._items[other_key] if isinstance(other, Artifacts)
                            else other[other_key])

    def __getitem__(self, key: str) -> str:
        value = self._items[key]
        return value() if isinstance(value, _Printed) else value

    def __contains__(self, key: object) -> bool:  # without printing anything
        return key in self._items

    def __setitem__(self, key: str, value: str) -> None:
        self._items[key] = value

    def __delitem__(self, key: str) -> None:
        del self._items[key]

    def __iter__(self):
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def copy(self) -> Artifacts:
        return Artifacts(self)


class _Printed:
    """A text made by ``make()`` at the first call, then kept."""

    def __init__(self, make: Callable[[], str]) -> None:
        self.make: Callable[[], str] | None = make
        self.text = ""

    def __call__(self) -> str:
        if self.make is not None:
            self.text, self.make = self.make(), None
        return self.text


def graph_text(gm: torch.fx.GraphModule) -> Callable[[], str]:
    return lambda: gm.print_readable(print_output=False)
# --8<-- [end:artifacts]


class CompiledGraph:
    """The compiled graph: call it with the flat tensor args; it returns a tuple."""

    def __init__(self, call: Callable[..., tuple], artifacts: MutableMapping[str, str],
                 kernel_count: int) -> None:
        self.call, self.artifacts, self.kernel_count = call, artifacts, kernel_count
        self.output_strides: list[tuple[int, ...] | None] = []  # per output, when static
        self.prims_graph_module: torch.fx.GraphModule | None = None
        # prims-graph node name -> number of the kernel that computes it (for pictures)
        self.kernel_groups: dict[str, int] = {}
        self.autotuners: dict[str, Autotuner] = {}  # mode="max-autotune": kernel name -> tuner

    def __call__(self, *args: torch.Tensor) -> tuple:
        return self.call(*args)


def default_target(example_inputs: list[Any], gm: torch.fx.GraphModule | None = None) -> str:
    """Triton for CUDA inputs, C++ for CPU inputs, and the fallback for any other device
    (Apple MPS, ...): no printer writes kernels for it, but the prims run there op by op.
    A graph without tensor inputs goes by the device its factories name (``factory_device``)."""
    devices = {t.device.type for t in example_inputs if isinstance(t, torch.Tensor)}
    if not devices and gm is not None:
        devices = {factory_device(gm).type}
    if devices == {"cuda"} and torch.cuda.is_available():
        return "triton"
    return "cpp" if devices <= {"cpu"} else "fallback"


# [Note: a graph without inputs]
# A graph can take no tensor at all: Funnel's positional embeddings are computed from
# ``torch.arange(..., device=...)`` and numbers alone, in a frame of their own. Its device
# was taken from its inputs, so it had none and was the CPU's: the C++ target compiled the
# graph, the factories (which name CUDA) ran as library calls on the GPU, and a C++ loop
# read their GPU memory from the host, which crashed the process on the H200. Such a graph
# runs where its factories put their tensors: the first device other than the CPU that one
# of them names (a CPU scalar beside CUDA tensors is still a library call), else the CPU.
def factory_device(gm: torch.fx.GraphModule) -> torch.device:
    """The device a graph without tensor inputs computes on ([Note: a graph without
    inputs])."""
    named = [torch.device(d) for node in gm.graph.nodes
             if isinstance(d := node.kwargs.get("device"), (torch.device, str))]
    return next((d for d in named if d.type not in ("cpu", "meta")), torch.device("cpu"))


def check_target(target: Any) -> str:
    if target not in TARGETS:
        raise ValueError(f"inductor: target must be one of {TARGETS}, got {target!r}")
    return target


def check_mode(mode: Any) -> str:
    if mode not in MODES:
        raise ValueError(f"inductor: mode must be one of {MODES}, got {mode!r}")
    return mode


def direct_launches() -> bool:
    """Launch Triton kernels through ``Launcher`` ([Note: direct launches]): on a GPU, unless
    ``MINIPT2_DIRECT_LAUNCH=0``. (Under the interpreter it would only add a layer.)"""
    return not interpreting() and os.environ.get("MINIPT2_DIRECT_LAUNCH", "1") != "0"


def tuned_kernels(kernels: Any, target: str, autotune: bool) -> frozenset[str]:
    """The kernels launched through an ``Autotuner``: under max-autotune, every Triton kernel
    with more than one candidate config (a matmul template keeps only its winner); in the
    other modes, with ``MINIPT2_TUNE_REDUCTIONS=1`` on a GPU, the reductions over
    static sizes ([Note: tuning reductions by default])."""
    if target != "triton":
        return frozenset()
    if autotune:  # (a template keeps the one config that won against the library)
        return frozenset(k.name for k in kernels if len(k.configs) > 1)
    if os.environ.get("MINIPT2_TUNE_REDUCTIONS", "0") != "1" or not can_time():
        return frozenset()
    names = set()
    for kernel in kernels:
        # a kernel over symbolic sizes would be timed again at every new size: not by default
        # (a kernel whose last program finishes was printed for its one block size)
        if kernel.rnumel is not None and not kernel.size_vars and kernel.finishes is None:
            kernel.configs = default_reduction_configs(kernel)
            if len(kernel.configs) > 1:
                names.add(kernel.name)
    return frozenset(names)


@sizevars.for_graph  # symbolic sizes: [Note: sizes as kernel arguments]
def compile_fx_inner(prims_gm: torch.fx.GraphModule, example_inputs: list[Any], *,
                     target: str | None = None, mode: str = "default",
                     later: bool = True) -> CompiledGraph:
    """Compile a prims graph for ``target`` ("triton", "cpp", "fallback"; default: by device).
    ``mode="max-autotune"`` launches Triton kernels through ``autotune.Autotuner``. ``later``:
    the default mode may build templates behind the library ([Note: a template untimed,
    compiled behind the library])."""
    target = check_target(target or default_target(example_inputs, prims_gm))
    if target != "fallback" and tensor_constants(prims_gm):  # [Note: tensor constants]
        return compile_with_constants(prims_gm, example_inputs, target, mode)
    autotune = check_mode(mode) in AUTOTUNE_MODES and target == "triton"
    artifacts = Artifacts()  # [Note: texts printed when read]
    artifacts.later("prims_graph", graph_text(prims_gm))
    if target == "fallback":
        artifacts["prims_graph"] = artifacts["prims_graph"]  # before the alignment copies
        source = fallback_wrapper_source(len(example_inputs))
        artifacts["wrapper"] = source
        scope = exec_python_source(source, "wrapper", "call",
                                   {"prims_graph": align_library_args(prims_gm)})
        call = fresh_constants(scope["call"], prims_gm, tensor_constants(prims_gm))
        return CompiledGraph(call, artifacts, 0)
    devices = {t.device.type for t in example_inputs if isinstance(t, torch.Tensor)}
    if target == "cpp" and devices - {"cpu"}:
        raise CompileError(f"target 'cpp' runs on CPU tensors, got inputs on {sorted(devices)}")
    clock = Stopwatch()
    host_counts = mm_template.launched_from_host(mode, example_inputs)
    texts = Artifacts() if target == "triton" and not autotune and later else artifacts
    lowered = lower_and_print(prims_gm, example_inputs, target, clock, texts,
                              templates=target == "triton" and (autotune or later),
                              timed=autotune, host_counts=host_counts)
    graph, scheduler, kernels = lowered
    templates = None  # [Note: a template untimed, compiled behind the library]
    if texts is not artifacts:
        if any(isinstance(g, TemplateGroup) for g in scheduler.groups):
            templates = _prepare_templates(prims_gm, lowered, target)
            library = Artifacts()
            graph, scheduler, kernels = lower_and_print(prims_gm, example_inputs, target,
                                                        clock, library)
            texts = texts if templates is not None else library
        for key in texts:
            artifacts.share(key, texts, key)
    try:
        namespace, wrapper, tuned = prepare_wrapper(prims_gm, graph, scheduler, kernels,
                                                    target, autotune, clock)
        source = wrapper.generate()
    except CompileError as e:  # [Note: compile errors fall back]; also a size the wrapper
        warnings.warn(f"inductor: {e}\nRunning this graph op by op (target 'fallback').",
                      stacklevel=2)  # cannot compute from its inputs
        return compile_fx_inner(prims_gm, example_inputs, target="fallback")
    artifacts["library_wrapper" if templates else "wrapper"] = source
    if templates:
        artifacts["wrapper"] = templates[0]
    call, autotuners = finish_wrapper(source, namespace, wrapper, kernels, graph, tuned,
                                      target, clock)
    if wants_cudagraphs(mode, example_inputs):  # [Note: static addresses]
        call = CudaGraphRunner(call, name=f"graph of {len(kernels)} kernels")
    clock.lap("wrapper")
    artifacts["timing"] = clock.report()
    result = CompiledGraph(call, artifacts, len(kernels))
    result.autotuners = autotuners
    result.prims_graph_module = prims_gm
    result.kernel_groups = kernel_groups(graph, scheduler, kernels)
    result.output_strides = output_strides(graph.graph_outputs)
    if templates:
        result.kernel_count = len(templates[3])
        build_later(result, lambda: finish_wrapper(*templates)[0], example_inputs)
    return result


def _prepare_templates(prims_gm: torch.fx.GraphModule, lowered: tuple, target: str
                       ) -> tuple | None:
    """``finish_wrapper``'s arguments for the version with templates (its source first), all
    but the compiling done; None where its wrapper cannot be printed. See [Note: a template
    untimed, compiled behind the library]."""
    graph, scheduler, kernels = lowered
    clock = Stopwatch()  # (the graph's own clock times the version that serves first)
    try:
        namespace, wrapper, tuned = prepare_wrapper(prims_gm, graph, scheduler, kernels,
                                                    target, False, clock)
        source = wrapper.generate()
    except CompileError:
        return None  # the library's version then serves alone
    return source, namespace, wrapper, kernels, graph, tuned, target, clock


def prepare_wrapper(prims_gm: torch.fx.GraphModule, graph: GraphLowering, scheduler: Any,
                    kernels: dict, target: str, autotune: bool, clock: Stopwatch) -> tuple:
    """(the kernels' namespace, the wrapper's printer, the tuned kernels' names)."""
    namespace = load_kernels(list(kernels.values()), target)
    clock.lap("building kernels (Triton JIT happens at the first launch)" if
              target == "triton" else "building kernels (g++, or the code cache)")
    tuned = tuned_kernels(kernels.values(), target, autotune)
    inplace = inplace_writes(prims_gm.meta.get("input_mutations", ()), graph,
                             scheduler.groups, scheduler.removed, target)
    wrapper = WrapperCodeGen(graph, scheduler.groups, scheduler.removed, kernels, target,
                             tuned, inplace)
    return namespace, wrapper, tuned


def finish_wrapper(source: str, namespace: dict[str, Any], wrapper: WrapperCodeGen,
                   kernels: dict, graph: GraphLowering, tuned: frozenset, target: str,
                   clock: Stopwatch) -> tuple[Callable[..., tuple], dict]:
    """(the wrapper's ``call``, the autotuners): kernels precompiled and bound, the source
    executed."""
    namespace, autotuners = bind_launchers(namespace, kernels, graph, tuned, target, clock)
    namespace.update(wrapper.constants)
    scope = exec_python_source(source, "wrapper", "call", namespace)
    for name, value in scope.items():  # [Note: a launch site as one function]
        if isinstance(value, LaunchSite):
            value.home = (scope, name)
    return scope["call"], autotuners


def lower_and_print(prims_gm: torch.fx.GraphModule, example_inputs: list[Any], target: str,
                    clock: Stopwatch, artifacts: MutableMapping[str, str],
                    templates: bool = False, timed: bool = False, host_counts: bool = True
                    ) -> tuple:
    """Lowering, fusion and kernel printing: (graph, scheduler, kernels by name), each
    stage's text filed in ``artifacts`` and its time on ``clock``. ``templates``: matrix
    multiplies may become Triton templates, timed against the library when ``timed``
    ([Note: template or library]), else by [Note: a template untimed, compiled behind the
    library]; ``host_counts``:
    their launches' host time counts in that choice (not under CUDA graphs, [Note: a
    launch's cost on the host])."""
    graph = GraphLowering(prims_gm, example_inputs)
    graph.run(*example_inputs)
    clock.lap("lowering (prims -> loop IR)")
    artifacts["loop_ir"] = "\n\n".join(op.describe() for op in graph.operations)
    outputs = {o.name for o in graph.graph_outputs if isinstance(o, Buffer)}
    scheduler = Scheduler(graph.operations, outputs, graph.origins)
    if templates:
        if timed:
            clock.lap("scheduling (fusion)")
        scheduler.groups = use_templates(scheduler.groups, graph.buffer_by_name,
                                         scheduler.removed, outputs, scheduler.log,
                                         host_counts, timed)
    scheduler.groups = fold_bias_adds(scheduler.groups, outputs, scheduler.log,
                                      graph.buffer_by_name, scheduler.removed)  # [Note: linear]
    clock.lap("choosing template or library for each matrix multiply" if templates and timed
              else "scheduling (fusion)")
    kernels = generate_kernels(scheduler, graph, target)
    if target == "triton" and os.environ.get("MINIPT2_LAST_PROGRAM", "1") != "0":
        kernels = finished_by_last_program(scheduler.groups, kernels, outputs, scheduler.log)
    artifacts["fusion"] = "\n".join(_describe_groups(scheduler) + [""] + scheduler.log)
    clock.lap(f"printing {len(kernels)} kernels")
    suffix = "py" if target == "triton" else "cpp"
    artifacts.update({f"kernels/{k.name}.{suffix}": k.source for k in kernels.values()})
    return graph, scheduler, kernels


def bind_launchers(namespace: dict[str, Any], kernels: dict, graph: GraphLowering,
                   tuned: frozenset, target: str, clock: Stopwatch) -> tuple[dict, dict]:
    """The wrapper's namespace with each Triton kernel behind what launches it: precompiled
    ([Note: parallel precompile]), a ``Launcher`` ([Note: direct launches]) or an
    ``Autotuner``; (namespace, autotuners by kernel name)."""
    if target == "triton" and not interpreting():
        jobs = precompile_jobs(kernels.values(), namespace, graph, tuned)
        clock.lap(f"compiling {precompile(jobs)} Triton variants on threads")
    if target == "triton" and direct_launches():
        pointers = fixed_dtype_pointers(kernels.values(), graph)
        namespace.update({k.name: Launcher(namespace[k.name], pointers.get(k.name))
                          for k in kernels.values()})
    autotuners = {k.name: Autotuner(namespace[k.name], k) for k in kernels.values()
                  if k.name in tuned}
    namespace.update(autotuners)
    return namespace, autotuners


# [Note: tensor constants]
# A tensor made inside the traced code from Python values, ``torch.tensor(d_head) ** 0.5``
# (DeBERTa scales its attention so), is no input of the graph: tracing stores it on the graph
# module as an attribute (``_tensor_constant0``) that a ``get_attr`` node reads. First, what
# the constants alone decide is computed now ([Note: constant folding]), and a 0-dim result
# becomes a number in the kernels. The lowering turns inputs into buffers and knows nothing of
# attributes, so every ``get_attr`` left then becomes one more placeholder, and the compiled
# call passes the tensors it holds after the caller's arguments. (PyTorch's inductor keeps
# constants as named attributes of its generated module instead; passing them is the same
# thing, printed differently.) A constant with dims on another device than the graph's
# inputs is a compile error, and dynamo runs its frame eagerly with one warning: the ops that
# read it are traced on its device, the buffers the wrapper would give them too, and a
# Triton kernel cannot reach host memory. (DeBERTa's CPU scalar was such a constant before
# folding; run op by op, its training step took 4.5 times eager's time on the H200.)
def tensor_constants(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The ``get_attr`` nodes of ``gm`` that read a tensor."""
    return [n for n in gm.graph.nodes if n.op == "get_attr"
            and isinstance(operator.attrgetter(n.target)(gm), torch.Tensor)]


def compile_with_constants(prims_gm: torch.fx.GraphModule, example_inputs: list[Any],
                           target: str, mode: str) -> CompiledGraph:
    """``compile_fx_inner`` of ``prims_gm`` with its constants folded and the tensors left
    lifted to inputs that the compiled call passes itself; a CompileError if one of those
    lives off the inputs' device."""
    devices = {t.device for t in example_inputs if isinstance(t, torch.Tensor)}
    kernels_device = next((t.device for t in example_inputs if isinstance(t, torch.Tensor)),
                          None) or factory_device(prims_gm)  # as GraphLowering.device() says
    fold_constants(prims_gm, kernels_device)  # [Note: constant folding]
    allowed = devices or {kernels_device}
    for node in tensor_constants(prims_gm):
        value = operator.attrgetter(node.target)(prims_gm)
        if value.device not in allowed and any(u.op != "output" for u in node.users):
            raise CompileError(
                f"a tensor made in the traced code lives on {value.device}, not on the device "
                f"of the graph's inputs ({node.target}: {tuple(value.shape)} {value.dtype}, "
                f"read by {', '.join(str(u.target) for u in node.users) or 'nothing'})")
    values = lift_tensor_constants(prims_gm)
    inner = compile_fx_inner(prims_gm, [*example_inputs, *values], target=target, mode=mode,
                             later=False)  # (its call is wrapped below, once)
    call = inner.call
    placeholders = [n for n in prims_gm.graph.nodes if n.op == "placeholder"]
    inner.call = fresh_constants(lambda *args: call(*args, *values), prims_gm,
                                 placeholders[len(example_inputs):])
    return inner


# [Note: a constant the graph returns]
# A tensor made in the traced code can leave the graph as it is: a value live across a graph
# break (transformers' MoE layers keep a 0-dim ``torch.tensor(0)`` on the CPU there), or a
# returned one. Eager makes it anew at every call; the compiled call passes the same lifted
# tensor every time, so returning it would hand each call one object, and a write into it
# (``c.add_(5)``) would show in the next call's result. Such an output is cloned per call. And
# since no kernel reads it, it may live on another device than the inputs (the CPU beside a
# CUDA graph), which otherwise is a compile error ([Note: tensor constants]). A constant is a
# tensor made anew at every call only as dynamo hands it over; a hand-traced module's plain
# tensor attribute, returned untouched, is one too by now, and its copy is no longer the
# attribute (dynamo passes such a tensor as an input, whose identity is kept).
def fresh_constants(call: Callable[..., Any], gm: torch.fx.GraphModule,
                    constants: list[torch.fx.Node]) -> Callable[..., Any]:
    """``call``, with each output of ``gm`` that is one of the ``constants`` nodes cloned at
    every call ([Note: a constant the graph returns])."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    returned: dict[torch.fx.Node, list[int]] = {}  # a constant returned twice is one tensor
    for i, a in enumerate(output.args[0]):
        if a in constants:
            returned.setdefault(a, []).append(i)
    if not returned:
        return call

    def fresh(*args: Any) -> tuple:
        outputs = list(call(*args))
        for positions in returned.values():
            copy = outputs[positions[0]].clone()
            for i in positions:
                outputs[i] = copy
        return tuple(outputs)
    return fresh


def lift_tensor_constants(gm: torch.fx.GraphModule) -> list[torch.Tensor]:
    """Turn each tensor ``get_attr`` of ``gm`` into a placeholder after the others (in
    place); returns the tensors, in the new placeholders' order."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    values = []
    for i, node in enumerate(tensor_constants(gm)):
        value = operator.attrgetter(node.target)(gm).detach()
        anchor = (gm.graph.inserting_after(placeholders[-1]) if placeholders
                  else gm.graph.inserting_before(next(iter(gm.graph.nodes))))
        with anchor:
            lifted = gm.graph.placeholder(f"constant{i}")
        lifted.meta.update(node.meta)  # "val": the shape and strides (on "meta")
        node.replace_all_uses_with(lifted)
        gm.graph.erase_node(node)
        placeholders.append(lifted)
        values.append(value)
    gm.recompile()
    return values


def output_strides(outputs: list[Any]) -> list[tuple[int, ...] | None]:
    """The strides each output of the compiled graph will have, where they are numbers
    (None for a non-tensor output or symbolic strides): what the backward graph's kernels
    must assume of a saved value ([Note: saved values in their real strides] in
    aotautograd)."""
    strides = []
    for out in outputs:
        layout = getattr(out, "layout", None) if isinstance(out, Buffer) else None
        try:
            strides.append(tuple(int(s) for s in layout.stride) if layout else None)
        except TypeError:  # a symbolic stride
            strides.append(None)
    return strides


def precompile_jobs(kernels: Any, namespace: dict[str, Any], graph: GraphLowering,
                    tuned: frozenset[str]) -> list[tuple[Any, tuple, dict[str, Any]]]:
    """What ``launcher.precompile`` compiles: per kernel over static sizes, its arguments
    (a dtype per buffer) under each launch config it may get; ``MINIPT2_PRECOMPILE=0``: none
    (every kernel compiles at its first launch)."""
    if os.environ.get("MINIPT2_PRECOMPILE", "1") == "0":
        return []
    jobs: dict[tuple, tuple[Any, tuple, dict[str, Any]]] = {}
    for kernel in kernels:
        dtypes, sizes = arg_dtypes(kernel, graph), kernel.size_args()
        if dtypes is None or not all(isinstance(s, (int, sympy.Integer)) for s in sizes):
            continue  # a symbolic size: compiled at the first launch, for the sizes it meets
        args = (*dtypes, *map(int, sizes))
        for config in kernel.configs if kernel.name in tuned else [kernel.launch]:
            jobs[kernel.name, args, tuple(config.items())] = (namespace[kernel.name], args,
                                                              dict(config))
    return list(jobs.values())  # (a kernel shared by equal loops: once per variant)


def arg_dtypes(kernel: KernelSource, graph: GraphLowering) -> tuple | None:
    """The dtype of each buffer ``kernel`` takes (the counters and partials of [Note: the
    last program finishes] are int32s), or None where one is not a buffer of ``graph``."""
    buffers = [graph.buffer_by_name.get(name) for name in kernel.args]
    dtypes = [torch.int32 if name in (COUNTER, PARTIALS) else None if b is None else b.get_dtype()
              for name, b in zip(kernel.args, buffers)]
    return None if None in dtypes else tuple(dtypes)


def fixed_dtype_pointers(kernels: Any, graph: GraphLowering) -> dict[str, int]:
    """Kernel name -> how many buffers it takes, for the kernels that every launch in the
    wrapper passes buffers of the same dtypes ([Note: keys without dtypes] in launcher.py)."""
    signatures: dict[str, set[tuple | None]] = {}
    for kernel in kernels:
        signatures.setdefault(kernel.name, set()).add(arg_dtypes(kernel, graph))
    counts = {kernel.name: len(kernel.args) for kernel in kernels}
    return {name: counts[name] for name, found in signatures.items()
            if len(found) == 1 and None not in found}


class Stopwatch:
    """Seconds per compilation step, for the ``timing`` artifact (``MINIPT2_LOGS=timing``)."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.laps: list[tuple[str, float]] = []

    def lap(self, what: str) -> None:
        now = time.perf_counter()
        self.laps.append((what, now - self.last))
        self.last = now

    def report(self) -> str:
        lines = [f"{seconds:8.3f} s  {what}" for what, seconds in self.laps]
        return "\n".join([*lines, f"{self.last - self.start:8.3f} s  inductor in all"])


def generate_kernels(scheduler: Scheduler, graph: GraphLowering, target: str) -> dict:
    """Scheduler step -> the printed kernel of each fused group; see [Note: one kernel for
    equal loops]."""
    kernels: dict[int, Any] = {}
    first_of: dict[str, KernelSource] = {}  # a kernel's code, name left out -> first kernel
    generate = generate_triton_kernel if target == "triton" else generate_cpp_kernel
    for step, group in enumerate(scheduler.groups):
        if isinstance(group, FusedGroup):
            printer = generate_mm_template if isinstance(group, TemplateGroup) else generate
            kernel = printer(group, scheduler.removed, graph.buffer_by_name, len(kernels))
            first = first_of.setdefault(_code_of(kernel), kernel)
            if first is not kernel:  # launched as the first, with this group's buffers
                kernel = dataclasses.replace(kernel, name=first.name, source=first.source)
            kernels[step] = kernel
    return kernels


# --8<-- [start:equal-loops]
# [Note: one kernel for equal loops]
# A transformer repeats its layers, so most of a training graph's kernels are printed more
# than once: GPT-2 small's twelve blocks gave 153 kernels and only about 40 different ones.
# The printer names each kernel after its position and heads it with comments naming its
# buffers, but the parameters are positional (``in_ptr0``, ``out_ptr0``, ...), so two
# kernels whose code agrees once the name and the comments are left out compute the same
# function of their arguments. The later one is launched as the first (same name, same
# source, its own buffers as arguments): one module, one compile, one cache entry. On the
# GPU that divides the kernels Triton compiles by three; on the CPU, the g++ runs.
def _code_of(kernel: KernelSource) -> str:
    """The kernel's source without its comment lines and with its name blanked."""
    lines = [line for line in kernel.source.splitlines()
             if not line.lstrip().startswith(("#", "//"))]
    return "\n".join(lines).replace(kernel.name, "KERNEL")
# --8<-- [end:equal-loops]


# --8<-- [start:load-kernels]
def load_kernels(kernels: list[Any], target: str) -> dict[str, Any]:
    """Kernel name -> loaded kernel. C++ kernels are built in parallel: each build is a
    compiler process, and the threads only wait for them.

    [Note: compile errors fall back]
    A kernel the C++ compiler rejects is a bug in a printer, but the user's program should
    still run: ``compile_fx_inner`` warns with the compiler's message and the source path
    (both in the ``CompileError``) and runs the graph op by op instead.
    """
    if target == "cpp" and len(kernels) > 1:
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            loaded = list(pool.map(lambda k: _load_kernel(k, target), kernels))
    else:
        loaded = [_load_kernel(k, target) for k in kernels]
    return {k.name: fn for k, fn in zip(kernels, loaded)}
# --8<-- [end:load-kernels]


def kernel_groups(graph: GraphLowering, scheduler: Scheduler, kernels: dict) -> dict[str, int]:
    """Which kernel computes each node of the prims graph.

    A node realized into a buffer belongs to that buffer's kernel (a group finished by the
    kernel before, [Note: the last program finishes], to that one); a node that was inlined
    (never stored) belongs to the kernel of its first user that has one.
    """
    kernel_of_buffer = {}
    for number, step in enumerate(sorted(kernels)):
        finished = kernels[step].finishes
        nodes = [*scheduler.groups[step].nodes, *(finished.nodes if finished else [])]
        kernel_of_buffer.update({node.name: number for node in nodes})
    groups: dict[str, int] = {}
    for node in reversed(list(graph.module.graph.nodes)):
        value = graph.env.get(node)
        name = getattr(value, "name", None)
        if node.op == "call_function" and name in kernel_of_buffer:
            groups[node.name] = kernel_of_buffer[name]
        elif node.op == "call_function" and not isinstance(value, Buffer):
            users = [groups[u.name] for u in node.users if u.name in groups]
            if users:
                groups[node.name] = users[0]
    return groups


def _load_kernel(kernel: Any, target: str) -> Any:
    if target == "triton":
        return TritonCodeCache.load(kernel.source, kernel.name)
    import ctypes

    fn = CppCodeCache.load(kernel.source, kernel.name)
    fn.argtypes = [ctypes.c_void_p] * len(kernel.args) + [ctypes.c_int64] * len(kernel.size_vars)
    return fn


def _sizes(sizes: list[Any]) -> str:
    return f"[{', '.join(str(s) for s in sizes)}]"


def _describe_groups(scheduler: Scheduler) -> list[str]:
    lines = []
    for group in scheduler.groups:
        if isinstance(group, TemplateGroup):
            epilogue = ", ".join(n.name for n in group.nodes) or "none"
            operands = ", ".join(group.mm.input_names())
            lines.append(f"template {group.mm.outputs[0].name} = mm({operands}), "
                         f"epilogue: {epilogue}")
        elif isinstance(group, FusedGroup):
            names = [n.name + (" (removed)" if n.name in scheduler.removed else "")
                     for n in group.nodes]
            reducing = (f", reducing {_sizes(group.reduction_ranges)}"
                        if group.is_reduction() else "")
            lines.append(f"kernel over {_sizes(group.ranges)}{reducing}: "
                         f"{', '.join(names)}")
        else:
            lines.append(f"library call {group.kernel.name}: {group.kernel.op}")
    return lines


# Set in ``gm.meta`` by a dynamo whose guards pin grad mode and every tensor input's
# ``requires_grad`` (ours does): aotautograd then skips its per-call dispatch ([Note: a
# signature the caller guards] in aot_autograd.py).
SIGNATURE_GUARDED = "signature_guarded"


def compile_fx(gm: torch.fx.GraphModule, example_inputs: list[Any], *,
               options: dict[str, Any] | None = None) -> Callable[..., tuple]:
    """A dynamo backend: torch-level graph -> aotautograd (prims) -> compile_fx_inner."""
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"inductor: options must be a dict, got {type(options).__name__}")
    options = dict(options or {})
    target = check_target(options.get("target") or default_target(example_inputs, gm))
    mode = check_mode(options.get("mode") or "default")
    import aotautograd
    import primtorch

    if not hasattr(aotautograd, "aot_module_simplified"):
        raise CompileError("inductor.compile_fx needs aotautograd.aot_module_simplified, "
                           "which this checkout does not have yet; call compile_fx_inner "
                           "on a prims graph instead")
    compiled: list[CompiledGraph] = []

    def fw_compiler(fw_gm: torch.fx.GraphModule, inputs: list[Any]) -> CompiledGraph:
        compiled.append(compile_fx_inner(fw_gm, inputs, target=target, mode=mode))
        return compiled[-1]

    started = time.perf_counter()
    fn = aotautograd.aot_module_simplified(
        gm, example_inputs, fw_compiler=fw_compiler, bw_compiler=fw_compiler,
        decompositions=inductor_decompositions(getattr(primtorch, "decomposition_table", {})),
        guarded=bool(getattr(gm, "meta", {}).get(SIGNATURE_GUARDED)))
    total = time.perf_counter() - started

    run = fn  # what dynamo calls: aotautograd's function itself, with the compile's records
    run.artifacts = _artifacts(fn, compiled)  # type: ignore[attr-defined]
    inner = sum(float(c.artifacts["timing"].splitlines()[-1].split()[0]) for c in compiled
                if "timing" in c.artifacts)
    run.artifacts["timing"] = (f"{total - inner:8.3f} s  aotautograd + primtorch (trace, "
                               f"decompose, partition)\n" +
                               "\n".join(c.artifacts.get("timing", "") for c in compiled))
    run.kernel_count = sum(c.kernel_count for c in compiled)  # type: ignore[attr-defined]
    run.compiled_graphs = compiled  # type: ignore[attr-defined]
    if compiled:
        run.prims_graph_module = compiled[0].prims_graph_module  # type: ignore[attr-defined]
        run.kernel_groups = compiled[0].kernel_groups  # type: ignore[attr-defined]
    return run


# [Note: attention on the CPU]
# primtorch writes the CPU's attention op, ``_scaled_dot_product_flash_attention_for_cpu``,
# and its backward in prims: two ``bmm`` calls with the scaled, masked softmax between them,
# which our kernels fuse. On the GPU that form is never met (the GPU ops stay library calls
# anyway). On the CPU it lost to the op it replaces: for the CPU suite's causal GPT (4 heads
# of 32 over 128 tokens) our softmax kernel took 1.15 ms per layer where PyTorch's blocked
# CPU kernel does the whole attention in 0.29 ms, skipping the masked half of the scores.
# Kept whole, gpt_infer went from 0.79x to 1.19x of eager and gpt_train from 0.95x to 1.22x
# on the 2-core CPU machine. So inductor leaves those two decompositions out of the table it
# hands aotautograd; the prims form stays primtorch's, tested there, for any other backend.
KEPT_WHOLE = frozenset(
    getattr(torch.ops.aten, name).default
    for name in ("_scaled_dot_product_flash_attention_for_cpu",
                 "_scaled_dot_product_flash_attention_for_cpu_backward")
    if hasattr(torch.ops.aten, name))


def inductor_decompositions(table: dict) -> dict:
    """primtorch's decompositions less the ones inductor does better without
    ([Note: attention on the CPU])."""
    return {op: fn for op, fn in table.items() if op not in KEPT_WHOLE}


def _artifacts(aot_fn: Any, compiled: list[CompiledGraph]) -> Artifacts:
    """The forward's artifacts; for training, aotautograd's graphs and the backward's too
    (keys ``backward/...``)."""
    artifacts = Artifacts()  # [Note: texts printed when read]
    # The forward and backward graphs are the prims graphs compile_fx_inner filed already;
    # their texts are shared, so that each is printed once if it is read at all.
    filed = {id(c.prims_graph_module): c.artifacts for c in compiled
             if c.prims_graph_module is not None and "prims_graph" in c.artifacts}
    if getattr(aot_fn, "bw_graph", None) is not None:  # training: a joint graph was split
        for key in ("joint_graph", "fw_graph", "bw_graph"):
            gm = getattr(aot_fn, key)
            if id(gm) in filed:
                artifacts.share(key, filed[id(gm)], "prims_graph")
            else:
                artifacts.later(key, graph_text(gm))
        artifacts["partition"] = aot_fn.partition.describe()
    for index, c in enumerate(compiled[:2]):
        for key in c.artifacts:
            artifacts.share(f"backward/{key}" if index else key, c.artifacts, key)
    return artifacts


__all__ = ["CompiledGraph", "compile_fx", "compile_fx_inner", "ComputedBuffer"]
