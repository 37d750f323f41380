"""Where one step of a model workload spends its time: eager, minipt2 and torch.compile.

    python benchmarks/profile_step.py [--workload graph_breaks] [--dtype bfloat16]
                                      [--size full|cpu|tiny] [--steps 5] [--compare torch|none]

For each of the three, after three warm steps, ``torch.profiler`` records ``--steps`` steps
and this prints, per step: the device's kernels (count, total time, the top ones by time),
the time the device was busy against the span from its first kernel to its last, and the
gaps between consecutive kernels of the last step longer than ``--gap`` us, each with the
kernels on either side. A step whose busy time is well under its span waits for the host:
its Python and library calls set the pace, not its kernels (book/docs/performance.md, "A run
on an H100, every cache empty"). It also prints the host's timeline of the step in phases
(forward, backward, optimizer), as medians of ``--steps`` perf_counter marks, and on a GPU
how long after the host the device reached the end of each phase (CUDA events at the same
marks): a lag near zero says the device was waiting for the host there.

On a machine without a GPU the "kernels" are the CPU ops the profiler records (aten ops and
minipt2's compiled functions), which says less: use it there to try the tool, and the GPU
for numbers. Nothing here is a benchmark result; ``benchmarks/run.py`` is.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_models  # noqa: E402
import models  # noqa: E402


def device_events(prof, cuda: bool) -> list:
    """The profiled events that are device work (CUDA kernels and copies; on the CPU, the
    top-level CPU ops), in start order."""
    if cuda:
        found = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    else:
        events = [e for e in prof.events() if e.device_type == DeviceType.CPU]
        found = [e for e in events if e.cpu_parent is None]
    return sorted(found, key=lambda e: e.time_range.start)


def kernel_report(tag: str, step: Callable[[], object], steps: int, gap_us: float,
                  cuda: bool, top: int = 12) -> dict:
    """Profile ``steps`` warm steps; print and return the per-step summary."""
    for _ in range(3):
        step()
    sync(cuda)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        sync(cuda)
    events = device_events(prof, cuda)
    by_name: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for e in events:
        entry = by_name[e.name[:80]]
        entry[0] += 1
        entry[1] += e.time_range.end - e.time_range.start
    busy = sum(t for _, t in by_name.values()) / steps
    span = (events[-1].time_range.end - events[0].time_range.start) / steps if events else 0.0
    print(f"== {tag}: {len(events) / steps:.0f} kernels a step, busy {busy:.0f} us of a "
          f"{span:.0f} us span")
    for name, (count, total) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"   {total / steps:9.1f} us  x{count / steps:<5.1f} {name}")
    last = events[-(len(events) // steps):] if events else []
    gaps = [(b.time_range.start - a.time_range.end, a.name[:40], b.name[:40])
            for a, b in zip(last, last[1:]) if b.time_range.start - a.time_range.end > gap_us]
    print(f"   gaps over {gap_us:g} us in the last step: {sum(g for g, *_ in gaps):.0f} us")
    for gap, before, after in gaps:
        print(f"     {gap:8.1f} us  {before} -> {after}")
    return {"kernels": len(events) / steps, "busy_us": busy, "span_us": span,
            "gaps_us": sum(g for g, *_ in gaps)}


def phases(w: models.ModelWorkload, module: Callable, params, steps: int,
           cuda: bool) -> dict[str, float]:
    """Median host microseconds of a training step's phases: zero_grad + forward, backward,
    optimizer (perf_counter marks; the forward includes any wait a ``.item()`` makes). On a
    GPU also ``<phase> lag``: how long after the host the device reached the phase's end,
    from a CUDA event recorded at each mark (each step starts from an idle device). Near
    zero, the device waits for the host there: the host sets the pace."""
    opt = torch.optim.SGD(params, lr=bench_models.LR)
    names = ("forward", "backward", "optimizer")
    rows: list[list[float]] = []
    for i in range(steps + 3):
        host: list[float] = []
        events: list[torch.cuda.Event] = []
        mark(host, events, cuda)
        opt.zero_grad(set_to_none=True)
        loss = module(*w.inputs)
        mark(host, events, cuda)
        loss.backward()
        mark(host, events, cuda)
        opt.step()
        mark(host, events, cuda)
        sync(cuda)
        if i < 3:
            continue
        row = [(b - a) * 1e6 for a, b in zip(host, host[1:])]
        if cuda:  # device arrival minus host arrival at each phase's end, from the start
            row += [events[0].elapsed_time(e) * 1e3 - (t - host[0]) * 1e6
                    for e, t in zip(events[1:], host[1:])]
        rows.append(row)
    keys = [*names, *(f"{name} lag" for name in names)] if cuda else list(names)
    return {key: statistics.median(r[i] for r in rows) for i, key in enumerate(keys)}


def mark(host: list[float], events: list, cuda: bool) -> None:
    """A phase boundary: the host's time, and on a GPU an event the device records there."""
    host.append(time.perf_counter())
    if cuda:
        events.append(torch.cuda.Event(enable_timing=True))
        events[-1].record()


def sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> dict:
    cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="graph_breaks", choices=models.NAMES)
    p.add_argument("--dtype", default="bfloat16" if cuda else "float32")
    p.add_argument("--size", default="full" if cuda else "tiny", choices=["full", "cpu", "tiny"])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--gap", type=float, default=5.0, help="report gaps over this many us")
    p.add_argument("--compare", default="torch", choices=["torch", "none"])
    args = p.parse_args(argv)
    device = "cuda" if cuda else "cpu"
    w = models.build(args.workload, device, getattr(torch, args.dtype), args.size)
    module = bench_models.fresh_model(w)
    steps = {"eager": bench_models.make_step(module, w, module.parameters()),
             "minipt2": bench_models.minipt2_step(w, "triton" if cuda else "cpp")[0]}
    if args.compare == "torch":
        steps["torch.compile"] = bench_models.peer_step(w)
    results = {who: kernel_report(f"{w.name} {args.dtype} {who}", step, args.steps, args.gap,
                                  cuda) for who, step in steps.items()}
    if w.kind == "train":
        import driver

        driver.reset()
        compiled_module = bench_models.fresh_model(w)
        compiled = driver.compile(compiled_module,
                                  options={"target": "triton" if cuda else "cpp"})
        for who, (mod, params) in {"eager": (module, module.parameters()),
                                   "minipt2": (compiled, compiled_module.parameters())}.items():
            times = phases(w, mod, params, args.steps, cuda)
            results[who]["phases_us"] = times
            print(f"== host phases, {who}: " + ", ".join(f"{k} {v:.0f} us"
                                                        for k, v in times.items()))
            if cuda:
                print("   (lag: how long after the host the device reached that phase's end;"
                      " near zero, the host sets the pace)")
    return results


if __name__ == "__main__":
    main()
