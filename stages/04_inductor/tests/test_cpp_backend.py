"""The C++ target's promises, against eager: NaN and infinity propagate through vectorised
libm calls and reductions; vector and scalar math agree; kernels use the threads torch uses,
and give the same bits with one or two; odd and tiny sizes; a rejected kernel falls back;
library calls read views without copies; devices with no printer get the fallback."""

from __future__ import annotations

import ctypes
import dataclasses
import importlib
import warnings

import inductor
import pytest
import torch
from inductor.codecache import CppCodeCache, cxx_flags, vector_math_flags
from inductor.codegen.cpp import LIBMVEC_UNARY, PARALLEL_THRESHOLD
from inductor_testing import prims_graph

compile_fx_module = importlib.import_module("inductor.compile_fx")  # not the function

SPECIAL = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e30, -1e30, 88.7, -104.0,
           1e-40, 1.0, -1.0, 0.5, -0.5, 3.0, 20.0, -20.0, 1e4, 0.99, -0.99]
UNARY = sorted(set(LIBMVEC_UNARY) | {"sqrt", "rsqrt", "abs", "floor", "reciprocal", "neg"})


def compile_and_run(fn, inputs, target="cpp"):
    compiled = inductor.compile_fx_inner(prims_graph(fn, inputs), inputs, target=target)
    return compiled, compiled(*inputs)


def special_values(dtype, n=67) -> torch.Tensor:
    """The special values, then random ones: 67 elements run the vector loop and its tail."""
    return torch.cat([torch.tensor(SPECIAL, dtype=dtype),
                      torch.randn(n - len(SPECIAL), dtype=dtype) * 3])


@pytest.mark.parametrize("target", ["cpp", "fallback"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", UNARY)
def test_nan_and_infinity_like_eager(name, dtype, target):
    x = special_values(dtype)
    _, (out,) = compile_and_run(lambda p, a: getattr(p, name)(a), [x], target)
    want = getattr(torch, name)(x)
    torch.testing.assert_close(out, want, equal_nan=True)


@pytest.mark.parametrize("name", ["amax", "amin", "sum", "prod"])
def test_reductions_propagate_nan_and_inf(name):
    x = torch.randn(6, 37)
    x[1, 5], x[2, 36], x[3, 0], x[4, 7], x[4, 9] = (float("nan"), float("inf"), -float("inf"),
                                                    float("inf"), -float("inf"))
    _, (out,) = compile_and_run(lambda p, a: getattr(p, name)(a, [1]), [x])
    torch.testing.assert_close(out, getattr(torch, name)(x, 1), equal_nan=True)


@pytest.fixture
def scalar_math(monkeypatch):
    monkeypatch.setenv("MINIPT2_VECTOR_MATH", "0")
    vector_math_flags.cache_clear()
    yield
    monkeypatch.undo()
    vector_math_flags.cache_clear()


def trig(p, a, b):
    return p.add(p.mul(p.sin(a), p.exp(p.neg(p.abs(b)))), p.tanh(p.erf(b)))


def test_scalar_math_compiles_and_agrees(scalar_math):
    assert "-DMINIPT2_VECTOR_MATH" not in cxx_flags()
    x, y = special_values(torch.float32, 1000), torch.randn(1000)
    _, (out,) = compile_and_run(trig, [x, y])
    want = (x.sin() * (-y.abs()).exp()) + y.erf().tanh()
    torch.testing.assert_close(out, want, equal_nan=True)


NTHREADS = r"""#include <omp.h>
extern "C" int minipt2_nthreads() {
    int n = 0;
    #pragma omp parallel
    {
        #pragma omp single
        n = omp_get_num_threads();
    }
    return n;
}
"""


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("n", [1, 2])
def test_kernels_use_torchs_thread_count(n, threads):
    """Our kernels link the libgomp torch has already loaded (same soname), so
    ``torch.set_num_threads`` governs them as it governs eager."""
    fn = CppCodeCache.load(NTHREADS, "minipt2_nthreads")
    fn.restype = ctypes.c_int
    torch.set_num_threads(n)
    assert fn() == n


def softmax_rows(p, a):
    m = p.amax(a, [1])
    e = p.exp(p.sub(a, p.bcast(p.reshape(m, [a.meta["val"].shape[0], 1]),
                               list(a.meta["val"].shape))))
    s = p.sum(e, [1])
    return p.div(e, p.bcast(p.reshape(s, [a.meta["val"].shape[0], 1]),
                            list(a.meta["val"].shape)))


def test_one_and_two_threads_give_the_same_bits(threads):
    x = torch.randn(300, 257)  # big enough to run in parallel
    results = []
    for n in (1, 2):
        torch.set_num_threads(n)
        _, (out,) = compile_and_run(softmax_rows, [x])
        results.append(out)
    assert torch.equal(results[0], results[1])
    torch.testing.assert_close(results[0], torch.softmax(x, 1))


@pytest.mark.parametrize("numel", [1, 7, 8, 9, 31, 33, PARALLEL_THRESHOLD - 1,
                                   PARALLEL_THRESHOLD + 1])
def test_sizes_around_vector_width_and_parallel_threshold(numel):
    x, y = torch.randn(numel), torch.randn(numel)
    _, (out,) = compile_and_run(trig, [x, y])
    torch.testing.assert_close(out, (x.sin() * (-y.abs()).exp()) + y.erf().tanh())


@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (3, 1), (2, 9), (129, 3)])
def test_softmax_odd_rows(shape):
    x = torch.randn(shape)
    _, (out,) = compile_and_run(softmax_rows, [x])
    torch.testing.assert_close(out, torch.softmax(x, 1))


