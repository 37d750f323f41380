"""Three former graph breaks, each compared with eager PyTorch:
``t.requires_grad = True`` on a tensor the frame computed ([Note: a tensor made a leaf]),
type hints in a nested ``def`` ([Note: type hints are constants]), and torch's
``associative_scan`` traced as a plain-Python stand-in ([Note: polyfills]).

No ``from __future__ import annotations`` here: it would turn the type hints below into
strings, which never reach the trace."""

import typing
from typing import Any, Optional

import dynamo
import pytest
import torch
from torch._higher_order_ops.associative_scan import associative_scan

import driver


# -- [Note: a tensor made a leaf] -------------------------------------------------------------
def encoder(x, w):
    """SEW's feature encoder, in small: a tensor made a leaf, then layers that use it."""
    with torch.no_grad():
        h = x[:, None] * 2  # computed without recording: a leaf
    alias = h
    h.requires_grad = True
    out = torch.nn.functional.conv1d(h, w).relu().sum(-1)
    return out, alias.requires_grad, alias.is_leaf


@pytest.mark.parametrize("target", ["eager", "aot_eager", "inductor"])
def test_requires_grad_on_a_computed_tensor(target, no_fallback):
    x = torch.randn(2, 8, requires_grad=True)
    w = torch.randn(3, 1, 3, requires_grad=True)
    want = encoder(x, w)
    want[0].sum().backward()
    want_grad = w.grad
    w.grad = None
    compiled = driver.compile(encoder, backend=target)
    got = compiled(x, w)
    got[0].sum().backward()
    torch.testing.assert_close(got[0], want[0])
    assert got[1:] == want[1:] == (True, True)
    torch.testing.assert_close(w.grad, want_grad)
    assert x.grad is None  # no gradient flows back past the new leaf, as in eager
    assert len(compiled.graphs) == 1


def test_a_new_leaf_that_escapes_breaks_the_graph(backend):
    """Returned, the leaf must be a leaf whose .grad the backward fills: the write runs in
    Python between two graphs."""
    def f(x, w):
        h = x[:, None]
        h.requires_grad = True
        return (h * w).sum(), h

    x, w = torch.randn(4), torch.randn(3, requires_grad=True)
    want = f(x, w)
    want[0].backward()
    got = dynamo.optimize(backend)(f)(x, w)
    got[0].backward()
    assert got[1].is_leaf and got[1].requires_grad
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1].grad, want[1].grad)
    assert backend.calls == 2


@pytest.mark.parametrize("target", ["aot_eager", "inductor"])
def test_a_new_leaf_in_a_graph_that_wants_no_gradient_breaks(target):
    """With no input requiring grad the graph is compiled for inference, whose outputs do
    not require grad: the write runs in Python instead, and the rest sees a leaf."""
    import driver

    def f(x):
        h = x[:, None]
        h.requires_grad = True
        return (h * 2).sum()

    x = torch.randn(4)
    want = f(x)
    got = driver.compile(f, backend=target)(x)
    assert got.requires_grad == want.requires_grad is True
    torch.testing.assert_close(got, want)
    got.backward()  # as eager allows


def test_requires_grad_false_and_inputs_still_break(backend):
    def f(x):
        y = x + 1
        x.requires_grad = True  # the caller's tensor
        return y * 2

    x = torch.randn(3)
    got = dynamo.optimize(backend)(f)(x.clone())
    torch.testing.assert_close(got, f(x.clone()))
    assert backend.calls == 2


# -- [Note: type hints are constants] --------------------------------------------------------
def annotated(x):
    y = x + 1

    def g(n: list[int], m: dict[str, Any], u: int | None = None,
          k: Optional[int] = None, v: typing.List[float] = ()) -> list[Any]:  # noqa: UP006, UP045
        return [n[0] * 2 + m["a"]]

    return g([y], {"a": x})[0].sin()


def test_type_hints_in_a_nested_def(backend, corpus):
    corpus(annotated, lambda n: (torch.randn(n),), graphs=1)


# -- [Note: polyfills] -----------------------------------------------------------------------
def ssm(a, b, reverse):
    """Falcon-Mamba's selective scan: h[t] = a[t] * h[t-1] + b[t], as an associative scan."""
    def combine(left, right):
        a_left, b_left = left
        a_right, b_right = right
        return a_left * a_right, a_right * b_left + b_right

    _, states = associative_scan(combine, (a.sigmoid(), b), dim=2, reverse=reverse,
                                 combine_mode="generic")
    cumsum = associative_scan(lambda p, q: p + q, b, dim=-1, reverse=reverse,
                              combine_mode="generic")
    listed = associative_scan(lambda p, q: [p[0] * q[0]], [a.tanh()], dim=0,
                              combine_mode="generic")
    return states * 2, cumsum, listed[0]


@pytest.mark.parametrize("reverse", [False, True])
def test_associative_scan_is_traced(reverse, backend, no_fallback):
    a = torch.randn(2, 3, 5, 4, requires_grad=True)
    b = torch.randn(2, 3, 5, 4, requires_grad=True)
    want = ssm(a, b, reverse)
    sum(o.pow(2).sum() for o in want).backward()
    want_grads = a.grad, b.grad
    a.grad = b.grad = None
    got = dynamo.optimize(backend)(ssm)(a, b, reverse)
    sum(o.pow(2).sum() for o in got).backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close((a.grad, b.grad), want_grads)
    assert backend.calls == 1


def test_associative_scan_pointwise_on_cpu_still_raises(backend):
    """Eager refuses "pointwise" for CPU tensors; the stand-in does not apply."""
    def f(x):
        return associative_scan(lambda p, q: p + q, x + 1, dim=0)

    with pytest.raises(ValueError, match="pointwise"):
        f(torch.randn(4))
    with pytest.raises(ValueError, match="pointwise"):
        dynamo.optimize(backend)(f)(torch.randn(4))


def test_a_scan_longer_than_the_cap_keeps_its_break(backend, monkeypatch):
    """Past ``MAX_SCAN_STEPS`` the stand-in does not apply: torch's own scan runs between
    graphs, and the result is still eager's."""
    from dynamo import polyfills

    monkeypatch.setattr(polyfills, "MAX_SCAN_STEPS", 4)

    def f(x):
        return associative_scan(lambda p, q: p + q, x * 2, dim=0, combine_mode="generic") + 1

    x = torch.randn(8, 3)
    torch.testing.assert_close(dynamo.optimize(backend)(f)(x), f(x))
    assert backend.calls > 1  # a graph before the scan and one after: it was not traced
    x = torch.randn(4, 3)
    dynamo.reset()
    backend.graphs.clear()
    torch.testing.assert_close(dynamo.optimize(backend)(f)(x), f(x))
    assert backend.calls == 1  # at the cap: traced
