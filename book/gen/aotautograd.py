"""Outputs of the AOTAutograd chapter: a joint graph, its forward and backward graphs under
both partitioners, and the bytes each partitioner saves on three small models."""

from __future__ import annotations

import math

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F


def _run(gm, example_inputs):
    return gm.forward


def _code(gm: fx.GraphModule) -> str:
    return gm.code.strip()


def small_fn(x, w):
    return (torch.tanh(x @ w).sin().sum(),)


class Block(nn.Module):
    """A GPT-2 block: pre-LayerNorm causal self-attention and a GELU MLP."""

    def __init__(self, c: int, heads: int, block_size: int):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.fc, self.out = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        self.heads = heads
        self.register_buffer("mask", torch.tril(torch.ones(block_size, block_size)))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2)
                   for t in self.qkv(self.ln_1(x)).split(C, dim=2))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = F.softmax(att.masked_fill(self.mask[:T, :T] == 0, float("-inf")), dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=64, block_size=16, n_layer=2, heads=2, c=32):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(block_size, c)
        self.blocks = nn.Sequential(*[Block(c, heads, block_size) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(c)
        self.head = nn.Linear(c, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        logits = self.head(self.ln_f(self.blocks(x)))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256),
                                 nn.Tanh(), nn.Linear(256, 10))

    def forward(self, x, target):
        return F.cross_entropy(self.net(x), target)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                 nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.head = nn.Linear(16, 10)

    def forward(self, x, target):
        return F.cross_entropy(self.head(self.net(x).mean((2, 3))), target)


def _models():
    torch.manual_seed(0)
    return [
        ("MLP 64-256-256-10, batch 32", MLP(), [torch.randn(32, 64), torch.randint(0, 10, (32,))]),
        ("GPT-2 style: 2 layers, 2 heads, width 32, vocab 64, batch 2 x 16 tokens", GPT(),
         [torch.randint(0, 64, (2, 16)), torch.randint(0, 64, (2, 16))]),
        ("conv net, 2 x (conv 3x3, BatchNorm, ReLU), batch 8 x 3 x 16 x 16", ConvNet(),
         [torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))]),
    ]


def _saved_bytes_table() -> str:
    import primtorch
    from aotautograd import aot_module_simplified
    from aotautograd.partitioners import default_partition, min_cut_rematerialization_partition

    rows = ["| model | partitioner | values saved | bytes saved | of which activations "
            "| forward nodes recomputed |", "|---|---|---:|---:|---:|---:|"]
    for title, model, inputs in _models():
        program = aot_module_simplified(model, inputs, _run,
                                        decompositions=primtorch.decomposition_table).program
        for name, partition_fn in (("default", default_partition),
                                   ("min-cut", min_cut_rematerialization_partition)):
            p = partition_fn(program)
            rows.append(f"| {title} | {name} | {len(p.saved)} | {p.saved_bytes:,} | "
                        f"{p.saved_bytes - p.saved_input_bytes:,} | {len(p.recomputed)} |")
    return "\n".join(rows)


def generate(write) -> None:
    from aotautograd import aot_module_simplified

    x, w = torch.randn(8, 16, requires_grad=True), torch.randn(16, 4, requires_grad=True)
    for name in ("default", "min_cut"):
        compiled = aot_module_simplified(fx.symbolic_trace(small_fn), [x, w], _run,
                                         partitioner=name)
        write(f"aotautograd/forward_{name}.txt", _code(compiled.fw_graph))
        write(f"aotautograd/backward_{name}.txt", _code(compiled.bw_graph))
        write(f"aotautograd/partition_{name}.txt", compiled.partition.describe() +
              "\nsaved: " + ", ".join(compiled.partition.saved))
    write("aotautograd/joint.txt", _code(compiled.joint_graph))
    write("aotautograd/saved_bytes.md", _saved_bytes_table())
