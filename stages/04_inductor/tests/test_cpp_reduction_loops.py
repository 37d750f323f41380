"""The C++ printer's loops over r: split accumulators ([Note: split accumulators]) and the
per-row scratch that keeps softmax's exps for its last loop ([Note: row scratch]). Row
lengths around the split width (LANES) run the split loop, its tail, or only the plain loop;
NaN and infinity rows must come out as in eager."""

from __future__ import annotations

import pytest
import torch
from inductor.codegen.cpp import LANES
from test_cpp_backend import compile_and_run
from test_reductions import layernorm_eager, layernorm_graph, softmax_graph

LENGTHS = [1, LANES - 1, 2 * LANES - 1, 2 * LANES, 2 * LANES + 1, 5 * LANES + 7, 1000]


def special_rows(n: int) -> torch.Tensor:
    """Random rows, then rows holding a NaN, +inf, -inf, all -inf, and huge values."""
    x = torch.randn(8, n) * 4
    x[1, n // 2] = float("nan")
    x[2, n - 1] = float("inf")
    x[3, 0] = -float("inf")
    x[4, :] = -float("inf")
    x[5, :] = 1e30
    x[6, n // 3] = 1e30
    return x


def kernel_source(compiled) -> str:
    (source,) = [v for k, v in compiled.artifacts.items() if k.startswith("kernels/")]
    return source


@pytest.mark.parametrize("n", LENGTHS)
def test_softmax_rows_like_eager(n):
    x = special_rows(n)
    compiled, (out,) = compile_and_run(softmax_graph, [x])
    assert compiled.kernel_count == 1
    torch.testing.assert_close(out, torch.softmax(x, 1), equal_nan=True)


@pytest.mark.parametrize("n", LENGTHS)
def test_layernorm_rows_like_eager(n):
    x = special_rows(n)
    x[5, :] = 3.0  # constant row: variance 0
    x[6, n // 3] = 1e4  # (eager's layer norm gives NaN for a row holding 1e30)
    compiled, (out, mean) = compile_and_run(layernorm_graph, [x])
    assert compiled.kernel_count == 1
    want, want_mean = layernorm_eager(x)
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4, equal_nan=True)
    torch.testing.assert_close(mean, want_mean, equal_nan=True)


@pytest.mark.parametrize("name", ["amax", "amin", "sum", "prod"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32])
def test_split_reductions_like_eager(name, dtype):
    x = (torch.randn(6, 3 * LANES + 5) * 3).to(dtype)
    if name == "prod":
        x = x.clamp(-2, 2) if dtype.is_floating_point else x.clamp(-1, 1)
    if dtype.is_floating_point:
        x[1, 40], x[2, 3 * LANES + 4], x[3, 0] = float("nan"), float("inf"), -float("inf")
    compiled, (out,) = compile_and_run(lambda p, a: getattr(p, name)(a, [1]), [x])
    assert "_lanes" in kernel_source(compiled)
    want = getattr(torch, name)(x, 1)
    torch.testing.assert_close(out, want.to(out.dtype), equal_nan=True)


def test_softmax_computes_exp_once_per_element():
    """The last loop reads the exps the sum loop kept, not a second ``std::exp``."""
    compiled, _ = compile_and_run(softmax_graph, [torch.randn(4, 4 * LANES)])
    source = kernel_source(compiled).split('extern "C" void')[-1]  # the kernel, no prelude
    assert source.count("std::exp(") == 1
    assert "row_" in source


def test_layernorm_keeps_no_scratch():
    """Recomputing ``x - mean`` is cheaper than a scratch row: nothing is kept."""
    compiled, _ = compile_and_run(layernorm_graph, [torch.randn(4, 4 * LANES)])
    assert "row_" not in kernel_source(compiled)


@pytest.fixture
def fresh_driver():
    """driver.compile's caches empty before and after: what a test compiles (here an
    ``nn.Sequential``, whose ``forward`` other tests compile too) leaves no sizes behind
    for automatic dynamic shapes to find."""
    import driver

    driver.reset()
    yield driver
    driver.reset()


COLUMN_CASES = {
    "sum": lambda x: x.sum(0),
    "weighted_sum": lambda x: (x * x.cos()).sum(0),
    "mean_and_max": lambda x: (x.mean(0), x.amax(0), x.amin(0)),
    "over_two_dims": lambda x: x.view(4, -1, x.shape[-1]).sum((0, 1)),
}


@pytest.mark.parametrize("columns", [64, 96, 40])
@pytest.mark.parametrize("case", sorted(COLUMN_CASES))
def test_column_reductions_like_eager(case, columns, fresh_driver):
    """[Note: column reductions on the CPU]: lanes across the columns when their count is a
    multiple of XLANES (64, 96), the usual loops otherwise (40); values, NaN and infinity
    as in eager."""
    from inductor.codegen.cpp import CppKernel

    fn = COLUMN_CASES[case]
    torch.manual_seed(columns)
    x = torch.randn(64, columns) * 3
    x[5, 3], x[7, 9], x[9, 10] = float("nan"), float("inf"), -float("inf")
    compiled = fresh_driver.compile(fn, options={"target": "cpp"})
    got, want = compiled(x), fn(x)
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        # 64 float32 terms of size ~3, added in another order than eager's: up to about
        # 64 * 2**-24 * 24 apart (one clean-clone CI run, unseeded, saw 1.3e-5)
        torch.testing.assert_close(g, w, equal_nan=True, rtol=1.3e-6, atol=1e-4)
    sources = "".join(v for r in compiled.graphs for k, v in r.artifacts.items()
                      if k.startswith("kernels/"))
    assert ("xb += " in sources) == (columns % CppKernel.XLANES == 0)


def test_bias_gradients_use_column_loops(fresh_driver):
    """The case that motivated it: a Linear's bias gradient in a training step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
    twin = __import__("copy").deepcopy(model)
    compiled = fresh_driver.compile(model, options={"target": "cpp"})
    x = torch.randn(128, 64)
    compiled(x).square().mean().backward()
    twin(x).square().mean().backward()
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a.grad, b.grad)
    sources = "".join(v for r in compiled.graphs for k, v in r.artifacts.items()
                      if "kernels/" in k)  # the backward's: "backward/kernels/..."
    assert "xb += " in sources
