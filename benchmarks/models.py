"""The model workloads of the benchmark suite (see /work/shared/BENCHMARKS.md).

Defines the models (own copies: benchmarks never import from tests) and, per workload, a
builder ``(device, dtype, size) -> ModelWorkload``:

- ``mlp_train``: 3 x (Linear + GELU) + LayerNorm and an MSE loss (4096 wide, batch 4096);
- ``gpt_infer`` / ``gpt_train``: nanoGPT's GPT-2 small (12 layers, 12 heads, 768 wide, 1024
  context, tied embedding and head, ``F.scaled_dot_product_attention``), batch 8;
- ``convnet_train``: a small ResNet (BatchNorm in train mode, so running stats are mutated);
- ``graph_breaks``: an MLP whose forward prints (into a StringIO) and branches on ``.item()``;
- ``decode_dynamic``: GPT inference over growing sequence lengths (4..256), one forward each.

A workload is a kind ("train": forward + loss + backward + SGD step; "infer": forward under
``torch.no_grad``; "decode": the loop over lengths under ``torch.no_grad``), a seeded model
factory (every call returns the same initial weights, dropout 0), and the inputs. ``size`` is
"full" (the GPU sizes), "cpu" (smaller, for a 2-core CPU) or "tiny" (the CI smoke test).
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclasses.dataclass
class ModelWorkload:
    name: str
    kind: str  # "train", "infer" or "decode"
    make_model: Callable[[], nn.Module]  # same initial weights on every call
    inputs: tuple  # the model's positional arguments; for "decode", the full-length tokens
    lengths: tuple[int, ...] = ()  # "decode": the sequence lengths run, in order
    shape: list = dataclasses.field(default_factory=list)  # what the table/JSON show


# ---------------------------------------------------------------------------- the models


class GeluMLP(nn.Module):
    """mlp_train: ``depth`` x (Linear + GELU), LayerNorm; returns the MSE loss."""

    def __init__(self, width: int, depth: int = 3):
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.GELU()]
        self.layers = nn.Sequential(*layers, nn.LayerNorm(width))

    def forward(self, x, target):
        return F.mse_loss(self.layers(x), target)  # x, target: (B, width)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float):
        super().__init__()
        self.c_attn, self.c_proj = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)
        self.n_head, self.dropout = n_head, dropout
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in (q, k, v))  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0,
            is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout)
        self.c_fc, self.c_proj = nn.Linear(n_embd, 4 * n_embd), nn.Linear(4 * n_embd, n_embd)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.drop(self.c_proj(h))


@dataclasses.dataclass
class GPTConfig:
    vocab: int = 50304
    block_size: int = 1024
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0


class GPT(nn.Module):
    """nanoGPT's GPT-2: tied embedding and head. ``forward(idx)`` returns the logits of the
    last position (nanoGPT's inference path, ``(B, 1, vocab)``); ``forward(idx, targets)``
    the cross-entropy loss over every position."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList(Block(cfg.n_embd, cfg.n_head, cfg.dropout)
                               for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))  # (B, T, C)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        if targets is None:
            return self.lm_head(x[:, -1:, :])  # (B, 1, vocab)
        logits = self.lm_head(x)  # (B, T, vocab)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


class BasicBlock(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.conv1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)

    def forward(self, x):
        return F.relu(self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))) + x)


class ConvNet(nn.Module):
    """convnet_train: a conv/BatchNorm/ReLU/max-pool stem, ``blocks`` residual blocks,
    average pooling and a linear head; returns the cross-entropy loss."""

    def __init__(self, width: int, blocks: int = 2, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        self.blocks = nn.Sequential(*(BasicBlock(width) for _ in range(blocks)))
        self.fc = nn.Linear(width, classes)

    def forward(self, x, target):
        x = self.blocks(self.stem(x))  # (B, width, H / 2, W / 2)
        return F.cross_entropy(self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1)), target)


