"""[Note: tuning reductions by default]: with MINIPT2_TUNE_REDUCTIONS=1, on a GPU, the
default mode launches reduction kernels through the autotuner over a few configs; pointwise
kernels keep their heuristic. Off by default (it did not pay for its compile time)."""

from __future__ import annotations

import importlib

import inductor
import pytest
import torch
from inductor import autotune
from inductor_testing import assert_close, prims_graph, to_target

compile_fx = importlib.import_module("inductor.compile_fx")  # the module, not the function


def softmax_then_sin(p, x):
    shape = list(x.meta["val"].shape)
    rows = [shape[0], 1]
    m = p.amax(x, [1])
    e = p.exp(p.sub(x, p.bcast(p.reshape(m, rows), shape)))
    s = p.sum(e, [1])
    return p.sin(p.div(e, p.bcast(p.reshape(s, rows), shape))), p.cos(x)


def compile_and_run(monkeypatch, can_time: bool, env: str | None = "1"):
    monkeypatch.setattr(compile_fx, "can_time", lambda: can_time)
    if env is None:
        monkeypatch.delenv("MINIPT2_TUNE_REDUCTIONS", raising=False)
    else:
        monkeypatch.setenv("MINIPT2_TUNE_REDUCTIONS", env)
    x = to_target([torch.randn(37, 300)], "triton")
    compiled = inductor.compile_fx_inner(prims_graph(softmax_then_sin, x), x, target="triton")
    return compiled, compiled(*x), x[0]


def test_reductions_are_tuned_when_there_is_a_gpu(monkeypatch):
    compiled, (out, out2), x = compile_and_run(monkeypatch, can_time=True)
    wrapper = compiled.artifacts["wrapper"]
    reductions = [k for k, t in compiled.autotuners.items() if t.kernel.rnumel is not None]
    assert reductions and set(reductions) == set(compiled.autotuners)  # no pointwise one
    for name in reductions:
        assert f"{name}.run(" in wrapper
        configs = compiled.autotuners[name].kernel.configs
        assert 2 <= len(configs) <= 4 and configs[0] == compiled.autotuners[name].kernel.launch
    assert_close(out, torch.softmax(x.cpu(), 1).sin())
    assert_close(out2, x.cpu().cos())


@pytest.mark.parametrize("can_time,env", [(False, "1"), (True, "0"), (True, None)])
def test_no_gpu_or_switched_off_means_plain_launches(monkeypatch, can_time, env):
    compiled, (out, _), x = compile_and_run(monkeypatch, can_time, env)
    assert compiled.autotuners == {} and ".run(" not in compiled.artifacts["wrapper"]
    assert_close(out, torch.softmax(x.cpu(), 1).sin())


def test_default_candidates_are_neighbours_of_the_heuristic():
    class Source:  # the fields default_reduction_configs reads
        launch = {"XBLOCK": 4, "RBLOCK": 1024, "num_warps": 8}
        rnumel = 1000

    configs = autotune.default_reduction_configs(Source)
    assert configs[0] == Source.launch
    assert {c["num_warps"] for c in configs} == {4, 8, 16}
    assert all(c["RBLOCK"] == 1024 for c in configs)  # a persistent row stays whole
