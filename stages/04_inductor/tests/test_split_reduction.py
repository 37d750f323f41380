"""Split reductions ([Note: split reductions]) against eager, on both printers.

Splitting only happens for CUDA tensors; these tests let CPU tensors split too, so the
Triton interpreter and the C++ printer run the two-kernel form.
"""

from __future__ import annotations

import inductor
import pytest
import torch
from inductor import split_reduction as sr
from inductor_testing import assert_close, prims_graph, results, to_target

TARGETS = ["cpp", "triton"]


@pytest.fixture(autouse=True)
def split_on_cpu(monkeypatch):
    monkeypatch.setattr(sr, "SPLIT_DEVICES", {"cuda", "cpu"})


def compile_and_run(fn, inputs, target):
    inputs = to_target(inputs, target)
    compiled = inductor.compile_fx_inner(prims_graph(fn, inputs), inputs, target=target)
    return compiled, compiled(*inputs)


def test_choose_splits():
    assert sr.choose_splits(64, 131072) == 16  # 64 channels: 1024 rows of 8192
    assert sr.choose_splits(4096, 4096) == 1  # enough rows already
    assert sr.choose_splits(1, 2047) == 1  # halves would be below the smallest chunk
    assert sr.choose_splits(1, 1 << 20) == 1024  # 1024 rows of 1024
    assert sr.choose_splits(3, 1000) == 1  # short rows: nothing to gain
    # [Note: rows that need no split]: 64 rows of up to 512 KiB stay whole ...
    assert sr.choose_splits(64, 131072, row_bytes=4 * 131072) == 1
    assert sr.choose_splits(64, 131072, row_bytes=8 * 131072) == 16  # (float64: too long)
    assert sr.choose_splits(16, 32768, row_bytes=4 * 32768) == 32  # ... but 16 rows split
    assert sr.choose_splits(768, 8192, outer=True, row_bytes=2 * 8192) == 32  # column sums too
    assert sr.choose_splits(2, 3 * 4096) == 8  # chunks of 1536; 16 would make them 768
    assert sr.choose_splits(1, 3 * 5 * 7 * 67) == 1  # odd: no power of two divides it


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", ["sum", "amax", "amin", "prod"])
def test_batchnorm_like_channel_reduction(target, kind):
    """[N, C, H, W] reduced over N, H, W: few rows, long, and not contiguous per row."""
    x = torch.randn(4, 3, 32, 24)
    if kind == "prod":
        x = 1 + x * 1e-3  # keep the product finite

    def fn(p, a):
        return getattr(p, kind)(p.mul(a, a) if kind == "sum" else a, [0, 2, 3])

    compiled, (out,) = compile_and_run(fn, [x], target)
    want = {"sum": lambda: (x * x).sum([0, 2, 3]), "amax": lambda: x.amax([0, 2, 3]),
            "amin": lambda: x.amin([0, 2, 3]), "prod": lambda: x.prod(0).prod(1).prod(1)}
    assert compiled.kernel_count == 2  # partials, then the partials of each row
    assert_close(out, want[kind](), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
def test_full_reduction_of_bf16_keeps_float32_partials(target):
    x = torch.randn(1 << 16).to(torch.bfloat16)

    def fn(p, a):
        return (p.convert_element_type(p.sum(p.convert_element_type(a, torch.float32), [0]),
                                       torch.bfloat16),)

    compiled, (out,) = compile_and_run(fn, [x], target)
    # Triton: one kernel whose last program adds the partials ([Note: the last program
    # finishes], test_last_program.py)
    assert compiled.kernel_count == (1 if target == "triton" else 2)
    assert_close(out, x.float().sum().to(torch.bfloat16))


@pytest.mark.parametrize("target", TARGETS)
def test_epilogue_fuses_into_the_second_reduction(target):
    x = torch.randn(2, 8192)

    def fn(p, a):
        s = p.sum(a, [1])
        return (p.mul(s, p.scalar(0.5, s)),)

    compiled, (out,) = compile_and_run(fn, [x], target)
    # (Triton: one launch, the second kernel run by the last programs; [Note: the last
    # program finishes])
    assert compiled.kernel_count == (1 if target == "triton" else 2)
    assert_close(out, x.sum(1) * 0.5, rtol=1e-5, atol=1e-4)


def test_choose_splits_for_column_sums():
    """[Note: split column sums]: 16+ outputs a program, so more rows before splitting."""
    assert sr.choose_splits(768, 8192) == 1  # rows enough for a row sum ...
    assert sr.choose_splits(768, 8192, outer=True) == 32  # ... 24 programs as a column sum
    assert sr.choose_splits(4096, 4096, outer=True) == 8  # 128 programs: more
    assert sr.choose_splits(32768, 4096, outer=True) == 1  # 1024 programs already
    assert sr.choose_splits(768, 384, outer=True) == 1  # halves below the smallest chunk


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", ["sum", "var_mean"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_column_sums_split_with_the_chunk_outermost(target, kind, dtype):
    """A layer norm's weight gradient: [8192, 96] summed over its rows. The partials are
    [32, 96] (chunk first, so a program's outputs stay neighbours) and the result matches
    eager's."""
    torch.manual_seed(0)
    x = (torch.randn(8192, 96) + 3).to(dtype)

    def fn(p, a):
        if kind == "sum":
            return (p.sum(a, [0]),)
        return tuple(results(p, p.mean_m2(a, [0]), 2))

    compiled, outs = compile_and_run(fn, [x], target)
    loop_ir = compiled.artifacts["loop_ir"]
    assert "[32, 96], index=[i0, i1], reduction_ranges=[256]" in loop_ir, loop_ir
    x64 = x.double()
    want = [x64.sum(0)] if kind == "sum" else [x64.mean(0), x64.var(0, correction=0) * 8192]
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
    for got, ref in zip(outs, want):
        assert_close(got.double() / ref.abs().mean(), ref / ref.abs().mean(), rtol=tol,
                     atol=tol)


@pytest.mark.parametrize("target", TARGETS)
def test_many_rows_are_not_split(target):
    x = torch.randn(512, 64)

    def fn(p, a):
        return (p.sum(a, [1]),)

    compiled, (out,) = compile_and_run(fn, [x], target)
    assert compiled.kernel_count == 1
    assert_close(out, x.sum(1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("channels,split", [(32, False), (16, True)])
def test_enough_short_rows_are_not_split(target, channels, split):
    """[Note: rows that need no split]: BatchNorm's statistics over [8, C, 32, 32], rows of
    8192 float32 (32 KiB): 32 channels stay one kernel, 16 split in two."""
    torch.manual_seed(0)
    x = torch.randn(8, channels, 32, 32)

    def fn(p, a):
        return (p.sum(a, [0, 2, 3]),)

    compiled, (out,) = compile_and_run(fn, [x], target)
    if target == "cpp":
        assert compiled.kernel_count == (2 if split else 1)
    else:  # one launch either way ([Note: the last program finishes]); the split shows
        assert ("_then_" in compiled.artifacts["wrapper"]) == split
    assert_close(out, x.sum([0, 2, 3]), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(300, 64), (1000, 33), (64, 4096)])
def test_column_sums_use_the_outer_reduction_tile(shape, monkeypatch):
    """[Note: outer reductions]: a sum over dim 0 of a row-major matrix takes many outputs
    per program and a short looped r, and still equals eager. (The heuristic's launch is
    what this checks, so no tuning on a GPU: [Note: tuning reductions by default].)"""
    monkeypatch.setenv("MINIPT2_TUNE_REDUCTIONS", "0")
    from inductor.codegen.triton_reduction import launch_config

    x = torch.randn(*shape)
    compiled, (out,) = compile_and_run(lambda p, a: (p.sum(a, [0]),), [x], "triton")
    assert "triton_red_" in compiled.artifacts["wrapper"]
    persistent, xblock, _, _ = launch_config(shape[1], shape[0], 4, outer=True)
    assert not persistent and xblock == 32
    assert f"XBLOCK={xblock}" in compiled.artifacts["wrapper"]
    assert_close(out, x.sum(0), rtol=1e-5, atol=1e-4)


def test_loads_that_stay_put_along_a_row_do_not_make_a_column_sum(monkeypatch):
    """[Note: a load that stays put]: ``sum_j a[i, j] * b[i] + c[i]`` reads ``b`` and ``c``
    once a row; only ``a`` moves with the reduction, along it, so this is a row sum: the
    whole row in one tile, not the column-sum tile."""
    monkeypatch.setenv("MINIPT2_TUNE_REDUCTIONS", "0")
    a, b, c = torch.randn(256, 512), torch.randn(256), torch.randn(256)

    def fn(p, x, y, z):
        per_row = p.add(p.mul(x, p.bcast(p.reshape(y, [256, 1]), [256, 512])),
                        p.bcast(p.reshape(z, [256, 1]), [256, 512]))
        return (p.sum(per_row, [1]),)

    compiled, (out,) = compile_and_run(fn, [a, b, c], "triton")
    assert compiled.kernel_count == 1  # enough rows: not split, as a column sum would be
    assert "RBLOCK=512" in compiled.artifacts["wrapper"]
    assert_close(out, (a * b[:, None] + c[:, None]).sum(1), rtol=1e-4, atol=1e-3)


def test_loads_that_stay_put_along_a_column_do_not_make_a_row_sum(monkeypatch):
    """[Note: a load that stays put], the other way round: a layer norm's weight gradient
    ``sum_i g[i, j] * (x[i, j] - m[i]) * r[i]`` reads ``m`` and ``r`` once per reduced row,
    whatever the output column; only ``g`` and ``x`` decide, and they walk along the output
    columns: a column sum, with the column-sum tile."""
    monkeypatch.setenv("MINIPT2_TUNE_REDUCTIONS", "0")
    monkeypatch.setenv("MINIPT2_LAST_PROGRAM", "0")  # the second kernel's launch shows its tile
    from inductor.codegen.triton_reduction import launch_config

    g, x = torch.randn(1024, 96), torch.randn(1024, 96)
    m, r = torch.randn(1024), torch.rand(1024)

    def fn(p, grad, a, mean, rstd):
        col = lambda t: p.bcast(p.reshape(t, [1024, 1]), [1024, 96])  # noqa: E731
        return (p.sum(p.mul(grad, p.mul(p.sub(a, col(mean)), col(rstd))), [0]),)

    compiled, (out,) = compile_and_run(fn, [g, x, m, r], "triton")
    _, xblock, _, _ = launch_config(96, 1024, 4, outer=True)
    assert f"XBLOCK={xblock}" in compiled.artifacts["wrapper"]
    assert_close(out, (g * (x - m[:, None]) * r[:, None]).sum(0), rtol=1e-4, atol=1e-3)


def bias_gradient_step(dtype):
    """A tanh's backward times the incoming gradient, and its column sum: the gradient a
    Linear's weight and input multiplies read, and the bias gradient. Computed in float32
    and stored in ``dtype``, as PrimTorch's decompositions of bfloat16 ops do."""
    def fn(p, g, a):
        g, a = p.convert_element_type(g, torch.float32), p.convert_element_type(a, torch.float32)
        t = p.tanh(a)
        grad = p.convert_element_type(p.mul(g, p.sub(p.scalar(1.0, t), p.mul(t, t))), dtype)
        return (grad, p.sum(p.convert_element_type(grad, torch.float32), [0]))
    return fn


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_column_sum_takes_its_pointwise_producer(target, dtype, monkeypatch):
    """[Note: a column sum's producer]: the gradient [4096, 96] and its split column sum are
    one kernel (one launch on Triton, [Note: the last program finishes]), placed "rx": the
    sum reads the element its own iteration stored, rounded as stored. The gradient is the
    one the two kernels of the unsplit graph store, bit for bit, and both are eager's."""
    torch.manual_seed(0)
    g, a = torch.randn(4096, 96).to(dtype), torch.randn(4096, 96).to(dtype)
    compiled, (grad, bias) = compile_and_run(bias_gradient_step(dtype), [g, a], target)
    fusion = compiled.artifacts["fusion"]
    assert "vertical" in fusion.split("\n\n")[1].splitlines()[0], fusion  # the partial sum
    assert compiled.kernel_count == (1 if target == "triton" else 2), fusion
    monkeypatch.setattr(sr, "SPLIT_DEVICES", set())
    unsplit, (grad2, bias2) = compile_and_run(bias_gradient_step(dtype), [g, a], target)
    assert unsplit.kernel_count == 2
    assert_close(grad, grad2.cpu(), rtol=0, atol=0)
    assert_close(bias, bias2.cpu(), rtol=1e-4, atol=1e-3)  # (another order of adds)
    t = torch.tanh(a.float())
    want = (g.float() * (1 - t * t)).to(dtype)
    assert_close(grad, want)
    assert_close(bias, want.float().sum(0), rtol=1e-4, atol=1e-3)


def gradient_sum_and(kind):
    """``bias_gradient_step``'s gradient and column sum, and a third loop over [B, C]: the
    gradient times ``b`` (a "consumer", reading what the sum's kernel computes) or a loop of
    its own over the same input (``exp(a) * b``, "sideways": only the size in common)."""
    def fn(p, g, a, b):
        g, a, b = (p.convert_element_type(v, torch.float32) for v in (g, a, b))
        t = p.tanh(a)
        grad = p.mul(g, p.sub(p.scalar(1.0, t), p.mul(t, t)))
        other = p.mul(grad, b) if kind == "consumer" else p.mul(p.exp(a), b)
        return (grad, p.sum(grad, [0]), other)
    return fn


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", ["consumer", "sideways"])
def test_a_column_sums_kernel_takes_only_loops_that_read_what_it_computes(target, kind):
    """[Note: a column sum's producer]: ``g * b`` joins the kernel that computes ``g`` and its
    split column sum (on Triton the whole graph is then one launch); ``exp(a) * b``, which
    merely has the same size, stays a kernel of its own (``producer_refused``; letting such
    loops in gave a two-layer GPT's backward four kernels more)."""
    torch.manual_seed(0)
    g, a, b = (torch.randn(4096, 96) for _ in range(3))
    compiled, (grad, bias, other) = compile_and_run(gradient_sum_and(kind), [g, a, b], target)
    joined = {"consumer": 0, "sideways": 1}[kind]
    assert compiled.kernel_count == (1 if target == "triton" else 2) + joined, \
        compiled.artifacts["fusion"]
    t = torch.tanh(a)
    want = g * (1 - t * t)
    assert_close(grad, want)
    assert_close(bias, want.sum(0), rtol=1e-4, atol=1e-3)
    assert_close(other, want * b if kind == "consumer" else torch.exp(a) * b)


@pytest.mark.parametrize("rows", [1024, 512])
def test_a_column_sum_in_chunks_as_long_as_a_row_takes_its_producer(rows):
    """[Note: a loop that fits two ways]: [1024, 256] splits into 4 chunks of 256 rows and
    [512, 256] into 2, B = S * C, so the gradient's loop fits the partials' space as "xr"
    (a row over both x dims, a column over r), the usual first placement, and as "rx", the
    one the partial sums read; the scheduler takes "rx", and gradient and sum are one
    launch."""
    assert sr.choose_splits(256, rows, outer=True) * 256 == rows  # a chunk as long as a row
    torch.manual_seed(0)
    g, a = torch.randn(rows, 256), torch.randn(rows, 256)
    compiled, (grad, bias) = compile_and_run(bias_gradient_step(g.dtype), [g, a], "triton")
    assert compiled.kernel_count == 1, compiled.artifacts["fusion"]
    t = torch.tanh(a)
    assert_close(grad, g * (1 - t * t))
    assert_close(bias, (g * (1 - t * t)).sum(0), rtol=1e-4, atol=1e-3)


def test_a_reader_of_a_chunk_as_long_as_a_row_joins_too():
    """The joining loop itself fits two ways: ``g * b`` beside ``g``'s split column sum over
    [512, 256] fits "xr" first and reads ``g`` where "rx" wrote it; it takes "rx" and joins
    ([Note: a loop that fits two ways], [Note: a column sum's producer])."""
    torch.manual_seed(0)
    g, a, b = (torch.randn(512, 256) for _ in range(3))
    compiled, (grad, bias, other) = compile_and_run(gradient_sum_and("consumer"), [g, a, b],
                                                    "triton")
    assert compiled.kernel_count == 1, compiled.artifacts["fusion"]
    t = torch.tanh(a)
    want = g * (1 - t * t)
    assert_close(grad, want)
    assert_close(bias, want.sum(0), rtol=1e-4, atol=1e-3)
    assert_close(other, want * b)


def test_a_row_sum_of_the_same_sizes_stays_right():
    """A [A * B, R] view reduced over R has the sizes of the cases above, and there "xr" is
    the right placement: the loop that makes it and its row sum stay one kernel, and
    right."""
    torch.manual_seed(0)
    x = torch.randn(512, 256)

    def fn(p, a):
        e = p.exp(a)
        return e, p.sum(p.reshape(e, [2, 256, 256]), [2])

    compiled, (e, total) = compile_and_run(fn, [x], "triton")
    assert compiled.kernel_count == 1, compiled.artifacts["fusion"]
    assert_close(e, torch.exp(x))
    assert_close(total, torch.exp(x).reshape(2, 256, 256).sum(2), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
def test_an_unsplit_column_sum_leaves_its_producer_alone(target, monkeypatch):
    """An unsplit column sum runs one program per 32 columns down every row: too few
    programs for the pointwise loop too (``starves``), so the two stay two kernels."""
    monkeypatch.setattr(sr, "SPLIT_DEVICES", set())
    g, a = torch.randn(4096, 96), torch.randn(4096, 96)
    compiled, (grad, bias) = compile_and_run(bias_gradient_step(g.dtype), [g, a], target)
    assert compiled.kernel_count == 2
    assert "an unsplit column sum: too few programs" in compiled.artifacts["fusion"]
    t = torch.tanh(a)
    assert_close(bias, (g * (1 - t * t)).sum(0), rtol=1e-5, atol=1e-4)
