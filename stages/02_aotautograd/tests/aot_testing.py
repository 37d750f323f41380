"""Test helpers: small training models, compilers that run the graphs they are given, and
the eager-vs-compiled training check (outputs, gradients, buffers)."""

from __future__ import annotations

import copy
import math

import primtorch
import torch
import torch.nn as nn
import torch.nn.functional as F
from aotautograd import aot_module_simplified

TABLE = primtorch.decomposition_table


class GraphRecorder:
    """A compiler that checks the graph's contract (every node has a meta tensor in
    ``meta["val"]``), remembers it, and runs it as it is."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        for node in gm.graph.nodes:
            if node.op not in ("output",) and node.op != "get_attr":
                val = node.meta.get("val")
                assert val is not None or node.op == "placeholder", node.format_node()
                if isinstance(val, torch.Tensor):
                    assert val.device.type == "meta", node.format_node()
        self.graphs.append((gm, list(example_inputs)))
        return gm.forward


def compile_module(module, inputs, partitioner="min_cut", decompositions=TABLE):
    return aot_module_simplified(module, inputs, GraphRecorder(), GraphRecorder(),
                                 decompositions=decompositions, partitioner=partitioner)


class MLP(nn.Module):
    def __init__(self, d_in=8, hidden=16, d_out=4):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_in, hidden), nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, d_out)

    def forward(self, x, target):
        h = torch.tanh(self.fc2(F.relu(self.fc1(x))))  # (B, hidden)
        return F.mse_loss(self.head(h), target)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout):
        super().__init__()
        self.c_attn, self.c_proj = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)
        self.n_head, self.dropout = n_head, nn.Dropout(dropout)
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in (q, k, v))  # (B, nh, T, hs)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # (B, nh, T, T)
        att = att.masked_fill(self.bias[:T, :T] == 0, float("-inf"))
        att = self.dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.dropout(self.c_proj(y))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, dropout)
        self.fc, self.proj = nn.Linear(n_embd, 4 * n_embd), nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    """nanoGPT's model, small: tied embedding and head, returns the cross-entropy loss."""

    def __init__(self, vocab=64, block_size=16, n_layer=2, n_head=2, n_embd=32, dropout=0.0):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, n_embd), nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(n_embd, n_head, block_size, dropout)
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


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
            nn.Conv2d(8, 8, 3), nn.BatchNorm2d(8), nn.ReLU())
        self.head = nn.Linear(8, 5)

    def forward(self, x, target):
        h = self.features(x).mean((2, 3))  # (B, 8)
        return F.cross_entropy(self.head(h), target)


def model_and_inputs(name: str, seed: int = 0):
    torch.manual_seed(seed)
    if name == "mlp":
        return MLP(), [torch.randn(6, 8), torch.randn(6, 4)]
    if name == "gpt2":
        return GPT(), [torch.randint(0, 64, (2, 16)), torch.randint(0, 64, (2, 16))]
    if name == "convnet":
        return ConvNet().train(), [torch.randn(4, 3, 8, 8), torch.randint(0, 5, (4,))]
    raise ValueError(name)


MODELS = ["mlp", "gpt2", "convnet"]


def assert_same_training(eager, compiled_model, compiled, inputs, rtol=1e-4, atol=1e-5):
    """One forward and backward: outputs, parameter gradients, buffers equal eager's."""
    out_c = compiled(*inputs)
    out_e = eager(*inputs)
    out_e = out_e if isinstance(out_e, tuple) else (out_e,)
    for c, e in zip(out_c, out_e, strict=True):
        torch.testing.assert_close(c, e, rtol=rtol, atol=atol)
    out_c[0].backward()
    out_e[0].backward()
    for (name, p_c), p_e in zip(compiled_model.named_parameters(), eager.parameters()):
        assert (p_c.grad is None) == (p_e.grad is None), name
        if p_e.grad is not None:
            torch.testing.assert_close(p_c.grad, p_e.grad, rtol=rtol, atol=atol, msg=name)
    for (name, b_c), b_e in zip(compiled_model.named_buffers(), eager.buffers()):
        torch.testing.assert_close(b_c, b_e, rtol=rtol, atol=atol, msg=name)


def twin(model):
    return model, copy.deepcopy(model)
