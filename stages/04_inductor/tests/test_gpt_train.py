"""Training a tiny GPT-2-style model (2 layers) for five SGD steps through
``driver.compile(backend="inductor")`` matches eager: the losses step by step, and the
parameters after the last step. On the C++ target and on the fallback target."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import driver


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)  # (B, T, C) each
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, C/H)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 64, width: int = 32, heads: int = 2, layers: int = 2,
                 context: int = 16) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied, as in GPT-2

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))  # (B, T, C)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))  # (B, T, vocab)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def train(model, step_fn, batches) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for idx, targets in batches:
        opt.zero_grad()
        loss = step_fn(idx, targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("target", ["cpp", "fallback"])
def test_tiny_gpt_trains_like_eager(target, monkeypatch):
    monkeypatch.setenv("MINIPT2_STRICT", "1")  # a stage that gives up fails the test
    torch.manual_seed(0)
    model = TinyGPT()
    reference = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 64, (2, 16), generator=gen),
                torch.randint(0, 64, (2, 16), generator=gen)) for _ in range(5)]
    driver.reset()
    compiled = driver.compile(model, backend="inductor", options={"target": target})
    got = train(model, compiled, batches)
    want = train(reference, reference, batches)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert got[-1] < got[0]  # it learns something
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
