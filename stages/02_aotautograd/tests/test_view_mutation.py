"""Writes through views, and reads of views whose base was written, against eager:
outputs, gradients and the inputs a program writes. See [Note: mutation through views]
(aotautograd/functionalize.py).

Each case runs through ``driver.compile`` on the aot_eager backend and on inductor's C++
and Triton targets (Triton in its interpreter on CPU); a fallback to eager would make every
check pass, so a fallback warning fails the test, and so does a second graph.
"""

from __future__ import annotations

import dynamo
import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F
from aotautograd import aot_module_simplified
from aotautograd.exc import AOTUnsupported

import driver

BACKENDS = {
    "aot_eager": dict(backend="aot_eager"),
    "inductor-cpp": dict(backend="inductor", options={"target": "cpp"}),
    "inductor-triton": dict(backend="inductor", options={"target": "triton"}),
}


def pooled_dropout(x, scale):
    """EfficientNet's classifier: ``nn.Dropout(inplace=True)`` after ``flatten``, a view
    of the pooled features; ``scale`` stands in for dropout's random mask."""
    h = torch.flatten(F.adaptive_avg_pool2d(x.exp(), 1), 1)  # (B, C), a view of (B, C, 1, 1)
    h.mul_(scale)
    return h.sin()


def slice_written(x, y):
    a = x * 2
    a[:, 1:3].mul_(y)  # autograd's backward of this is CopySlices: as_strided(...).copy_
    return a.cos()


def stale_view_read(x, y):
    a = x + y
    row = a[1]  # taken before a is written: must see the write
    a.mul_(3)
    return row * 2, a


def transposed_select(x, y):
    a = x * 3
    a.t()[2].add_(y[0])  # a chain of two views: t, then select
    return a


def split_piece(x, y):
    a = x * y
    first, second = a.split(2, dim=1)
    return torch.cat([first.exp(), second], 1), a.view(-1).mul_(0.5)[1:]


def input_rows_written(x, w):
    x[1:].mul_(2)  # a view of an input: the input gets its new value back
    return x.sum(1, keepdim=True) * w  # (backward reads no input written: see test_runtime's
    #                                    test_mutated_input_used_by_backward)


def element_set(x, y):
    a = x * y
    a[0, 1] = 9.0  # an all-integer index: PyTorch copies a scalar tensor it made for the 9
    return a.sin()


def index_table(x, y):
    """BEiT's relative position index: an integer table built in the forward, one element
    set to a constant, then used to gather."""
    idx = torch.zeros(3, 3, dtype=torch.long, device=x.device)
    idx[0, 0] = 2
    return x[idx[0]] * y[0, 0]


def input_element_set(x, w):
    x[2, 0] = -1.0  # an element of an input: the caller sees it
    return x.sum(1, keepdim=True) * w


CASES = {  # name: (function, inputs: shapes, which require grad)
    "pooled-dropout": (pooled_dropout, [((2, 5, 3, 3), True), ((2, 5), False)]),
    "slice-written": (slice_written, [((3, 4), True), ((3, 2), True)]),
    "stale-view-read": (stale_view_read, [((3, 4), True), ((3, 4), False)]),
    "transposed-select": (transposed_select, [((5, 3), True), ((2, 5), True)]),
    "split-piece": (split_piece, [((3, 4), True), ((3, 4), True)]),
    "input-rows-written": (input_rows_written, [((3, 4), False), ((3, 4), True)]),
    "element-set": (element_set, [((3, 4), True), ((3, 4), True)]),
    "index-table": (index_table, [((3, 4), True), ((3, 4), True)]),
    "input-element-set": (input_element_set, [((3, 4), False), ((3, 4), True)]),
}


def make_inputs(specs, seed=0, device="cpu"):
    torch.manual_seed(seed)
    return [torch.randn(shape).to(device) for shape, _ in specs]


def device_of(backend: str) -> str:
    """Triton kernels take CUDA tensors where there is a GPU (else the interpreter runs them
    on the CPU's)."""
    return "cuda" if backend == "inductor-triton" and torch.cuda.is_available() else "cpu"


