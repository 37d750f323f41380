"""CUDA graphs for ``mode="reduce-overhead"``: record the wrapper's launches once, replay them.

Input: a compiled graph's ``call`` (the wrapper: kernel launches and library calls on CUDA
tensors) and the graph's example inputs.
Output: ``CudaGraphRunner``, a callable with the same contract (flat tensors in, a tuple
out) that runs ``call`` plainly on its first invocation (the warm-up: Triton compiles its
kernels, cuBLAS makes its workspace), records it into a ``torch.cuda.CUDAGraph`` on the
second, and from then on replays the recording: one launch from Python instead of one per
kernel. ``runner.log`` says what happened on each call (the ``cudagraphs`` log channel).

Chapter: book/docs/performance.md ("CUDA graphs").

[Note: static addresses]
A recording holds raw device addresses: replaying it reads its inputs from, and writes its
outputs to, exactly the memory used while recording. So each input is one of two kinds:
- *placed*: a parameter (or any tensor that keeps its address across calls, like an
  output of another recording): the recording reads it where it lies. A later call that
  passes a different tensor there cannot use this recording (it would read stale memory).
- *copied*: everything else (the batch): the runner owns a static buffer of the same layout
  and each call copies its argument into it before the replay.
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
from collections.abc import Callable, Sequence
from typing import Any

import torch

MAX_RECORDINGS = 2  # see [Note: outputs a later replay would overwrite]
# Device addresses of every recording's outputs: a later graph (the backward) that is given
# one of them reads it in place instead of copying it ([Note: static addresses]).
_STATIC_OUTPUT_PTRS: set[int] = set()


def _use_count(t: torch.Tensor) -> int:
    """How many tensors share ``t``'s storage (PyTorch's own count, not Python's refcount)."""
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


def is_placed(t: Any) -> bool:
    """Inputs read where they lie: parameters, and tensors that keep their address across
    calls. See [Note: static addresses]."""
    if not isinstance(t, torch.Tensor):
        return False
    return isinstance(t, torch.nn.Parameter) or (t.requires_grad and t.is_leaf) or \
        t.data_ptr() in _STATIC_OUTPUT_PTRS


@dataclasses.dataclass
class Recording:
    """One CUDA graph with its static inputs and outputs."""

    graph: Any  # torch.cuda.CUDAGraph
    inputs: list[Any]  # the static input tensors (placed ones are the caller's own)
    placed: list[bool]
    outputs: tuple
    baseline: list[int]  # storage use counts of ``watched`` right after recording
    watched: list[torch.Tensor]  # buffers a replay writes: outputs and copied inputs

    # --8<-- [start:busy]
    def busy(self) -> bool:
        return any(_use_count(t) > n for t, n in zip(self.watched, self.baseline))

    def accepts(self, args: Sequence[Any]) -> bool:
        """Whether ``args`` can be run by this recording (same placed addresses, layouts)."""
        for arg, static, placed in zip(args, self.inputs, self.placed):
            if not isinstance(arg, torch.Tensor):
                if arg != static:
                    return False
            elif placed:
                if arg.data_ptr() != static.data_ptr() or arg.stride() != static.stride():
                    return False
            elif arg.shape != static.shape or arg.stride() != static.stride() \
                    or arg.dtype != static.dtype or arg.device != static.device:
                return False
        return True

    def replay(self, args: Sequence[Any]) -> tuple:
        for arg, static, placed in zip(args, self.inputs, self.placed):
            if isinstance(arg, torch.Tensor) and not placed and arg.data_ptr() != \
                    static.data_ptr():
                static.copy_(arg)
        self.graph.replay()
        return tuple(o.detach() if isinstance(o, torch.Tensor) else o for o in self.outputs)
    # --8<-- [end:busy]


class CudaGraphRunner:
    """``call`` behind CUDA graphs; see the module docstring."""

    def __init__(self, call: Callable[..., tuple], name: str = "graph") -> None:
        self.call, self.name = call, name
        self.recordings: list[Recording] = []
        self.calls = 0
        self.failed: str | None = None
        self.log: list[str] = []

    def __call__(self, *args: Any) -> tuple:
        self.calls += 1
        if self.failed or self.calls == 1 or torch.cuda.is_current_stream_capturing():
            return self.call(*args)  # call 1 is the warm-up
        for recording in self.recordings:
            if recording.accepts(args) and not recording.busy():
                return recording.replay(args)
        if len(self.recordings) < MAX_RECORDINGS:
            recording = self.record(args)
            if recording is not None:
                self.recordings.append(recording)
                self.log.append(f"{self.name}: recorded CUDA graph {len(self.recordings)}")
                return recording.replay(args)
        self.log.append(f"{self.name}: call {self.calls} ran without a CUDA graph (every "
                        "recording is busy or expects other input addresses)")
        return self.call(*args)

    def record(self, args: Sequence[Any]) -> Recording | None:
        placed = [is_placed(a) for a in args]
        inputs = [a if p or not isinstance(a, torch.Tensor) else
                  torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device)
                  for a, p in zip(args, placed)]
        try:
            for static, arg in zip(inputs, args):
                if isinstance(arg, torch.Tensor) and static is not arg:
                    static.copy_(arg)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # one run on a side stream, as capture requires
                self.call(*inputs)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                outputs = self.call(*inputs)
        except Exception as e:  # noqa: BLE001 - any capture failure: run plainly instead
            self.failed = f"{type(e).__name__}: {e}"
            warnings.warn(f"inductor: mode='reduce-overhead' could not record a CUDA graph "
                          f"for {self.name} ({self.failed}); running it without one",
                          stacklevel=3)
            return None
        watched = [o for o in outputs if isinstance(o, torch.Tensor)] + \
            [s for s, p in zip(inputs, placed) if isinstance(s, torch.Tensor) and not p]
        baseline = [_use_count(t) for t in watched]
        _STATIC_OUTPUT_PTRS.update(o.data_ptr() for o in outputs if isinstance(o, torch.Tensor))
        return Recording(graph, inputs, placed, tuple(outputs), baseline, watched)


def wants_cudagraphs(mode: str | None, example_inputs: Sequence[Any]) -> bool:
    """CUDA graphs for ``reduce-overhead`` and ``max-autotune`` (as torch.compile), when every
    tensor is on a CUDA device."""
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    return (mode in ("reduce-overhead", "max-autotune") and torch.cuda.is_available()
            and bool(tensors) and all(t.device.type == "cuda" for t in tensors))


__all__ = ["CudaGraphRunner", "Recording", "is_placed", "wants_cudagraphs"]
