"""[Note: a library call's strides]: an argument a library call wants aligned is stored
with padded rows when inductor computes it.

Memory-efficient attention (CUDA only) is the call that needs it; here a custom op that
reports the strides it was handed stands in for it, registered in ``ALIGNED_ARGS`` the same
way. Eager is the oracle for the values; the strides are the padded ones.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from inductor_testing import device_for

import driver

graph_module = importlib.import_module("inductor.graph")


@torch.library.custom_op("minipt2_test::strides_and_sum", mutates_args=())
def strides_and_sum(x: torch.Tensor) -> torch.Tensor:
    """The strides of ``x`` and the sum of its values (float64), to see both."""
    return torch.tensor([*x.stride(), x.double().sum().item()], dtype=torch.float64)


@strides_and_sum.register_fake
def _(x):
    return torch.empty(x.dim() + 1, dtype=torch.float64, device=x.device)


@pytest.mark.parametrize("target", ["cpp", "triton"])
@pytest.mark.parametrize("dtype,row", [(torch.float32, 8), (torch.bfloat16, 8),
                                       (torch.float64, 6)])
def test_computed_argument_gets_padded_rows(monkeypatch, target, dtype, row):
    op = torch.ops.minipt2_test.strides_and_sum.default
    monkeypatch.setitem(graph_module.ALIGNED_ARGS, op, 0)
    a = torch.randn(3, 5, device=device_for(target)).to(dtype)
    if dtype == torch.float64:  # 2 float64 per 16 bytes: rows of 5 pad to 6
        a = torch.randn(3, 5, device=device_for(target), dtype=dtype)

    def fn(a):
        return torch.ops.minipt2_test.strides_and_sum((a + 1).expand(4, 3, 5))

    compiled = driver.compile(fn, options={"target": target})
    got, want = compiled(a), fn(a)
    assert got[:3].tolist() == [3 * row, row, 1]  # eager's expand: (0, 5, 1)
    torch.testing.assert_close(got[3], want[3])


@pytest.mark.parametrize("dtype,row", [(torch.float32, 8), (torch.float64, 6)])
def test_op_by_op_path_hands_over_padded_rows(monkeypatch, dtype, row):
    """[Note: a library call's strides, op by op]: ATen's pad-and-slice of a mask, traced,
    is a ``cat`` and a copying ``slice`` on the fallback target."""
    op = torch.ops.minipt2_test.strides_and_sum.default
    monkeypatch.setitem(graph_module.ALIGNED_ARGS, op, 0)
    a = torch.randn(2, 3, 5, dtype=dtype)

    def fn(a):
        padded = torch.cat([a * 2, torch.zeros(2, 3, 3, dtype=a.dtype)], -1)
        return torch.ops.minipt2_test.strides_and_sum(padded[..., :5])

    got = driver.compile(fn, options={"target": "fallback"})(a)
    want = fn(a)
    assert got[:3].tolist() == [3 * row, row, 1]
    torch.testing.assert_close(got[3], want[3])
    aligned = torch.randn(2, 3, 8, dtype=dtype)[..., :5]
    assert graph_module.with_aligned_rows(aligned) is aligned  # already aligned: itself


def test_attention_mask_is_an_aligned_argument():
    names = {str(op) for op in graph_module.ALIGNED_ARGS}
    assert "aten._scaled_dot_product_efficient_attention.default" in names


@torch.library.custom_op("minipt2_test::twice_like", mutates_args=())
def twice_like(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x).copy_(x * 2)  # the input's strides, as cuDNN attention does


@twice_like.register_fake
def _(x):
    return torch.empty_like(x)


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_library_call_result_layout_follows_the_buffers_it_gets(target, monkeypatch):
    """[Note: what a library call returns]: the traced value says row-major; the call gets
    a transposed view of a buffer (as a call that reads any strides does) and returns its
    result transposed too. The kernels are compiled for the real layout, so the wrapper
    makes no copy."""
    import inductor
    from inductor_testing import prims_graph, to_target

    monkeypatch.setattr(graph_module, "ANY_STRIDES",
                        graph_module.ANY_STRIDES | {torch.ops.minipt2_test.twice_like.default})

    (a,) = to_target([torch.randn(5, 3)], target)

    def fn(p, x):
        call = p.call(torch.ops.minipt2_test.twice_like.default, p.permute(x, [1, 0]))
        call.meta["val"] = torch.empty(3, 5, device="meta")  # a stale traced value
        return p.add(call, p.scalar(1.0, call))

    compiled = inductor.compile_fx_inner(prims_graph(fn, [a]), [a], target=target)
    torch.testing.assert_close(compiled(a)[0], a.t() * 2 + 1)
    wrapper = compiled.artifacts["wrapper"].split("def call")[1]
    assert "as_layout(buf0, (3, 5), (1, 3))" in wrapper, wrapper


@pytest.mark.parametrize("target", ["cpp", "triton"])
@pytest.mark.parametrize("cols,row", [(5, 8), (8, 8), (1, 1)])
def test_an_input_argument_is_copied_into_padded_rows_only_when_it_must(monkeypatch, target,
                                                                      cols, row):
    """A graph input in that position (BEiT's relative-position bias) is copied into padded
    rows when its strides are not aligned ((3, 5): (5, 1) -> (8, 1)), and handed over as it is
    when they are ((3, 8)) or when the only strided dim has size 1."""
    op = torch.ops.minipt2_test.strides_and_sum.default
    monkeypatch.setitem(graph_module.ALIGNED_ARGS, op, 0)
    a = torch.randn(3, cols, device=device_for(target)) if cols > 1 else \
        torch.randn(1, 3, device=device_for(target))

    def fn(a):
        return torch.ops.minipt2_test.strides_and_sum(a)

    compiled = driver.compile(fn, options={"target": target})
    got, want = compiled(a), fn(a)
    assert got[:2].tolist() == ([row, 1] if cols > 1 else [3, 1])
    torch.testing.assert_close(got[2], want[2])


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_weight_norm_backward_gets_the_row_major_gradient_it_assumes(target):
    """[Note: library calls that read any strides]: autograd's formula hands weight norm's
    backward ``grad.contiguous()``, which the trace of prims (row-major values) records as
    nothing; the kernel reads its argument as row-major memory, so a transposed view made
    its gradients wrong. Values and gradients against eager."""
    device = device_for(target)
    torch.manual_seed(0)
    v = torch.randn(8, 6, device=device, requires_grad=True)
    g = torch.randn(8, 1, device=device, requires_grad=True)
    x = torch.randn(4, 6, device=device)

    def fn(v, g, x):
        return x @ torch._weight_norm(v, g, 0).t()  # the weight's gradient is a transpose

    compiled = driver.compile(fn, options={"target": target})
    want, got = fn(v, g, x), compiled(v, g, x)
    torch.testing.assert_close(got, want)
    want_grads = torch.autograd.grad(want.square().sum(), [v, g])
    got_grads = torch.autograd.grad(got.square().sum(), [v, g])
    for mine, theirs in zip(got_grads, want_grads):
        torch.testing.assert_close(mine, theirs)


def test_only_calls_that_read_any_strides_get_strided_views():
    """A matrix product reads a transposed operand as is; a call not on the list (CELU)
    gets a row-major copy of it, made by a kernel."""
    import inductor
    from inductor_testing import prims_graph

    a = torch.randn(5, 3)

    def celu(p, x):
        return p.call(torch.ops.aten.celu.default, p.permute(x, [1, 0]))

    def mm(p, x):
        return p.call(torch.ops.aten.mm.default, p.permute(x, [1, 0]), x)

    for fn, want in [(celu, torch.nn.functional.celu(a.t())), (mm, a.t() @ a)]:
        compiled = inductor.compile_fx_inner(prims_graph(fn, [a]), [a], target="cpp")
        torch.testing.assert_close(compiled(a)[0], want)
        wrapper = compiled.artifacts["wrapper"].split("def call")[1]
        assert ("fallback_0(arg0.t(), arg0)" in wrapper) == (fn is mm), wrapper
        assert ("cpp_fused_copy" in wrapper) == (fn is celu), wrapper
