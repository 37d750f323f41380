"""Shared fixtures for the dynamo tests: a counting eager backend, a clean cache, and the
corpus runner (``run_case``): compiled vs eager on two calls with the same shapes and one
call with new shapes."""

from __future__ import annotations

import copy
import functools
import warnings

import dynamo
import pytest
import torch


class CountingBackend:
    """An eager backend (runs gm.forward) that remembers every graph it was given."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []
        self.example_inputs: list[list[torch.Tensor]] = []

    @property
    def calls(self) -> int:
        return len(self.graphs)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):
        self.graphs.append(gm)
        self.example_inputs.append(example_inputs)
        return gm.forward


@pytest.fixture(autouse=True)
def _fresh_dynamo(monkeypatch):
    dynamo.reset()
    monkeypatch.delenv("MINIPT2_STRICT", raising=False)
    yield
    dynamo.reset()


@pytest.fixture
def backend() -> CountingBackend:
    return CountingBackend()


@pytest.fixture
def no_fallback():
    """Turn any FallbackWarning into an error: the test expects a full capture."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", dynamo.FallbackWarning)
        yield


def same(actual, expected) -> None:
    """Same structure and types; tensors equal in value, dtype and shape."""
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            same(a, e)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for k in expected:
            same(actual[k], expected[k])
    elif isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected, equal_nan=True)
        assert actual.shape == expected.shape and actual.dtype == expected.dtype
    else:
        assert actual == expected


def fresh(args):
    return copy.deepcopy(args)


def run_case(backend, fn, make_args, graphs: int | None = 1, allow_fallback=False):
    """Eager vs compiled on make_args(4) twice (second must hit the cache) and make_args(6).

    ``graphs`` is the number of graphs after the first two calls (None: not checked).
    Arguments are compared after the call too, so mutation of inputs must match.
    """
    opt = dynamo.optimize(backend)(fn)
    with warnings.catch_warnings():
        if not allow_fallback:
            warnings.simplefilter("error", dynamo.FallbackWarning)
        for i, size in enumerate((4, 4, 6)):
            torch.manual_seed(i)
            args = make_args(size)
            eager_args, opt_args = fresh(args), fresh(args)
            expected = fn(*eager_args)
            actual = opt(*opt_args)
            same(actual, expected)
            same(list(opt_args), list(eager_args))
            if i == 1 and graphs is not None:
                assert backend.calls == graphs, f"{backend.calls} graphs, expected {graphs}"
    return opt


@pytest.fixture
def corpus(backend):
    """``corpus(fn, make_args, graphs=...)``: run_case with this test's backend."""
    return functools.partial(run_case, backend)
