"""AOTAutograd's entry point with dynamo's backend contract: trace the captured graph (and,
when autograd would record it, its backward) down to aten ops and prims, partition, hand
the graphs to the compilers, and return something to call.

Input: ``gm`` (a GraphModule from dynamo, an ``nn.Module``, or any callable on tensors),
its example inputs, ``fw_compiler(gm, example_inputs) -> callable`` (and ``bw_compiler``,
by default the same), a decomposition table, and a partitioner ("min_cut" or "default").
Output: a callable taking the same flat inputs and returning a tuple of outputs; with
autograd on, the outputs carry a ``grad_fn`` that runs the compiled backward graph.

Chapter: book/docs/aotautograd.md ("aot_module_simplified").

The pipeline, one line per step: ``trace_program`` (joint.py: trace, functionalize, run the
autograd engine) -> a partitioner (partitioners.py: forward and backward graphs) ->
``fw_compiler`` / ``bw_compiler`` -> ``make_*_runtime`` (runtime.py). A program is traced
once per *signature* (is autograd recording, and which inputs and parameters require grad):
the graphs differ, so a call with a new signature compiles a new entry.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence

import torch
import torch.fx as fx
from dynamo.sym_node import find_env, has_symbolic_sizes, hint_int

from aotautograd.joint import Program, module_state, trace_program
from aotautograd.partitioners import PARTITIONERS, Partition
from aotautograd.proxy_tensor import DecompositionTable
from aotautograd.runtime import make_inference_runtime, make_training_runtime

log = logging.getLogger("minipt2.aotautograd")
Compiler = Callable[[fx.GraphModule, list], Callable]


def signature(primals: Sequence[object]) -> tuple:
    """Which compiled entry serves a call on ``primals`` (inputs, then parameters):
    "inference" unless eager autograd would record the call (grad mode on and something
    requires grad), else "training" and which primals require grad."""
    if not torch.is_grad_enabled():
        return ("inference",)
    requires_grad = [isinstance(x, torch.Tensor) and x.requires_grad for x in primals]
    return ("training", *requires_grad) if any(requires_grad) else ("inference",)


# --8<-- [start:aot-module-simplified]
def aot_module_simplified(
    gm: Callable,
    example_inputs: Sequence[object],
    fw_compiler: Compiler,
    bw_compiler: Compiler | None = None,
    decompositions: DecompositionTable | None = None,
    partitioner: str | Callable[[Program], Partition] = "min_cut",
    *,
    guarded: bool = False,
) -> Callable[..., tuple]:
    """Trace ``gm`` (with ``decompositions`` applied), partition the joint graph when
    autograd would record the call, compile the graphs, and return a function of the same
    flat inputs returning a tuple. ``guarded=True``: the caller guarantees every call has
    the example inputs' signature ([Note: a signature the caller guards])."""
    if not callable(gm):
        raise TypeError(f"aot_module_simplified: gm must be callable, got {type(gm).__name__}")
    if isinstance(partitioner, str) and partitioner not in PARTITIONERS:
        raise ValueError(f"partitioner={partitioner!r}: choose one of {sorted(PARTITIONERS)}")
    partition_fn = PARTITIONERS.get(partitioner, partitioner)
    state = state_reader(gm)  # the parameters and buffers, as they are at each call
    entries: dict[tuple, Callable] = {}

    metas = symbolic_inputs(gm, example_inputs)

    def entry_for(args: Sequence[object], primals: list) -> Callable:
        key = signature(primals)
        if key not in entries:
            entries[key] = compile_entry(gm, list(args), primals[len(args):],
                                         key[0] == "training", fw_compiler,
                                         bw_compiler or fw_compiler, decompositions,
                                         partition_fn, metas)
        return entries[key]

    first = entry_for(example_inputs, [*example_inputs, *state()])

    stateless = not state()  # a dynamo graph: its parameters are inputs already
    if guarded and stateless and not first.overlaps:
        first.entries = entries  # [Note: a signature the caller guards]
        return first

    def forward(*args: object) -> tuple:
        # read once per call: [Note: per-call cost]
        primals = args if stateless else [*args, *state()]
        run = entry_for(args, primals)
        if run.overlaps and written_input_overlaps(primals, run.overlaps):
            return run_eagerly(gm, args)  # [Note: a written input that another input sees]
        return run(*primals)

    for name in ("fw_graph", "bw_graph", "joint_graph", "partition", "program"):
        setattr(forward, name, getattr(first, name))  # for printing and tests
    forward.entries = entries
    return forward
# --8<-- [end:aot-module-simplified]


