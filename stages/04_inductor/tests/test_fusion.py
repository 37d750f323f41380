"""Scheduling and fusion: what is realized, what shares a kernel, what never hits memory."""

from __future__ import annotations

import re

import inductor
import pytest
import torch
from inductor_testing import assert_close, prims_graph, to_target

TARGETS = ["cpp", "triton"]


def compile_and_run(fn, inputs, target):
    inputs = to_target(inputs, target)
    compiled = inductor.compile_fx_inner(prims_graph(fn, inputs), inputs, target=target)
    return compiled, compiled(*inputs)


@pytest.mark.parametrize("target", TARGETS)
def test_shared_value_is_fused_and_never_allocated(target):
    x = torch.randn(6, 5)

    def fn(p, a):
        shared = p.mul(p.sin(a), p.cos(a))  # two users: realized, see [Note: realize]
        return p.add(shared, p.scalar(1.0, shared)), p.mul(shared, p.scalar(2.0, shared))

    compiled, (o1, o2) = compile_and_run(fn, [x], target)
    assert compiled.kernel_count == 1
    assert "buf0: ComputedBuffer" in compiled.artifacts["loop_ir"]
    assert "buf0 lives only inside its kernel" in compiled.artifacts["fusion"]
    assert "buf0 = empty_strided" not in compiled.artifacts["wrapper"]
    assert_close(o1, x.sin() * x.cos() + 1)
    assert_close(o2, x.sin() * x.cos() * 2)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_value_wider_than_its_one_input_is_recomputed_not_stored(target, dtype):
    """[Note: recompute rather than store wider]: ``tanh`` of an upcast bfloat16 input, read
    on both sides of a matmul, is computed again in each kernel; from a float32 input (no
    narrower to read again) it is stored once and read back."""
    x, w = torch.randn(8, 16).to(dtype), torch.randn(16, 16).to(dtype)

    def fn(p, a, b):
        up = p.convert_element_type(a, torch.float32)
        t = p.tanh(p.mul(up, p.scalar(0.5, up)))
        before = p.convert_element_type(p.add(t, p.scalar(1.0, t)), dtype)
        product = p.call(torch.ops.aten.mm.default, before, b)  # between the users of t
        after = p.mul(p.convert_element_type(product, torch.float32), t)
        return (after,)

    compiled, (out,) = compile_and_run(fn, [x, w], target)
    t = torch.tanh(x.float() * 0.5)
    want = ((t + 1).to(dtype) @ w).float() * t
    assert_close(out, want, atol=5e-2, rtol=5e-2)
    tanh_kernels = [k for k in compiled.artifacts if k.startswith("kernels/") and
                    "tanh" in k]  # (a kernel is named after the ops it computes)
    stored = compiled.artifacts["loop_ir"].count(": ComputedBuffer")
    if dtype == torch.bfloat16:
        assert len(tanh_kernels) == 2 and stored == 2  # (1 + t) for the matmul, the result
    else:
        assert len(tanh_kernels) == 1 and stored == 3  # t itself as well


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("stats", ["per_row", "full"])
def test_a_normalized_value_is_recomputed_when_its_statistics_are_small(target, stats):
    """[Note: recompute rather than store wider]: ``(x - mean) * rstd`` of a bfloat16 ``x``
    with one float32 statistic per row (64 times fewer elements than ``x``) is recomputed on
    both sides of a matmul; with statistics as large as ``x`` it is stored once."""
    x, w = torch.randn(8, 64).to(torch.bfloat16), torch.randn(64, 64).to(torch.bfloat16)
    shape = [8] if stats == "per_row" else [8, 64]
    mean, rstd = torch.randn(shape), torch.rand(shape) + 0.5

    def fn(p, a, b, m, r):
        up = p.convert_element_type(a, torch.float32)
        if stats == "per_row":
            m, r = p.broadcast_in_dim(m, [8, 64], [0]), p.broadcast_in_dim(r, [8, 64], [0])
        xhat = p.mul(p.sub(up, m), r)
        before = p.convert_element_type(xhat, torch.bfloat16)
        product = p.call(torch.ops.aten.mm.default, before, b)  # between the users of xhat
        return (p.mul(p.convert_element_type(product, torch.float32), xhat),)

    compiled, (out,) = compile_and_run(fn, [x, w, mean, rstd], target)
    stat = (lambda t: t[:, None]) if stats == "per_row" else (lambda t: t)
    xhat = (x.float() - stat(mean)) * stat(rstd)
    assert_close(out, (xhat.to(torch.bfloat16) @ w).float() * xhat, atol=5e-2, rtol=5e-2)
    stored = compiled.artifacts["loop_ir"].count(": ComputedBuffer")
    assert stored == (2 if stats == "per_row" else 3)  # xhat itself, when stored


