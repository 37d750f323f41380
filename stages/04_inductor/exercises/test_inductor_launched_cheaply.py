"""Exercise inductor-launched-cheaply: tests that pass on the reference ``launched_cheaply``
and fail on the stub. Run with ``python -m driver exercise check inductor-launched-cheaply``."""

from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import inductor  # noqa: E402
from inductor import autotune, later, mm_template  # noqa: E402
from inductor_testing import device_for  # noqa: E402

CUDA = torch.device("cuda")


@pytest.fixture
def h200(monkeypatch):
    """A GPU that can be timed, with the H200's 132 multiprocessors."""
    monkeypatch.setattr(autotune, "can_time", lambda: True)
    monkeypatch.setattr(mm_template, "multiprocessors", lambda device: 132)


def test_graph_breaks_products_take_the_template(h200):
    assert mm_template.launched_cheaply(4096, 2048, 2048, torch.bfloat16, CUDA)
    assert mm_template.launched_cheaply(2048, 2048, 4096, torch.float16, CUDA)


@pytest.mark.parametrize("m, n, k, dtype", [
    (4096, 2048, 2048, torch.float32),  # not 16-bit
    (8192, 2304, 768, torch.bfloat16),  # K below CHEAP_MIN_DIM (GPT-2's attention input)
    (4096, 4096, 4096, torch.bfloat16),  # 2 * 4096**3 flops: more than CHEAP_MAX_FLOPS
])
def test_other_products_keep_the_library(h200, m, n, k, dtype):
    assert not mm_template.launched_cheaply(m, n, k, dtype, CUDA)


def test_a_half_empty_last_wave_keeps_the_library(h200, monkeypatch):
    # 2048 x 2176 in 128 x 128 tiles: 16 x 17 = 272, 3 waves over 132 with 8 in the last
    assert not mm_template.launched_cheaply(2048, 2176, 2048, torch.bfloat16, CUDA)
    monkeypatch.setattr(mm_template, "multiprocessors", lambda device: 136)  # 2 full waves
    assert mm_template.launched_cheaply(2048, 2176, 2048, torch.bfloat16, CUDA)


def test_without_a_gpu_to_time_nothing_takes_it(monkeypatch):
    monkeypatch.setattr(autotune, "can_time", lambda: False)
    monkeypatch.setattr(mm_template, "multiprocessors", lambda device: 132)
    assert not mm_template.launched_cheaply(4096, 2048, 2048, torch.bfloat16, CUDA)


def test_the_default_mode_builds_the_template_behind_the_library(monkeypatch, tmp_path):
    """End to end, with the rule's limits lowered to a 64-wide product on a GPU of one
    multiprocessor: the compiled graph's texts hold the template, its first calls ran the
    library's version, and both answer as eager does."""
    monkeypatch.setenv("MINIPT2_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("MINIPT2_MM_TEMPLATE", raising=False)
    monkeypatch.setattr(autotune, "can_time", lambda: True)
    monkeypatch.setattr(autotune, "benchmark", lambda launch, config: 1 / 0)  # never timed
    monkeypatch.setattr(mm_template, "multiprocessors", lambda device: 1)
    monkeypatch.setattr(mm_template, "CHEAP_MIN_DIM", 64)
    dev = device_for("triton")
    a = torch.randn(64, 64, device=dev, dtype=torch.bfloat16)
    b = torch.randn(64, 64, device=dev, dtype=torch.bfloat16)
    compiled = inductor.compile_fx(torch.fx.symbolic_trace(
        lambda x, y: (torch.relu(x @ y),)), [a, b], options={"target": "triton"})
    torch.testing.assert_close(compiled(a, b)[0], torch.relu(a @ b), atol=3e-2, rtol=3e-2)
    later.wait()
    torch.testing.assert_close(compiled(a, b)[0], torch.relu(a @ b), atol=3e-2, rtol=3e-2)
    assert "triton_tem_mm" in compiled.artifacts["wrapper"]
    assert "triton_tem_mm" not in compiled.artifacts["library_wrapper"]
