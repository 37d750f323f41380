"""Exercise inductor-tile-plan: tests that pass on the reference ``tile_plan`` and fail on
the stub. Run with ``python -m driver exercise check inductor-tile-plan``."""

from __future__ import annotations

import itertools
import os
import sys

import pytest
import sympy
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from inductor.codegen.triton_template import X0, Y0, tile_plan  # noqa: E402
from inductor.ir import index_vars  # noqa: E402
from inductor_testing import device_for  # noqa: E402

import driver  # noqa: E402


@pytest.mark.parametrize("ranges", [[6, 5], [2, 3, 5], [2, 1, 3, 4], [1, 4, 5]])
def test_every_element_lands_on_its_row_and_column(ranges):
    plan = tile_plan(ranges)
    rows = 1
    for n in ranges[:-1]:
        rows *= n
    assert [int(n) for n in plan.sizes] == [rows, ranges[-1]] and plan.symbols == [Y0, X0]
    symbols = index_vars(ranges, "i")
    for flat, point in enumerate(itertools.product(*map(range, ranges))):
        row, col = divmod(flat, ranges[-1])
        env = {Y0: row, X0: col}
        for sym, value in zip(symbols, point):
            if isinstance(sym, sympy.Symbol):
                assert int(plan.replacements[sym].subs(env)) == value, (sym, point)


def test_a_linear_over_three_dims_runs_as_one_template(monkeypatch, tmp_path):
    monkeypatch.setenv("MINIPT2_MM_TEMPLATE", "1")
    monkeypatch.setenv("MINIPT2_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MINIPT2_STRICT", "1")  # a broken plan must fail, not fall back
    dev = device_for("triton")
    torch.manual_seed(0)
    layer = torch.nn.Linear(32, 48).to(dev)
    x, r = torch.randn(3, 17, 32, device=dev), torch.randn(3, 17, 48, device=dev)
    fn = lambda a, b: torch.tanh(layer(a)) + b  # noqa: E731
    compiled = driver.compile(fn, mode="max-autotune", options={"target": "triton"})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, r), fn(x, r), atol=1e-4, rtol=1e-4)
