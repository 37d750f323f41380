"""Many instances of one module class run one compiled entry ([Note: module guards] in
variables/nn_module.py): modules are guarded by class and by what the trace read from them,
not by identity, and their parameters are graph inputs read from the instance passed.

A forward that breaks the graph is a frame of its own (so is the resume function after the
break, which takes ``self`` as a live local). Guarded by identity, each instance of a
12-layer stack failed the guard and compiled again, and the ninth ran eagerly after the
recompile-limit warning. Each test compares with eager (outputs, gradients, attribute
writes), and the ones that must recompile check that they do.
"""

from __future__ import annotations

import copy
import warnings

import dynamo
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from dynamo import config


class Block(nn.Module):
    """A residual MLP block whose forward breaks the graph on ``.item()``."""

    scale = 1.0  # a class attribute the trace reads

    def __init__(self, n: int = 8, eps: float = 1e-5, norm: type = nn.LayerNorm) -> None:
        super().__init__()
        self.norm = norm(n, eps=eps)
        self.fc1 = nn.Linear(n, 2 * n)
        self.fc2 = nn.Linear(2 * n, n)
        self.drop = nn.Dropout(0.0)  # reads self.training

    def forward(self, x):
        h = self.drop(F.gelu(self.fc1(self.norm(x))))  # (B, 2n)
        self.mean = h.mean().item()  # data leaves the graph: a break, then a resume function
        return x + self.scale * self.fc2(h)  # (B, n)


def run_blocks(backend, blocks, x):
    """Each block compiled on its own (``driver.compile`` per module does the same); they
    share the cache of ``Block.forward``'s code. Returns (output, eager output)."""
    reference = copy.deepcopy(blocks)
    compiled = [dynamo.optimize(backend)(block.forward) for block in blocks]
    out, want = x, x.detach().clone().requires_grad_(x.requires_grad)
    x_want = want
    for fn, block in zip(compiled, reference):
        out, want = fn(out), block(want)
    torch.testing.assert_close(out, want)
    for block, ref in zip(blocks, reference):
        assert block.mean == ref.mean  # the attribute write after the break, per instance
    return out, want, reference, x_want


def entries() -> int:
    """Compiled entries of every code object: a forward's and its resume function's."""
    from dynamo.eval_frame import _cache

    return sum(len(found) for found in _cache.values())


def test_twelve_instances_share_one_entry(backend, no_fallback):
    torch.manual_seed(0)
    blocks = [Block() for _ in range(12)]  # different weights: each instance's must be used
    assert len(blocks) > config.recompile_limit
    x = torch.randn(4, 8, requires_grad=True)
    out, want, reference, x_want = run_blocks(backend, blocks, x)
    assert len(dynamo.cache_entries(Block.forward)) == 1
    assert entries() == 2  # Block.forward and the resume function after its break
    assert backend.calls == 2
    out.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(x.grad, x_want.grad)
    for block, ref in zip(blocks, reference):
        for (name, p), q in zip(block.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, msg=name)


def test_blocks_called_in_a_compiled_loop_share_one_entry(backend):
    """The loop inside a compiled forward: each block's frame (its forward, its resume
    function) is served by one entry. The loop's own resume function is not yet: it takes
    the blocks still to run, and unrolls them, so it is guarded by their number."""

    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(12))

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x

    torch.manual_seed(0)
    model = Stack()
    reference = copy.deepcopy(model)
    x = torch.randn(4, 8, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", dynamo.FallbackWarning)
        out = dynamo.optimize(backend)(model.forward)(x)
    torch.testing.assert_close(out, reference(x))
    forward = Block.forward.__code__
    assert len(dynamo.cache_entries(Block.forward)) == 1
    assert not [w for w in caught if f":{forward.co_firstlineno}:" in str(w.message)]


# What another instance may differ in, and must recompile for. Each change makes the seventh
# of twelve blocks; that block gets a second entry, the others share the first.
def _untrained(block):
    block.fc1.weight.requires_grad_(False)


def _hooked(block):
    block.norm.register_forward_hook(lambda module, args, out: out * 2)


CHANGES = {
    "attribute value (eps)": lambda: Block(eps=1e-3),
    "submodule of another class": lambda: Block(norm=nn.RMSNorm),
    "training flag": lambda: Block().eval(),
    "parameter requires_grad": lambda: _changed(_untrained),
    "parameter of another shape": lambda: _changed(
        lambda b: setattr(b.fc2, "bias", nn.Parameter(torch.randn(1)))),
    "class attribute shadowed on the instance": lambda: _changed(
        lambda b: setattr(b, "scale", 2.0)),
    "a hook on a submodule": lambda: _changed(_hooked),  # ([Note: forward hooks]: traced)
}


def _changed(change):
    block = Block()
    change(block)
    return block


@pytest.mark.parametrize("change", list(CHANGES))
def test_an_instance_that_differs_recompiles(change, backend):
    torch.manual_seed(0)
    blocks = [Block() for _ in range(12)]
    blocks[6] = CHANGES[change]()
    with warnings.catch_warnings():
        warnings.simplefilter("error", dynamo.FallbackWarning)
        run_blocks(backend, blocks, torch.randn(4, 8, requires_grad=True))
    assert entries() == 3


def test_modules_compared_with_is(backend, no_fallback):
    """``a is b`` of two modules is answered at trace time and guarded both ways."""

    class Pair(nn.Module):
        def __init__(self, shared: bool):
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.b = self.a if shared else nn.Linear(4, 4)

        def forward(self, x):
            return self.a(x) if self.a is self.b else self.a(x) + self.b(x)

    torch.manual_seed(0)
    pairs = [Pair(False), Pair(True), Pair(False)]
    x = torch.randn(2, 4)
    for pair in pairs:
        torch.testing.assert_close(dynamo.optimize(backend)(pair.forward)(x), pair(x))
    assert len(dynamo.cache_entries(Pair.forward)) == 2
