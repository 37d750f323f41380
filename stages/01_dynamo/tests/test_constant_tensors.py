"""[Note: constant tensors]: a 0-d tensor made by ``torch.tensor(c)`` from a Python number
has a known value, which slice bounds, ``range()``, ``int()`` and Scalar arguments (clamp's
bounds) use at trace time instead of breaking the graph. Compiled vs eager; an in-place
write makes the value unknown again, and the result stays eager's."""

from __future__ import annotations

import operator

import dynamo
import pytest
import torch


def _compile_and_compare(backend, fn, *args, fullgraph=True, dynamic=None):
    compiled = dynamo.optimize(backend, fullgraph=fullgraph, dynamic=dynamic)(fn)
    got, want = compiled(*args), fn(*args)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    return compiled


def _relative_slice(q, emb):
    span = torch.tensor(min(q.size(-2), 32))  # DeBERTa-v1's disentangled attention
    rel = emb[32 - span: 32 + span, :].unsqueeze(0)
    return torch.matmul(q, rel.transpose(-1, -2))


def test_slice_bounds_from_a_constant_tensor_are_one_graph(backend):
    """Before [Note: constant tensors], the slice was a graph break: two graphs. A new
    length recompiles (the constant came from a guarded size) and is right too."""
    q, emb = torch.randn(2, 16, 8, requires_grad=True), torch.randn(64, 8, requires_grad=True)
    compiled = _compile_and_compare(backend, _relative_slice, q, emb, dynamic=False)
    assert backend.calls == 1
    (grad,) = torch.autograd.grad(compiled(q, emb).sum(), emb)
    (grad_want,) = torch.autograd.grad(_relative_slice(q, emb).sum(), emb)
    torch.testing.assert_close(grad, grad_want)
    short = torch.randn(2, 8, 8)
    torch.testing.assert_close(compiled(short, emb), _relative_slice(short, emb))
    assert backend.calls == 2


def test_a_symbolic_length_is_not_a_constant(backend):
    """With the length symbolic (automatic dynamic, on the second length), ``torch.tensor``
    of it has no known value: the slice breaks the graph as before, still right."""
    compiled = dynamo.optimize(backend)(_relative_slice)
    emb = torch.randn(64, 8)
    for n in (16, 8, 4):
        q = torch.randn(2, n, 8)
        torch.testing.assert_close(compiled(q, emb), _relative_slice(q, emb))


def test_a_plain_constant_tensor_as_slice_bounds(backend):
    def f(x):
        t = torch.tensor(3)
        return x[t:], x[:t], x[1:t + 2:t - 1]

    _compile_and_compare(backend, f, torch.arange(10.0))
    assert backend.calls == 1


def _clamped_positions(pos):
    span = torch.tensor(4)
    return torch.clamp(pos + span, 0, span * 2 - 1), torch.clamp(-pos + span, 0, span * 2 - 1)


def test_clamp_with_bounds_from_a_constant_tensor_is_one_graph(backend):
    """clamp's Scalar overload reads ``.item()`` of ``span * 2 - 1`` in eager, which was a
    graph break ("clamp() reads the values of a tensor"): now the known number is the arg."""
    pos = torch.arange(-6, 6)[None, :] - torch.arange(12)[:, None]
    _compile_and_compare(backend, _clamped_positions, pos)
    assert backend.calls == 1
    (graph,) = backend.graphs
    clamps = [n for n in graph.graph.nodes if n.target is torch.clamp]
    assert [n.args[1:] for n in clamps] == [(0, 7), (0, 7)]


def test_range_int_and_item_of_a_constant_tensor(backend):
    def f(x):
        t = torch.tensor(4, dtype=torch.int32)
        total = x
        for i in range(t):
            total = total + i
        return total * int(t) + t.item() + operator.index(t // 3) + float(-t)

    _compile_and_compare(backend, f, torch.randn(3))
    assert backend.calls == 1


@pytest.mark.parametrize("make", [
    lambda: torch.tensor(3.0) * 2,  # a float: no exact bounds through arithmetic
    lambda: torch.tensor(7) / 2,  # true division
    lambda: torch.tensor([3]),  # not 0-d
])
def test_values_that_stay_unknown_still_break(backend, make):
    def f(x):
        t = make()
        return x[: int(t)] * 2

    compiled = _compile_and_compare(backend, f, torch.arange(10.0), fullgraph=False)
    torch.testing.assert_close(compiled(torch.arange(10.0)), f(torch.arange(10.0)))
    assert backend.calls == 2  # the int() breaks the graph


def test_overflow_and_floor_division_are_eagers(backend):
    def f(x):
        big = torch.tensor(2**31 - 1, dtype=torch.int32) + 1  # wraps, as in eager
        neg = torch.tensor(-7) // 2  # floors: -4
        return x[: neg + 9], x[: big // 2**28 + 9]  # x[:5], x[:1]

    _compile_and_compare(backend, f, torch.arange(10.0))
    assert backend.calls == 1


@pytest.mark.parametrize("write", [
    lambda t: t.add_(1),
    lambda t: t.fill_(5),
    lambda t: t.view(1).__setitem__(0, 6),  # through a view
    lambda t: torch.add(t, 2, out=t),
])
def test_a_constant_tensor_written_in_place(backend, write):
    """The write changes the value the bounds knew: they are dropped (the use may break),
    and every name bound to the tensor sees the new value, as in eager."""
    def f(x):
        t = torch.tensor(3)
        alias = t
        write(t)
        return x[:alias], x[:t + 1]

    _compile_and_compare(backend, f, torch.arange(10.0), fullgraph=False)


def test_augmented_assignment_on_a_constant_tensor(backend):
    def f(x):
        t = torch.tensor(3)
        alias = t
        t += 1  # in place: ``alias`` is ``t``, 4 in eager
        return x[:alias], x[:t]

    _compile_and_compare(backend, f, torch.arange(10.0), fullgraph=False)


def test_a_comparison_after_an_in_place_write_is_not_decided_from_old_bounds(backend):
    """[Note: value bounds] too: ``rand`` is in [0, 1) until ``mul_`` scales it."""
    def f(x):
        r = torch.rand([])
        r.mul_(0)
        r.add_(5)
        if r < 2.0:
            return x + 1
        return x - 1

    _compile_and_compare(backend, f, torch.randn(3), fullgraph=False)


def test_under_inference_mode_a_written_tensor_is_still_right(backend):
    """An inference tensor has no version counter to see writes with: no bounds at all."""
    def f(x):
        t = torch.tensor(3)
        alias = t
        t.add_(1)
        return x[:alias], x[:t + 1]

    with torch.inference_mode():
        _compile_and_compare(backend, f, torch.arange(10.0), fullgraph=False)


def test_a_write_under_autocast_is_seen(backend):
    def f(x):
        t = torch.tensor(3)
        with torch.autocast("cpu"):
            y = x @ x.T
            t.add_(1)  # on the autocast path of example values
        return y[:t]

    _compile_and_compare(backend, f, torch.randn(10, 4), fullgraph=False)
