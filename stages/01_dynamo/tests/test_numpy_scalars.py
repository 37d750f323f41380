"""[Note: numpy scalars are constants] (variables/constant.py), and ``==`` on objects that
define their own ``__eq__``: eager PyTorch is the oracle, and the comparison must never be
answered by identity when Python would call ``__eq__``."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import torch
from dynamo.exc import FallbackWarning

import driver


def test_a_numpy_scalar_compares_by_value():
    """Reformer: ``seq_len % np.lcm(...) != 0`` was True under compile (identity)."""
    def f(x):
        n = np.lcm(8, 8)
        if x.shape[-1] % n != 0:
            return x + 1
        return x - 1
    x = torch.zeros(2, 32)
    compiled = driver.compile(f, fullgraph=True)
    torch.testing.assert_close(compiled(x), f(x))


N = np.int64(8)


def test_a_global_numpy_scalar_is_guarded_by_type_and_value():
    global N

    def f(x):
        return x + 1 if N == 8 else x - 1
    compiled = driver.compile(f, fullgraph=True)
    x = torch.zeros(3)
    for value in (np.int64(8), np.int64(9), np.float32(8.0), 8):
        N = value
        torch.testing.assert_close(compiled(x), f(x))
    N = np.int64(8)


def test_numpy_scalars_as_arguments_of_tensor_ops_and_results():
    def f(x):
        return (x * np.int64(3) + np.float32(0.5), np.int64(7) // 2,
                torch.full((2,), np.float32(1.5)))
    got, want = driver.compile(f, fullgraph=True)(torch.ones(2)), f(torch.ones(2))
    torch.testing.assert_close(got[0], want[0])
    assert got[1] == want[1] and type(got[1]) is type(want[1])
    torch.testing.assert_close(got[2], want[2])


@dataclasses.dataclass
class Point:
    x: int


P1, P2 = Point(1), Point(1)


def test_objects_with_their_own_eq_are_not_compared_by_identity():
    """Two equal dataclasses are ``==`` though not the same object: the trace breaks there
    rather than answer by identity."""
    def f(x):
        if P1 == P2:
            return x + 1
        return x - 1
    x = torch.zeros(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        got = driver.compile(f)(x)
    torch.testing.assert_close(got, f(x))
    with pytest.raises(Exception, match="defines its own __eq__"):
        driver.compile(f, fullgraph=True)(x)
