"""argmax/argmin and Welford's mean/m2 as reduction types: against eager on both printers,
in persistent and looped Triton kernels and in the C++ split-accumulator loops, and what
they fuse with (max.dim, var_mean, layer norm, batch norm)."""

from __future__ import annotations

import re

import inductor
import pytest
import torch
import torch.nn.functional as F
from inductor import split_reduction
from inductor.codegen import triton_reduction
from inductor.codegen.cpp import LANES
from inductor_testing import assert_close, device_for, prims_graph, results, to_target

import driver

TARGETS = ["cpp", "triton"]


def compile_and_run(fn, inputs, target):
    inputs = to_target(inputs, target)
    compiled = inductor.compile_fx_inner(prims_graph(fn, inputs), inputs, target=target)
    return compiled, compiled(*inputs)


def kernel_source(compiled) -> str:
    return "\n".join(v for k, v in compiled.artifacts.items() if k.startswith("kernels/"))


# ---- argmax / argmin --------------------------------------------------------------------

def rows_with_traps(rows: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    """Random rows, plus rows that trip naive argmax: ties, all equal, NaN, -inf/inf."""
    g = torch.Generator().manual_seed(n)
    if not dtype.is_floating_point:
        x = torch.randint(-3, 4, (rows, n), generator=g)  # many ties
        x[0] = 2
        return x.to(dtype)
    x = torch.randn(rows, n, generator=g)
    x[0] = 1.0  # all equal: position 0
    x[1, n // 3] = x[1, n - 1] = 50.0  # a tie: the first
    x[2, n // 2] = float("nan")
    x[2, n - 1] = float("nan")  # NaN counts as the extreme: the first NaN
    x[3] = float("-inf")  # all -inf: position 0 (argmax)
    x[4, n // 4] = float("inf")
    x[4, :n // 4] = float("-inf")
    return x.to(dtype)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n", [5, 2 * LANES + 3, 3000])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reductions_match_eager(target, n, name):
    x = rows_with_traps(6, n, torch.float32)
    if name == "argmin":
        x[3] = float("inf")  # all +inf: position 0
    compiled, (out,) = compile_and_run(lambda p, a: getattr(p, name)(a, 1), [x], target)
    assert out.dtype == torch.int64
    assert torch.equal(out.cpu(), getattr(torch, name)(x, 1))
    assert compiled.kernel_count == 1
    assert "FallbackKernel" not in compiled.artifacts["loop_ir"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reductions_in_looped_triton_kernels(target, name, monkeypatch):
    """Rows longer than a tile: each lane keeps its best, and ties between lanes go to the
    smaller position (a lane's best may sit after another lane's equal value)."""
    monkeypatch.setattr(triton_reduction, "PERSISTENT_MAX", 64)
    monkeypatch.setattr(triton_reduction, "LOOP_RBLOCK", 32)
    x = rows_with_traps(6, 301, torch.float32)
    x[5] = 0.0
    x[5, 40] = x[5, 7] = x[5, 290] = 9.0 if name == "argmax" else -9.0
    compiled, (out,) = compile_and_run(lambda p, a: getattr(p, name)(a, 1), [x], target)
    assert torch.equal(out.cpu(), getattr(torch, name)(x, 1))
    if target == "triton":
        assert "for roffset in range" in kernel_source(compiled)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("dim", [0, 1])
def test_arg_reductions_dtypes_and_strides(target, dtype, dim):
    x = rows_with_traps(9, 70, dtype)
    x = x.t().contiguous().t() if dim == 0 else x  # a transposed read
    _, (hi, lo) = compile_and_run(lambda p, a: (p.argmax(a, dim), p.argmin(a, dim)), [x],
                                  target)
    assert torch.equal(hi.cpu(), torch.argmax(x, dim))
    assert torch.equal(lo.cpu(), torch.argmin(x, dim))


@pytest.mark.parametrize("target", TARGETS)
def test_arg_reduction_of_a_size_one_dim_is_zero(target):
    x = torch.randn(4, 1, 3)
    compiled, (out,) = compile_and_run(lambda p, a: p.argmax(a, 1), [x], target)
    assert torch.equal(out.cpu(), torch.argmax(x, 1))


@pytest.mark.parametrize("target", TARGETS)
def test_max_dim_values_and_indices_are_one_kernel(target):
    device = device_for(target)
    x = torch.randn(8, 100, device=device)
    x[3, 10] = x[3, 20] = 99.0

    def fn(a):
        return torch.max(a * 2, dim=1)

    compiled = driver.compile(fn, options={"target": target})
    values, indices = compiled(x)
    want = fn(x)
    assert_close(values, want.values.cpu())
    assert torch.equal(indices.cpu(), want.indices.cpu())
    assert compiled.graphs[0].compiled.kernel_count == 1


# ---- Welford: mean and m2 in one pass ---------------------------------------------------

def split_here(target: str, rows: int, rnumel: int) -> bool:
    """Whether ``rows`` rows of ``rnumel`` elements are split on ``target``'s device: few long
    rows are, on CUDA only, into chunk partials and a second reduction over them ([Note:
    split reductions]). The tests' 3 to 6 rows are that case; the CPU keeps one kernel."""
    return (device_for(target).type in split_reduction.SPLIT_DEVICES
            and split_reduction.choose_splits(rows, rnumel) > 1)


def mean_m2_graph(dims):
    return lambda p, a: results(p, p.mean_m2(a, dims), 2)


def float64_stats(x: torch.Tensor, dims):
    x = x.double()
    return x.mean(dims), x.var(dims, correction=0) * (x.numel() / x.mean(dims).numel())


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n,offset", [(7, 0.0), (2 * LANES + 5, 100.0), (8192, 1000.0)])
def test_mean_m2_rows(target, n, offset):
    x = torch.randn(5, n) * 3 + offset
    compiled, (mean, m2) = compile_and_run(mean_m2_graph([1]), [x], target)
    want_mean, want_m2 = float64_stats(x, [1])
    assert_close(mean, want_mean.float(), rtol=1e-5, atol=1e-5)  # float32 sums
    assert_close(m2 / n, (want_m2 / n).float(), rtol=1e-4, atol=1e-4)
    # split (5 rows of 8192 on CUDA): the chunks' mean and m2 in one kernel, their
    # combination in a second
    assert compiled.kernel_count == (2 if split_here(target, 5, n) else 1)


@pytest.mark.parametrize("target", TARGETS)
def test_mean_m2_of_wide_rows_far_from_zero_in_one_pass(target):
    """65536-wide rows with mean 1e4 and std 1: the textbook one-pass formula would lose
    every digit; Welford per lane plus Chan's combination keeps them. The looped kernel
    runs one loop over the row, not two. On CUDA these 3 rows are split: chunks of 1024 in
    a persistent kernel (one pass, no loop), then Chan's combination of the chunks."""
    x = torch.randn(3, 65536) + 1e4
    compiled, (mean, m2) = compile_and_run(mean_m2_graph([1]), [x], target)
    want_mean, want_m2 = float64_stats(x, [1])
    assert_close(mean, want_mean.float(), rtol=1e-6, atol=0)
    assert_close(m2 / 65536, (want_m2 / 65536).float(), rtol=2e-3, atol=0)
    source = kernel_source(compiled)
    loops = source.count("for roffset in range") if target == "triton" else len(
        re.findall(r"for \(int64_t \w+ = \d+; \w+ < 65536", source))
    if split_here(target, 3, 65536):
        assert compiled.kernel_count == 2 and loops == 0, source
    else:
        assert compiled.kernel_count == 1 and loops == 1, source


@pytest.mark.parametrize("target", TARGETS)
def test_mean_m2_over_several_and_outer_dims(target):
    x = torch.randn(6, 5, 7).transpose(0, 1) * 2 - 3  # (5, 6, 7), strided
    _, (mean, m2) = compile_and_run(mean_m2_graph([0, 2]), [x], target)
    want_mean, want_m2 = float64_stats(x, [0, 2])
    assert_close(mean, want_mean.float(), rtol=1e-5, atol=1e-5)
    assert_close(m2, want_m2.float(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
def test_mean_m2_of_bfloat16_and_nan(target):
    x = (torch.randn(4, 300) * 2 + 5).bfloat16()
    x[2, 17] = float("nan")
    _, (mean, m2) = compile_and_run(mean_m2_graph([1]), [x], target)
    want_mean, want_m2 = float64_stats(x.float(), [1])
    assert mean.dtype == torch.bfloat16
    assert_close(mean, want_mean.bfloat16(), equal_nan=True, rtol=1e-2, atol=1e-2)
    assert_close(m2, want_m2.bfloat16(), equal_nan=True, rtol=1e-2, atol=1e-1)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("which", ["mean", "m2"])
def test_split_welford_reductions(target, which, monkeypatch):
    """Few long rows are split on a GPU ([Note: split reductions]); Welford's partials
    combine exactly. Tests allow splitting on the CPU too, to run both printers."""
    monkeypatch.setattr(split_reduction, "SPLIT_DEVICES", {"cuda", "cpu"})
    x = torch.randn(2, 16384) * 3 + 500

    def fn(p, a):
        mean, m2 = results(p, p.mean_m2(a, [1]), 2)
        return mean if which == "mean" else m2

    compiled, (out,) = compile_and_run(fn, [x], target)
    want_mean, want_m2 = float64_stats(x, [1])
    if which == "mean":
        assert_close(out, want_mean.float(), rtol=1e-6, atol=0)
    else:
        assert_close(out / 16384, (want_m2 / 16384).float(), rtol=1e-4, atol=0)
    assert compiled.kernel_count == (1 if target == "triton" else 2)  # ([Note: the last
    # program finishes]: one launch)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("correction", [0, 1])
def test_var_mean_std_through_the_driver(target, correction):
    device = device_for(target)
    x = torch.randn(16, 300, device=device) * 4 + 200

    def fn(a):
        var, mean = torch.var_mean(a, dim=1, correction=correction)
        return var, mean, a.std(dim=0), a.var()

    compiled = driver.compile(fn, options={"target": target})
    for got, want in zip(compiled(x), fn(x)):
        assert_close(got, want.cpu(), rtol=1e-4, atol=1e-4)
    assert "FallbackKernel" not in compiled.graphs[0].artifacts["loop_ir"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("width", [256, 16384])
def test_layer_norm_is_one_kernel_with_welford(target, width, monkeypatch):
    """Persistent and looped: the looped kernel now passes over each row twice (Welford,
    then the output), not three times. On CUDA the 6 rows of 16384 are split ([Note: split
    reductions]): the chunks' statistics, their combination, then the normalisation."""
    monkeypatch.setattr(triton_reduction, "PERSISTENT_MAX", 8192)
    driver.reset()  # static sizes, whichever width ran first (a symbolic row is not split)
    device = device_for(target)
    x = torch.randn(6, width, device=device) * 2 + 300
    w, b = torch.randn(width, device=device), torch.randn(width, device=device)

    def fn(a):
        return F.layer_norm(a, (width,), w, b)

    compiled = driver.compile(fn, options={"target": target})
    # rows of mean 300 and spread 2 lose about 7 bits to the mean: two summation orders
    # (16 OpenMP threads on the GPU machine against eager's) differed by 1.1e-4
    assert_close(compiled(x), fn(x).cpu(), rtol=1e-4, atol=3e-4)
    record = compiled.graphs[0]
    split = split_here(target, 6, width)
    assert record.compiled.kernel_count == (3 if split else 1)
    assert "welford" in record.artifacts["loop_ir"]
    source = "\n".join(v for k, v in record.artifacts.items() if k.startswith("kernels/"))
    if target == "triton" and width > 8192 and not split:
        assert source.count("for roffset in range") == 2


@pytest.mark.parametrize("target", TARGETS)
def test_batch_norm_training_statistics(target):
    torch.manual_seed(0)
    device = device_for(target)
    bn = torch.nn.BatchNorm2d(3).to(device)
    x = torch.randn(4, 3, 5, 5, device=device) * 2 + 7
    reference = torch.nn.BatchNorm2d(3).to(device)
    compiled = driver.compile(bn, options={"target": target})
    assert_close(compiled(x), reference(x).cpu(), rtol=1e-4, atol=1e-4)
    assert_close(bn.running_var, reference.running_var.cpu(), rtol=1e-5, atol=1e-5)
    assert_close(bn.running_mean, reference.running_mean.cpu(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n", [10, 2 * LANES + 36, 20000])
def test_mean_m2_with_infinities_and_nan(target, n):
    """The shift that keeps Welford accurate turns an infinity into inf - inf; the mean
    then falls back to the plain sum, so it is what ``mean`` gives (torch.var_mean's own
    Welford says NaN there), and the variance is NaN as in eager."""
    x = torch.randn(5, n)
    x[0, 0] = float("inf")
    x[1, n // 2] = float("inf")
    x[2, 3], x[2, 5] = float("-inf"), float("inf")
    x[3, 7] = float("nan")
    device = device_for(target)
    compiled = driver.compile(lambda a: torch.var_mean(a, 1), options={"target": target})
    var, mean = compiled(x.to(device))
    assert_close(mean, x.mean(1), equal_nan=True)
    assert_close(var, x.var(1), equal_nan=True, rtol=1e-4, atol=1e-4)
