"""Horizontal fusion: independent loops over the same space share a kernel even when other
kernels run between them in program order, unless the reorder rule forbids the move; and
epilogues of library calls (bias + activation after mm) are one kernel."""

from __future__ import annotations

import random
import re

import inductor
import pytest
import torch
import torch.fx
import torch.nn.functional as F
from inductor_testing import assert_close, prims_graph, to_target

TARGETS = ["cpp", "triton"]
aotautograd = pytest.importorskip("aotautograd")
needs_aot = pytest.mark.skipif(not hasattr(aotautograd, "aot_module_simplified"),
                               reason="aotautograd.aot_module_simplified not written yet")


def compile_and_run(fn, inputs, target):
    inputs = to_target(inputs, target)
    compiled = inductor.compile_fx_inner(prims_graph(fn, inputs), inputs, target=target)
    return compiled, compiled(*inputs)


def kernel_lines(fusion: str) -> list[str]:
    return [line for line in fusion.splitlines() if line.startswith("kernel over")]


@pytest.mark.parametrize("target", TARGETS)
def test_independent_loops_fuse_across_another_kernel(target):
    x, y = torch.randn(3, 8), torch.randn(5)

    def fn(p, a, b):
        return p.sin(a), p.exp(b), p.cos(a)  # the [5] loop sits between the two [3, 8] ones

    compiled, outs = compile_and_run(fn, [x, y], target)
    fusion = compiled.artifacts["fusion"]
    assert compiled.kernel_count == 2
    assert "fuse buf2 into [buf0]: horizontal" in fusion
    assert "moved back past 1 later group(s)" in fusion
    for got, want in zip(outs, (x.sin(), y.exp(), x.cos())):
        assert_close(got, want)


@pytest.mark.parametrize("target", TARGETS)
def test_reorder_rule_keeps_a_consumer_after_its_producer(target):
    x, y = torch.randn(3, 8), torch.randn(5)

    def fn(p, a, b):
        s = p.sin(p.exp(a))  # two users: realized here, before the sum
        total = p.sum(b, [0])  # a kernel of its own, between s and its reader t
        t = p.add(p.cos(a), p.broadcast_in_dim(total, [3, 8], []))
        return p.mul(s, p.scalar(2.0, s)), p.add(s, p.scalar(1.0, s)), total, t

    compiled, (s2, s1, total, t) = compile_and_run(fn, [x, y], target)
    fusion = compiled.artifacts["fusion"]
    assert compiled.kernel_count == 3
    assert re.search(r"buf\d+ not fused with \[buf0, .*\] \(earlier\): it reads buf1, "
                     r"written after that kernel \(the reorder rule\)", fusion), fusion
    s = x.exp().sin()
    assert_close(s2, s * 2)
    assert_close(s1, s + 1)
    assert_close(total, y.sum(0))
    assert_close(t, x.cos() + y.sum())


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dim", [0, 1])
def test_horizontal_fusion_keeps_one_load_direction(target, dim):
    """[Note: one tile, one direction]: a [16, 16] pointwise loop fits a sum's space either
    way, but joins a column sum (loads along x) only at the price of loads along r."""
    x, y = torch.randn(16, 16), torch.randn(16, 16)

    def fn(p, a, b):
        return p.sum(a, [dim]), p.sin(b)

    compiled, (total, s) = compile_and_run(fn, [x, y], target)
    fusion = compiled.artifacts["fusion"]
    if dim == 0:
        assert compiled.kernel_count == 2
        assert "buf1 not fused with [buf0]: score 0 (no buffer shared, loads along another " \
               "axis)" in fusion
    else:
        assert compiled.kernel_count == 1
        assert "fuse buf1 into [buf0]: horizontal" in fusion
    assert_close(total, x.sum(dim))
    assert_close(s, y.sin())


@pytest.mark.parametrize("target", TARGETS)
def test_library_call_between_same_space_loops(target):
    x = torch.randn(4, 6)

    def fn(p, a):
        s = p.sin(a)
        total = p.call(torch.ops.aten.cumsum.default, p.cos(a), 1)  # a library call
        c = p.exp(a)  # independent of the call: runs in the kernel before it
        d = p.mul(total, p.scalar(2.0, total))  # reads the call's output: stays after it
        return s, c, d

    compiled, (s, c, d) = compile_and_run(fn, [x], target)
    fusion = compiled.artifacts["fusion"]
    assert "horizontal" in fusion and "(the reorder rule)" in fusion
    # the call's input (cos), sin and exp in one kernel before the call; mul after it
    assert kernel_lines(fusion) == ["kernel over [4, 6]: buf0, buf2, buf3",
                                    "kernel over [4, 6]: buf4"]
    lines = compiled.artifacts["wrapper"].split("def call")[1].splitlines()
    call = next(i for i, line in enumerate(lines) if "fallback_0(" in line)
    mul = next(i for i, line in enumerate(lines) if re.search(r"_fused_mul_\d+(_launch)?\W", line))
    assert call < mul
    assert_close(s, x.sin())
    assert_close(c, x.exp())
    assert_close(d, x.cos().cumsum(1) * 2)


