"""The benchmark suite behind ``python -m driver bench`` (see /work/shared/BENCHMARKS.md).

    python benchmarks/run.py --suite micro|models|all [--dtypes float32,bfloat16]
                             [--size full|cpu|tiny] [--target triton|cpp]
                             [--mode default|reduce-overhead|max-autotune]
                             [--no-torch-compile | --compare torch|none]
                             [--cold-caches] [--out FILE.json]

For every workload and dtype, in one process: eager PyTorch, minipt2 (``driver.compile``,
or with ``--frontend fx`` ``torch.fx.symbolic_trace`` + ``inductor.compile_fx``, which
skips our dynamo) and ``torch.compile`` as the peer. Reported per row: warm median times
(``triton.testing.do_bench`` on CUDA; on CPU the median wall clock of
interleaved rounds, so a shared machine's load hits all three alike), both speedups over eager,
first-call (compile) seconds (after each compiler has compiled a throwaway function once:
``common.warm_up_compilers``), max relative error vs eager, minipt2's kernel count, and the
achieved bandwidth (bytes a perfect kernel moves / time) against the device's measured copy
bandwidth. Rows go to a JSON file and a table; the geomean speedups come last.

``--suite models`` runs the model workloads instead (``models.py``, measured by
``bench_models.py``: a training step or a no-grad forward per row, with graph counts and no
bandwidth); ``--suite all`` runs both, one table each, then the geomeans over every row.
``--mode reduce-overhead`` or ``--mode max-autotune`` is passed to ``driver.compile`` and
``torch.compile`` alike (with max-autotune the first call includes the tuning; on CPU
neither changes anything for minipt2).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
for _path in [ROOT, *sorted((ROOT / "stages").glob("0*_*"))]:
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_models  # noqa: E402
import models  # noqa: E402
import workloads  # noqa: E402
from common import (  # noqa: E402, F401
    first_call,
    geomean,
    rel_error,
    sync,
    time_interleaved,
    time_rounds,
    warm_up_compilers,
)

from driver.timing import time_ms  # noqa: E402

SUITES = {**workloads.SUITES, "models": models.NAMES,
          "all": workloads.SUITES["micro"] + models.NAMES}


def copy_bandwidth(device: str) -> float:
    """Measured device copy bandwidth in GB/s (bytes read + written)."""
    numel = (1 << 28) if device == "cuda" else (1 << 24)
    src = torch.randn(numel, device=device)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), device=device)
    return 2 * src.numel() * src.element_size() / (ms * 1e-3) / 1e9


def minipt2_compile(fn: Callable, args: tuple, target: str, frontend: str,
                    mode: str = "default"):
    """(compiled callable, kernel count getter)."""
    if frontend == "fx":
        import inductor

        gm = torch.fx.symbolic_trace(fn)
        holder: dict = {}

        def run(*a):
            if "fn" not in holder:
                holder["fn"] = inductor.compile_fx(gm, list(a), options={"target": target,
                                                                         "mode": mode})
            return holder["fn"](*a)[0]

        return run, lambda: holder["fn"].kernel_count
    import driver

    driver.reset()
    compiled = driver.compile(fn, mode=mode, options={"target": target})
    return compiled, lambda: sum(sum(1 for k in g.artifacts if k.startswith("kernels/"))
                                 for g in compiled.graphs)


def bench_one(w: workloads.Workload, args: argparse.Namespace, copy_gbs: float) -> dict:
    want = w.fn(*w.args)
    row = {"workload": w.name, "dtype": str(w.args[0].dtype).replace("torch.", ""),
           "shape": list(w.args[0].shape), "bytes": w.bytes_moved}
    device = w.args[0].device.type
    fns = {"eager": lambda: w.fn(*w.args)}
    compiled, kernels = minipt2_compile(w.fn, w.args, args.target, args.frontend, args.mode)
    out, row["minipt2_compile_s"] = first_call(compiled, w.args)
    row["minipt2_error"] = rel_error(out, want)
    row["minipt2_kernels"] = kernels()
    fns["minipt2"] = lambda: compiled(*w.args)
    if not args.no_torch_compile:
        peer = torch.compile(w.fn, mode=args.mode)
        out, row["torch_compile_s"] = first_call(peer, w.args)
        row["torch_compile_error"] = rel_error(out, want)
        fns["torch_compile"] = lambda: peer(*w.args)
    row.update({f"{who}_ms": ms for who, ms in time_rounds(fns, device).items()})
    for who in ("eager", "minipt2", "torch_compile"):
        if f"{who}_ms" in row:
            gbs = w.bytes_moved / (row[f"{who}_ms"] * 1e-3) / 1e9
            row[f"{who}_gbs"], row[f"{who}_copy_frac"] = gbs, gbs / copy_gbs
            row[f"{who}_speedup"] = row["eager_ms"] / row[f"{who}_ms"]
    return row


def table(rows: list[dict], copy_gbs: float) -> str:
    head = (f"{'workload':10} {'dtype':8} {'eager ms':>9} {'mpt2 ms':>9} {'tc ms':>9} "
            f"{'mpt2 x':>7} {'tc x':>7} {'mpt2 %bw':>8} {'tc %bw':>7} {'mpt2 s':>7} "
            f"{'tc s':>6} {'mpt2 err':>9} {'kern':>4}")
    lines = [f"copy bandwidth: {copy_gbs:.0f} GB/s", head, "-" * len(head)]
    for r in rows:
        def get(key, fmt, r=r):
            return format(r[key], fmt) if key in r else "-"
        lines.append(
            f"{r['workload']:10} {r['dtype']:8} {r['eager_ms']:9.3f} {r['minipt2_ms']:9.3f} "
            f"{get('torch_compile_ms', '9.3f'):>9} {r['minipt2_speedup']:7.2f} "
            f"{get('torch_compile_speedup', '7.2f'):>7} {100 * r['minipt2_copy_frac']:7.1f}% "
            f"{get('torch_compile_copy_frac', '6.1%'):>7} {r['minipt2_compile_s']:7.2f} "
            f"{get('torch_compile_s', '6.2f'):>6} {r['minipt2_error']:9.2e} "
            f"{r['minipt2_kernels']:4d}")
    for dtype in dict.fromkeys(r["dtype"] for r in rows):
        sel = [r for r in rows if r["dtype"] == dtype]
        mp = geomean([r["minipt2_speedup"] for r in sel])
        tc = geomean([r["torch_compile_speedup"] for r in sel if "torch_compile_speedup" in r])
        lines.append(f"geomean {dtype}: minipt2 {mp:.2f}x, torch.compile {tc:.2f}x over eager")
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(prog="bench", description=__doc__.splitlines()[0])
    p.add_argument("--suite", default="micro", choices=sorted(SUITES))
    p.add_argument("--workloads", default=None, help="comma-separated subset")
    p.add_argument("--dtypes", default="float32,bfloat16" if cuda else "float32")
    p.add_argument("--size", default="full" if cuda else "cpu", choices=["full", "cpu", "tiny"])
    p.add_argument("--device", default="cuda" if cuda else "cpu", choices=["cuda", "cpu"])
    p.add_argument("--target", default=None, choices=["triton", "cpp"],
                   help="default: triton on cuda, cpp on cpu")
    p.add_argument("--frontend", default="driver", choices=["driver", "fx"])
    p.add_argument("--no-torch-compile", action="store_true")
    p.add_argument("--compare", default="torch", choices=["torch", "none"],
                   help="the peer timed beside eager and minipt2: torch.compile (the "
                        "default), or none (the same as --no-torch-compile)")
    p.add_argument("--mode", default="default",
                   choices=["default", "reduce-overhead", "max-autotune"],
                   help="for minipt2 (driver.compile) and torch.compile alike")
    p.add_argument("--out", default=None, help="JSON file of rows (default: benchmarks/"
                   "results/<suite>-<device>.json)")
    p.add_argument("--cold-caches", action="store_true",
                   help="point minipt2's, Triton's and PyTorch inductor's caches at new empty "
                        "folders first, so that every first call compiles from scratch")
    args = p.parse_args(argv)
    args.no_torch_compile = args.no_torch_compile or args.compare == "none"
    return args


def run_rows(args: argparse.Namespace, names: list[str], copy_gbs: float | None) -> list[dict]:
    rows = []
    for dtype in args.dtypes.split(","):
        for name in names:
            if name in models.NAMES:
                m = models.build(name, args.device, getattr(torch, dtype), args.size)
                rows.append(bench_models.bench_model(m, args))
            else:
                w = workloads.build(name, args.device, getattr(torch, dtype), args.size)
                rows.append(bench_one(w, args, copy_gbs))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def report(rows: list[dict], copy_gbs: float | None) -> str:
    """The micro table, the model table (rows with a "kind"), and for both, overall geomeans."""
    micro = [r for r in rows if "kind" not in r]
    model_rows = [r for r in rows if "kind" in r]
    parts = [table(micro, copy_gbs)] if micro else []
    if model_rows:
        parts.append(bench_models.table(model_rows))
    if micro and model_rows:
        parts += bench_models.geomean_lines(rows, " (all)")
    return "\n".join(parts)


CACHE_VARIABLES = {"MINIPT2_CACHE_DIR": "minipt2", "TRITON_CACHE_DIR": "triton",
                   "TORCHINDUCTOR_CACHE_DIR": "torchinductor"}


def empty_caches() -> str:
    """Point every compiler cache this run can fill at a new empty folder (each compiler
    reads its variable when it looks in its cache); returns the folder. With it, the
    first-call columns compare compiles from scratch, as on a fresh machine; without it they
    compare whatever the caches hold (with everything cached, torch.compile's graph cache
    skips its backend and ours finds only the kernels: book/docs/performance.md)."""
    import tempfile

    root = tempfile.mkdtemp(prefix="minipt2-bench-caches-")
    for variable, name in CACHE_VARIABLES.items():
        os.environ[variable] = os.path.join(root, name)
    return root


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse(argv)
    caches = f"cold: new empty folders under {empty_caches()}" if args.cold_caches else \
        "as found"
    device = args.device
    args.target = args.target or ("triton" if device == "cuda" else "cpp")
    names = args.workloads.split(",") if args.workloads else SUITES[args.suite]
    micro = any(name not in models.NAMES for name in names)
    copy_gbs = copy_bandwidth(device) if micro else None
    warm_up_compilers(device, args.target, peer=not args.no_torch_compile)
    rows = run_rows(args, names, copy_gbs)
    out = Path(args.out or ROOT / "benchmarks" / "results" / f"{args.suite}-{device}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "target": args.target, "size": args.size, "mode": args.mode,
            "torch": torch.__version__, "copy_gbs": copy_gbs, "argv": sys.argv,
            "cpus": os.cpu_count(),
            "first_calls": "after a throwaway compile by each compiler (warm_up_compilers)",
            "caches": caches}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(report(rows, copy_gbs))
    return rows

if __name__ == "__main__":
    main(sys.argv[1:])
