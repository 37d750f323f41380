"""An example program for ``python -m driver compile examples/mlp.py`` (README, book).

The convention: ``model`` (a function, an nn.Module class or instance, or a factory of one)
and ``example_inputs()`` returning its arguments.
"""

import torch


class Model(torch.nn.Module):
    """A two-layer MLP block: the matmuls are library calls, the rest is fused."""

    def __init__(self, width: int = 64):
        super().__init__()
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


def model():
    torch.manual_seed(0)
    return Model().eval()


def example_inputs():
    return (torch.randn(32, 64),)
