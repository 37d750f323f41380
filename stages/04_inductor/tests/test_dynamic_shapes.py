"""Inductor with symbolic sizes: kernels that take sizes as arguments, a wrapper that reads
them from its inputs, buffer reuse and reductions over symbolic extents, int32 indexing by
guard. Graphs come from dynamo with ``dynamic=True`` (symbolic example values through
primtorch's decompositions, as the driver sets up); eager is the oracle.
Chapter: book/docs/dynamic-shapes.md ("Symbolic sizes in kernels").
"""

from __future__ import annotations

import re

import dynamo
import inductor
import primtorch
import pytest
import sympy
import torch
from dynamo import shapes
from inductor.sizevars import SizeVars
from inductor_testing import device_for, to_target

TARGETS = ["cpp", "triton"]


@pytest.fixture(autouse=True)
def _dynamo(monkeypatch):
    monkeypatch.setattr(dynamo.config, "meta_decompositions", primtorch.decomposition_table)
    dynamo.reset()
    yield
    dynamo.reset()


class Recorder:
    """A dynamo backend that compiles with inductor and keeps what it compiled."""

    def __init__(self, target: str) -> None:
        self.target, self.compiled = target, []

    def __call__(self, gm, example_inputs):
        self.compiled.append(inductor.compile_fx(gm, example_inputs,
                                                 options={"target": self.target}))
        return self.compiled[-1]


def run_sizes(fn, target, sizes, make):
    """``fn`` compiled once, dynamic, and run on ``make(size)`` for each size (moved to the
    target's device, strides kept), against eager."""
    backend = Recorder(target)
    opt = dynamo.optimize(backend, dynamic=True)(fn)
    for size in sizes:
        args = to_target(make(size), target)
        torch.testing.assert_close(opt(*args), fn(*args), rtol=1e-4, atol=1e-5)
    return backend.compiled


def chain(x):
    """Three kernels (each reads a transpose of the last), so buf0 dies before buf2 is born."""
    s = x.exp().sin()
    b = (s + s.t()) * 0.5
    return b - b.t().exp()


@pytest.mark.parametrize("target", TARGETS)
def test_buffers_are_reused_with_symbolic_sizes(target):
    compiled = run_sizes(chain, target, (4, 6, 9), lambda n: [torch.randn(n, n)])
    assert len(compiled) == 1
    wrapper = compiled[0].artifacts["wrapper"]
    assert "s0 = arg0.size(0)" in wrapper
    assert "empty_strided((s0, s0), (s0, 1)" in wrapper
    assert re.search(r"buf\d+ = buf\d+; del buf\d+  # reuse", wrapper)


def softmax_rows(x):
    return torch.softmax(x * 2, dim=-1) + x.amax(-1, keepdim=True)


@pytest.mark.parametrize("target", TARGETS)
def test_reductions_over_symbolic_rows(target):
    # row lengths below, at and past the C++ split-accumulator width and the Triton block
    compiled = run_sizes(softmax_rows, target, (5, 33, 64, 100, 3),
                         lambda n: [torch.randn(3, n)])
    assert len(compiled) == 1
    kernels = "\n".join(v for k, v in compiled[0].artifacts.items() if k.startswith("kernels/"))
    if target == "triton":
        assert "for roffset in range(0," in kernels  # looped: no RBLOCK holds every row
        assert "rnumel: tl.constexpr" not in kernels
    else:
        assert "/ 32 * 32" in kernels  # split accumulators up to a run-time multiple of 32


@pytest.mark.parametrize("target", TARGETS)
def test_bfloat16_and_strided_inputs(target):
    def fn(x, y):
        return (x.float() + y).sum(0).to(torch.bfloat16)

    compiled = run_sizes(fn, target, (5, 7, 12), lambda n: [
        torch.randn(3, n).to(torch.bfloat16).t(), torch.randn(n, 3)])
    assert len(compiled) == 1


