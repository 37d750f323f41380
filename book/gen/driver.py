"""Outputs of the "Seeing inside the compiler" chapter: the driver's commands, run for real."""

import contextlib
import io
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "driver", *args], capture_output=True,
                            text=True, cwd=ROOT, timeout=600)
    return result.stdout + result.stderr


def generate(write) -> None:
    import torch

    import driver
    from driver import programs, report

    write("driver/compile_inductor_stage.txt",
          _run("compile", "examples/mlp.py", "--target", "cpp", "--stage", "inductor"))
    write("driver/explain.txt", _run("explain", "examples/mlp.py"))
    program = programs.load("examples/mlp.py", "cpp")
    compiled = driver.compile(program.fn, options={"target": "cpp"})
    compiled(*program.inputs)
    record = compiled.graphs[0]
    prims_gm = getattr(record.compiled, "prims_graph_module", None)
    write("driver/captured_graph.svg", report.graph_svg(record.gm))
    if prims_gm is not None:
        groups = getattr(record.compiled, "kernel_groups", None)
        write("driver/prims_graph.svg", report.graph_svg(prims_gm, groups))
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        driver.set_logs("fusion", "recompiles")
        f = driver.compile(lambda x: torch.sigmoid(x) * x, options={"target": "cpp"})
        f(torch.randn(8))
        f(torch.randn(16))
        driver.set_logs()
    write("driver/logs.txt", stderr.getvalue())
