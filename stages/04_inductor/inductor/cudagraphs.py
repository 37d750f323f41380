"""CUDA graphs for ``mode="reduce-overhead"``: record the wrapper's launches once, replay them.

Input: a compiled graph's ``call`` (the wrapper: kernel launches and library calls on CUDA
tensors) and the graph's example inputs.
Output: ``CudaGraphRunner``, a callable with the same contract (flat tensors in, a tuple
out) that runs ``call`` plainly on its first invocation (the warm-up: Triton compiles its
kernels, cuBLAS makes its workspace), records it into a ``torch.cuda.CUDAGraph`` on the
second, and from then on replays the recording: one launch from Python instead of one per
kernel. ``runner.log`` says what was recorded and which calls ran without a graph;
``runner.replays`` counts the calls a recording served.

Chapter: book/docs/performance.md ("CUDA graphs").

[Note: static addresses]
A recording holds raw device addresses: replaying it reads its inputs from, and writes its
outputs to, exactly the memory used while recording. So each input is one of two kinds:
- *placed*: a parameter, or any tensor that keeps its address across calls: an output of
  another recording, or an argument found at the same address in the call just before the
  recording (a BatchNorm's running statistics, a batch the caller refills in place). The
  recording reads it where it lies. A later call that passes a tensor at another address
  there cannot use this recording (it would read stale memory); the second recording, made
  then, copies that argument.
- *copied*: everything else (a new batch each step): the runner owns a static buffer of the
  same layout and each call copies its argument into it before the replay.
Either way a replay reads what the call passed, as the plain call would: placing only
saves the copy. A graph that writes an input in place writes a placed one where it lies,
which is what the default mode does too, and a copied one in its static buffer, which
aotautograd's runtime then copies back.
Outputs live in the recording's private memory pool and are overwritten by the next replay.

[Note: outputs a later replay would overwrite]
The caller may still hold an output of the previous call (``a = f(x); b = f(y); a + b``),
or a view of one, or autograd may hold it as a saved tensor until backward. Before
replaying, the runner asks each static buffer's storage how many tensors use it (a
reference count kept by PyTorch's allocator); more than right after recording means someone
outside still holds it, and replaying would silently change their values. Then the runner
uses a second recording with its own pool (two outputs alive at once is the common case);
if that one is busy too, it runs ``call`` plainly. Never a wrong answer, at worst the speed
of the default mode. Each returned output is a fresh alias (``detach``) of the static
buffer, so the caller's references show up in that count.

Anything that fails while recording (an op that cannot be captured, a host sync) makes the
runner warn once and run ``call`` plainly from then on.
"""

from __future__ import annotations

import dataclasses
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch

MAX_RECORDINGS = 2  # per shape: see [Note: outputs a later replay would overwrite]
MAX_SHAPES = 64  # shapes recorded per graph: see [Note: a recording per shape]
MIN_FREE = 0.25  # of the device's memory, for a graph's every recording after its first
# Device addresses of every recording's outputs: a later graph (the backward) that is given
# one of them reads it in place instead of copying it ([Note: static addresses]).
_STATIC_OUTPUT_PTRS: set[int] = set()


_storage_use_count = torch._C._storage_Use_Count  # by the storage's C pointer


def _use_count(t: torch.Tensor) -> int:
    """How many tensors share ``t``'s storage (PyTorch's own count, not Python's refcount)."""
    return _storage_use_count(t.untyped_storage()._cdata)


def is_placed(t: Any) -> bool:
    """Inputs read where they lie: parameters, and tensors that keep their address across
    calls. See [Note: static addresses]."""
    if not isinstance(t, torch.Tensor):
        return False
    return isinstance(t, torch.nn.Parameter) or (t.requires_grad and t.is_leaf) or \
        t.data_ptr() in _STATIC_OUTPUT_PTRS