def test_int32_indexing_by_guard():
    env = shapes.ShapeEnv()
    s0 = env.create_symbol(100, "x.size()[0]")
    s1 = env.create_symbol(30, "x.size()[1]")
    sizes = SizeVars(env)
    assert sizes.known_below(64 * s0, 2**31)  # guarded: s0 <= a power of two
    assert "x.size()[0] <= 16777216" in [g for _, g in env.produce_guards()]
    assert sizes.known_below(s0 + 5, 2**31)  # follows from that guard: nothing new
    assert sizes.known_below(4 * s0**2, 2**31)  # a tighter bound replaces the looser one
    printed = [g for _, g in env.produce_guards()]
    assert "x.size()[0] <= 16384" in printed and "x.size()[0] <= 16777216" not in printed
    assert not sizes.known_below(s0 * s1, 2**31)  # two symbols: unsure, so int64
    assert not SizeVars(None).known_below(sympy.Symbol("s9", positive=True), 2**31)
    assert SizeVars(None).known_below(2**31 - 1, 2**31)


def test_triton_kernel_takes_sizes_as_plain_ints():
    def fn(x):
        return (x[:, 1:] * x.shape[1]).relu()

    compiled = run_sizes(fn, "triton", (5, 9), lambda n: [torch.randn(4, n)])
    kernel = next(v for k, v in compiled[0].artifacts.items() if k.startswith("kernels/"))
    params = re.search(r"def triton_\w+\((.*)\):", kernel).group(1)
    assert re.search(r"xnumel, s0, s1, XBLOCK: tl.constexpr", params)  # plain ints
    assert re.search(r"xindex % \(-1 \+ s1\)", kernel)  # the sliced row length, at run time


@pytest.mark.parametrize("target", TARGETS)
def test_backward_reads_saved_sizes(target):
    torch.manual_seed(0)
    device = device_for(target)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(),
                                torch.nn.Linear(8, 2)).to(device)
    backend = Recorder(target)
    opt = dynamo.optimize(backend, dynamic=True)(model.forward)
    for n in (3, 7):
        x = torch.randn(n, 6, device=device)
        opt(x).pow(2).sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        model(x).pow(2).sum().backward()
        for got, want in zip(grads, [p.grad for p in model.parameters()]):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        model.zero_grad()
    assert len(backend.compiled) == 1
    assert "s0 = arg" in backend.compiled[0].artifacts["backward/wrapper"]


def test_fallback_target_runs_symbolic_graphs():
    compiled = run_sizes(softmax_rows, "fallback", (4, 9),
                         lambda n: [torch.randn(2, n)])
    assert len(compiled) == 1


def test_reshape_of_reshape_indexes_linearly():
    """(B*T, C) -> (B, T, C) -> (B*T, C) reads element 512*i0 + i1, with no division by a
    run-time size (which would keep the C++ loop from vectorising), static or symbolic."""
    from dynamo.shapes import FloorDiv
    from inductor.scheduler import simplify_index

    i0, i1 = (sympy.Symbol(f"i{k}", integer=True, nonnegative=True) for k in range(2))
    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    for t, ranges in ((s1, {i0: s0 * s1, i1: 512}), (8, {i0: 32, i1: 512})):
        index = (512 * t * FloorDiv(512 * i0 + i1, 512 * t) + sympy.Mod(i1, 512)
                 + 512 * sympy.Mod(i0 + FloorDiv(i1, 512), t))
        assert simplify_index(index, ranges) == 512 * i0 + i1

    def mlp_rows(x, w):
        B, T, C = x.shape
        h = (x.reshape(B * T, C) @ w).reshape(B, T, -1)
        return torch.tanh(h).reshape(B * T, -1) @ w.t()

    w = torch.randn(8, 24)
    compiled = run_sizes(lambda x: mlp_rows(x, w), "cpp", (3, 5),
                         lambda n: [torch.randn(2, n, 8)])
    kernel = next(v for k, v in compiled[0].artifacts.items() if k.startswith("kernels/"))
    body = kernel[kernel.rindex('extern "C" void'):]
    assert " / " not in body and " % " not in body, body
