"""Exercise primtorch-hardsigmoid: the decomposition of ``aten.hardsigmoid``."""

import pytest
import torch
from primtorch import decomposition_table, prims

hardsigmoid = decomposition_table[torch.ops.aten.hardsigmoid.default]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_matches_eager(dtype):
    x = torch.linspace(-5, 5, 41, dtype=torch.float64).to(dtype).reshape(1, 41).t()
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-6
    torch.testing.assert_close(hardsigmoid(x), torch.nn.functional.hardsigmoid(x),
                               rtol=tol, atol=tol)


def test_edges_and_nan():
    x = torch.tensor([-3.0, 3.0, -100.0, 100.0, 0.0, float("nan")])
    expected = torch.nn.functional.hardsigmoid(x)
    torch.testing.assert_close(hardsigmoid(x), expected, equal_nan=True)


def test_uses_only_prims():
    calls = []

    class Record(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            calls.append(func)
            return func(*args, **(kwargs or {}))

    x = torch.randn(3, 4)
    with Record():
        hardsigmoid(x)
    assert calls and all(prims.is_prim(f) for f in calls), calls


def test_meta():
    out = hardsigmoid(torch.empty(2, 5, dtype=torch.bfloat16, device="meta"))
    assert out.shape == (2, 5) and out.dtype == torch.bfloat16
