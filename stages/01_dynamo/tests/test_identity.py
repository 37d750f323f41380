"""[Note: `is` between tensors]: ``query is key`` (nn.MultiheadAttention) inside a graph."""

from __future__ import annotations

import warnings

import dynamo
import torch


def made_vs_inputs(a, b):
    c = a * 2
    return c + 1, (c is a), (c is not b), (a is a)


def branch(a, b):
    return a + 1 if a is b else a - 1


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


def returns_its_input(x, b):
    c, d = x.contiguous(), x.to(torch.float32)
    e = torch.nn.functional.dropout(x, 0.5, training=False)
    y = x * 2
    z = y.add_(1)
    w = x + 0
    w += 1
    return y, (c is x, d is x, e is x, z is y, y is x, w is x, b is x, (x * 3) is (x * 3))


def test_ops_that_return_their_input_answer_as_in_eager(backend, no_fallback):
    """An in-place op, ``contiguous`` of a contiguous tensor, ``.to`` of its own dtype and
    dropout in eval mode return their input in eager; their example tensors do the same in
    the trace, and the answers agree with eager's."""
    x, b = torch.randn(3), torch.randn(3)
    got = dynamo.optimize(backend)(returns_its_input)(x.clone(), b)
    want = returns_its_input(x.clone(), b)
    assert got[1] == want[1] == (True, True, True, True, False, False, False, False)
    torch.testing.assert_close(got[0], want[0])
    transposed = torch.randn(3, 4).t()  # not contiguous: a copy, another object
    opt = dynamo.optimize(backend)(lambda t: (t.contiguous() is t, t + 1))
    assert opt(transposed)[0] is False
