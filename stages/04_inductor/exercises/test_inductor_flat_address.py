"""Exercise inductor-flat-address: tests that pass on the reference ``flat_suffix`` and fail
on the stub. Run with ``python -m driver exercise check inductor-flat-address``."""

from __future__ import annotations

import itertools
import os
import sys

import pytest
import sympy
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from inductor.codegen.triton import XINDEX, flat_suffix  # noqa: E402
from inductor_testing import assert_close, device_for  # noqa: E402

import driver  # noqa: E402

X = sympy.symbols("x0 x1 x2", integer=True, nonnegative=True)
S0 = sympy.Symbol("s0", integer=True, positive=True)


def same_addresses(index, sizes, symbols, rewritten) -> bool:
    for flat, point in enumerate(itertools.product(*map(range, sizes))):
        env = dict(zip(symbols, point))
        if rewritten.subs({XINDEX: flat, **env}) != index.subs(env):
            return False
    return True


@pytest.mark.parametrize("sizes,index,folded", [
    ((4, 6), 6 * X[0] + X[1], XINDEX),
    ((3, 4, 5), 3 + 2 * (20 * X[0] + 5 * X[1] + X[2]), 3 + 2 * XINDEX),
    ((3, 4, 5), 9 * X[0] + 5 * X[1] + X[2], 9 * X[0] + sympy.Mod(XINDEX, 20)),
    ((3, 4, 5), 3 * X[0] + 4 * X[1] + X[2], 3 * X[0] + 4 * X[1] + X[2]),
    ((3, 4), X[0] + 4 * X[1], X[0] + 4 * X[1]),
])
def test_rewrites_the_row_major_run(sizes, index, folded):
    symbols = list(X[:len(sizes)])
    got = flat_suffix(index, list(sizes), symbols)
    assert sympy.expand(got - folded) == 0
    assert same_addresses(index, sizes, symbols, got)


def test_symbolic_sizes():
    got = flat_suffix(64 * S0 * X[0] + 64 * X[1] + X[2], [3, S0, 64], list(X))
    assert got == XINDEX


def test_a_compiled_kernel_reads_at_xindex():
    device = device_for("triton")
    x, b = torch.randn(16, 256, device=device), torch.randn(256, device=device)
    compiled = driver.compile(lambda a, c: (a + c).exp(), options={"target": "triton"})
    assert_close(compiled(x, b), (x + b).exp().cpu())
    (source,) = [v for r in compiled.graphs for k, v in r.artifacts.items()
                 if k.startswith("kernels/")]
    assert "tl.load(in_ptr0 + (xindex))" in source