@pytest.mark.parametrize("target", TARGETS)
def test_an_upcast_value_is_stored_narrow(target):
    """[Note: store the narrow value]: a bfloat16 value, upcast to float32 and then read by
    a row sum and a column sum (layer norm backward's two reductions), is stored as the
    bfloat16 it was before the cast, and both sums read it back."""
    x, y = torch.randn(16, 32).to(torch.bfloat16), torch.randn(16, 32).to(torch.bfloat16)

    def fn(p, a, b):
        wide = [p.convert_element_type(t, torch.float32) for t in (a, b)]
        dy = p.convert_element_type(p.mul(p.sin(wide[0]), wide[1]), torch.bfloat16)
        up = p.convert_element_type(dy, torch.float32)  # several users: stored
        return p.sum(up, [1]), p.sum(p.mul(up, wide[1]), [0])

    compiled, (rows, cols) = compile_and_run(fn, [x, y], target)
    dy = (x.float().sin() * y.float()).to(torch.bfloat16).float()
    assert_close(rows, dy.sum(1), atol=1e-4, rtol=1e-5)
    assert_close(cols, (dy * y.float()).sum(0), atol=1e-4, rtol=1e-5)
    wrapper = compiled.artifacts["wrapper"]
    assert re.search(r"empty_strided\(\(16, 32\), \(32, 1\), .*dtype=torch.bfloat16\)", wrapper)
    assert "(16, 32), (32, 1), device=device_cpu, dtype=torch.float32" not in wrapper
    assert "(16, 32), (32, 1), device=device_cuda_0, dtype=torch.float32" not in wrapper


@pytest.mark.parametrize("target", TARGETS)
def test_transposed_read_of_a_buffer_is_not_fused(target):
    x = torch.randn(4, 4)

    def fn(p, a):
        s = p.sin(p.exp(a))
        return p.add(s, p.permute(s, [1, 0]))

    compiled, (out,) = compile_and_run(fn, [x], target)
    assert compiled.kernel_count == 2
    assert "another iteration's element" in compiled.artifacts["fusion"]
    s = x.exp().sin()
    assert_close(out, s + s.t())


@pytest.mark.parametrize("target", TARGETS)
def test_horizontal_fusion_and_different_sizes(target):
    x, y = torch.randn(3, 8), torch.randn(5)

    def fn(p, a, b):
        return p.sin(a), p.cos(a), p.exp(b)

    compiled, outs = compile_and_run(fn, [x, y], target)
    fusion = compiled.artifacts["fusion"]
    assert compiled.kernel_count == 2
    assert "horizontal" in fusion and "different loop ranges" in fusion
    for got, want in zip(outs, (x.sin(), x.cos(), y.exp())):
        assert_close(got, want)


@pytest.mark.parametrize("target", TARGETS)
def test_library_call_between_kernels(target):
    x = torch.randn(4, 6)

    def fn(p, a):
        total = p.call(torch.ops.aten.cumsum.default, p.sin(a), 1)  # no lowering: a library call
        return p.exp(total)

    compiled, (out,) = compile_and_run(fn, [x], target)
    assert compiled.kernel_count == 2
    assert "fallback_0(" in compiled.artifacts["wrapper"]
    assert "library call" in compiled.artifacts["fusion"]
    assert_close(out, x.sin().cumsum(1).exp())


@pytest.mark.parametrize("target", TARGETS)
def test_dead_buffer_is_reused(target):
    x = torch.randn(4, 4)

    def fn(p, a):
        s = p.sin(p.exp(a))
        b = p.mul(p.add(s, p.permute(s, [1, 0])), p.scalar(0.5, s))
        return p.sub(b, p.exp(p.permute(b, [1, 0])))

    compiled, (out,) = compile_and_run(fn, [x], target)
    assert compiled.kernel_count == 3
    assert re.search(r"buf2 = buf0; del buf0  # reuse", compiled.artifacts["wrapper"])
    s = x.exp().sin()
    b = (s + s.t()) * 0.5
    assert_close(out, b - b.t().exp())


