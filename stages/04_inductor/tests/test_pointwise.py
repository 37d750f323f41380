"""Pointwise graphs, both targets, against eager: fusion into one kernel, broadcasting,
strides, size-1 dims, odd sizes and dtypes."""

from __future__ import annotations

import inductor
import pytest
import torch
from inductor_testing import assert_close, prims_graph, to_target

TARGETS = ["cpp", "triton"]


def run(fn, inputs, target):
    inputs = to_target(inputs, target)
    compiled = inductor.compile_fx_inner(prims_graph(fn, inputs), inputs, target=target)
    return compiled, compiled(*inputs)


def chain(p, x, y):  # (x.sin() + y.cos()) * 2 - x
    a = p.add(p.sin(x), p.cos(y))
    return p.sub(p.mul(a, p.scalar(2.0, a)), x)


def chain_eager(x, y):
    return (x.sin() + y.cos()) * 2 - x


@pytest.mark.parametrize("target", TARGETS)
def test_chain_is_one_kernel(target):
    x, y = torch.randn(33, 17), torch.randn(33, 17)
    compiled, (out,) = run(chain, [x, y], target)
    assert compiled.kernel_count == 1
    assert len([k for k in compiled.artifacts if k.startswith("kernels/")]) == 1
    assert_close(out, chain_eager(x, y))
    assert list(compiled.artifacts) == ["prims_graph", "loop_ir", "fusion",
                                        *[k for k in compiled.artifacts if "kernels/" in k],
                                        "wrapper", "timing"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape_x,shape_y", [((4, 1, 5), (3, 1)), ((1,), (6, 7)),
                                            ((2, 3), (3,)), ((1, 1), (1, 1))])
def test_broadcasting(target, shape_x, shape_y):
    x, y = torch.randn(shape_x), torch.randn(shape_y)
    out_shape = list(torch.broadcast_shapes(shape_x, shape_y))

    def fn(p, a, b):
        return p.mul(p.bcast(p.exp(a), out_shape), p.bcast(b, out_shape))

    compiled, (out,) = run(fn, [x, y], target)
    assert compiled.kernel_count == 1
    assert_close(out, x.exp() * y)


def _non_contiguous_inputs():
    base = torch.randn(9, 12)
    return [base.t(), base[1:, ::2].t(), torch.randn(3, 8, 5).permute(2, 0, 1)[:, 1]]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("which", range(3))
def test_non_contiguous_inputs(target, which):
    x = _non_contiguous_inputs()[which]
    y = torch.randn(x.shape)
    assert not x.is_contiguous()
    compiled, (out,) = run(chain, [x, y], target)
    assert_close(out, chain_eager(x, y))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape", [(1,), (1, 1, 1), (7, 1, 3), (1, 1031), (2049,), (3, 5, 7)])
def test_odd_and_size_one_shapes(target, shape):
    x, y = torch.randn(shape), torch.randn(shape)
    compiled, (out,) = run(chain, [x, y], target)
    assert_close(out, chain_eager(x, y))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_float_dtypes(target, dtype):
    x, y = torch.randn(6, 11, dtype=dtype), torch.randn(6, 11, dtype=dtype)
    compiled, (out,) = run(chain, [x, y], target)
    assert out.dtype == dtype
    assert compiled.kernel_count == 1
    # bf16: eager rounds after every op, the kernel once at the store (as inductor does)
    tol = {"atol": 3e-2, "rtol": 3e-2} if dtype in (torch.bfloat16, torch.float16) else {}
    assert_close(out, chain_eager(x, y), **tol)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int8])
def test_int_dtypes(target, dtype):
    x = torch.randint(-50, 50, (5, 9), dtype=dtype)
    y = torch.randint(1, 20, (5, 9), dtype=dtype)

    def fn(p, a, b):
        m = p.maximum(p.mul(a, b), p.sub(b, a))
        return p.where(p.gt(m, p.scalar(3, m)), p.fmod(m, b), p.neg(m))

    compiled, (out,) = run(fn, [x, y], target)
    assert compiled.kernel_count == 1
    m = torch.maximum(x * y, y - x)
    assert_close(out, torch.where(m > 3, torch.fmod(m, y), -m))


@pytest.mark.parametrize("target", TARGETS)
def test_type_conversions(target):
    x = torch.randn(4, 10) * 10

    def fn(p, a):
        i = p.convert_element_type(a, torch.int32)
        b = p.convert_element_type(a, torch.bfloat16)
        back = p.convert_element_type(b, torch.float32)
        return (p.add(p.convert_element_type(i, torch.float32), back),
                p.convert_element_type(a, torch.bool), b)

    compiled, outs = run(fn, [x], target)
    expected = (x.to(torch.int32).float() + x.bfloat16().float(), x.bool(), x.bfloat16())
    for got, want in zip(outs, expected):
        assert_close(got, want)


@pytest.mark.parametrize("target", TARGETS)
def test_views_are_remapped_not_copied(target):
    x = torch.randn(4, 6)

    def fn(p, a):
        t = p.permute(p.sin(a), [1, 0])  # (6, 4)
        r = p.reshape(t, [3, 8])
        return p.add(r, p.reshape(a, [3, 8]))

    compiled, (out,) = run(fn, [x], target)
    assert compiled.kernel_count == 1
    assert "Fallback" not in compiled.artifacts["loop_ir"]
    assert_close(out, x.sin().t().reshape(3, 8) + x.reshape(3, 8))


@pytest.mark.parametrize("target", TARGETS)
def test_output_is_input_and_constant_only_output(target):
    x = torch.randn(3, 4)

    def fn(p, a):
        return a, p.full([2, 3], 1.5, dtype=torch.float32, device=p.device)

    compiled, (same, const) = run(fn, [x], target)
    assert same.data_ptr() == x.data_ptr() or same.device.type == "cuda"
    assert_close(const, torch.full((2, 3), 1.5))


def test_fallback_target_runs_the_graph():
    x, y = torch.randn(5, 6), torch.randn(5, 6)
    compiled, (out,) = run(chain, [x, y], "fallback")
    assert compiled.kernel_count == 0
    assert "def call(arg0, arg1)" in compiled.artifacts["wrapper"]
    assert_close(out, chain_eager(x, y))


def test_bad_target_is_a_value_error():
    x = torch.randn(3)
    with pytest.raises(ValueError, match="target"):
        inductor.compile_fx_inner(prims_graph(chain, [x, x]), [x, x], target="cuda")


@pytest.mark.parametrize("shape", [(1 << 16,), (300, 257)], ids=str)
def test_loops_big_enough_to_run_in_parallel(shape):
    """Above the C++ printer's parallel threshold the loop gets OpenMP pragmas that must
    compile together with the vectorisation pragma, for 1-D and 2-D loops."""
    from inductor.codegen.cpp import PARALLEL_THRESHOLD

    assert torch.Size(shape).numel() >= PARALLEL_THRESHOLD
    x, y = torch.randn(shape), torch.randn(shape)
    compiled, (out,) = run(chain, [x, y], "cpp")
    (source,) = [v for k, v in compiled.artifacts.items() if k.startswith("kernels/")]
    assert "omp parallel for" in source
    assert_close(out, chain_eager(x, y))
