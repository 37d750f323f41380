"""The autotuner behind ``mode="max-autotune"``: each Triton kernel launched with the fastest
of a few candidate configs, timed on the real inputs at its first call, remembered on disk.

Input: a loaded ``@triton.jit`` kernel and its ``KernelSource``, whose ``configs`` are the
candidate launch parameters (the printer's heuristic first; ``pointwise_configs`` and
friends below make the lists).
Output: ``Autotuner``, bound in the wrapper's namespace under the kernel's name; the wrapper
calls ``kernel.run(*buffers, *sizes)`` instead of launching with fixed parameters.

Chapter: book/docs/inductor.md ("Autotuning").

[Note: autotuning]
The printers pick launch parameters by rule of thumb (``block_size``, ``tile_config``,
``launch_config``): good, not best, and the best depends on the GPU, the sizes and the
dtypes. With ``mode="max-autotune"`` the first call of each kernel launches every candidate
config on the real arguments, times it with ``triton.testing.do_bench`` (the median of many
launches after a warm-up that also compiles it) and keeps the fastest; a config that fails
(too many registers for this GPU, say) is skipped. Running a kernel several times is safe:
a kernel never reads a buffer it writes, so each run computes the same outputs.
Tuning costs seconds per kernel, so the winner is cached on disk, in ``autotune/`` next to
the code cache, keyed by a hash of the kernel's source, the sizes it is launched with, the
device's name and Triton's version: a new process, or the same kernel in another graph, skips
the timing. Entries are JSON written atomically; one that does not parse, or names a config
that is not a candidate, is deleted and tuned again, never trusted.

[Note: tuning reductions by default]
A reduction's speed turns on its warps per row more than anything else, and the best count
moved with the dtype and the row length in every measurement we made (8192-wide layer norm
rows: 16 warps best in float32, 8 in bfloat16). torch.compile tunes reductions in its
default mode too. ``MINIPT2_TUNE_REDUCTIONS=1`` does the same here: reduction kernels over
static sizes are launched through the autotuner over three or four configs around the
heuristic (``default_reduction_configs``), with the same timing and disk cache. It is off by
default because, measured on an H200, it did not pay: the micro suite's reductions moved by
under one point of copy bandwidth (float32 softmax 94.7% -> 95.3%, layer norm unchanged),
while timing every candidate of GPT-2's ~150 reduction kernels took the first training call
from 35 s to 118 s. (A kernel over symbolic sizes is never tuned this way: it would be
timed again at every new size.)

Under the Triton interpreter (no GPU) and on the C++ target nothing is tuned: interpreted
kernels run numpy one block at a time, so their timings say nothing about a GPU (and would
take minutes). The heuristic config is used and nothing is written to disk.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from inductor.codecache import code_hash, subdir, write_atomic

log = logging.getLogger("minipt2.autotune")
Config = dict[str, int]  # launch parameters: XBLOCK, RBLOCK, YBLOCK, num_warps, num_stages

MIN_YBLOCK = 32  # every tiled candidate's YBLOCK is at least this, or the whole y extent


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _unique(configs: Sequence[Config]) -> list[Config]:
    seen: dict[tuple, Config] = {}
    for config in configs:
        seen.setdefault(tuple(sorted(config.items())), config)
    return list(seen.values())


# --8<-- [start:candidates]
def pointwise_configs(heuristic: Config, numel: int) -> list[Config]:
    """Flat pointwise kernels: 256 to 2048 elements per program, 2 to 8 warps."""
    configs = [heuristic]
    for xblock, warps in ((256, 2), (512, 4), (512, 8), (1024, 4), (1024, 8), (2048, 8)):
        xblock = min(xblock, _pow2_at_least(numel))
        configs.append({"XBLOCK": xblock, "num_warps": max(1, min(warps, xblock // 32))})
    return _unique(configs)


def tiled_configs(heuristic: Config, ynumel: int, xnumel: int) -> list[Config]:
    """Tiled pointwise kernels ([Note: tiling]): square and oblong tiles of 1K to 4K elements."""
    configs = [heuristic]
    for yblock, xblock, warps in ((64, 64, 4), (64, 64, 8), (32, 128, 4), (128, 32, 4),
                                  (32, 64, 2)):
        yblock = min(max(yblock, MIN_YBLOCK), _pow2_at_least(ynumel))
        xblock = min(xblock, _pow2_at_least(xnumel))
        configs.append({"YBLOCK": yblock, "XBLOCK": xblock,
                        "num_warps": max(1, min(warps, yblock * xblock // 128))})
    return _unique(configs)


def reduction_configs(heuristic: Config, persistent: bool, numel: int) -> list[Config]:
    """Reduction kernels. A persistent kernel must hold a whole row (RBLOCK stays); more or
    fewer rows per program and warps vary. A looped one varies RBLOCK and pipelining too."""
    configs, rows = [heuristic], _pow2_at_least(numel)
    if persistent:
        rblock = heuristic["RBLOCK"]
        for xblock in (1, 2, 8, 32):
            if xblock <= rows and xblock * rblock <= 16384:
                for warps in (4, 8):
                    configs.append({"XBLOCK": xblock, "RBLOCK": rblock, "num_warps": warps})
        return _unique(configs)
    for xblock, rblock, warps, stages in ((1, 1024, 4, 2), (1, 2048, 8, 1), (1, 4096, 8, 1),
                                          (2, 2048, 8, 2), (4, 1024, 8, 2)):
        configs.append({"XBLOCK": min(xblock, rows), "RBLOCK": rblock, "num_warps": warps,
                        "num_stages": stages})
    return _unique(configs)


def default_reduction_configs(kernel: Any) -> list[Config]:
    """The few configs the default mode tries for a reduction kernel: the heuristic, and the
    persistent tile's neighbours in warps (a warp per 1 KiB, 2 KiB or 4 KiB of a row) and
    rows per program. See [Note: tuning reductions by default]."""
    heuristic = kernel.launch
    if "YBLOCK" in heuristic or kernel.rnumel is None:
        return [heuristic]
    warps = heuristic["num_warps"]
    configs = [heuristic,
               {**heuristic, "num_warps": max(1, warps // 2)},
               {**heuristic, "num_warps": min(32, warps * 2)}]
    if heuristic["XBLOCK"] > 1:
        configs.append({**heuristic, "XBLOCK": heuristic["XBLOCK"] // 2,
                        "num_warps": max(1, warps // 2)})
    return _unique(configs)
# --8<-- [end:candidates]


def can_time() -> bool:
    """Only a real GPU gives timings worth tuning on; see [Note: autotuning]."""
    from inductor.codegen.triton import interpreting

    return torch.cuda.is_available() and not interpreting()


def benchmark(launch: Callable[[], Any], config: Config) -> float:
    """Milliseconds per ``launch()`` (the median), by Triton's ``do_bench``. ``config`` is
    what ``launch`` runs with (tests replace this function with a fake that reads it)."""
    import triton.testing

    return float(triton.testing.do_bench(launch, return_mode="median"))


def host_ms(launch: Callable[[], Any], calls: int = 20, repeat: int = 3) -> float:
    """Milliseconds of host time per ``launch()``: ``calls`` launches back to back, the GPU
    left to run behind them, the fastest of ``repeat`` tries ([Note: a launch's cost on the
    host] in mm_template.py). Tests replace this function too."""
    best = float("inf")
    for _ in range(repeat):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            launch()
        best = min(best, (time.perf_counter() - start) * 1e3 / calls)
        torch.cuda.synchronize()
    return best


def device_name() -> str:
    from inductor.codegen.triton import interpreting

    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return f"{name} (Triton interpreter)" if interpreting() else name


def cache_key(source: str, sizes: Sequence[int]) -> str:
    import triton

    return code_hash(source, repr(tuple(sizes)), device_name(), triton.__version__)


def read_entry(key: str, configs: Sequence[Config]) -> Config | None:
    """The cached best config for ``key``; a corrupt or foreign entry is deleted."""
    path = subdir("autotune") / f"{key}.json"
    if not path.exists():
        return None
    try:
        config = json.loads(path.read_text())["config"]
        if config in configs:
            return config
    except (OSError, ValueError, KeyError, TypeError):
        pass
    path.unlink(missing_ok=True)  # rebuilt, never trusted
    return None


def write_entry(key: str, name: str, sizes: Sequence[int], best: Config,
                timings: list[tuple[Config, float]]) -> None:
    entry = {"kernel": name, "sizes": list(sizes), "device": device_name(), "config": best,
             "timings_ms": [[config, ms] for config, ms in timings]}
    write_atomic(subdir("autotune") / f"{key}.json", json.dumps(entry, indent=1) + "\n")


_memory: dict[str, Config] = {}  # cache key -> best config, for this process


def clear_memory_cache() -> None:
    """Forget what this process tuned (the disk cache stays)."""
    _memory.clear()


# --8<-- [start:scratch]
# [Note: timing on scratch copies]
# Timing a config launches the kernel many times. A kernel that only writes fresh buffers
# the wrapper allocated for it can run as often as it likes; but a kernel may write into a
# graph input (BatchNorm's running statistics, [Note: writing an input in place]) or add
# into a buffer another kernel zeroed (``scatter_add``'s atomic adds), and each extra launch
# applies the write again. On the H200, a Linear, BatchNorm1d and Linear trained once under
# ``mode="max-autotune"`` left the running mean at the batch's mean instead of a tenth of it:
# the momentum update had run once per timed launch. (Only while tuning: a second process
# read the choice from disk and matched eager.) So the launches being timed write into copies:
# every buffer the kernel stores to (its ``out_ptr`` parameters) is replaced by a view, of the
# same size, strides and offset, into a copy of its whole storage, made once for all the
# candidates. Reads still come from the real buffers, which is all the timing needs. If the
# copies do not fit in memory, nothing is timed and the heuristic config runs.
def written_positions(kernel: Any) -> list[int]:
    """The positions, among the kernel's buffers, of those it stores to: its parameters named
    ``out_ptr*``; every buffer when the signature cannot be read."""
    found = re.search(rf"def {re.escape(kernel.name)}\(([^)]*)\)", kernel.source)
    if found is None:
        return list(range(len(kernel.args)))
    names = [part.split(":")[0].strip() for part in found.group(1).split(",")]
    return [i for i, name in enumerate(names[:len(kernel.args)]) if name.startswith("out_ptr")]


def scratch_outputs(args: Sequence[Any], written: Sequence[int]) -> list[Any] | None:
    """``args`` with each written tensor replaced by the same view of a copy of its storage
    (one copy per storage); None when a copy does not fit ([Note: timing on scratch
    copies])."""
    copies: dict[int, Any] = {}
    scratch = list(args)
    try:
        for i in written:
            tensor = args[i]
            storage = tensor.untyped_storage()
            if storage.data_ptr() not in copies:
                copies[storage.data_ptr()] = storage.clone()
            scratch[i] = torch.empty(0, dtype=tensor.dtype, device=tensor.device).set_(
                copies[storage.data_ptr()], tensor.storage_offset(), tensor.size(),
                tensor.stride())
    except torch.OutOfMemoryError:
        return None
    return scratch
# --8<-- [end:scratch]


# --8<-- [start:autotuner]
class Autotuner:
    """A Triton kernel launched with its best config for the sizes it is called with."""

    def __init__(self, fn: Any, kernel: Any) -> None:
        self.fn, self.kernel = fn, kernel  # the @triton.jit function, its KernelSource
        self.decisions: dict[tuple, tuple[Config, str]] = {}  # sizes -> (config, how chosen)

    def run(self, *args: Any) -> None:
        """``args``: the kernel's buffers, then its sizes (``KernelSource.size_args``)."""
        sizes = tuple(int(a) for a in args[len(self.kernel.args):])
        if sizes not in self.decisions:
            self.decisions[sizes] = self.choose(args, sizes)
        self.launch(self.decisions[sizes][0], args)

    def choose(self, args: Sequence[Any], sizes: tuple) -> tuple[Config, str]:
        """(config, how): "heuristic" when nothing can be timed, else from this process's
        memory, from disk, or "timed" now (and written to disk)."""
        if not can_time():
            log.info("%s %s: %s (heuristic: nothing to time on without a GPU)",
                     self.kernel.name, list(sizes), self.kernel.configs[0])
            return self.kernel.configs[0], "heuristic"
        key = cache_key(self.kernel.source, sizes)
        if key in _memory:
            return _memory[key], "memory"
        config, how = read_entry(key, self.kernel.configs), "disk"
        if config is None:
            scratch = scratch_outputs(args, written_positions(self.kernel))
            if scratch is None:  # no memory for the copies: keep the heuristic, this time
                return self.kernel.configs[0], "heuristic"
            timings = [(c, self.time(c, scratch)) for c in self.kernel.configs]
            config, best_ms = min(timings, key=lambda t: t[1])
            if best_ms == float("inf"):  # nothing ran: keep the heuristic, remember nothing
                return self.kernel.configs[0], "heuristic"
            write_entry(key, self.kernel.name, sizes, config, timings)
            how = f"timed, {best_ms:.4f} ms vs {timings[0][1]:.4f} ms for the heuristic"
        _memory[key] = config
        log.info("%s %s: %s (%s)", self.kernel.name, list(sizes), config, how)
        return config, how

    def time(self, config: Config, args: Sequence[Any]) -> float:
        try:
            return benchmark(lambda: self.launch(config, args), config)
        except Exception as e:  # e.g. out of registers on this GPU: not a candidate here
            log.info("%s: config %s failed (%s); skipped", self.kernel.name, config, e)
            return float("inf")

    def launch(self, config: Config, args: Sequence[Any]) -> None:
        sizes = args[len(self.kernel.args):]
        tiled = "YBLOCK" in config
        xnumel, ynumel = (sizes[1], sizes[0]) if tiled else (sizes[0], 1)
        grid = (-(-xnumel // config["XBLOCK"]), -(-ynumel // config.get("YBLOCK", 1)), 1)
        self.fn[grid](*args, **config)
# --8<-- [end:autotuner]