@pytest.mark.parametrize("target", TARGETS)
def test_contiguous_dims_collapse_to_one_index(target):
    x, y = torch.randn(2, 3, 5), torch.randn(2, 3, 5)
    compiled, _ = compile_and_run(lambda p, a, b: p.add(a, b), [x, y], target)
    (source,) = [v for k, v in compiled.artifacts.items() if k.startswith("kernels/")]
    assert "x0" in source and "x1" not in source
    compiled, (out,) = compile_and_run(lambda p, a, b: p.add(a, b), [x, y.transpose(0, 2)
                                                                       .contiguous()
                                                                       .transpose(0, 2)],
                                       target)
    (source,) = [v for k, v in compiled.artifacts.items() if k.startswith("kernels/")]
    assert "x1" in source


def test_kernel_names_and_headers_name_the_ops():
    x = torch.randn(8)
    compiled, _ = compile_and_run(lambda p, a: p.add(p.sin(a), p.cos(a)), [x], "triton")
    (name,) = [k for k in compiled.artifacts if k.startswith("kernels/")]
    assert name == "kernels/triton_poi_fused_sin_cos_add_0.py"
    assert "# Fused kernel for buf0 over [8]" in compiled.artifacts[name]
    assert "tmp1 = ops.sin(tmp0)" in compiled.artifacts["loop_ir"]


def test_huge_loops_index_in_int64():
    big = torch.randn(1, 2**16).expand(2**16, 2**16)  # 2**32 elements, 256 KiB of memory
    small = torch.randn(64)
    for x, wide in ((big, True), (small, False)):
        gm = prims_graph(lambda p, a: p.neg(a), [x])
        compiled = inductor.compile_fx_inner(gm, [x], target="triton")  # compiled, not run
        (source,) = [v for k, v in compiled.artifacts.items() if k.startswith("kernels/")]
        assert ("tl.program_id(0).to(tl.int64)" in source) == wide


@pytest.mark.parametrize("dynamic", [False, None])
def test_merged_dims_fuse_into_the_statistics_kernel(dynamic):
    """[Note: merged dims]: layer norm over [B, T, C] whose result is reshaped to [B*T, C]
    for a matmul is one kernel (statistics and normalisation), static or with T symbolic
    (automatic dynamic: the second length recompiles with T a symbol)."""
    import torch.nn.functional as F

    import driver

    w = torch.randn(16, 8)

    def f(x):
        return F.layer_norm(x, (16,)).reshape(-1, 16) @ w

    compiled = driver.compile(f, dynamic=dynamic, options={"target": "cpp"})
    for t in (5, 7):
        x = torch.randn(3, t, 16)
        torch.testing.assert_close(compiled(x), f(x), rtol=1e-4, atol=1e-5)
    graph = compiled.graphs[-1]
    kernels = [k for k in graph.artifacts if "kernels/" in k]
    assert len(kernels) == 1, graph.artifacts["fusion"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype,weighted", [(torch.float32, False), (torch.bfloat16, False),
                                            (torch.float32, True)])
def test_cross_entropy_backward_is_one_kernel(target, dtype, weighted):
    """[Note: a one-hot without a scatter]: the gradient of the loss (softmax minus the
    one-hot of the targets) is one kernel over the classes; no tensor of zeros is stored.
    Ignored targets and class weights included; eager is the oracle."""
    from inductor_testing import device_for

    import driver

    torch.manual_seed(0)
    dev = device_for(target)
    x = torch.randn(48, 300, device=dev).to(dtype).requires_grad_()
    t = torch.randint(300, (48,), device=dev)
    t[[3, 17]] = -100
    weight = torch.rand(300, device=dev).to(dtype) if weighted else None

    def loss(a, b):
        return torch.nn.functional.cross_entropy(a, b, weight=weight)

    compiled = driver.compile(loss, options={"target": target})
    compiled(x, t).backward()
    got, x.grad = x.grad, None
    loss(x, t).backward()
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(got, x.grad, **tol)
    (graph,) = compiled.graphs
    fusion = graph.artifacts["backward/fusion"]
    over_classes = [line for line in fusion.splitlines()
                    if line.startswith("kernel over") and "300" in line]
    assert len(over_classes) == 1, fusion  # (a weight's per-row gather is a [48, 1] kernel)
