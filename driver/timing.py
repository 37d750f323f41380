"""Timing shared by the CLI, the report and the benchmarks.

Input: a zero-argument callable. Output: its warm median time in milliseconds.
On CUDA, ``triton.testing.do_bench`` (device events, median); elsewhere the median of
repeated wall-clock runs — at least ``repeat`` of them and half a second, because CPUs are
noisy (see ../shared/BENCHMARKS.md, "Measuring").
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def time_ms(fn: Callable[[], object], repeat: int = 10, device: str | None = None) -> float:
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and torch.cuda.is_available():
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
    fn()
    samples: list[float] = []
    while len(samples) < repeat or (sum(samples) < 500 and len(samples) < 200):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)
