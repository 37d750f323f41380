"""Reductions: each reduction prim against eager, and what fuses into a reduction kernel."""

from __future__ import annotations

import inductor
import pytest
import torch
from inductor.codegen import triton_reduction
from inductor_testing import assert_close, prims_graph, shape_of, to_target

TARGETS = ["cpp", "triton"]
REDUCTIONS = {"sum": torch.sum, "prod": None, "amax": torch.amax, "amin": torch.amin}


def compile_and_run(fn, inputs, target):
    inputs = to_target(inputs, target)
    compiled = inductor.compile_fx_inner(prims_graph(fn, inputs), inputs, target=target)
    return compiled, compiled(*inputs)


def eager(name: str, x: torch.Tensor, dims: list[int]) -> torch.Tensor:
    if name == "prod":
        for d in sorted(dims, reverse=True):
            x = x.prod(d)
        return x
    return REDUCTIONS[name](x, dims)


def make_input(shape, dtype, transposed):
    if dtype.is_floating_point:
        x = torch.randn(shape) * 0.7 + 0.2
    else:
        x = torch.randint(-3, 4, shape)
    x = x.to(dtype)
    return x.transpose(0, -1).contiguous().transpose(0, -1) if transposed else x


CASES = [  # (shape, dims)
    ((5, 37), [1]),
    ((5, 37), [0]),
    ((3, 1, 6), [0, 2]),
    ((2, 3, 5), [0, 1, 2]),
    ((4, 1), [1]),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(REDUCTIONS))
@pytest.mark.parametrize("case", range(len(CASES)))
def test_reduction_prim_float32(target, name, case):
    shape, dims = CASES[case]
    x = make_input(shape, torch.float32, transposed=case % 2 == 1)
    compiled, (out,) = compile_and_run(lambda p, a: getattr(p, name)(a, dims), [x], target)
    assert_close(out, eager(name, x, dims), rtol=1e-5, atol=1e-5)
    assert compiled.kernel_count == 1


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int32, torch.int8, torch.float64])
@pytest.mark.parametrize("name", ["sum", "amax", "amin", "prod"])
def test_reduction_prim_dtypes(target, dtype, name):
    x = make_input((6, 9), dtype, transposed=True)
    _, (out,) = compile_and_run(lambda p, a: getattr(p, name)(a, [1]), [x], target)
    want = eager(name, x.float() if dtype == torch.bfloat16 else x, [1]).to(dtype)
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}
    assert out.dtype == dtype
    assert_close(out, want, **tol)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["amax", "amin"])
def test_max_and_min_propagate_nan(target, name):
    x = torch.randn(4, 10)
    x[1, 3] = float("nan")
    x[2, 0] = float("inf")
    _, (out,) = compile_and_run(lambda p, a: getattr(p, name)(a, [1]), [x], target)
    assert_close(out, eager(name, x, [1]), equal_nan=True)


@pytest.mark.parametrize("target", TARGETS)
def test_empty_and_no_dims_still_run(target):
    x, e = torch.randn(3, 4), torch.randn(3, 0)

    def fn(p, a, b):
        return p.sum(a, []), p.sum(b, [1])

    _, (same, zeros) = compile_and_run(fn, [x, e], target)
    assert_close(same, x)
    assert_close(zeros, torch.zeros(3))


def softmax_graph(p, a):
    shape = shape_of(a)
    rows = [shape[0], 1]
    m = p.amax(a, [1])
    e = p.exp(p.sub(a, p.bcast(p.reshape(m, rows), shape)))
    s = p.sum(e, [1])
    return p.div(e, p.bcast(p.reshape(s, rows), shape))


def layernorm_graph(p, a):
    shape, n = shape_of(a), shape_of(a)[1]
    rows = [shape[0], 1]
    mean = p.div(p.sum(a, [1]), p.full([shape[0]], n, dtype=torch.float32, device=p.device))
    centered = p.sub(a, p.bcast(p.reshape(mean, rows), shape))
    var = p.sum(p.mul(centered, centered), [1])
    var = p.div(var, p.full([shape[0]], n, dtype=torch.float32, device=p.device))
    rstd = p.rsqrt(p.add(var, p.full([shape[0]], 1e-5, dtype=torch.float32, device=p.device)))
    return p.mul(centered, p.bcast(p.reshape(rstd, rows), shape)), mean


def layernorm_eager(x):
    return torch.nn.functional.layer_norm(x, (x.shape[1],)), x.mean(1)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("looped", [False, True])
def test_softmax_and_layernorm_are_one_kernel(target, looped, monkeypatch):
    if looped:  # rows longer than a persistent tile: loops over r in one kernel
        monkeypatch.setattr(triton_reduction, "PERSISTENT_MAX", 16)
        monkeypatch.setattr(triton_reduction, "LOOP_RBLOCK", 16)
    x = torch.randn(7, 45)
    compiled, (out,) = compile_and_run(softmax_graph, [x], target)
    assert compiled.kernel_count == 1
    assert_close(out, torch.softmax(x, 1))
    compiled, (out, mean) = compile_and_run(layernorm_graph, [x], target)
    assert compiled.kernel_count == 1
    want, want_mean = layernorm_eager(x)
    assert_close(out, want, rtol=1e-4, atol=1e-4)
    assert_close(mean, want_mean)
    kernel = next(k for k in compiled.artifacts if k.startswith("kernels/"))
    if target == "triton":
        assert ("triton_red_" if looped else "triton_per_") in kernel
        assert compiled.artifacts[kernel].count("for roffset") == (3 if looped else 0)


@pytest.mark.parametrize("target", TARGETS)
def test_reduction_across_rows_is_not_fused_with_a_row_major_loop(target):
    x = torch.randn(6, 5)

    def fn(p, a):
        e = p.exp(p.sin(a))
        return p.sum(p.mul(e, e), [0]), p.cos(e)  # column sums: x is dim 1, r is dim 0

    compiled, (col, c) = compile_and_run(fn, [x], target)
    e = x.sin().exp()
    assert_close(col, (e * e).sum(0), rtol=1e-5, atol=1e-5)
    assert_close(c, e.cos())
    assert "an unsplit column sum: too few programs" in compiled.artifacts["fusion"]


@pytest.mark.parametrize("target", TARGETS)
def test_reduction_epilogue_reads_only_its_row(target):
    x = torch.randn(4, 6)

    def fn(p, a):
        total = p.sum(a, [1])  # [4]
        shifted = p.add(total, p.scalar(1.0, total))  # epilogue: one value per row
        other_row = p.permute(p.reshape(total, [2, 2]), [1, 0])  # reads another row
        return shifted, other_row

    compiled, (shifted, other) = compile_and_run(fn, [x], target)
    assert_close(shifted, x.sum(1) + 1, rtol=1e-5, atol=1e-5)
    assert_close(other, x.sum(1).reshape(2, 2).t(), rtol=1e-5, atol=1e-5)
    assert compiled.kernel_count == 2
    assert "buf2 not fused with [buf0, buf1]" in compiled.artifacts["fusion"]