# --8<-- [start:pinning]
# [Note: a recording holds no placed input]
# A training step chains recordings: the forward's outputs include the values saved for the
# backward, and the backward's recording reads them in place (they are placed inputs there,
# being a recording's static outputs). If that recording kept the tensors it was recorded
# with, it would hold a reference to the forward's static buffers for good, their use count
# would never drop back to the count taken after recording, and the forward's recordings
# would look busy at every later call: each step then ran its graphs plainly, after the
# checks. That was the state of every training workload in mode="reduce-overhead" until we
# printed the runners' logs on the H200 (graph_breaks and the convnet: no replay after the
# third step). A recording therefore keeps, for a placed input, only its address and
# strides (all ``accepts`` compares). Nor does it keep an output that is a placed input
# passed through (the forward saves its inputs for the backward: a parameter, or the
# previous graph's static output): such an output is rebuilt from the call's own argument at
# each replay (``PassedThrough``), the argument itself when it was returned as it is, which
# is what the plain call returns too.
# --8<-- [end:pinning]
@dataclasses.dataclass(frozen=True)
class PassedThrough:
    """An output that is placed input ``index``, or a view of it (``view``: size, strides,
    storage offset); see [Note: a recording holds no placed input]."""

    index: int
    view: tuple | None = None

    def rebuild(self, args: Sequence[Any]) -> torch.Tensor:
        arg = args[self.index]
        return arg if self.view is None else arg.as_strided(*self.view)


@dataclasses.dataclass
class Recording:
    """One CUDA graph with its static inputs and outputs. Per argument, ``inputs`` holds the
    static buffer of a copied tensor, the address and strides of a placed one
    ([Note: a recording holds no placed input]), or a non-tensor argument's value."""

    graph: Any  # torch.cuda.CUDAGraph
    inputs: list[Any]
    placed: list[bool]
    outputs: tuple  # static output buffers, and ``PassedThrough`` for placed inputs
    watched: list[torch.Tensor]  # buffers a replay writes: outputs and copied inputs
    baseline: list[int] = dataclasses.field(init=False)  # their use counts after recording

    def __post_init__(self) -> None:
        # each watched buffer's storage, by its C pointer: asking a tensor for its storage
        # makes a Python object at every call, and the watched tensors keep it alive
        self.storages = [t.untyped_storage()._cdata for t in self.watched]
        self.baseline = [_storage_use_count(s) for s in self.storages]
        self.copied = [i for i, (a, p) in enumerate(zip(self.inputs, self.placed))
                       if isinstance(a, torch.Tensor) and not p]
        self.at = [(i, a) for i, (a, p) in enumerate(zip(self.inputs, self.placed)) if p]
        self.constants = [(i, a) for i, (a, p) in enumerate(zip(self.inputs, self.placed))
                          if not p and not isinstance(a, torch.Tensor)]

    # --8<-- [start:busy]
    def busy(self) -> bool:
        return any(_storage_use_count(s) > n for s, n in zip(self.storages, self.baseline))

    def accepts(self, args: Sequence[Any]) -> bool:
        """Whether ``args`` can be run by this recording (same placed addresses, layouts)."""
        for i, (address, stride) in self.at:
            arg = args[i]
            if arg.data_ptr() != address or arg.stride() != stride:
                return False
        for i in self.copied:
            arg, static = args[i], self.inputs[i]
            if arg.shape != static.shape or arg.stride() != static.stride() \
                    or arg.dtype != static.dtype or arg.device != static.device:
                return False
        return all(args[i] == value for i, value in self.constants)

    def replay(self, args: Sequence[Any]) -> tuple:
        for i in self.copied:
            static = self.inputs[i]
            if args[i].data_ptr() != static.data_ptr():
                static.copy_(args[i])
        self.graph.replay()
        return tuple(o.detach() if isinstance(o, torch.Tensor) else
                     o.rebuild(args) if isinstance(o, PassedThrough) else o
                     for o in self.outputs)
    # --8<-- [end:busy]


def _like(t: torch.Tensor, same_alignment: bool = False) -> torch.Tensor:
    """A copy of ``t`` with its sizes and strides; ``same_alignment``: also its address modulo
    16, the property of a pointer Triton compiles a variant for (the warm-up on a copy must
    compile the variant the recording will launch on ``t`` itself)."""
    if not same_alignment or t.data_ptr() % 16 == 0:
        out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
        return out.copy_(t)
    shift = (t.data_ptr() % 16) // t.element_size()
    span = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if n > 0)
    base = torch.empty(shift + span, dtype=t.dtype, device=t.device)
    return base.as_strided(t.shape, t.stride(), shift).copy_(t)


