"""``python -m driver bench --suite models`` on CPU at ``--size tiny``: every model workload
runs, lands in the JSON, and minipt2 matches eager (correctness only: never speed)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import models  # noqa: E402

TOLERANCE = {"float32": 1e-3}  # max relative error vs eager of the first step's loss/logits


def run_driver(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "driver", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=600)


def test_model_suite_runs_tiny_on_cpu(tmp_path):
    out = tmp_path / "models.json"
    result = run_driver("bench", "--suite", "models", "--device", "cpu", "--size", "tiny",
                        "--dtypes", "float32", "--no-torch-compile", "--out", str(out),
                        cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    result_json = json.loads(out.read_text())
    rows = result_json["rows"]
    assert "warm_up_compilers" in result_json["meta"]["first_calls"]  # a throwaway compile first
    assert [r["workload"] for r in rows] == models.NAMES
    for r in rows:
        assert r["minipt2_error"] <= TOLERANCE[r["dtype"]], r
        assert r["minipt2_graphs"] >= 1 and r["minipt2_kernels"] >= 1, r
        assert r["eager_ms"] > 0 and r["minipt2_ms"] > 0, r
    by_name = {r["workload"]: r for r in rows}
    assert by_name["graph_breaks"]["minipt2_graphs"] >= 2  # the print and .item() split it
    decode = by_name["decode_dynamic"]
    assert decode["lengths"] == len(models.DECODE_LENGTHS["tiny"])
    assert decode["minipt2_graphs"] <= 2  # dynamic shapes: static, then one symbolic graph
    assert [r["length"] for r in decode["per_length"]] == list(models.DECODE_LENGTHS["tiny"])
    assert "decode_dynamic" in result.stdout and "geomean float32" in result.stdout


def test_a_failing_peer_is_reported_not_raised(monkeypatch):
    """torch.compile can fail where minipt2 runs (mode="reduce-overhead" on decoding raised
    "accessing tensor output of CUDAGraphs that has been overwritten" on the H200): the row
    says so, the table and the geomean go on without it."""
    import argparse

    import bench_models
    import torch

    def failing_peer(w, mode="default"):
        def step():
            raise RuntimeError("overwritten by a subsequent run\nsecond line")
        return step

    monkeypatch.setattr(bench_models, "peer_step", failing_peer)
    w = models.build("mlp_train", "cpu", torch.float32, "tiny")
    args = argparse.Namespace(target="cpp", mode="default", no_torch_compile=False)
    row = bench_models.bench_model(w, args)
    assert row["torch_compile_failed"] == "RuntimeError: overwritten by a subsequent run"
    assert "torch_compile_ms" not in row and "torch_compile_s" not in row
    assert row["minipt2_speedup"] > 0
    text = bench_models.table([row])
    assert "torch.compile failed: RuntimeError" in text
    assert "torch.compile -" in text  # no peer geomean from zero rows


def test_profile_step_reports_kernels_gaps_and_phases():
    """``benchmarks/profile_step.py`` on the CPU: the per-step profile of eager and minipt2
    (kernels, busy time against span, gaps) and the host's phases of a training step."""
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_step.py"),
                             "--workload", "graph_breaks", "--size", "tiny", "--steps", "2",
                             "--compare", "none"], capture_output=True, text=True,
                            cwd=ROOT, timeout=600, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for who in ("eager", "minipt2"):
        assert f"== graph_breaks float32 {who}: " in out and "us span" in out, out
        assert f"== host phases, {who}: forward " in out, out
    assert "torch.compile" not in out  # --compare none
    assert "CompiledFunction" in out  # minipt2's training graphs, as the profiler names them