def leaves(values, specs):
    return [v.clone().requires_grad_(grad) for v, (_, grad) in zip(values, specs)]


@pytest.mark.filterwarnings("error", category=dynamo.FallbackWarning)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES)
def test_write_through_view_matches_eager(case, backend):
    fn, specs = CASES[case]
    device = device_of(backend)
    values = make_inputs(specs, device=device)
    eager_in, compiled_in = leaves(values, specs), leaves(values, specs)
    expected = fn(*eager_in)
    compiled = driver.compile(fn, **BACKENDS[backend])
    out = compiled(*compiled_in)
    assert len(compiled.graphs) == 1, "expected one compiled graph, not an eager run"
    torch.testing.assert_close(out, expected)
    for got, want in zip(compiled_in, eager_in):  # inputs written in place
        torch.testing.assert_close(got.detach(), want.detach())
    loss = lambda outs: sum(  # noqa: E731
        (o * torch.linspace(-1, 1, o.numel(), device=device).view(o.shape)).sum()
        for o in (outs if isinstance(outs, tuple) else (outs,)))
    loss(expected).backward()
    loss(out).backward()
    for got, want in zip(compiled_in, eager_in):
        if want.requires_grad:
            torch.testing.assert_close(got.grad, want.grad)


@pytest.mark.filterwarnings("error", category=dynamo.FallbackWarning)
@pytest.mark.parametrize("backend", ["aot_eager", "inductor-cpp"])
def test_inplace_dropout_on_a_view_keeps_the_mask(backend):
    """The real pattern, random mask and all: every element is either dropped (0, and no
    gradient) or kept and scaled by 1 / (1 - p) (and its gradient too)."""
    p = 0.5

    def fn(x):
        h = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return F.dropout(h, p, training=True, inplace=True)

    x = torch.randn(16, 32, 2, 2, requires_grad=True)
    compiled = driver.compile(fn, **BACKENDS[backend])
    out = compiled(x)
    assert len(compiled.graphs) == 1
    pooled = x.detach().mean((2, 3))
    kept = out != 0
    assert 0.3 < kept.float().mean() < 0.7  # dropped about half
    torch.testing.assert_close(out[kept], pooled[kept] / (1 - p))
    out.sum().backward()
    per_pixel = x.grad.mean((2, 3)) * 4  # d out / d x = mask / (1 - p) / 4, per pooled pixel
    torch.testing.assert_close(per_pixel, kept.float() / (1 - p))


@pytest.mark.parametrize("fn", [
    lambda x: (x * 1).expand(3, 4).add_(1),  # one element of the base, many of the view
    lambda x: (x * 1).view(4).unfold(0, 2, 2).mul_(2),  # unfold has no scatter
], ids=["expand", "unfold"])
def test_writes_that_are_no_scatter_are_refused(fn):
    with pytest.raises(AOTUnsupported, match="expand|no scatter"):
        aot_module_simplified(fx.symbolic_trace(fn), [torch.randn(1, 4)], lambda gm, _: gm)


def test_a_view_whose_eager_strides_aten_will_not_give_stays_a_view(monkeypatch):
    """[Note: eager strides of input views]: asking ATen for an input view's eager geometry
    may fail (symbolic sizes; once an internal assert of PyTorch's, in Longformer). That is
    no error: the view stays a view of the input, and a write through it reaches the input."""
    import aotautograd.proxy_tensor as proxy_tensor

    meta = torch.empty(3, 4, device="meta")  # a failing geometry call answers "unknown"
    assert proxy_tensor._eager_view(torch.ops.aten.view.default, (meta, [5, 5]), {}) is None

    monkeypatch.setattr(proxy_tensor, "_eager_view", lambda func, args, kwargs: None)

    def fn(x):
        x[1:].mul_(2)  # through a view of the input, whose geometry is now unknown
        return x.sum() * 3

    eager_in = torch.randn(3, 4)
    compiled_in = eager_in.clone()
    want = fn(eager_in)
    torch.testing.assert_close(driver.compile(fn, backend="aot_eager")(compiled_in), want)
    torch.testing.assert_close(compiled_in, eager_in)