def placed_layout(t: torch.Tensor) -> tuple[int, tuple[int, ...]]:
    """What a recording keeps of a placed input: its address and strides."""
    return t.data_ptr(), t.stride()


def passed_through(output: Any, inputs: Sequence[Any], sources: dict[int, int]) -> Any:
    """``output`` as a recording keeps it: a ``PassedThrough`` when it shares the storage of
    a placed input (``sources``: storage address -> argument index), else itself."""
    if not isinstance(output, torch.Tensor):
        return output
    index = sources.get(output.untyped_storage().data_ptr())
    if index is None:
        return output
    if output is inputs[index]:
        return PassedThrough(index)
    return PassedThrough(index, (output.shape, output.stride(), output.storage_offset()))


# --8<-- [start:per-shape]
# [Note: a recording per shape]
# A recording holds one set of sizes. A graph compiled for dynamic shapes is called with
# many: GPT-2's decoding benchmark runs one symbolic graph at 63 prefix lengths a step. With
# two recordings for the whole graph, two lengths replayed (0.46 ms a call on the H200) and
# the other 61 ran plainly (2.4 ms). So recordings are kept per input shape (the tensors'
# sizes and the int arguments, which are the graph's symbolic sizes), up to
# ``MAX_RECORDINGS`` for each of at most ``MAX_SHAPES`` shapes; a shape beyond that runs
# plainly. Each recording has its own memory pool, so every shape recorded keeps the memory
# of one call's intermediates. On the H200, bfloat16 decoding went from 118 ms a step in
# the default mode to 51 ms (eager: 180 ms), for 2.9 GB more reserved by its 64 recordings
# (4.3 GB in float32, where the step is the GPU's and CUDA graphs gain little: 349 -> 341 ms).
# torch.compile's CUDA graphs share one pool between recordings and checkpoint its state;
# a shared pool here would need the busy check to cover every recording that shares it.
# A training step at 64 sequence lengths would keep 64 steps' activations, so the memory
# is bounded too: a graph's recordings after its first are made only while a quarter of the
# device's memory is free (``MIN_FREE``); past that, new shapes run plainly, as in the
# default mode, instead of running the program out of memory.
# --8<-- [end:per-shape]
def room_for_another(args: Sequence[Any]) -> bool:
    """Whether a further recording may take memory on the device of ``args`` ([Note: a
    recording per shape])."""
    device = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
    free, total = torch.cuda.mem_get_info(device)
    return free >= MIN_FREE * total

def placements(args: Sequence[Any], before: Sequence[int | None] | None) -> list[bool]:
    """Which of ``args`` a recording reads in place ([Note: static addresses]): parameters,
    other recordings' outputs, and tensors at the address they had in the call ``before``
    (its arguments' addresses, None for a non-tensor)."""
    return [is_placed(a) or (isinstance(a, torch.Tensor) and before is not None
                             and a.data_ptr() == before[i])
            for i, a in enumerate(args)]


def shape_key(args: Sequence[Any]) -> tuple:
    """The shape a call is recorded for: each tensor's sizes, each other argument itself."""
    return tuple(a.shape if isinstance(a, torch.Tensor) else a for a in args)


