"""[Note: `is` between tensors]: ``query is key`` (nn.MultiheadAttention) inside a graph."""

from __future__ import annotations

import warnings

import dynamo
import pytest
import torch


def made_vs_inputs(a, b):
    c = a * 2
    return c + 1, (c is a), (c is not b), (a is a)


def branch(a, b):
    return a + 1 if a is b else a - 1


def in_place(x):
    y = x.add_(1)
    return y * 2, (y is x)


def test_a_computed_value_is_no_input(backend):
    a, b = torch.randn(3), torch.randn(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = dynamo.optimize(backend)(made_vs_inputs)(a, b)
    want = made_vs_inputs(a, b)
    torch.testing.assert_close(got[0], want[0])
    assert got[1:] == want[1:] == (False, True, True)


def test_two_inputs_are_guarded_to_stay_two(backend):
    """Answered by this call's objects; the same tensor passed twice later recompiles."""
    a, b = torch.randn(3), torch.randn(3)
    opt = dynamo.optimize(backend)(branch)
    torch.testing.assert_close(opt(a, b), a - 1)
    torch.testing.assert_close(opt(a, a), a + 1)


def test_multihead_attention_compiles_in_one_graph(backend):
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    q, kv = torch.randn(2, 1, 8), torch.randn(2, 5, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt = dynamo.optimize(backend)(m.forward)
        torch.testing.assert_close(opt(q, kv, kv)[0], m(q, kv, kv)[0])
        torch.testing.assert_close(opt(kv, kv, kv)[0], m(kv, kv, kv)[0])


def test_an_in_place_result_is_not_answered(backend):
    """An in-place op returns its own input: no answer, the frame runs eagerly."""
    x = torch.randn(3)
    with pytest.warns(dynamo.FallbackWarning, match="`is` between two traced values"):
        got = dynamo.optimize(backend)(in_place)(x.clone())
    assert got[1] is True
