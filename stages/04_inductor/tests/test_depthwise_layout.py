"""[Note: depthwise convolutions read channels-last]: on a GPU, a value that a depthwise
convolution reads is stored channels-last when inductor computes it, forward and backward.

The rule is for GPUs (``CHANNELS_LAST_DEVICES``); here it is switched on for the CPU too, so
that both targets run it (Triton under the interpreter). Eager is the oracle for the loss
and every gradient; the wrappers show where the layout was chosen.
"""

from __future__ import annotations

import importlib
import re

import pytest
import torch
from inductor_testing import device_for

import driver

graph_module = importlib.import_module("inductor.graph")


class Block(torch.nn.Module):
    """ConvNeXt's block in small: a 7x7 depthwise convolution, LayerNorm and a Linear over
    (N, H, W, C), back to (N, C, H, W), and the residual sum, twice, so that the second
    depthwise convolution reads a sum inductor computed."""

    def __init__(self, channels: int = 8, groups: int | None = None):
        super().__init__()
        self.convs = torch.nn.ModuleList(
            torch.nn.Conv2d(channels, channels, 7, padding=3, groups=groups or channels)
            for _ in range(2))
        self.norms = torch.nn.ModuleList(torch.nn.LayerNorm(channels) for _ in range(2))
        self.fcs = torch.nn.ModuleList(torch.nn.Linear(channels, channels) for _ in range(2))

    def forward(self, x):
        x = x * 2  # computed here, so the first convolution's input is ours too
        for conv, norm, fc in zip(self.convs, self.norms, self.fcs):
            y = fc(norm(conv(x).permute(0, 2, 3, 1))).permute(0, 3, 1, 2)
            x = x + torch.nn.functional.gelu(y)
        return x.square().mean()


def channels_last_buffers(compiled, n: int, c: int, h: int, w: int) -> int:
    """How many buffers the wrappers allocate with (n, c, h, w) channels-last strides."""
    text = "\n".join(v for g in compiled.graphs for k, v in g.artifacts.items()
                     if k.endswith("wrapper"))
    pattern = re.escape(f"empty_strided(({n}, {c}, {h}, {w}), ({h * w * c}, 1, {w * c}, {c}),")
    return len(re.findall(pattern, text))


def run(target: str, groups: int | None):
    torch.manual_seed(0)
    dev = device_for(target)
    net = Block(groups=groups).to(dev)
    ref = Block(groups=groups).to(dev)
    ref.load_state_dict(net.state_dict())
    x = torch.randn(2, 8, 6, 5, device=dev)
    compiled = driver.compile(net, options={"target": target})
    got, want = compiled(x), ref(x)
    got.backward()
    want.backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(net.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
    return compiled


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_depthwise_inputs_are_channels_last(monkeypatch, target):
    monkeypatch.setattr(graph_module, "CHANNELS_LAST_DEVICES", ("cuda", "cpu"))
    compiled = run(target, groups=None)
    # forward: both convolutions' inputs (x * 2 and the first residual sum); backward: the
    # gradients of both convolutions' outputs (the residual sums saved for backward are the
    # forward's buffers, handed over in their own layout)
    assert channels_last_buffers(compiled, 2, 8, 6, 5) >= 3


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_other_convolutions_keep_row_major_inputs(monkeypatch, target):
    monkeypatch.setattr(graph_module, "CHANNELS_LAST_DEVICES", ("cuda", "cpu"))
    compiled = run(target, groups=2)  # grouped, not depthwise: 4 channels per filter
    assert channels_last_buffers(compiled, 2, 8, 6, 5) == 0


def test_off_on_the_cpu_by_default():
    assert "cpu" not in graph_module.CHANNELS_LAST_DEVICES
    compiled = run("cpp", groups=None)
    assert channels_last_buffers(compiled, 2, 8, 6, 5) == 0


# [Note: a convolution's result layout on a GPU]

def strided_cases():
    """4-d tensors in many layouts: row-major, channels-last, permuted, with size-1 dims,
    sliced, expanded."""
    channels_last = torch.channels_last
    return [torch.empty(2, 3, 4, 5), torch.empty(2, 3, 4, 5).to(memory_format=channels_last),
            torch.empty(8, 1, 3, 3), torch.empty(8, 4, 1, 1), torch.empty(1, 3, 1, 5),
            torch.empty(2, 1, 4, 5).to(memory_format=channels_last),
            torch.empty(2, 3, 1, 1).to(memory_format=channels_last),
            torch.empty(2, 5, 4, 3).permute(0, 3, 2, 1),
            torch.empty(2, 4, 5, 3).permute(0, 3, 1, 2),
            torch.empty(2, 3, 4, 10)[..., ::2], torch.empty(3, 1, 1, 1).expand(3, 2, 4, 5),
            torch.empty(1, 1, 1, 1), torch.empty(2, 3, 4, 5)[:, :, :, 1:2]]


def test_looks_channels_last_is_atens_suggest_memory_format():
    from torch._prims_common import suggest_memory_format  # the oracle, in a test only

    for t in strided_cases():
        want = suggest_memory_format(t) == torch.channels_last
        assert graph_module.looks_channels_last(t.shape, t.stride()) == want, (t.shape, t.stride())


def test_convolution_result_is_channels_last_on_a_gpu_when_its_input_is():
    aten = torch.ops.aten
    x = torch.empty(2, 8, 6, 5, device="meta").to(memory_format=torch.channels_last)
    w = torch.empty(8, 1, 3, 3, device="meta")
    args = (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 8)
    val = aten.convolution.default(*args)
    assert val.is_contiguous()  # PyTorch's meta function: always row-major
    on_gpu = graph_module.convolution_result_layout(aten.convolution.default, val, args,
                                                    torch.device("cuda"))
    assert on_gpu.is_contiguous(memory_format=torch.channels_last) and not on_gpu.is_contiguous()
    assert graph_module.convolution_result_layout(aten.convolution.default, val, args,
                                                  torch.device("cpu")) is val
    row_major = (x.contiguous(), *args[1:])
    assert graph_module.convolution_result_layout(aten.convolution.default, val, row_major,
                                                  torch.device("cuda")) is val
    dy = torch.empty(2, 8, 6, 5, device="meta")
    back = (dy, x, w, [8], [1, 1], [1, 1], [1, 1], False, [0, 0], 8, [True, True, True])
    grads = graph_module.convolution_result_layout(
        aten.convolution_backward.default, aten.convolution_backward.default(*back), back,
        torch.device("cuda"))
    assert grads[0].is_contiguous(memory_format=torch.channels_last)
    assert grads[0].stride() == (240, 1, 40, 8) and grads[2].shape == (8,)
    double = (x.double(), w.double(), *args[2:])
    assert graph_module.convolution_result_layout(
        aten.convolution.default, val, double, torch.device("cuda")) is val  # no NHWC for fp64