class GraphBreaker(nn.Module):
    """graph_breaks: three pieces of graph separated by a ``print`` (to a StringIO, so the
    benchmark stays quiet) and a branch on a ``.item()``; returns the MSE loss."""

    def __init__(self, width: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(width, width), nn.Linear(width, width)
        self.head = nn.Linear(width, width)
        self.sink = io.StringIO()

    def forward(self, x, target):
        h = F.gelu(self.fc1(x))  # (B, width)
        print("step", x.shape[0], file=self.sink)  # a few bytes a call: let it grow
        if h.mean().item() > 0:  # GELU's mean is positive: this branch
            h = self.fc2(h) * 0.5
        else:
            h = self.fc2(h) - 1.0
        return F.mse_loss(self.head(torch.tanh(h)), target)


# ---------------------------------------------------------------------------- the sizes

GPT_CONFIGS = {
    "full": (GPTConfig(), 8, 1024),  # (config, batch, sequence length)
    "cpu": (GPTConfig(vocab=2048, block_size=256, n_layer=2, n_head=4, n_embd=128), 4, 128),
    "tiny": (GPTConfig(vocab=64, block_size=32, n_layer=2, n_head=2, n_embd=32), 2, 16),
}
MLP_SIZES = {"full": (4096, 4096), "cpu": (512, 512), "tiny": (16, 32)}  # (batch, width)
CONV_SIZES = {"full": (128, 64, 32), "cpu": (16, 16, 32), "tiny": (4, 8, 8)}  # (B, C, H=W)
BREAK_SIZES = {"full": (4096, 2048), "cpu": (512, 256), "tiny": (8, 16)}  # (batch, width)
DECODE_LENGTHS = {"full": tuple(range(4, 257, 4)), "cpu": tuple(range(4, 65, 4)),
                  "tiny": (4, 8, 12)}


def _seeded(factory: Callable[[], nn.Module], device: str, dtype: torch.dtype):
    def make() -> nn.Module:
        torch.manual_seed(0)
        return factory().to(device=device, dtype=dtype)
    return make


def _randn(shape, device, dtype) -> torch.Tensor:
    return torch.randn(shape, device=device, dtype=torch.float32).to(dtype)


def _gpt(name: str, device: str, dtype: torch.dtype, size: str) -> ModelWorkload:
    cfg, batch, seq = GPT_CONFIGS[size]
    make = _seeded(lambda: GPT(cfg), device, dtype)
    gen = torch.Generator().manual_seed(1)
    idx = torch.randint(cfg.vocab, (batch, seq), generator=gen).to(device)
    if name == "gpt_infer":
        return ModelWorkload(name, "infer", make, (idx,), shape=[batch, seq])
    if name == "gpt_train":
        targets = torch.randint(cfg.vocab, (batch, seq), generator=gen).to(device)
        return ModelWorkload(name, "train", make, (idx, targets), shape=[batch, seq])
    lengths = DECODE_LENGTHS[size]
    idx = torch.randint(cfg.vocab, (batch, max(lengths)), generator=gen).to(device)
    return ModelWorkload(name, "decode", make, (idx,), lengths=lengths,
                         shape=[batch, f"{lengths[0]}..{lengths[-1]}"])


def build(name: str, device: str, dtype: torch.dtype, size: str) -> ModelWorkload:
    torch.manual_seed(1)
    if name in ("gpt_infer", "gpt_train", "decode_dynamic"):
        return _gpt(name, device, dtype, size)
    if name == "mlp_train":
        batch, width = MLP_SIZES[size]
        make = _seeded(lambda: GeluMLP(width), device, dtype)
        inputs = (_randn((batch, width), device, dtype), _randn((batch, width), device, dtype))
        return ModelWorkload(name, "train", make, inputs, shape=[batch, width])
    if name == "convnet_train":
        batch, width, hw = CONV_SIZES[size]
        make = _seeded(lambda: ConvNet(width), device, dtype)
        target = torch.randint(10, (batch,)).to(device)
        inputs = (_randn((batch, 3, hw, hw), device, dtype), target)
        return ModelWorkload(name, "train", make, inputs, shape=[batch, 3, hw, hw])
    if name == "graph_breaks":
        batch, width = BREAK_SIZES[size]
        make = _seeded(lambda: GraphBreaker(width), device, dtype)
        inputs = (_randn((batch, width), device, dtype), _randn((batch, width), device, dtype))
        return ModelWorkload(name, "train", make, inputs, shape=[batch, width])
    raise ValueError(f"unknown model workload {name!r}; known: {NAMES}")


NAMES = ["mlp_train", "gpt_infer", "gpt_train", "convnet_train", "graph_breaks",
         "decode_dynamic"]
