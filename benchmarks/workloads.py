"""The micro workloads of the benchmark suite (see /work/shared/BENCHMARKS.md).

Each workload is a builder ``(device, dtype, size) -> Workload``: the function to compile,
its inputs (fresh random data, never zeros), and the bytes a perfect kernel moves (every
input read once, every output written once), from which achieved bandwidth is computed.
``size`` is "full" (the GPU sizes of BENCHMARKS.md), "cpu" (smaller, for a 2-core CPU) or
"tiny" (what the CI smoke test runs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
import torch.nn.functional as F


@dataclasses.dataclass
class Workload:
    name: str
    fn: Callable
    args: tuple
    bytes_moved: int


def trig(x, y):
    return torch.sin(x) + torch.cos(y)


def gelu_bias(x, b):
    return F.gelu(x + b) * 0.5 + x


def softmax(x):
    return torch.softmax(x * 0.125, -1)


def layernorm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def rmsnorm(x, w):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    return (y * w.float()).to(x.dtype)


SIZES = {  # name -> {size: shape}
    "trig": {"full": (1 << 26,), "cpu": (1 << 22,), "tiny": (1000,)},
    "gelu_bias": {"full": (8192, 8192), "cpu": (2048, 2048), "tiny": (8, 33)},
    "softmax": {"full": (8192, 8192), "cpu": (2048, 2048), "tiny": (8, 33)},
    "layernorm": {"full": (8192, 8192), "cpu": (2048, 2048), "tiny": (8, 33)},
    "rmsnorm": {"full": (16384, 4096), "cpu": (4096, 1024), "tiny": (8, 33)},
}


def _randn(shape, device, dtype) -> torch.Tensor:
    return torch.randn(shape, device=device, dtype=torch.float32).to(dtype)


def build(name: str, device: str, dtype: torch.dtype, size: str) -> Workload:
    shape = SIZES[name][size]
    item = torch.empty((), dtype=dtype).element_size()
    numel = 1
    for s in shape:
        numel *= s
    x = _randn(shape, device, dtype)
    vec = _randn(shape[-1:], device, dtype)
    if name == "trig":
        return Workload(name, trig, (x, _randn(shape, device, dtype)), 3 * numel * item)
    if name == "gelu_bias":
        return Workload(name, gelu_bias, (x, vec), (2 * numel + shape[-1]) * item)
    if name == "softmax":
        return Workload(name, softmax, (x,), 2 * numel * item)
    if name == "layernorm":
        bias = _randn(shape[-1:], device, dtype)
        return Workload(name, layernorm, (x, vec, bias), (2 * numel + 2 * shape[-1]) * item)
    if name == "rmsnorm":
        return Workload(name, rmsnorm, (x, vec), (2 * numel + shape[-1]) * item)
    raise ValueError(f"unknown workload {name!r}; known: {sorted(SIZES)}")


SUITES = {"micro": list(SIZES)}
