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


def test_normal_fills_and_draws_with_the_mean_and_std_asked():
    """``a.normal_(mean, std)`` (functionalized as ``normal_functional``: what
    ``torch.distributions`` samples with) and ``torch.normal`` with tensor arguments."""
    torch.manual_seed(0)
    filled = decomposition_table[aten.normal_functional.default](
        torch.empty(20000, dtype=torch.float64), 3.0, 2.0)
    assert abs(filled.mean().item() - 3) < 0.06 and abs(filled.std().item() - 2) < 0.06
    half = decomposition_table[aten.normal_functional.default](torch.empty(8, 4).bfloat16())
    assert half.dtype == torch.bfloat16 and half.shape == (8, 4)
    mean, std = torch.tensor([[-5.0], [5.0]]), torch.full((1, 20000), 0.5)
    drawn = decomposition_table[aten.normal.Tensor_Tensor](mean, std)
    assert drawn.shape == (2, 20000)
    torch.testing.assert_close(drawn.mean(1), mean[:, 0], atol=0.03, rtol=0)
    assert abs(drawn.std(1) - 0.5).max() < 0.03
    drawn = decomposition_table[aten.normal.float_Tensor](1.0, torch.full((20000,), 0.1))
    assert abs(drawn.mean().item() - 1) < 0.01 and abs(drawn.std().item() - 0.1) < 0.01
    drawn = decomposition_table[aten.normal.Tensor_float](torch.zeros(20000), 2.0)
    assert abs(drawn.std().item() - 2) < 0.06
