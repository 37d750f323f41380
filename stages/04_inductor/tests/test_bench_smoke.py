"""The micro benchmark suite (benchmarks/run.py) at tiny sizes: every workload compiles to
one kernel and matches eager. Correctness only; speed is measured by the suite itself."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2}


def load_run_module():
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("minipt2_bench_run", BENCHMARKS / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_micro_suite_is_one_kernel_each_and_correct(target, tmp_path, monkeypatch):
    run = load_run_module()
    monkeypatch.setattr(run, "copy_bandwidth", lambda device: 1.0)  # not measured here
    monkeypatch.setattr(run, "time_ms", lambda fn, repeat=10, device="cpu": (fn(), 1.0)[1])
    out = tmp_path / "rows.json"
    device = "cuda" if target == "triton" and torch.cuda.is_available() else "cpu"
    rows = run.main(["--suite", "micro", "--size", "tiny", "--target", target, "--device", device,
                     "--frontend",
                     "fx", "--dtypes", "float32,bfloat16", "--no-torch-compile",
                     "--out", str(out)])
    assert [r["workload"] for r in rows] == 2 * ["trig", "gelu_bias", "softmax", "layernorm",
                                                 "rmsnorm"]
    for row in rows:
        assert row["minipt2_kernels"] == 1, row
        assert row["minipt2_error"] <= TOLERANCE[row["dtype"]], row
    saved = json.loads(out.read_text())
    assert saved["rows"] == rows and saved["meta"]["copy_gbs"] == 1.0


def test_workloads_use_random_data():
    sys.path.insert(0, str(BENCHMARKS))
    import workloads

    w = workloads.build("layernorm", "cpu", torch.float32, "tiny")
    assert all(a.abs().sum() > 0 for a in w.args)
    assert w.bytes_moved == (2 * 8 * 33 + 2 * 33) * 4
