"""The benchmark suite's workloads (/work/shared/BENCHMARKS.md), small, as the stage tests
use them: the micro functions and the training models. One definition, shared by
stage 2's tests (``aot_testing.py``, ``test_workloads_through_aot.py``) and stage 3's
``test_workloads.py`` (which puts this folder on ``sys.path``).

- micro workloads: ``trig``, ``gelu_bias``, ``softmax``, ``layernorm``, ``rmsnorm`` (the
  formulas of ``benchmarks/workloads.py``);
- ``GeluMLP``: mlp_train, 3 x (Linear + GELU) + LayerNorm;
- ``MLP``: a smaller ReLU/tanh regression net (aotautograd's training tests);
- ``GPT``: nanoGPT's model, small: embeddings, LayerNorm, causal attention (by hand, or
  ``flash=True``: ``F.scaled_dot_product_attention`` with ``dropout_p`` as nanoGPT calls
  it), tanh GELU, dropout, tied embedding and head, cross-entropy loss;
- ``ResNet``: convnet_train, a stem (conv, BatchNorm2d, in-place ReLU, max pooling) and one
  residual block, average pooling, a linear head, cross-entropy loss.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


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


MICRO = {"trig": trig, "gelu_bias": gelu_bias, "softmax": softmax, "layernorm": layernorm,
         "rmsnorm": rmsnorm}


def micro_inputs(name: str, dtype: torch.dtype = torch.float32, shape=(8, 33),
                 requires_grad: bool = True) -> list[torch.Tensor]:
    """Random inputs of a micro workload: (x, y) for trig, x for softmax, (x, weight[,
    bias]) for the others; weights and biases run along the last dim."""
    count = {"trig": (2, 0), "softmax": (1, 0), "layernorm": (1, 2)}.get(name, (1, 1))
    full = [torch.randn(shape) for _ in range(count[0])]
    vectors = [torch.randn(shape[-1:]) for _ in range(count[1])]
    return [t.to(dtype).requires_grad_(requires_grad) for t in full + vectors]


class GeluMLP(nn.Module):
    def __init__(self, width: int = 16, depth: int = 3):
        super().__init__()
        layers = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.GELU()]
        self.layers = nn.Sequential(*layers, nn.LayerNorm(width))

    def forward(self, x):
        return self.layers(x)  # (B, width)


class MLP(nn.Module):
    def __init__(self, d_in=8, hidden=16, d_out=4):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_in, hidden), nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, d_out)

    def forward(self, x, target):
        h = torch.tanh(self.fc2(F.relu(self.fc1(x))))  # (B, hidden)
        return F.mse_loss(self.head(h), target)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout, flash=False):
        super().__init__()
        self.c_attn, self.c_proj = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)
        self.n_head, self.dropout, self.flash = n_head, dropout, flash
        self.attn_dropout, self.resid_dropout = nn.Dropout(dropout), nn.Dropout(dropout)
        if not flash:
            self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in (q, k, v))  # (B, nh, T, hs)
        if self.flash:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0,
                is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # (B, nh, T, T)
            att = att.masked_fill(self.bias[:T, :T] == 0, float("-inf"))
            y = self.attn_dropout(F.softmax(att, dim=-1)) @ v  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout, flash=False):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, dropout, flash)
        self.fc, self.proj = nn.Linear(n_embd, 4 * n_embd), nn.Linear(4 * n_embd, n_embd)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.drop(self.proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh")))


class GPT(nn.Module):
    """nanoGPT's model, small: tied embedding and head, returns the cross-entropy loss."""

    def __init__(self, vocab=64, block_size=16, n_layer=2, n_head=2, n_embd=32, dropout=0.0,
                 flash=False):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, n_embd), nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(n_embd, n_head, block_size, dropout, flash)
                                    for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))  # (B, T, C)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # (B, T, vocab)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


class ResNet(nn.Module):
    def __init__(self, classes: int = 5):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        self.conv1, self.bn1 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, classes)

    def forward(self, x, target):
        x = self.stem(x)  # (B, 8, H / 2, W / 2)
        x = F.relu(self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))) + x)
        return F.cross_entropy(self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1)), target)
