"""Shared fixtures for the dynamo tests: a counting eager backend and a clean cache."""

from __future__ import annotations

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
