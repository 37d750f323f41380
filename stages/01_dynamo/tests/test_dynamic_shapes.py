"""Dynamic shapes in dynamo: symbolic sizes, guards on relations, automatic dynamic.

Every case runs compiled and eager on several sizes and compares; the counting backend
checks how many graphs were compiled. These tests use dynamo alone (no primtorch), so ops
whose meta kernel cannot take symbolic sizes are specialised ([Note: specialization on
failure]); tests/test_dynamic_shapes.py covers the whole pipeline.
Chapter: book/docs/dynamic-shapes.md.
"""

from __future__ import annotations

import dynamo
import pytest
import torch
from dynamo import shapes


def guards_of(fn) -> list[list[str]]:
    return [[str(g) for g in entry.guards] for entry in dynamo.cache_entries(fn)]


def check(opt, fn, *args):
    torch.testing.assert_close(opt(*args), fn(*args))


def halves(x):
    n = x.shape[0] // 2  # symbolic: a floordiv node in the graph
    return x.softmax(-1) * x.size(1), torch.arange(n), n


def test_size_arithmetic_stays_in_one_graph(backend, no_fallback):
    opt = dynamo.optimize(backend, dynamic=True)(halves)
    for n in (6, 7, 10, 33):
        x = torch.randn(n, 5)
        out, positions, half = opt(x)
        torch.testing.assert_close(out, halves(x)[0])
        torch.testing.assert_close(positions, torch.arange(n // 2))
        assert half == n // 2 and type(half) is int
    assert backend.calls == 1
    ops = [getattr(n.target, "__name__", n.target) for n in backend.graphs[0].graph.nodes]
    assert "floordiv" in ops and "size" in ops  # computed from x at run time
    guards = guards_of(halves)[0]
    assert "2 <= x.size()[0]" in guards and "2 <= x.size()[1]" in guards
    assert not any("== 6" in g for g in guards)  # nothing specialised


def branchy(x):
    if x.shape[0] > 4:  # a relation: guarded, not specialised
        return x.sum(0)
    return x.mean(0)


def test_relation_guard_fails_once(backend, no_fallback):
    opt = dynamo.optimize(backend, dynamic=True)(branchy)
    for n in (6, 9, 12):
        check(opt, branchy, torch.randn(n, 10))
    assert backend.calls == 1
    assert "x.size()[0] > 4" in guards_of(branchy)[0]
    check(opt, branchy, torch.randn(3, 10))  # the relation fails: exactly one recompile
    assert backend.calls == 2
    assert "x.size()[0] <= 4" in guards_of(branchy)[1]
    for n in (2, 4, 5, 30):
        check(opt, branchy, torch.randn(n, 10))
    assert backend.calls == 2


def scale_rows(x, w):
    return (x @ w.unsqueeze(1)).softmax(0)


def test_automatic_dynamic_compiles_twice(backend, no_fallback):
    opt = dynamo.optimize(backend)(scale_rows)  # dynamic=None
    w = torch.randn(8)
    for n in range(3, 20):
        check(opt, scale_rows, torch.randn(n, 8), w)
    assert backend.calls == 2  # static for 3, symbolic from 4 on
    first, second = guards_of(scale_rows)
    assert "x.size() == (3, 8)" in first
    assert "x.size()[1] == 8" in second and "2 <= x.size()[0]" in second
    assert "w.size() == (8,)" in second  # w never changed: still static


def test_dynamic_false_specialises_every_size(backend, no_fallback):
    opt = dynamo.optimize(backend, dynamic=False)(scale_rows)
    w = torch.randn(8)
    for n in (3, 4, 5):
        check(opt, scale_rows, torch.randn(n, 8), w)
    assert backend.calls == 3


def test_mark_dynamic(backend, no_fallback):
    opt = dynamo.optimize(backend)(scale_rows)
    w = torch.randn(8)
    x = torch.randn(5, 8)
    dynamo.mark_dynamic(x, 0)
    check(opt, scale_rows, x, w)
    assert "2 <= x.size()[0]" in guards_of(scale_rows)[0]
    check(opt, scale_rows, torch.randn(11, 8), w)
    assert backend.calls == 1
    with pytest.raises(ValueError):
        dynamo.mark_dynamic(x, 2)


def test_zero_one_specialization(backend, no_fallback):
    opt = dynamo.optimize(backend, dynamic=True)(scale_rows)
    w = torch.randn(8)
    check(opt, scale_rows, torch.randn(1, 8), w)
    assert "x.size()[0] == 1" in guards_of(scale_rows)[0]  # 1 stays a constant
    check(opt, scale_rows, torch.randn(3, 8), w)
    check(opt, scale_rows, torch.randn(4, 8), w)
    assert backend.calls == 2


def pair(x, y):
    return x * 2, y.sum(0)


def test_duck_sizing_shares_a_symbol(backend, no_fallback):
    opt = dynamo.optimize(backend, dynamic=True)(pair)
    check(opt, pair, torch.randn(4, 3), torch.randn(4, 7))
    guards = guards_of(pair)[0]
    assert "y.size()[0] == x.size()[0]" in guards
    check(opt, pair, torch.randn(6, 3), torch.randn(6, 7))
    assert backend.calls == 1
    check(opt, pair, torch.randn(6, 3), torch.randn(5, 7))  # no longer equal: recompile
    assert backend.calls == 2
    assert "y.size()[0] == x.size()[0]" not in guards_of(pair)[1]


def shifted(x, y):
    return x + y  # broadcasting add: ATen's meta kernel wants concrete sizes


def test_specialization_on_failure(backend, no_fallback, monkeypatch):
    monkeypatch.setattr(dynamo.config, "meta_decompositions", {})
    opt = dynamo.optimize(backend, dynamic=True)(shifted)
    check(opt, shifted, torch.randn(5, 3), torch.randn(3))
    assert "x.size()[0] == 5" in guards_of(shifted)[0]  # specialised, so still correct
    check(opt, shifted, torch.randn(6, 3), torch.randn(3))
    assert backend.calls == 2


def data_dependent(x):
    y = x * 2
    idx = torch.nonzero(y > 0)  # its size depends on the data: a graph break
    return idx.float().sum() + y.sum()


@pytest.mark.parametrize("dynamic", [None, True])
def test_data_dependent_sizes_break_the_graph(backend, dynamic):
    opt = dynamo.optimize(backend, dynamic=dynamic)(data_dependent)
    for n in (5, 8):
        check(opt, data_dependent, torch.randn(n))
    report = dynamo.explain(data_dependent)(torch.randn(5))
    assert report.graph_break_count == 1
    assert "depends on the data" in report.break_reasons[0]


def masked(x):
    return x[x > 0].sum() * x.shape[0]


def test_boolean_mask_breaks_the_graph(backend):
    opt = dynamo.optimize(backend, dynamic=True)(masked)
    for n in (4, 9):
        check(opt, masked, torch.randn(n))
    assert "depends on the data" in dynamo.explain(masked)(torch.randn(5)).break_reasons[0]


def returns_size(x):
    b, t = x.shape
    return x.t() * 2, b * t + 1


def test_symbolic_size_returned_to_python(backend, no_fallback):
    opt = dynamo.optimize(backend, dynamic=True)(returns_size)
    for n in (3, 4):
        x = torch.randn(n, 6)
        doubled, count = opt(x)
        torch.testing.assert_close(doubled, x.t() * 2)
        assert count == n * 6 + 1
    assert backend.calls == 1


def test_shape_env_relations_and_printing():
    env = shapes.ShapeEnv()
    s0 = env.create_symbol(8, "x.size()[0]")
    s1 = env.create_symbol(3, "y.size()[1]")
    assert env.create_symbol(8, "z.size()[0]") == s0  # duck sizing
    assert env.create_symbol(1, "z.size()[1]") == 1  # 0/1 specialization
    assert env.evaluate(s0 > 1) and not env.guards  # known: every symbol is >= 2
    assert env.evaluate(s0 > 5) and not env.evaluate(s0 < 6)  # recorded once, then known
    assert env.evaluate(sympy_eq(shapes.FloorDiv(s0 * s1, 2 * s0), 1))
    printed = [expr for _, expr in env.produce_guards()]
    assert printed[0] == "z.size()[0] == x.size()[0]"
    assert "x.size()[0] > 5" in printed and "(y.size()[1] // 2) == 1" in printed
    assert env.to_python(s0 * s1 + 2) == "(x.size()[0]*y.size()[1] + 2)"


def sympy_eq(a, b):
    import sympy

    return sympy.Eq(a, b)
