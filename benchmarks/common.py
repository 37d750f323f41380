"""Measuring helpers shared by the micro suite (``run.py``) and the model suite
(``bench_models.py``): device sync, the timed first (compiling) call, max relative error vs
eager, interleaved timing (CPU and GPU) and the geomean."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import torch

from driver.timing import time_ms


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def first_call(fn: Callable, args: tuple) -> tuple[object, float]:
    sync()
    start = time.perf_counter()
    out = fn(*args)
    sync()
    return out, time.perf_counter() - start


def warm_up_compilers(device: str, target: str, peer: bool) -> None:
    """Compile and run a throwaway function with minipt2, and with torch.compile when it is
    the peer, before any first call is timed. What a process pays once, whichever compiler
    comes first (importing the compiler, Triton building its driver module on a fresh
    machine), is then not charged to the first workload of the run, which is also the one
    where minipt2 always compiles before torch.compile."""
    import driver

    def throwaway(t: torch.Tensor) -> torch.Tensor:
        return (t * 2).sin() + 1

    x = torch.randn(1024, device=device)
    driver.compile(throwaway, options={"target": target})(x)
    if peer:
        torch.compiler.reset()
        torch.compile(throwaway)(x)
    driver.reset()
    sync()


def rel_error(got: object, want: torch.Tensor) -> float:
    got = got[0] if isinstance(got, (tuple, list)) else got
    diff = (got.double() - want.double()).abs().max().item()
    return diff / max(want.double().abs().max().item(), 1e-30)


def time_interleaved(fns: dict[str, Callable[[], object]], repeat: int = 10) -> dict:
    """CPU: warm median ms of each function, timed in rounds (one run of each per round) for
    at least ``repeat`` rounds and a second, so load from other processes on a shared
    machine hits all of them alike rather than whichever ran at a bad moment."""
    samples: dict[str, list[float]] = {who: [] for who in fns}
    for fn in fns.values():
        fn()
    while min(map(len, samples.values())) < repeat or (
            sum(map(sum, samples.values())) < 1000 and len(samples["eager"]) < 300):
        for who, fn in fns.items():
            start = time.perf_counter()
            fn()
            samples[who].append((time.perf_counter() - start) * 1e3)
    return {who: statistics.median(s) for who, s in samples.items()}


GPU_ROUNDS = 3


def time_rounds(fns: dict[str, Callable[[], object]], device: str,
                rounds: int = GPU_ROUNDS) -> dict:
    """The time of each function: on a GPU, ``do_bench``'s median (``time_ms``) taken in
    ``rounds`` rounds, one of each function per round, and the median over the rounds; on a
    CPU, ``time_interleaved``. Timed one after the other, the first function ran warm or
    cold with the clocks and the neighbours of that moment: mlp_train in bfloat16 read
    0.99x in one suite run and 1.03x timed in rounds on the same machine."""
    if device != "cuda":
        return time_interleaved(fns)
    samples: dict[str, list[float]] = {who: [] for who in fns}
    for _ in range(rounds):
        for who, fn in fns.items():
            samples[who].append(time_ms(fn, device=device))
    return {who: statistics.median(s) for who, s in samples.items()}


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")
