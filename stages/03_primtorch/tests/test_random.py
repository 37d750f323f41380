"""Random decompositions: the numbers differ from eager's (see [Note: random prims]), so these
tests check distributions and the consistency of forward and backward."""

import pytest
import torch
from primtorch import decomposition_table

aten = torch.ops.aten


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_scales_kept_elements_and_backward_uses_the_mask(dtype):
    x = torch.randn(200, 100).to(dtype)
    out, mask = decomposition_table[aten.native_dropout.default](x, 0.3, True)
    assert mask.dtype == torch.bool and out.dtype == dtype
    assert abs(mask.float().mean().item() - 0.7) < 0.02
    torch.testing.assert_close(out, torch.where(mask, x / 0.7, 0).to(dtype), rtol=1e-2,
                               atol=1e-2)
    grad = torch.randn_like(x)
    back = decomposition_table[aten.native_dropout_backward.default](grad, mask, 1 / 0.7)
    torch.testing.assert_close(back, aten.native_dropout_backward(grad, mask, 1 / 0.7))


def test_dropout_outside_training_and_p_one():
    x = torch.randn(10)
    out, mask = decomposition_table[aten.native_dropout.default](x, 0.5, False)
    assert torch.equal(out, x) and mask.all()
    out, mask = decomposition_table[aten.native_dropout.default](x, 1.0, True)
    assert not out.any() and not mask.any()


def test_distributions():
    torch.manual_seed(0)
    normal = decomposition_table[aten.randn.default]([20000], dtype=torch.float64)
    assert abs(normal.mean().item()) < 0.03 and abs(normal.std().item() - 1) < 0.03
    uniform = decomposition_table[aten.uniform.default](torch.empty(20000), -2.0, 4.0)
    assert -2 <= uniform.min() and uniform.max() < 4 and abs(uniform.mean().item() - 1) < 0.1
    coin = decomposition_table[aten.bernoulli.p](torch.empty(20000), 0.25)
    assert set(coin.unique().tolist()) <= {0.0, 1.0} and abs(coin.mean().item() - 0.25) < 0.02
    p = torch.rand(20000)
    draws = decomposition_table[aten.bernoulli.default](p)
    assert abs(draws.mean().item() - p.mean().item()) < 0.02


def test_seeded_runs_repeat():
    fn = decomposition_table[aten.rand.default]
    torch.manual_seed(5)
    first = fn([50])
    torch.manual_seed(5)
    assert torch.equal(fn([50]), first)
