"""``mode="max-autotune"``: candidate configs, the choice of the fastest, the disk cache.

Without a GPU nothing can be timed ([Note: autotuning]), so the tests that tune replace
``autotune.benchmark`` with a deterministic fake clock: it runs each launch once (so every
candidate really runs) and reports made-up times in which the third candidate is fastest.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import inductor
import pytest
import torch
from inductor import autotune, split_reduction
from inductor_testing import assert_close, device_for, prims_graph, to_target

ON_GPU = device_for("triton").type == "cuda"  # a real GPU: kernels are compiled and timed

FASTEST = 2  # the candidate the fake clock says is fastest (not the heuristic, which is 0)

# kind -> (prims program, input shape, eager)
KERNELS = {
    "flat": (lambda p, a: p.sin(a), (37, 53), torch.sin),
    "tiled": (lambda p, a: p.sin(p.permute(a, [1, 0])), (37, 53), lambda x: x.t().sin()),
    "persistent": (lambda p, a: p.sum(a, [1]), (37, 53), lambda x: x.sum(1)),
    "looped": (lambda p, a: p.amax(a, [1]), (3, 9000), lambda x: x.amax(1)),
}


class FakeClock:
    """``autotune.benchmark`` for tests: launches, then reports a deterministic time."""

    def __init__(self) -> None:
        self.timed: list[dict] = []

    def __call__(self, launch, config) -> float:
        launch()
        self.timed.append(config)
        return 1.0 + abs(len(self.timed) - 1 - FASTEST)


def refuse_to_time(launch, config) -> float:
    raise AssertionError("timed again: the cached config should have been used")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIPT2_CACHE_DIR", str(tmp_path))
    # one kernel per kind: on CUDA the looped kind's 3 rows of 9000 would be split into two
    # kernels ([Note: split reductions]), and these tests tune a single kernel
    monkeypatch.setattr(split_reduction, "SPLIT_DEVICES", set())
    autotune.clear_memory_cache()
    yield tmp_path
    autotune.clear_memory_cache()


def use_clock(monkeypatch, clock) -> None:
    monkeypatch.setattr(autotune, "can_time", lambda: True)
    monkeypatch.setattr(autotune, "benchmark", clock)


def compile_and_run(kind: str, mode: str = "max-autotune", target: str = "triton"):
    fn, shape, eager = KERNELS[kind]
    torch.manual_seed(0)
    x = torch.randn(shape)
    (gx,) = to_target([x], target)
    compiled = inductor.compile_fx_inner(prims_graph(fn, [gx]), [gx], target=target, mode=mode)
    (out,) = compiled(gx)
    assert_close(out, eager(x))
    return compiled


def only_tuner(compiled) -> autotune.Autotuner:
    (tuner,) = compiled.autotuners.values()
    return tuner


def entries(cache) -> list:
    directory = cache / "autotune"
    return sorted(directory.iterdir()) if directory.exists() else []


@pytest.mark.parametrize("kind", sorted(KERNELS))
def test_picks_the_fastest_config_and_caches_it(kind, cache, monkeypatch):
    clock = FakeClock()
    use_clock(monkeypatch, clock)
    tuner = only_tuner(compile_and_run(kind))
    configs = tuner.kernel.configs
    assert len(configs) > FASTEST and clock.timed == configs  # every candidate was timed
    ((config, how),) = tuner.decisions.values()
    assert config == configs[FASTEST] != configs[0] and how.startswith("timed")
    (entry,) = entries(cache)
    assert json.loads(entry.read_text())["config"] == configs[FASTEST]
    assert stat.S_IMODE(os.stat(cache / "autotune").st_mode) == 0o700


@pytest.mark.parametrize("kind", sorted(KERNELS))
def test_every_candidate_computes_the_same_result(kind, cache):
    fn, shape, eager = KERNELS[kind]
    tuner = only_tuner(compile_and_run(kind))
    x = to_target([torch.randn(shape)], "triton")[0]
    want = eager(x)
    assert [n[:3] for n in tuner.kernel.args] == ["arg", "buf"]
    for config in tuner.kernel.configs:
        out = torch.full(want.shape, float("nan"), device=want.device)  # contiguous, as buf0
        args = [x if name.startswith("arg") else out for name in tuner.kernel.args]
        tuner.launch(config, [*args, *tuner.kernel.size_args()])
        assert_close(out, want.cpu(), msg=lambda m, c=config: f"{c}: {m}")


def test_reuses_the_disk_cache_after_clearing_memory(cache, monkeypatch):
    use_clock(monkeypatch, FakeClock())
    first = only_tuner(compile_and_run("tiled"))
    monkeypatch.setattr(autotune, "benchmark", refuse_to_time)
    again = only_tuner(compile_and_run("tiled"))  # a new graph, same kernel: this process
    assert list(again.decisions.values())[0][1] == "memory"
    autotune.clear_memory_cache()
    fresh = only_tuner(compile_and_run("tiled"))
    ((config, how),) = fresh.decisions.values()
    assert how == "disk" and config == list(first.decisions.values())[0][0]


def test_reuses_the_disk_cache_in_a_new_process(cache, monkeypatch):
    use_clock(monkeypatch, FakeClock())
    tuner = only_tuner(compile_and_run("persistent"))
    script = f"""
