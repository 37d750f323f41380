"""[Note: online softmax]: a looped Triton kernel computes a row's max and its sum of
exponentials in one pass; values and gradients against eager, including rows holding
-inf, NaN and large values, and the sums that must keep their own loop."""

from __future__ import annotations

import aotautograd
import inductor
import pytest
import torch
import torch.nn.functional as F
from inductor.codegen import triton_reduction
from inductor_testing import assert_close, to_target

# the interpreter's numpy warns at inf - inf, which the -inf rows compute as eager does
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
needs_aot = pytest.mark.skipif(not hasattr(aotautograd, "aot_module_simplified"),
                               reason="needs aotautograd")


@pytest.fixture
def looped(monkeypatch):
    """Rows longer than a persistent tile: the reductions loop over r in 16-wide tiles."""
    monkeypatch.setattr(triton_reduction, "PERSISTENT_MAX", 16)
    monkeypatch.setattr(triton_reduction, "LOOP_RBLOCK", 16)
    torch.manual_seed(0)


def rows(dtype=torch.float32) -> torch.Tensor:
    """7 rows of 45: plain, shifted by 1000, some -inf, all -inf, a NaN, a +inf."""
    x = torch.randn(7, 45) * 3
    x[1] += 1000.0
    x[2, ::3] = float("-inf")
    x[3] = float("-inf")
    x[4, 7] = float("nan")
    x[5, 40] = float("inf")
    return x.to(dtype)


def compile_triton(fn, inputs):
    return inductor.compile_fx(torch.fx.symbolic_trace(fn), to_target(inputs, "triton"),
                               options={"target": "triton"})


def loops_of(compiled, marker="tl.exp") -> list[int]:
    """The number of loops over r of each forward kernel that computes an exponential."""
    return [text.count("for roffset") for key, text in compiled.artifacts.items()
            if key.startswith("kernels/") and marker in text]


@needs_aot
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("softmax", [torch.softmax, torch.log_softmax])
def test_softmax_in_one_pass_over_the_statistics(looped, dtype, softmax):
    def fn(x):
        return (softmax(x, -1),)

    x = rows(dtype)
    compiled = compile_triton(fn, [x])
    (got,) = compiled(*to_target([x], "triton"))
    # bfloat16: a result a rounding away from eager's (each is within one of float32's)
    tol = {} if dtype == torch.float32 else {"atol": 1e-2, "rtol": 2e-2}
    assert_close(got, fn(x)[0], equal_nan=True, **tol)
    # the max and the sum in one loop, the outputs in a second (was three loops)
    assert loops_of(compiled) == [2]
    assert "tl.exp(acc" in "".join(compiled.artifacts.values())  # the rescaled sum


@needs_aot
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cross_entropy_values_and_gradients(looped, dtype):
    def loss(x, target):
        return (F.cross_entropy(x, target),)

    x = torch.randn(9, 45, dtype=dtype) * 4
    x[2] += 500.0
    target = torch.randint(0, 45, (9,))
    compiled = compile_triton(loss, [x, target])
    xe = x.clone().requires_grad_()
    xc = to_target([x], "triton")[0].clone().requires_grad_()
    (got,) = compiled(xc, *to_target([target], "triton"))
    (want,) = loss(xe, target)
    tol = {} if dtype == torch.float32 else {"atol": 1e-2, "rtol": 1e-2}
    assert_close(got, want, **tol)
    got.backward()
    want.backward()
    assert_close(xc.grad, xe.grad, **tol)
    # the log-sum-exp's max and sum: one pass, and nothing of the row's size stored: the
    # target gather computes its entries from x ([Note: a value and its own statistics])
    assert loops_of(compiled)[0] == 1


@needs_aot
def test_a_sum_shifted_by_another_rows_max(looped):
    """sum(exp(y - max(x))): the running max is y's, and the sum is scaled by
    exp(max(y) - max(x)) after the loop."""
    def fn(x, y):
        return ((y - x.amax(-1, keepdim=True)).exp().sum(-1),)

    x, y = torch.randn(6, 45), torch.randn(6, 45) - 2.0
    y[3, 5] = 30.0  # y's max far above x's: the scale factor is large
    compiled = compile_triton(fn, [x, y])
    (got,) = compiled(*to_target([x, y], "triton"))
    assert_close(got, fn(x, y)[0], rtol=1e-5, atol=1e-5)
    assert loops_of(compiled) == [1]


@needs_aot
def test_other_sums_keep_their_second_loop(looped):
    """Only exactly sum(exp(h - max)) is computed online: twice that is not."""
    def fn(x):
        return (((x - x.amax(-1, keepdim=True)).exp() * 2.0).sum(-1),)

    x = rows()[:3]
    compiled = compile_triton(fn, [x])
    (got,) = compiled(*to_target([x], "triton"))
    assert_close(got, fn(x)[0], equal_nan=True)
    assert loops_of(compiled) == [2]


def test_rows_of_symbolic_length(looped):
    """A row length that is a symbol (dynamic shapes): the same one-pass kernel serves
    every length, full tiles or not."""
    import driver

    driver.reset()
    compiled = driver.compile(lambda x: torch.log_softmax(x, -1), dynamic=True,
                              options={"target": "triton"})
    for length in (45, 64, 97):
        x = rows()[:, :1].repeat(1, length) + torch.randn(7, length)
        x[2, ::3] = float("-inf")
        (gx,) = to_target([x], "triton")  # the GPU's, where there is one
        assert_close(compiled(gx), torch.log_softmax(x, -1), equal_nan=True)
    symbolic = [text for graph in compiled.graphs for key, text in graph.artifacts.items()
                if key.startswith("kernels/") and ", rnumel, " in text]  # not a constexpr
    assert symbolic and all("tl.exp(acc" in text for text in symbolic)  # the rescaled sum
