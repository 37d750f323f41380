"""Exercise primtorch-broadcast: ``primtorch.prims_common.broadcast_to``."""

import primtorch
import pytest
import torch
from primtorch import prims
from primtorch.prims_common import broadcast_to

CASES = [((3,), (2, 3)), ((2, 1), (2, 5)), ((), (4, 1)), ((1, 1, 3), (2, 4, 3)),
         ((4, 1), (3, 4, 6)), ((2, 3), (2, 3))]


@pytest.mark.parametrize("shape,target", CASES)
def test_values_match_expand(shape, target):
    a = torch.randn(shape)
    out = broadcast_to(a, target)
    assert out.shape == target
    assert torch.equal(out, a.expand(target))


@pytest.mark.parametrize("shape,target", CASES)
def test_meta_tensors(shape, target):
    out = broadcast_to(torch.empty(shape, device="meta"), target)
    assert out.shape == target and out.device.type == "meta"


def test_one_prim_and_none_when_shapes_match():
    a = torch.randn(3)
    assert broadcast_to(a, [3]) is a  # nothing to do: no prim at all
    calls = []

    class Record(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            calls.append(func)
            return func(*args, **(kwargs or {}))

    with Record():
        broadcast_to(a, [2, 5, 3])
    assert calls == [prims.broadcast_in_dim]


def test_add_broadcasts_through_it():
    x, y = torch.randn(4, 1), torch.randn(3)
    add = primtorch.decomposition_table[torch.ops.aten.add.Tensor]
    assert torch.equal(add(x, y), x + y)
