"""Tests for the exercise dynamo-shape-guards (``shapes.ShapeEnv.evaluate``).

They pass on the reference implementation and fail when the exercise region is replaced
by ``raise NotImplementedError``.
"""

from __future__ import annotations

import dynamo
import pytest
import sympy
import torch
from dynamo.shapes import ShapeEnv


@pytest.fixture(autouse=True)
def _fresh():
    dynamo.reset()
    yield
    dynamo.reset()


def printed(env: ShapeEnv) -> list[str]:
    return [expr for kind, expr in env.produce_guards() if kind == "SHAPE"]


def test_answer_is_the_hints_and_the_relation_is_guarded():
    env = ShapeEnv()
    s0 = env.create_symbol(8, "x.size()[0]")
    assert env.evaluate(s0 > 4) is True
    assert printed(env) == ["x.size()[0] > 4"]
    assert env.evaluate(sympy.Lt(s0, 7)) is False  # guarded as it was answered: s0 >= 7
    assert printed(env) == ["x.size()[0] >= 7"]  # (which implies s0 > 4: that one goes)
    assert env.evaluate(s0 > 6) is True and printed(env) == ["x.size()[0] >= 7"]


def test_known_relations_need_no_guard():
    env = ShapeEnv()
    s0 = env.create_symbol(8, "x.size()[0]")
    assert env.evaluate(sympy.Eq(s0, 1)) is False  # every symbol is at least 2
    assert env.evaluate(2 * s0 > s0) is True
    assert printed(env) == []


def test_each_relation_is_guarded_once():
    env = ShapeEnv()
    s0, s1 = env.create_symbol(8, "x.size()[0]"), env.create_symbol(5, "y.size()[0]")
    for _ in range(3):
        assert env.evaluate(s0 > s1) is True
    assert printed(env) == ["x.size()[0] > y.size()[0]"]


def test_equal_sizes_become_one():
    env = ShapeEnv(duck_sizing=False)
    s0, s1 = env.create_symbol(6, "x.size()[0]"), env.create_symbol(6, "y.size()[0]")
    assert env.evaluate(sympy.Eq(s0, s1)) is True
    assert env.simplify(s1 + 1) == s0 + 1  # from now on s1 is s0
    assert printed(env) == ["x.size()[0] == y.size()[0]"]


def branchy(x):
    if x.shape[0] > 4:
        return x * 2
    return x - 1


def test_a_branch_on_a_size_recompiles_once_when_it_flips():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    opt = dynamo.optimize(backend, dynamic=True)(branchy)
    for n in (6, 9, 3, 2, 7):
        x = torch.randn(n)
        torch.testing.assert_close(opt(x), branchy(x))
    assert len(graphs) == 2
    guards = [[str(g) for g in e.guards] for e in dynamo.cache_entries(branchy)]
    assert "x.size()[0] > 4" in guards[0] and "x.size()[0] <= 4" in guards[1]