# [Note: a signature the caller guards]
# ``forward`` asks at every call which signature it has (grad mode, and which inputs require
# grad) to pick the entry compiled for it: a Python loop over the inputs, about 6 us a call
# under cProfile on the H200's host, three times a step in the graph_breaks benchmark (whose
# step time, noisier than that, did not move measurably without it). Dynamo already asks
# the same before it calls the graph at all: its guards pin grad mode and each tensor
# input's ``requires_grad``, and a call that differs compiles a graph of its own. So when
# the caller says so (``guarded=True``: inductor's ``compile_fx`` for a graph our dynamo
# marked), the entry of the example inputs is returned itself, with no dispatch around it;
# unless the program writes an input that another may share, which is checked per call.
# --8<-- [start:compile-entry]
def compile_entry(gm: Callable, args: list, state: list, train: bool, fw_compiler: Compiler,
                  bw_compiler: Compiler, decompositions: DecompositionTable | None,
                  partition_fn: Callable[[Program], Partition],
                  metas: list | None = None) -> Callable:
    """Trace, partition and compile the program for one signature."""
    with torch.enable_grad() if train else torch.no_grad():
        program = trace_program(gm, args, decompositions, train, metas)
    primals = [*args, *state]
    if not program.is_joint:
        # --8<-- [start:aot-inference]
        fw_gm = program.graph_module  # inference: one graph, no autograd.Function
        fw_gm.graph.eliminate_dead_code()  # decompositions leave unused pieces behind
        fw_gm.recompile()
        mark_input_mutations(fw_gm, program)
        run = make_inference_runtime(program, fw_compiler(fw_gm, primals))
        # --8<-- [end:aot-inference]
        run.fw_graph, run.bw_graph, run.joint_graph, run.partition = fw_gm, None, None, None
    else:
        partition = partition_fn(program)
        log.info("partition: %s", partition.describe())
        mark_input_mutations(partition.forward, program)
        compiled_fw = fw_compiler(partition.forward, primals)
        saved_in_real_strides(partition, getattr(compiled_fw, "output_strides", None))
        bw_inputs = [example_value(n) for n in partition.backward.graph.nodes
                     if n.op == "placeholder"]
        compiled_bw = bw_compiler(partition.backward, bw_inputs)
        run = make_training_runtime(program, partition, compiled_fw, compiled_bw)
        run.fw_graph, run.bw_graph = partition.forward, partition.backward
        run.joint_graph, run.partition = program.graph_module, partition
    run.program = program
    run.overlaps = overlap_checks(program, primals)
    return run
# --8<-- [end:compile-entry]


# [Note: a written input that another input sees]
# The traced program is functional: an input written in place gets its new value after the
# graph ran, and every read in the graph sees the old one. Eager reads the new value through
# any other tensor that shares the memory: ``f(x, x.view(4, 4))`` with ``a.add_(1)`` inside
# returns ``b`` plus one in eager. So when a call passes an argument that the program writes
# together with another tensor in the same storage, that call runs eagerly (one warning), as
# eager would. Only arguments written in place are checked, at every call, against the other
# tensor arguments; a module's own parameters and buffers, when the program reads them
# itself (``state_reader``), are not: the rare program that passes a view of its own buffer
# as an argument is not caught.
#
# The check is one pass: the storages of the written arguments go into a set, then every
# other tensor argument's storage is looked up in it. Under dynamo a module's buffers *are*
# arguments (the graph's placeholders), and a ResNet-50 training step writes 159 of them
# (BatchNorm's running mean, variance and step count) among 321 tensor arguments: comparing
# each written one with every other, as this check first did, asked for about 51,000
# storages per step; one pass asks for 321.
def overlap_checks(program: Program, primals: Sequence[object]) -> tuple:
    """(the arguments the program writes, the other tensor primals), what
    ``written_input_overlaps`` compares at every call; () when the program writes none."""
    written = [m for m in program.mutated_inputs if m < program.num_user_inputs]
    others = [i for i, p in enumerate(primals)
              if isinstance(p, torch.Tensor) and i not in written]
    return (written, others) if written else ()


def written_input_overlaps(primals: Sequence[object],
                           checks: tuple[list[int], list[int]]) -> bool:
    """Whether a written argument shares its storage with another tensor primal (storages
    of no bytes share nothing: their address is 0)."""
    written, others = checks
    storages: set[int] = set()
    for i in written:
        address = primals[i].untyped_storage().data_ptr()
        if address in storages and address:
            return True  # two written arguments in one storage
        storages.add(address)
    storages.discard(0)
    return any(primals[i].untyped_storage().data_ptr() in storages for i in others)


def run_eagerly(gm: Callable, args: Sequence[object]) -> tuple:
    """The call as eager runs it, flat like the compiled program's outputs."""
    warnings.warn("aotautograd: an argument written in place shares memory with another "
                  "input; running this call eagerly ([Note: a written input that another "
                  "input sees])", stacklevel=3)
    return tuple(torch.utils._pytree.tree_leaves(gm(*args)))