def test_bfloat16_loads_compute_in_float():
    """Loaded as float, computed in float, rounded once at the store (as torch.compile)."""
    x = torch.randn(5, 33).bfloat16()
    _, (out,) = compile_and_run(lambda p, a: p.sin(p.mul(a, a)), [x])
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, (x.float() * x.float()).sin().bfloat16())


def test_compile_error_falls_back_with_message_and_path(monkeypatch):
    real = compile_fx_module.generate_cpp_kernel

    def broken(*args):
        kernel = real(*args)
        return dataclasses.replace(kernel, source=kernel.source + "\n#error minipt2 broken\n")

    monkeypatch.setattr(compile_fx_module, "generate_cpp_kernel", broken)
    x = torch.randn(10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled, (out,) = compile_and_run(lambda p, a: p.cos(a), [x])
    text = "\n".join(str(w.message) for w in caught)
    assert "minipt2 broken" in text and "kernel.cpp" in text
    assert compiled.kernel_count == 0
    torch.testing.assert_close(out, x.cos())


def test_linear_weight_reaches_mm_as_a_view():
    """[Note: views into library calls]: no copy kernel for the transposed weight."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
    gm = torch.fx.symbolic_trace(model)
    x = torch.randn(4, 16)
    with torch.no_grad():
        fn = inductor.compile_fx(gm, [x], options={"target": "cpp"})
        (out,) = fn(x)
        want = model(x)
    torch.testing.assert_close(out, want)
    assert not any("copy" in key for key in fn.artifacts if key.startswith("kernels/"))
    assert "reinterpret(" in fn.artifacts["wrapper"]


def test_devices_without_a_printer_get_the_fallback():
    assert compile_fx_module.default_target([torch.empty(2, device="meta")]) == "fallback"
    assert compile_fx_module.default_target([torch.empty(2)]) == "cpp"


def test_loops_with_gathers_have_no_omp_simd():
    """[Note: no omp simd around a gather]: a weighted cross entropy's loss kernel gathers
    the target's weight and logit; its loops carry no ``omp simd`` (g++ 13 miscompiled them
    for AVX-512), while the log-softmax kernel beside it keeps its pragmas. Eager is the
    oracle for the loss and its gradient."""
    import driver

    torch.manual_seed(0)
    x = torch.randn(48, 300, requires_grad=True)
    t = torch.randint(300, (48,))
    t[[3, 17]] = -100
    weight = torch.rand(300)

    def loss(a, b):
        return torch.nn.functional.cross_entropy(a, b, weight=weight)

    compiled = driver.compile(loss, options={"target": "cpp"})
    got = compiled(x, t)
    got.backward()
    grad, x.grad = x.grad, None
    want = loss(x, t)
    want.backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(grad, x.grad)
    (graph,) = compiled.graphs
    sources = {name: src.split('extern "C" void')[-1] for name, src in graph.artifacts.items()
               if name.startswith(("kernels/", "backward/kernels/"))}
    gathers = [name for name, src in sources.items() if "indirect" in src]
    assert gathers and all("omp simd" not in sources[name] for name in gathers), gathers
    assert any("omp simd" in src for name, src in sources.items() if name not in gathers)