@pytest.mark.parametrize("target", TARGETS)
def test_reductions_over_the_same_rows_share_a_kernel(target):
    a, b = torch.randn(6, 37), torch.randn(6, 37).to(torch.bfloat16)

    def fn(p, x, y):
        s = p.sum(x, [0])  # [37], reducing [6]
        noise = p.sin(p.sum(x, [1]))  # a kernel over other loops in between
        m = p.amax(y, [0])  # same space as s, independent: one kernel with s
        return s, noise, m

    compiled, (s, noise, m) = compile_and_run(fn, [a, b], target)
    lines = kernel_lines(compiled.artifacts["fusion"])
    assert compiled.kernel_count == 2
    assert any("reducing [6]" in line and "buf0" in line and "buf2" in line for line in lines)
    assert_close(s, a.sum(0), rtol=1e-5, atol=1e-5)
    assert_close(noise, a.sum(1).sin(), rtol=1e-5, atol=1e-5)
    assert_close(m, b.amax(0))


@pytest.mark.parametrize("target", TARGETS)
def test_transposed_read_of_an_earlier_group_is_refused(target):
    x, y = torch.randn(5, 5), torch.randn(7)

    def fn(p, a, b):
        s = p.sin(p.exp(a))  # two users: realized
        e = p.exp(b)
        t = p.add(s, p.permute(s, [1, 0]))  # reads s transposed: a kernel of its own
        return s, e, t

    compiled, (s, e, t) = compile_and_run(fn, [x, y], target)
    fusion = compiled.artifacts["fusion"]
    assert compiled.kernel_count == 3
    assert "another iteration's element" in fusion
    want = x.exp().sin()
    assert_close(t, want + want.t())
    assert_close(e, y.exp())


def random_program(seed: int):
    """A random graph of pointwise ops and reductions over two spaces, with values read
    across kernels: horizontal fusion must never reorder a read before its write."""
    rng = random.Random(seed)

    def fn(p, a, b):
        pool = {(4, 6): [a], (6,): [b]}
        outs = []
        for _ in range(8):
            kind = rng.choice(["unary", "binary", "reduce", "bcast"])
            if kind == "unary":
                shape = rng.choice(list(pool))
                v = getattr(p, rng.choice(["sin", "exp", "neg"]))(rng.choice(pool[shape]))
            elif kind == "binary":
                shape = rng.choice(list(pool))
                v = getattr(p, rng.choice(["add", "mul", "sub"]))(
                    rng.choice(pool[shape]), rng.choice(pool[shape]))
            elif kind == "reduce":
                shape, v = (6,), p.sum(rng.choice(pool[(4, 6)]), [0])
            else:
                shape = (4, 6)
                v = p.add(rng.choice(pool[shape]),
                          p.broadcast_in_dim(rng.choice(pool[(6,)]), [4, 6], [1]))
            pool[shape].append(v)
            if rng.random() < 0.5:
                outs.append(v)
        return outs or [pool[(4, 6)][-1]]

    return fn


@pytest.mark.parametrize("seed", range(8))
def test_random_programs_match_eager(seed):
    x, y = torch.randn(4, 6) * 0.5, torch.randn(6) * 0.5
    fn = random_program(seed)
    want = prims_graph(fn, [x, y])(x, y)  # the prims run eagerly: the oracle
    compiled, got = compile_and_run(random_program(seed), [x, y], "triton")
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_close(g, w, rtol=1e-4, atol=1e-4)


