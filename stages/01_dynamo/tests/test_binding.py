"""Binding a call's arguments to the frame's parameters ([Note: binding arguments] in
eval_frame.py): the fast path for plain positional calls gives exactly the table that
``inspect.Signature.bind`` gives, every other call goes through ``bind``, and a call that
does not fit raises eager's TypeError."""

from __future__ import annotations

import inspect

import dynamo
import pytest
import torch
from dynamo.eval_frame import _binder


def plain(a, b, c=3, d=None):
    return a, b, c, d


def only_positional(a, /, b=2):
    return a, b


def star(a, *rest, k=1, **extra):
    return a, rest, k, extra


def keyword_only(a, *, k):
    return a, k


CALLS = [
    (plain, (1, 2), {}), (plain, (1, 2, 5), {}), (plain, (1, 2, 5, 6), {}),
    (plain, (1,), {"b": 2}), (plain, (), {"a": 1, "b": 2, "d": 4}), (plain, (1, 2), {"c": 0}),
    (only_positional, (1,), {}), (only_positional, (1, 5), {}), (only_positional, (1,), {"b": 7}),
    (star, (1,), {}), (star, (1, 2, 3), {"k": 4, "z": 5}), (keyword_only, (1,), {"k": 2}),
]


@pytest.mark.parametrize("fn, args, kwargs", CALLS)
def test_binder_matches_signature_bind(fn, args, kwargs):
    signature = inspect.signature(fn)
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    got = _binder(fn, signature)(args, kwargs)
    assert got == dict(bound.arguments)
    assert list(got) == list(bound.arguments)  # signature order: guards name them so


@pytest.mark.parametrize("fn, args, kwargs", [
    (plain, (1,), {}), (plain, (1, 2, 3, 4, 5), {}), (plain, (1, 2), {"e": 0}),
    (only_positional, (), {"a": 1}), (keyword_only, (1,), {}), (keyword_only, (1, 2), {}),
])
def test_binder_raises_for_calls_that_do_not_fit(fn, args, kwargs):
    with pytest.raises(TypeError):
        _binder(fn, inspect.signature(fn))(args, kwargs)


def test_compiled_calls_bind_like_eager(backend, no_fallback):
    def fn(x, scale=2.0, shift=None):
        y = x * scale
        return y if shift is None else y + shift

    compiled = dynamo.optimize(backend)(fn)
    x = torch.randn(3)
    for args, kwargs in [((x,), {}), ((x, 3.0), {}), ((x, 3.0, x), {}), ((x,), {"shift": x}),
                         ((), {"x": x, "scale": 0.5})]:
        torch.testing.assert_close(compiled(*args, **kwargs), fn(*args, **kwargs))
    with pytest.raises(TypeError):
        compiled(x, 1.0, x, x)  # one argument too many: eager's error
