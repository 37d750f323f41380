"""[Note: `is` between tensors]: ``query is key`` (nn.MultiheadAttention) inside a graph; and
[Note: one container, two names]: a list or dict from outside, reached by two names."""

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


TABLE = {"scale": 2.0}
HISTORY = [1.0]


def same_global_twice(x):
    table = TABLE
    return x * table["scale"], table is TABLE, TABLE is not TABLE, HISTORY is HISTORY


def test_a_global_dict_is_itself(backend, no_fallback):
    """A dict's tracker made a new dict each time it was asked for its value, so
    ``TABLE is TABLE`` was False in the trace (a wrong answer, silently)."""
    x = torch.randn(3)
    got = dynamo.optimize(backend)(same_global_twice)(x)
    torch.testing.assert_close(got[0], x * 2)
    assert got[1:] == same_global_twice(x)[1:] == (True, False, True)


class Recorder(torch.nn.Module):
    def __init__(self, log: list):
        super().__init__()
        self.log = log

    def forward(self, x):
        HISTORY.append(3.0)  # through the global name...
        return x * len(self.log), self.log is HISTORY  # ...read through the attribute


def test_one_list_reached_by_two_names_is_one_list(backend, no_fallback):
    """The module's ``log`` is the global ``HISTORY``: the append through one name is seen
    through the other, as in eager; a module with a list of its own is told apart."""
    x = torch.ones(2)
    HISTORY[:] = [1.0]
    got = dynamo.optimize(backend)(Recorder(HISTORY).forward)(x)
    torch.testing.assert_close(got[0], x * 2)  # eager: len 2, after the append
    assert got[1] is True and HISTORY == [1.0, 3.0]
    HISTORY[:] = [1.0]
    got = dynamo.optimize(backend)(Recorder([5.0]).forward)(x)
    torch.testing.assert_close(got[0], x * 1)
    assert got[1] is False and HISTORY == [1.0, 3.0]
