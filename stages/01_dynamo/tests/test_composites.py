"""Python versions of composite ATen ops used while sizes are symbolic.

[Note: composite ops and symbolic sizes] in dynamo/composites.py. Eager ``torch.matmul`` is
the oracle for every pair of ranks (values and gradients); a dynamic-shape capture of ``@``
must stay one graph without specialising the batch size.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from dynamo import composites

SHAPES = [  # (a, b): every rank pairing matmul distinguishes, broadcasting included
    ((5,), (5,)), ((3, 5), (5,)), ((5,), (5, 4)), ((3, 5), (5, 4)),
    ((2, 3, 5), (5, 4)), ((2, 3, 5), (5,)), ((7, 2, 3, 5), (5, 4)),
    ((5,), (2, 5, 4)), ((3, 5), (2, 5, 4)), ((2, 3, 5), (2, 5, 4)),
    ((1, 3, 5), (6, 5, 4)), ((6, 1, 3, 5), (2, 5, 4)), ((2, 3, 5), (5, 0)),
]


@pytest.mark.parametrize("sa,sb", SHAPES, ids=str)
def test_matmul_matches_eager_with_gradients(sa, sb):
    a = torch.randn(sa, dtype=torch.float64, requires_grad=True)
    b = torch.randn(sb, dtype=torch.float64, requires_grad=True)
    want = torch.matmul(a, b)
    got = composites.matmul(a, b)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want)
    g = torch.randn_like(want)
    torch.testing.assert_close(torch.autograd.grad(got, (a, b), g),
                               torch.autograd.grad(want, (a, b), g))


def test_transposed_operands_and_errors():
    a, b = torch.randn(6, 4).t(), torch.randn(2, 4, 3).transpose(1, 2)  # non-contiguous
    torch.testing.assert_close(composites.matmul(b, a), torch.matmul(b, a))
    with pytest.raises(RuntimeError, match="at least 1D"):
        composites.matmul(torch.tensor(1.0), a)


def test_the_mode_routes_every_spelling(monkeypatch):
    calls = []
    for name, python_version in list(composites.OVERRIDES.items()):
        def spy(*args, _version=python_version):
            calls.append(1)
            return _version(*args)
        monkeypatch.setitem(composites.OVERRIDES, name, spy)
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    with composites.SymbolicComposites():
        outs = [torch.matmul(a, b), a.matmul(b), a @ b, a.sin()]
    assert len(calls) == 3  # sin is not a composite we replace
    for out in outs[:3]:
        torch.testing.assert_close(out, a @ b)


@pytest.mark.parametrize("case", ["plain", "causal", "causal_rect", "bool_mask", "float_mask",
                                  "scale"])
def test_attention_matches_eager_with_gradients(case):
    torch.manual_seed(0)
    lq = 5 if case == "causal_rect" else 7
    q = torch.randn(2, 3, lq, 8, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 3, 7, 8, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 3, 7, 4, dtype=torch.float64, requires_grad=True)
    kwargs = {"is_causal": case.startswith("causal")}
    if case == "bool_mask":
        kwargs["attn_mask"] = torch.rand(lq, 7) > 0.3
        kwargs["attn_mask"][:, 0] = True  # no row fully masked (eager gives NaN there too)
    elif case == "float_mask":
        kwargs["attn_mask"] = torch.randn(2, 1, lq, 7, dtype=torch.float64)
    elif case == "scale":
        kwargs["scale"] = 0.3
    want = F.scaled_dot_product_attention(q, k, v, **kwargs)
    got = composites.scaled_dot_product_attention(q, k, v, **kwargs)
    torch.testing.assert_close(got, want)
    g = torch.randn_like(want)
    torch.testing.assert_close(torch.autograd.grad(got, (q, k, v), g),
                               torch.autograd.grad(want, (q, k, v), g))


def test_attention_leaves_dropout_to_aten():
    q = torch.randn(1, 1, 3, 4)
    assert composites.scaled_dot_product_attention(q, q, q, dropout_p=0.1) is NotImplemented
    with composites.SymbolicComposites():  # the mode then calls ATen's own
        out = F.scaled_dot_product_attention(q, q, q, dropout_p=0.0)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, q, q))
