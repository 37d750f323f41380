"""Exercise primtorch-log-softmax: the decomposition of ``aten._log_softmax``."""

import pytest
import torch
from primtorch import decomposition_table

log_softmax = decomposition_table[torch.ops.aten._log_softmax.default]


@pytest.mark.parametrize("shape,dim", [((5,), 0), ((3, 4), -1), ((3, 4), 0), ((2, 3, 4), 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_eager(shape, dim, dtype):
    x = torch.randn(shape, dtype=dtype) * 3
    torch.testing.assert_close(log_softmax(x, dim, False), torch.log_softmax(x, dim))


def test_large_inputs_do_not_overflow():
    x = torch.tensor([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, 1000.0]])
    out = log_softmax(x, 1, False)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, torch.log_softmax(x, 1))


def test_bfloat16_and_half_to_float():
    x = torch.randn(4, 6).bfloat16()
    out = log_softmax(x, 1, False)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, torch.log_softmax(x, 1), rtol=2e-2, atol=2e-2)
    assert log_softmax(x, 1, True).dtype == torch.float32