class CudaGraphRunner:
    """``call`` behind CUDA graphs; see the module docstring."""

    def __init__(self, call: Callable[..., tuple], name: str = "graph") -> None:
        self.call, self.name = call, name
        self.recordings: dict[tuple, list[Recording]] = {}  # by shape_key
        self.calls = 0
        self.replays = 0  # calls a recording served
        self.failed: str | None = None
        self.log: list[str] = []
        self.last_addresses: list[int | None] | None = None  # of the last plain call

    def __call__(self, *args: Any) -> tuple:
        self.calls += 1
        if self.failed or torch.cuda.is_current_stream_capturing():
            return self.call(*args)
        if self.calls == 1:
            return self.plain(args)  # the warm-up
        key = shape_key(args)
        mine = self.recordings.get(key, ())
        for recording in mine:
            if recording.accepts(args) and not recording.busy():
                self.replays += 1
                return recording.replay(args)
        room = not self.recordings or room_for_another(args)
        if room and len(mine) < MAX_RECORDINGS and (mine or len(self.recordings) < MAX_SHAPES):
            recording = self.record(args)
            if recording is not None:
                mine = self.recordings.setdefault(key, [])
                mine.append(recording)
                self.log.append(f"{self.name}: recorded CUDA graph {len(mine)} for shape "
                                f"{len(self.recordings)}")
                self.replays += 1
                return recording.replay(args)
        why = ("less than a quarter of the device's memory is free" if not room else
               "every recording is busy or expects other input addresses" if mine else
               f"{MAX_SHAPES} shapes recorded already")
        self.log.append(f"{self.name}: call {self.calls} ran without a CUDA graph ({why})")
        return self.plain(args)

    def plain(self, args: Sequence[Any]) -> tuple:
        """Run ``call`` without a graph, noting where each argument lies: an argument at the
        same address at the next recording is placed ([Note: static addresses])."""
        if len(self.recordings) < MAX_SHAPES or any(len(r) < MAX_RECORDINGS
                                                    for r in self.recordings.values()):
            self.last_addresses = [a.data_ptr() if isinstance(a, torch.Tensor) else None
                                   for a in args]
        return self.call(*args)

    def record(self, args: Sequence[Any]) -> Recording | None:
        placed = placements(args, self.last_addresses)
        inputs = [a if p or not isinstance(a, torch.Tensor) else _like(a)
                  for a, p in zip(args, placed)]
        try:
            # one run on a side stream, as capture requires, on copies of the placed inputs:
            # a graph that writes an input in place (BatchNorm's running statistics) must
            # write the caller's tensor once, in the replay that serves this call
            warm_up = [_like(a, same_alignment=True) if p and isinstance(a, torch.Tensor)
                       else a for a, p in zip(inputs, placed)]
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.call(*warm_up)
            torch.cuda.current_stream().wait_stream(side)
            del warm_up
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                outputs = self.call(*inputs)
        except Exception as e:  # noqa: BLE001 - any capture failure: run plainly instead
            self.failed = f"{type(e).__name__}: {e}"
            warnings.warn(f"inductor: mode='reduce-overhead' could not record a CUDA graph "
                          f"for {self.name} ({self.failed}); running it without one",
                          stacklevel=3)
            return None
        sources = {a.untyped_storage().data_ptr(): i for i, (a, p) in enumerate(zip(args, placed))
                   if p}
        kept_outputs = [passed_through(o, inputs, sources) for o in outputs]
        statics = [o for o in kept_outputs if isinstance(o, torch.Tensor)]
        watched = statics + [s for s, p in zip(inputs, placed)
                             if isinstance(s, torch.Tensor) and not p]
        ptrs = {o.data_ptr() for o in statics}
        _STATIC_OUTPUT_PTRS.update(ptrs)
        kept = [placed_layout(a) if p else a for a, p in zip(inputs, placed)]
        recording = Recording(graph, kept, placed, tuple(kept_outputs), watched)
        # its memory goes back to the allocator with it: a later tensor there is not placed
        weakref.finalize(recording, _STATIC_OUTPUT_PTRS.difference_update, ptrs)
        return recording


def wants_cudagraphs(mode: str | None, example_inputs: Sequence[Any]) -> bool:
    """CUDA graphs for ``reduce-overhead`` and ``max-autotune`` (as torch.compile), when every
    tensor is on a CUDA device."""
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    return (mode in ("reduce-overhead", "max-autotune") and torch.cuda.is_available()
            and bool(tensors) and all(t.device.type == "cuda" for t in tensors))


__all__ = ["CudaGraphRunner", "PassedThrough", "Recording", "is_placed", "wants_cudagraphs"]
