"""[Note: writing an input in place]: a mutated input's new value is stored into the input
by its kernel when nothing can tell; the values, the versions and every case that must keep
the copy are checked against eager."""

from __future__ import annotations

import pytest
import torch
from inductor_testing import device_for

import driver


def wrapper_text(compiled) -> str:
    return "\n".join(g.artifacts["wrapper"] for g in compiled.graphs)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(8)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x))).mean()


@pytest.mark.parametrize("target", ["cpp", "triton"])
@pytest.mark.parametrize("train", [True, False])
def test_batchnorm_statistics_are_written_into_their_buffers(target, train):
    """Triton: the running mean, variance and batch count are stored by their kernel into
    the module's buffers (no copy); C++ keeps the copies. Over three steps the buffers, the
    loss and the gradients equal eager's, and each buffer's version moves, as a ``copy_``
    into it would move it. On a GPU a float32 BatchNorm reaches the trace as cuDNN's op,
    which decomposes like the native one ([Note: cuDNN's batch norm] in primtorch)."""
    torch.manual_seed(0)
    dev = device_for(target)
    net, ref = Net().to(dev), Net().to(dev)
    ref.load_state_dict(net.state_dict())
    compiled = driver.compile(net, options={"target": target})
    steps(compiled, net, ref, dev, train)
    text = wrapper_text(compiled)
    assert "cudnn_batch_norm" not in text  # decomposed, not a library call
    assert text.count("written in place") == (3 if target == "triton" else 0)


def steps(compiled, net, ref, dev, train):
    for _ in range(3):
        x = torch.randn(4, 3, 8, 8, device=dev)
        versions = [b._version for b in net.buffers()]
        with torch.set_grad_enabled(train):
            loss, want = compiled(x), ref(x)
        torch.testing.assert_close(loss, want)
        assert all(b._version > v for b, v in zip(net.buffers(), versions))
        if train:
            loss.backward()
            want.backward()
    for (name, got), want in zip(net.named_buffers(), ref.buffers()):
        torch.testing.assert_close(got, want, msg=name)
    if train:
        torch.testing.assert_close(net.conv.weight.grad, ref.conv.weight.grad)


@pytest.mark.parametrize("case", ["read-by-another-kernel", "read-elsewhere", "returned"])
def test_an_input_whose_old_value_is_still_needed_is_copied(case):
    """Three ways the old value stays needed: another kernel reads it, the new value's own
    loop reads it at other indices (a flip), or it is returned. Each keeps the copy."""
    dev = device_for("triton")

    def fn(x, buf):
        if case == "read-by-another-kernel":
            y = (buf * 2).sum()  # a reduction: its own kernel
            buf.add_(x)
            return y + buf.sum()
        if case == "read-elsewhere":
            buf.copy_(buf.flip(0) + x)
            return buf * 1
        old = buf * 1
        buf.mul_(3)
        return old, x + 1

    x = torch.randn(64, device=dev)
    buf = torch.randn(64, device=dev)
    compiled = driver.compile(fn, options={"target": "triton"})
    mine, theirs = buf.clone(), buf.clone()
    torch.testing.assert_close(compiled(x, mine), fn(x, theirs))
    torch.testing.assert_close(mine, theirs)
    assert "written in place" not in wrapper_text(compiled)


def test_a_pointwise_update_is_written_in_place_and_repeats_like_eager():
    """``buf.mul_(0.5).add_(x)`` read and written at the same index: in place, and two calls
    in a row give eager's values."""
    dev = device_for("triton")

    def fn(x, buf):
        buf.mul_(0.5).add_(x)
        return x.sum()

    x = torch.randn(32, 4, device=dev)
    compiled = driver.compile(fn, options={"target": "triton"})
    mine, theirs = torch.ones(32, 4, device=dev), torch.ones(32, 4, device=dev)
    for _ in range(2):
        compiled(x, mine)
        fn(x, theirs)
    torch.testing.assert_close(mine, theirs)
    assert "written in place" in wrapper_text(compiled)


def test_a_saved_input_overwritten_by_the_graph_still_raises_at_backward():
    """The version bump makes autograd see the write: eager raises when a tensor saved for
    a backward is overwritten in place before it; so does the compiled graph."""
    dev = device_for("triton")
    buf = torch.ones(8, device=dev)
    w = torch.randn(8, device=dev, requires_grad=True)
    loss = (w * buf).sum()  # eager saves buf for w's gradient

    def fn(x, buf):
        buf.mul_(2)
        return x + 1

    compiled = driver.compile(fn, options={"target": "triton"})
    compiled(torch.randn(8, device=dev), buf)
    assert "written in place" in wrapper_text(compiled)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
