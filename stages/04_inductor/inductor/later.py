"""Templates compiled behind the library: a graph that runs now, and a faster one later.

Input: a ``CompiledGraph`` already serving calls with library matrix multiplies, and a
function that builds the same graph's call with Triton templates in their place.
Output: the build runs on a thread; when it is done, the graph's ``call`` becomes the new
version's (its texts describe that version from the start). ``wait()`` returns when every
such build has finished.
Chapter: book/docs/performance.md ("A template untimed, compiled behind the library").

# --8<-- [start:note]
# [Note: a template untimed, compiled behind the library]
# A library matrix multiply costs the host more than a kernel of ours ([Note: a launch's
# cost on the host] in mm_template.py), and where the GPU waits for the host, as in a
# training step with an ``.item()`` in its forward, a template launched directly is time
# saved at every call. The default mode times nothing, so it takes a template only where its
# first config was measured close to cuBLAS: 16-bit operands on a GPU, every dim of at least
# ``CHEAP_MIN_DIM`` (2048: 16 tiles along M and N, 32 steps along K), at most
# ``CHEAP_MAX_FLOPS`` (2**36, about 90 us of tensor-core time, where the host's ~12 us is a
# large share), and tiles whose last wave fills three quarters of the multiprocessors. On
# the H200 such products ran 2-7 % slower than cuBLAS on the GPU alone; most of GPT-2's,
# with a dim of 768, 13-33 % slower, so they stay the library's (max-autotune, which
# times, finds the one that is faster: the attention input with its bias add), as does a
# 4096-cubed one.
#
# A template takes Triton's compiler seconds (7.5 s for one with a GELU epilogue on the
# H200 host, against 1.2 s for graph_breaks' whole first call), and the first call should
# not wait for it. So the graph is compiled twice: with library calls, which serve the
# first call and every call until the other is ready, and with templates, whose kernels
# compile on a thread while the program runs. When they are built the graph's call becomes
# the templates' one. Both versions compute the same graph into the same outputs, in the
# same layouts, so a forward run by one and its backward by the other agree; a call in
# flight keeps the version it started with. If the templates' build fails, the library's
# version stays, with one warning. ``wait()`` is for whoever must know the graph is final:
# the benchmark, before it times anything, and tests.
# --8<-- [end:note]
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

_builds: list[threading.Thread] = []


def build_later(graph: Any, build: Callable[[], Callable[..., tuple]],
                example_inputs: Sequence[Any]) -> None:
    """Run ``build`` on a thread; its result becomes ``graph.call``."""
    device = next((t.device for t in example_inputs if isinstance(t, torch.Tensor)), None)

    def run() -> None:
        try:
            if device is not None and device.type == "cuda":
                torch.cuda.set_device(device)
            graph.call = build()
        except Exception as error:  # noqa: BLE001 - the library's version serves on
            warnings.warn(f"inductor: the templates of a graph did not build "
                          f"({type(error).__name__}: {error}); its library calls stay",
                          stacklevel=1)

    thread = threading.Thread(target=run, name="minipt2-templates", daemon=True)
    _builds.append(thread)
    thread.start()


def wait() -> int:
    """Return when every graph's templates are built (or have failed to); how many builds
    there were to wait for."""
    count = 0
    while _builds:
        _builds.pop(0).join()
        count += 1
    return count
