"""Compile-time shortcuts must not change what is compiled.

Index arithmetic is memoized ([Note: memoized index arithmetic] in ir.py, ``simplify_index``,
``lowering.unflatten``, the loop-IR printer's ``_text``), and the forward/backward graph
artifacts reuse the prims-graph text. Compiles through the caches (cold, then warm) must print
the same kernels, wrapper and graphs as a compile through the plain functions.
"""

from __future__ import annotations

import re
from typing import Any

import inductor
import pytest
import torch
import torch.fx
import torch.nn.functional as F
from inductor import ir, lowering, scheduler, virtualized
from inductor_testing import to_target

aotautograd = pytest.importorskip("aotautograd")
needs_aot = pytest.mark.skipif(not hasattr(aotautograd, "aot_module_simplified"),
                               reason="aotautograd.aot_module_simplified not written yet")

CACHES = [(scheduler, "_simplify"), (ir, "dot_index"), (ir, "_index_vars"),
          (ir, "_contiguous_strides"), (lowering, "unflatten"), (virtualized, "_text")]


def attention_block(x, w):
    """Reshapes, transposes, a LayerNorm and a softmax: the index arithmetic a GPT needs."""
    h = F.layer_norm(x, (16,))  # (B, T, C) = (2, 8, 16)
    q = (h @ w).view(2, 8, 4, 4).transpose(1, 2)  # (B, nh, T, hs)
    att = torch.softmax(q @ q.transpose(-1, -2) * 0.5, -1)  # (B, nh, T, T)
    y = (att @ q).transpose(1, 2).reshape(2, 8, 16)
    return ((y + x).square().sum(),)


def compile_artifacts(x, w):
    fn = inductor.compile_fx(torch.fx.symbolic_trace(attention_block), [x, w],
                             options={"target": "triton"})
    return fn, {k: v for k, v in fn.artifacts.items() if not k.endswith("timing")}


@needs_aot
def test_memoized_compile_prints_what_an_unmemoized_one_prints(monkeypatch):
    x = torch.randn(2, 8, 16, requires_grad=True)
    w = torch.randn(16, 16, requires_grad=True)
    _, cached_cold = compile_artifacts(x, w)
    _, cached_warm = compile_artifacts(x, w)  # every index expression now from the caches
    assert scheduler._simplify.cache_info().hits > 0
    with monkeypatch.context() as m:
        for module, name in CACHES:  # the plain functions (recursion included)
            m.setattr(module, name, getattr(module, name).__wrapped__)
        _, uncached = compile_artifacts(x, w)
    assert any(k.startswith("backward/kernels/") for k in uncached)  # training: both graphs
    for cached in (cached_cold, cached_warm):
        assert cached.keys() == uncached.keys()
        for key in uncached:
            assert cached[key] == uncached[key], key


@needs_aot
def test_forward_and_backward_graph_text_is_the_graphs_own():
    x = torch.randn(2, 8, 16, requires_grad=True)
    w = torch.randn(16, 16, requires_grad=True)
    fn, artifacts = compile_artifacts(x, w)
    forward, backward = (c.prims_graph_module for c in fn.compiled_graphs)
    assert artifacts["fw_graph"] == forward.print_readable(print_output=False)
    assert artifacts["bw_graph"] == backward.print_readable(print_output=False)


def recorded(monkeypatch, cls: type, name: str) -> tuple[list, Any]:
    """Patch ``cls.name`` to note each object it is called on; (that list, the original)."""
    calls, plain = [], getattr(cls, name)

    def counting(self, *args, **kwargs):
        calls.append(self)
        return plain(self, *args, **kwargs)
    monkeypatch.setattr(cls, name, counting)
    return calls, plain


@needs_aot
def test_graph_texts_are_printed_when_read_and_once(monkeypatch):
    """[Note: texts printed when read]: compiling prints no FX graph; the joint graph's text is
    printed at its first read, the forward's once for ``fw_graph`` and ``prims_graph``, and
    each is the graph's own text."""
    printed, plain = recorded(monkeypatch, torch.fx.GraphModule, "print_readable")
    x = torch.randn(2, 8, 16, requires_grad=True)
    w = torch.randn(16, 16, requires_grad=True)
    fn = inductor.compile_fx(torch.fx.symbolic_trace(attention_block), [x, w],
                             options={"target": "cpp"})
    assert printed == [] and "joint_graph" in fn.artifacts and "prims_graph" in fn.artifacts
    forward, backward = (c.prims_graph_module for c in fn.compiled_graphs)
    text = fn.artifacts["fw_graph"]
    assert printed == [forward] and fn.artifacts["prims_graph"] == text
    assert fn.artifacts.copy()["backward/prims_graph"] == fn.artifacts["bw_graph"]
    assert printed == [forward, backward]
    assert fn.artifacts["joint_graph"] == fn.joint_graph.print_readable(print_output=False)
    assert text == plain(forward, print_output=False)


