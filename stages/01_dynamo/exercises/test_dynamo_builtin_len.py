"""Tests for the exercise dynamo-builtin-len (variables/builtin.py, ``_len``).

They pass on the reference implementation and fail when the exercise region is replaced
by ``raise NotImplementedError``.
"""

from __future__ import annotations

import dynamo
import pytest
import torch


@pytest.fixture(autouse=True)
def _fresh():
    dynamo.reset()
    yield
    dynamo.reset()


def compiled(fn):
    return dynamo.optimize(lambda gm, example_inputs: gm.forward, fullgraph=True)(fn)


def test_len_of_containers():
    def fn(x):
        xs = [x, x + 1, x + 2]
        d = {"a": x, "b": x}
        return x * len(xs) + len(d) + len({1, 2, 3, 4}) + len((x,))

    x = torch.randn(3)
    torch.testing.assert_close(compiled(fn)(x), fn(x))


def test_len_of_a_list_argument_and_after_mutation():
    def fn(xs):
        xs = list(xs)
        xs.append(xs[0])
        return xs[0] * len(xs)

    xs = [torch.randn(2) for _ in range(3)]
    torch.testing.assert_close(compiled(fn)(xs), fn(xs))


def test_len_of_tensors_constants_and_modules():
    layers = torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(3)])

    def fn(x):
        return x * len(x) + len("abc") + len(layers)

    x = torch.randn(4, 2)
    torch.testing.assert_close(compiled(fn)(x), fn(x))