import sys
import torch
sys.path.insert(0, {os.path.dirname(__file__)!r})
import inductor
from inductor import autotune
from inductor_testing import prims_graph, to_target

def refuse(launch, config):
    raise AssertionError("timed again")

autotune.can_time = lambda: True
autotune.benchmark = refuse
torch.manual_seed(0)
x = to_target([torch.randn(37, 53)], "triton")[0]  # on the GPU when there is one
compiled = inductor.compile_fx_inner(prims_graph(lambda p, a: p.sum(a, [1]), [x]), [x],
                                     target="triton", mode="max-autotune")
torch.testing.assert_close(compiled(x)[0], x.sum(1))
((config, how),) = list(compiled.autotuners.values())[0].decisions.values()
print(how, sorted(config.items()))
"""
    env = dict(os.environ, MINIPT2_CACHE_DIR=str(cache))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    ((config, _),) = tuner.decisions.values()
    assert result.stdout.strip() == f"disk {sorted(config.items())}"


@pytest.mark.parametrize("corruption", ["{not json", '{"config": {"XBLOCK": 3}}', "[]"])
def test_a_corrupt_entry_is_rebuilt(corruption, cache, monkeypatch):
    use_clock(monkeypatch, FakeClock())
    compile_and_run("flat")
    (entry,) = entries(cache)
    entry.write_text(corruption)
    autotune.clear_memory_cache()
    clock = FakeClock()
    use_clock(monkeypatch, clock)
    tuner = only_tuner(compile_and_run("flat"))
    ((config, how),) = tuner.decisions.values()
    assert how.startswith("timed") and clock.timed == tuner.kernel.configs
    assert json.loads(entry.read_text())["config"] == config == tuner.kernel.configs[FASTEST]


@pytest.mark.skipif(ON_GPU, reason="about the CPU-only set-up: with a GPU, kernels are "
                    "timed (test_with_a_gpu_every_candidate_is_timed_and_written)")
def test_without_a_gpu_the_heuristic_is_used_and_nothing_written(cache):
    for kind in KERNELS:
        tuner = only_tuner(compile_and_run(kind))
        ((config, how),) = tuner.decisions.values()
        assert how == "heuristic" and config == tuner.kernel.configs[0] == tuner.kernel.launch
    assert entries(cache) == []


@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU: the interpreter is never timed")
def test_with_a_gpu_every_candidate_is_timed_and_written(cache):
    """The real clock (``triton.testing.do_bench``): every kind is timed once, the winner
    written to disk and taken from memory when the same kernel is compiled again."""
    for kind in KERNELS:
        tuner = only_tuner(compile_and_run(kind))
        ((config, how),) = tuner.decisions.values()
        assert how.startswith("timed") and config in tuner.kernel.configs
        again = only_tuner(compile_and_run(kind))
        assert list(again.decisions.values()) == [(config, "memory")]
    assert len(entries(cache)) == len(KERNELS)


def test_default_mode_and_cpp_do_not_autotune(cache):
    compiled = compile_and_run("flat", mode="default")
    assert compiled.autotuners == {} and ".run(" not in compiled.artifacts["wrapper"]
    assert "num_warps=" in compiled.artifacts["wrapper"]  # a plain kernel[grid](...) launch
    compiled = compile_and_run("flat", target="cpp")
    assert compiled.autotuners == {} and ".run(" not in compiled.artifacts["wrapper"]


def test_mode_reaches_the_launcher_through_driver(cache):
    import driver

    driver.reset()
    x = to_target([torch.randn(37, 53)], "triton")[0]
    compiled = driver.compile(lambda t: (t.t() * 2).sin(), mode="max-autotune",
                              options={"target": "triton"})
    assert_close(compiled(x), (x.t() * 2).sin().cpu())
    (record,) = compiled.graphs
    assert ".run(" in record.artifacts["wrapper"] and "autotuned over" in \
        record.artifacts["wrapper"]
    (graph,) = record.compiled.compiled_graphs
    assert len(graph.autotuners) == 1


def test_bad_mode():
    x = torch.randn(3)
    with pytest.raises(ValueError, match="mode"):
        inductor.compile_fx_inner(prims_graph(lambda p, a: p.sin(a), [x]), [x], mode="fast")


def test_candidate_lists():
    flat = autotune.pointwise_configs({"XBLOCK": 1024, "num_warps": 4}, 10**6)
    assert flat[0] == {"XBLOCK": 1024, "num_warps": 4} and len(flat) == len(
        {tuple(sorted(c.items())) for c in flat})
    tiny = autotune.pointwise_configs({"XBLOCK": 8, "num_warps": 1}, 5)
    assert all(c["XBLOCK"] == 8 and c["num_warps"] == 1 for c in tiny)
    tiled = autotune.tiled_configs({"YBLOCK": 32, "XBLOCK": 32, "num_warps": 4}, 5, 1000)
    assert all(c["YBLOCK"] == 8 for c in tiled[1:])  # capped at the y extent
    big = autotune.tiled_configs({"YBLOCK": 32, "XBLOCK": 32, "num_warps": 4}, 10**4, 10**4)
    assert min(c["YBLOCK"] for c in big) >= autotune.MIN_YBLOCK
    persistent = autotune.reduction_configs({"XBLOCK": 4, "RBLOCK": 1024, "num_warps": 8},
                                            True, 100)
    assert {c["RBLOCK"] for c in persistent} == {1024}  # a persistent row must fit
    looped = autotune.reduction_configs({"XBLOCK": 1, "RBLOCK": 2048, "num_warps": 4},
                                        False, 1)
    assert len({c["RBLOCK"] for c in looped}) > 1 and all(c["XBLOCK"] == 1 for c in looped)
    for c in [*flat, *tiled, *persistent, *looped]:
        for key in ("XBLOCK", "YBLOCK", "RBLOCK"):
            assert c.get(key, 1) & (c.get(key, 1) - 1) == 0  # powers of two (tl.arange)


# -- [Note: timing on scratch copies] ---------------------------------------------------------
def test_timing_writes_into_copies_not_into_the_real_buffers(cache, monkeypatch):
    """A BatchNorm's forward in training mode under max-autotune: every candidate of the
    kernel that writes the running statistics in place is launched by the fake clock, and
    the statistics still match eager's one update. (Without the copies, the running mean
    took one momentum step per launch.)"""
    import driver

    clock = FakeClock()
    use_clock(monkeypatch, clock)
    torch.manual_seed(5)
    dev = device_for("triton")
    model, twin = torch.nn.BatchNorm1d(8).to(dev), torch.nn.BatchNorm1d(8).to(dev)
    x = torch.randn(16, 8, device=dev) + 3
    compiled = driver.compile(model, mode="max-autotune-no-cudagraphs",
                              options={"target": "triton"})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), twin(x))
    assert len(clock.timed) > 2  # candidates were launched more than once in all
    for name, buf in model.named_buffers():
        torch.testing.assert_close(buf, dict(twin.named_buffers())[name], msg=name)


def test_written_positions_are_the_out_pointers():
    kernel = type("K", (), {"name": "triton_k", "args": ["arg0", "buf1", "arg2", "arg3"],
                            "source": "@triton.jit\ndef triton_k(in_ptr0, in_ptr1, out_ptr0, "
                                      "out_ptr1, xnumel, XBLOCK: tl.constexpr):\n"})()
    assert autotune.written_positions(kernel) == [2, 3]
    kernel.source = "no signature here"
    assert autotune.written_positions(kernel) == [0, 1, 2, 3]


def test_scratch_outputs_keep_views_and_share_a_storage():
    base = torch.arange(12.0)
    a, b = base[2:8].view(2, 3), base[4:10]
    scratch = autotune.scratch_outputs([base[:1], a, b], [1, 2])
    assert scratch[0] is not None and scratch[0].data_ptr() == base.data_ptr()
    for real, copy in zip((a, b), scratch[1:]):
        assert copy.data_ptr() != real.data_ptr()
        assert (copy.shape, copy.stride(), copy.storage_offset()) == \
            (real.shape, real.stride(), real.storage_offset())
        torch.testing.assert_close(copy, real)
    assert scratch[1].untyped_storage().data_ptr() == scratch[2].untyped_storage().data_ptr()
    scratch[1].zero_()
    assert base[2:8].sum() > 0  # the real buffer is untouched