@needs_aot
@pytest.mark.parametrize("target", TARGETS)
def test_layer_norm_backward_sums_share_kernels(target):
    def fn(x, w, b):
        return (F.layer_norm(x, (37,), w, b),)

    x, w, b = torch.randn(6, 37), torch.randn(37), torch.randn(37)
    gx, gw, gb = (t.requires_grad_() for t in to_target([x, w, b], target))
    compiled = inductor.compile_fx(torch.fx.symbolic_trace(fn), [gx, gw, gb],
                                   options={"target": target})
    (out,) = compiled(gx, gw, gb)
    grad = torch.randn(6, 37)
    out.backward(to_target([grad], target)[0])
    ex, ew, eb = (t.detach().clone().requires_grad_() for t in (x, w, b))
    F.layer_norm(ex, (37,), ew, eb).backward(grad)
    assert_close(out, F.layer_norm(x, (37,), w, b), rtol=1e-5, atol=1e-5)
    for got, want in ((gx.grad, ex.grad), (gw.grad, ew.grad), (gb.grad, eb.grad)):
        assert_close(got, want, rtol=1e-4, atol=1e-4)
    backward = compiled.artifacts["backward/fusion"]
    over_columns = [line for line in kernel_lines(backward) if "reducing [6]" in line]
    over_rows = [line for line in kernel_lines(backward) if "reducing [37]" in line]
    assert len(over_columns) == 1 and len(over_rows) == 1  # weight and bias sums: one kernel
    assert len(re.findall(r"buf\d+", over_columns[0])) >= 2
    assert "horizontal" in backward


@needs_aot
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("form", ["matmul_add", "linear"])
def test_bias_and_gelu_after_mm_are_one_kernel(target, form):
    def fn(x, w, b):
        y = x @ w.t() + b if form == "matmul_add" else F.linear(x, w, b)
        return (F.gelu(y) * 0.5,)

    inputs = [torch.randn(8, 16), torch.randn(24, 16), torch.randn(24)]
    moved = to_target(inputs, target)
    with torch.no_grad():
        compiled = inductor.compile_fx(torch.fx.symbolic_trace(fn), moved,
                                       options={"target": target})
        (out,) = compiled(*moved)
    assert_close(out, fn(*inputs)[0], rtol=1e-5, atol=1e-5)
    fusion = compiled.artifacts["fusion"]
    assert compiled.kernel_count == 1, fusion  # the library call, then ONE epilogue kernel
    assert "library call" in fusion
    wrapper = compiled.artifacts["wrapper"]
    assert wrapper.count("empty_strided((8, 24)") == 1  # only the output: nothing in between


@pytest.mark.parametrize("target", TARGETS)
def test_a_scatter_stays_after_the_copy_it_writes_into(target):
    """A scatter is two loops writing one buffer (a copy of the base, then the scatter):
    horizontal fusion may move the copy into an earlier kernel, never the scatter before it."""
    a, src = torch.randn(6, 5), torch.randn(6, 5)
    index = torch.stack([torch.randperm(6, generator=torch.Generator().manual_seed(k))
                         for k in range(5)], 1)

    def fn(p, x, i, s):
        e = p.exp(p.exp(s))  # two users: realized first, a [6, 5] loop of its own
        out = p.scatter(p.neg(x), 0, i, e)
        return p.add(e, e), out, p.mul(out, e)

    compiled, (doubled, out, prod) = compile_and_run(fn, [a, index, src], target)
    want = torch.scatter(-a, 0, index, src.exp().exp())
    # exp(exp(s)) multiplies exp's relative error by exp(s), up to ~20 for randn data
    assert_close(out, want, rtol=1e-5, atol=1e-5)
    assert_close(prod, want * src.exp().exp(), rtol=1e-5, atol=1e-5)
    assert_close(doubled, 2 * src.exp().exp(), rtol=1e-5, atol=1e-5)


@needs_aot
@pytest.mark.parametrize("target", TARGETS)
def test_kernel_headers_name_source_nodes_and_aten_ops(target):
    def fn(x, w, b):
        return (F.gelu(x @ w + b).sum(-1),)

    inputs = to_target([torch.randn(8, 16), torch.randn(16, 24), torch.randn(24)], target)
    with torch.no_grad():
        compiled = inductor.compile_fx(torch.fx.symbolic_trace(fn), inputs,
                                       options={"target": target})
    (source,) = [v for k, v in compiled.artifacts.items() if k.startswith("kernels/")]
    comment = "#" if target == "triton" else "//"
    nodes = re.search(rf"^{comment} Source nodes: \[(.*)\]$", source, re.M).group(1).split(", ")
    prims_nodes = {n.name: n for n in compiled.prims_graph_module.graph.nodes}
    assert set(nodes) <= set(prims_nodes)
    targets = {str(prims_nodes[n].target) for n in nodes}
    assert {"minipt2.erf.default", "minipt2.sum.default", "minipt2.add.default"} <= targets
    aten = re.search(rf"^{comment} Original ATen: \[(.*)\]$", source, re.M).group(1)
    assert {"aten.add.Tensor", "aten.gelu.default", "aten.sum.dim_IntList"} <= \
        set(aten.split(", "))
    assert "aten.mm" not in aten  # the library call is not in the kernel
