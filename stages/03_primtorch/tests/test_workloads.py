"""The benchmark suite's workloads, forward and backward, decompose into prims and extern ops
only (no fallbacks), and the decomposed run computes what eager computes.

``Decompose`` is an eager stand-in for the tracer of stage 2: every aten op that has a
decomposition runs it (recursively, so its own aten calls are decomposed too); every other
op is a leaf, counted as prim, extern or fallback. In-place ops run as their functional
twin followed by a copy into the target, which is how the tracer functionalizes them.
"""

from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from primtorch import decomposition_table, op_kind
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
# In-place ops whose functional twin has another overload name.
FUNCTIONAL = {aten.bernoulli_.float: aten.bernoulli.p}


def functional_variant(func):
    if func in FUNCTIONAL:
        return FUNCTIONAL[func]
    name = func._schema.name.split("::")[-1]
    packet = getattr(aten, name[:-1], None) if name.endswith("_") else None
    return getattr(packet, func._overloadname, None) if packet is not None else None


def _has_tensors(args, kwargs) -> bool:
    leaves = torch.utils._pytree.tree_leaves((args, kwargs))
    return any(isinstance(t, torch.Tensor) for t in leaves)


class Decompose(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.leaves = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is aten.copy_.default or not _has_tensors(args, kwargs):
            return func(*args, **kwargs)  # a mutation's write-back; dtype arithmetic
        if func._schema.is_mutable and functional_variant(func) is not None:
            with self:
                out = functional_variant(func)(*args, **kwargs)
            return args[0].copy_(out)
        decomposition = decomposition_table.get(func)
        if decomposition is not None:
            with self:
                out = decomposition(*args, **kwargs)
            if out is not NotImplemented:
                return out
        self.leaves[(op_kind(func), str(func))] += 1
        return func(*args, **kwargs)


class Block(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
        self.heads, self.drop = heads, nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, C / H)
        x = x + self.drop(self.proj(y.transpose(1, 2).contiguous().view(B, T, C)))
        return x + self.drop(self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh")))


class GPT(nn.Module):
    def __init__(self, vocab=64, width=32, context=16, dropout=0.1):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.blocks = nn.ModuleList([Block(width, 4, dropout) for _ in range(2)])
        self.ln_f, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied embedding
        self.drop = nn.Dropout(dropout)

    def forward(self, idx, targets):
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(idx.shape[1])))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.conv1, self.bn1 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 10)

    def forward(self, x, y):
        x = self.stem(x)
        x = F.relu(self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))) + x)
        return F.cross_entropy(self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1)), y)


def rmsnorm(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w


def _mlp():
    layers = []
    for _ in range(3):
        layers += [nn.Linear(16, 16), nn.GELU()]
    return nn.Sequential(*layers, nn.LayerNorm(16))


def _workloads(dropout: float):
    torch.manual_seed(0)
    x, y = (torch.randn(8, 16, requires_grad=True) for _ in range(2))
    b, w = (torch.randn(16, requires_grad=True) for _ in range(2))
    gpt, resnet, mlp = GPT(dropout=dropout), ResNet(), _mlp()
    idx = torch.randint(0, 64, (2, 16))
    images, labels = torch.randn(2, 3, 8, 8), torch.tensor([1, 7])
    return {
        "trig": lambda: torch.sin(x) + torch.cos(y),
        "gelu_bias": lambda: F.gelu(x + b) * 0.5 + x,
        "softmax": lambda: torch.softmax(x * 0.125, -1),
        "layernorm": lambda: F.layer_norm(x, (16,), w, b),
        "rmsnorm": lambda: rmsnorm(x, w),
        "rmsnorm_bf16": lambda: rmsnorm(x.bfloat16(), w.bfloat16()),
        "rms_norm": lambda: F.rms_norm(x, (16,), w),
        "group_norm": lambda: F.group_norm(x.view(2, 4, 16), 2, w[:4], b[:4]),
        "mlp_train": lambda: mlp(x),
        "gpt_train": lambda: gpt(idx, idx),
        "convnet_train": lambda: resnet(images, labels),
    }, [x, y, b, w]


def _run(fn, inputs):
    out = fn()
    params = [p for p in inputs if p.requires_grad]
    grads = torch.autograd.grad(out.float().sum(), params, allow_unused=True)
    return [out] + [g for g in grads if g is not None]


@pytest.mark.parametrize("name", list(_workloads(0.1)[0]))
def test_workloads_decompose_fully(name):
    fns, inputs = _workloads(0.1)
    with Decompose() as mode:
        _run(fns[name], inputs)
    fallbacks = sorted(op for (kind, op) in mode.leaves if kind == "fallback")
    assert not fallbacks, f"{name}: not decomposed and not extern: {fallbacks}"
    assert any(kind == "prim" for kind, _ in mode.leaves)


@pytest.mark.parametrize("name", ["gelu_bias", "layernorm", "rmsnorm", "mlp_train",
                                  "gpt_train", "convnet_train", "group_norm"])
def test_workloads_decomposed_match_eager(name):
    """Forward and gradients through the decompositions equal eager's (no dropout)."""
    fns, inputs = _workloads(0.0)
    expected = _run(fns[name], inputs)
    fns, inputs = _workloads(0.0)
    with Decompose():
        actual = _run(fns[name], inputs)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)