def mark_input_mutations(fw_gm: torch.fx.GraphModule, program: Program) -> None:
    """Tell the compiler which forward outputs are new values of which inputs:
    ``fw_gm.meta["input_mutations"]``, pairs (output position, input position). A compiler
    may store such a value into the input's memory and return the input itself; the
    runtime then skips its copy ([Note: inputs written in place] in runtime.py)."""
    fw_gm.meta["input_mutations"] = [(p, i) for p, i in enumerate(program.mutated_inputs)
                                     if p not in program.differentiable]


def state_reader(gm: Callable) -> Callable[[], list[torch.Tensor]]:
    """A function returning ``gm``'s parameters and buffers as they are now: one per
    distinct tensor (a tied weight once), in ``module_state``'s order, the order in which
    ``trace_program`` lifts them to primals.

    The names are found once, here; a call looks each one up along its path of submodules
    (``blocks.0.attn.weight``: three dict lookups, then the owner's ``_parameters``). So a
    parameter or buffer the user replaces (``model.fc.weight = nn.Parameter(...)``), or a
    submodule, is read at the next call, as before, without walking ``named_parameters()``
    at every call, which cost ~95% of the wrapper's time on a small GPT
    ([Note: per-call cost])."""
    first_names = {}  # id -> the first name that reaches the tensor
    for name, tensor in module_state(gm).items():
        first_names.setdefault(id(tensor), name)
    paths = [name.split(".") for name in first_names.values()]

    def read(path: list[str]) -> torch.Tensor:
        module = gm
        for part in path[:-1]:
            module = module._modules[part]
        tensor = module._parameters.get(path[-1])
        return tensor if tensor is not None else module._buffers[path[-1]]

    def state() -> list[torch.Tensor]:
        return [read(path) for path in paths]

    return state


# --8<-- [start:saved-strides]
# [Note: saved values in their real strides]
# The backward graph is compiled before the forward ever runs, from the meta tensors of the
# trace, so its kernels assume each saved value has the strides of its meta tensor. A
# compiled forward may hand over a value in other strides: a library call decides its
# result's layout from the layout of the arguments it really gets, and those are the
# compiler's buffers, not the trace's meta tensors. cuDNN attention in bfloat16, called by
# ``nn.MultiheadAttention``, returned its output laid out as (T, B, H, D) where the trace
# said (B, H, T, D); the backward kernel that flattens it for the out-projection's weight
# gradient read it in the wrong order, and that one gradient came out wrong while every
# other was right. A forward compiler that knows its outputs' strides says so
# (``output_strides``, one entry per output, None where it cannot tell), and each saved
# value's placeholder in the backward takes those strides before the backward is compiled.
def saved_in_real_strides(partition: Partition, strides: list | None) -> None:
    """Re-stride the backward's placeholders of saved values to the strides the compiled
    forward reports for them."""
    if not strides:
        return
    placeholders = [n for n in partition.backward.graph.nodes if n.op == "placeholder"]
    first = len(strides) - len(partition.saved)  # the saved values end the forward's outputs
    for node, stride in zip(placeholders, strides[first:]):
        val = node.meta.get("val")
        if (stride is None or not isinstance(val, torch.Tensor) or has_symbolic_sizes(val)
                or len(stride) != val.ndim or tuple(val.stride()) == stride):
            continue
        node.meta["val"] = torch.empty_strided(val.shape, stride, dtype=val.dtype,
                                               device=val.device)
# --8<-- [end:saved-strides]


def example_value(node: fx.Node) -> torch.Tensor | int:
    """An uninitialised real tensor shaped like the placeholder (the backward compiler's
    example input: the real saved values do not exist before the forward runs); a saved
    size is its traced value. Symbolic sizes take their hints. A result a library call
    leaves out (cuDNN attention's unused outputs) is saved as None, and stays None."""
    val = node.meta["val"]
    if val is None:
        return None
    if not isinstance(val, torch.Tensor):
        return hint_int(val)
    device = node.meta.get("device", torch.device("cpu"))
    return torch.empty_strided([hint_int(s) for s in val.shape],
                               [hint_int(s) for s in val.stride()], dtype=val.dtype,
                               device=device)


def symbolic_inputs(gm: Callable, example_inputs: Sequence[object]) -> list | None:
    """Meta tensors with symbolic sizes for the inputs, if dynamo made some sizes symbolic
    (it leaves them in each placeholder's ``meta["example_value"]``); else None, and the
    program is traced for the example inputs' own sizes. Chapter:
    book/docs/dynamic-shapes.md ("aotautograd")."""
    if not isinstance(gm, fx.GraphModule):
        return None
    metas = [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]
    if len(metas) != len(example_inputs) or find_env(metas) is None:
        return None  # static, or another tracer's symbols (PyTorch's own dynamo)
    return [m if isinstance(m, torch.Tensor) and has_symbolic_sizes(m) else None
            for m in metas]
