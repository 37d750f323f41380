"""Property tests: random broadcastable shapes, dtypes and layouts through the binary and
ternary decompositions, against eager."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from primtorch import decomposition_table

aten = torch.ops.aten
DTYPES = [torch.bool, torch.int32, torch.int64, torch.bfloat16, torch.float32, torch.float64]
OPS = [aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor,
       aten.maximum.default, aten.lt.Tensor, aten.eq.Tensor]


@st.composite
def operand_pair(draw):
    """Two shapes that broadcast: a common shape, with dims dropped (from the left) or set to
    1 in either operand; each operand maybe transposed (non-contiguous) or 0-dim."""
    shape = draw(st.lists(st.integers(1, 4), min_size=0, max_size=3))

    def variant():
        s = [1 if draw(st.booleans()) else n for n in shape]
        return s[draw(st.integers(0, len(s))):]

    def make(s):
        dtype = draw(st.sampled_from(DTYPES))
        t = (torch.randn(s[::-1], dtype=torch.float64) * 4).to(dtype)
        return t.permute(list(reversed(range(t.dim()))))  # shape s, reversed strides

    return make(variant()), make(variant())


def _expected(op, a, b):
    try:
        return op(a, b)
    except RuntimeError:  # e.g. bool - bool: eager refuses, nothing to compare
        return None


@settings(max_examples=60, deadline=None)
@given(operand_pair(), st.sampled_from(OPS), st.sampled_from([None, 2, -1.5, True]))
def test_binary_ops_broadcast_and_promote_like_eager(pair, op, scalar):
    a, b = pair
    if scalar is not None:
        b = scalar
    expected = _expected(op, a, b)
    if expected is None:
        return
    actual = decomposition_table[op](a, b)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    tol = 2e-2 if expected.dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol, equal_nan=True)


@settings(max_examples=30, deadline=None)
@given(operand_pair())
def test_where_broadcasts_like_eager(pair):
    a, b = pair
    condition = a > 0 if a.dtype != torch.bool else a
    expected = torch.where(condition, a, b)
    actual = decomposition_table[aten.where.self](condition, a, b)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected, rtol=2e-2, atol=2e-2)
