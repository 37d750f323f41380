"""Tests for the exercise dynamo-tensor-guards (guards.make_tensor_guards).

They pass on the reference implementation and fail when the exercise
region is replaced by ``raise NotImplementedError``.
"""

from __future__ import annotations

import warnings

import dynamo
import pytest
import torch
from dynamo.guards import make_tensor_guards


def holds(guards, **values) -> bool:
    namespace = {"torch": torch, **values}
    return all(eval(str(g), namespace) for g in guards)


def test_guards_hold_for_the_tensor_they_describe():
    x = torch.randn(8, 4)
    guards = make_tensor_guards("x", x)
    assert all(isinstance(g, dynamo.Guard) for g in guards)
    assert all(g.source == "x" for g in guards)
    assert holds(guards, x=x)
    assert holds(guards, x=torch.zeros(8, 4))  # values are not guarded, metadata is


def test_guards_read_as_python():
    guards = [str(g) for g in make_tensor_guards("x", torch.randn(8, 8))]
    for expected in ["x.dtype == torch.float32", "x.size() == (8, 8)", "x.stride() == (8, 1)",
                     "x.requires_grad == False", "x.ndim == 2"]:
        assert expected in guards


@pytest.mark.parametrize("change", [
    lambda x: x.double(),  # dtype
    lambda x: x[:4],  # size
    lambda x: x.t().contiguous().t(),  # stride only: same size, column-major
    lambda x: x.clone().requires_grad_(),  # requires_grad
    lambda x: x.reshape(2, 4, 4),  # ndim
    lambda x: [1, 2],  # not a tensor at all
    lambda x: torch.nn.Parameter(x.clone()),  # a different tensor type
])
def test_guards_reject_every_metadata_change(change):
    x = torch.randn(8, 4)
    guards = make_tensor_guards("x", x)
    assert not holds(guards, x=change(x))


def test_a_dtype_change_recompiles():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    dynamo.reset()
    fn = dynamo.optimize(backend)(lambda x: x * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dynamo.FallbackWarning)
        assert fn(torch.ones(2)).dtype == torch.float32
        assert fn(torch.ones(2)).dtype == torch.float32
        assert fn(torch.ones(2, dtype=torch.int32)).dtype == torch.int32
    assert len(graphs) == 2
    dynamo.reset()
