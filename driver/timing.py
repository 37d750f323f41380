"""Timing helpers shared by the CLI and the benchmarks.

Input: a zero-argument callable. Output: its median time in milliseconds, warm.
On CUDA, ``triton.testing.do_bench`` (device events, median); elsewhere the median of
repeated wall-clock runs (see ../shared/BENCHMARKS.md, "Measuring").
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def time_ms(fn: Callable[[], object], *, repeat: int = 20, warmup: int = 3) -> float:
    if torch.cuda.is_available():
        import triton.testing

        return float(triton.testing.do_bench(fn, return_mode="median"))
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)