@needs_aot
def test_compiling_writes_no_graph_as_python(monkeypatch):
    """[Note: graph modules that write their code when asked]: compiling and running a
    training graph writes none of aotautograd's graphs out as Python (inductor reads their
    nodes); a graph's code is written when asked for, and runs as eager does."""
    x = torch.randn(2, 8, 16, requires_grad=True)
    w = torch.randn(16, 16, requires_grad=True)
    gm = torch.fx.symbolic_trace(attention_block)
    written, _ = recorded(monkeypatch, torch.fx.Graph, "python_code")
    fn = inductor.compile_fx(gm, [x, w], options={"target": "cpp"})
    (loss,) = fn(x, w)
    loss.backward()
    assert written == []
    forward = fn.compiled_graphs[0].prims_graph_module
    assert "def forward" in forward.code and written == [forward.graph]
    torch.testing.assert_close(forward(x, w)[0], attention_block(x, w)[0])


def test_a_log_channel_prints_only_its_own_texts(monkeypatch):
    """[Note: texts printed when read] through the driver: with no log channel on, compiling
    prints no FX graph; with ``prims`` on, it prints the prims graphs (forward and backward)
    and not dynamo's. Values and gradients as eager's either way."""
    import driver
    from driver import logs

    printed, _ = recorded(monkeypatch, torch.fx.GraphModule, "print_readable")
    x = torch.randn(3, requires_grad=True)
    got = driver.compile(lambda a: (a.sin() * 2).sum())(x)
    (grad,) = torch.autograd.grad(got, x)
    assert printed == []
    torch.testing.assert_close(got, (x.sin() * 2).sum())
    torch.testing.assert_close(grad, x.cos() * 2)
    try:
        logs.set_logs("prims")
        compiled = driver.compile(lambda a: (a.cos() * 2).sum())
        got = compiled(x)
    finally:
        logs.set_logs()
    (record,) = compiled.graphs
    assert len(printed) == 2 and record.gm not in printed
    torch.testing.assert_close(got, (x.cos() * 2).sum())


def repeated_blocks(x, w1, w2, b):
    """Two equal blocks (same shapes, same ops) and a third that differs in one constant."""
    h = F.gelu(x @ w1 + b, approximate="tanh")
    h = F.gelu(h @ w2 + b, approximate="tanh")
    return ((h @ w2 + b).sigmoid() * 3.0,)


@pytest.mark.parametrize("target", ["triton", "cpp"])
def test_equal_loops_share_one_kernel(target):
    """[Note: one kernel for equal loops]: the second block launches the first block's
    kernel with its own buffers; a kernel that differs in one constant keeps its own."""
    torch.manual_seed(0)
    x, w1, w2, b = to_target([torch.randn(8, 32), torch.randn(32, 32), torch.randn(32, 32),
                              torch.randn(32)], target)
    fn = inductor.compile_fx(torch.fx.symbolic_trace(repeated_blocks), [x, w1, w2, b],
                             options={"target": target})
    torch.testing.assert_close(fn(x, w1, w2, b)[0], repeated_blocks(x, w1, w2, b)[0],
                               rtol=1e-4, atol=1e-4)
    wrapper = fn.artifacts["wrapper"]
    sources = [k for k in fn.artifacts if k.startswith("kernels/")]
    body = wrapper.split("def call")[1]  # (the launch sites are bound above it)
    calls = [re.sub(r"_launch\d*$", "", line.split("[")[0].split("(")[0].strip())
             for line in body.splitlines() if line.strip().startswith(("triton_", "cpp_"))]
    assert len(calls) == 3 and len(set(calls)) == 2  # gelu twice (shared), sigmoid once
    assert calls[0] == calls[1] != calls[2]
    assert len(sources) == 2
