"""Guards and the cache: hits, recompiles on each kind of change, the recompile limit."""

from __future__ import annotations

import dynamo
import pytest
import torch

OFFSET = 1.0


def add_mul(x, y):
    return (x + y) * 2


def scaled(x, n):
    return x * n


def uses_global(x):
    return x + OFFSET


def guard_namespace(fn, **arguments):
    return {"torch": torch, "G": fn.__globals__, "C": {}, **arguments}


def run(backend, fn, *args, **kwargs):
    out = dynamo.optimize(backend)(fn)(*args, **kwargs)
    torch.testing.assert_close(out, fn(*args, **kwargs))
    return out


def test_same_input_hits_the_cache(backend, no_fallback):
    x, y = torch.randn(3, 3), torch.randn(3, 3)
    opt = dynamo.optimize(backend)(add_mul)
    for _ in range(3):
        torch.testing.assert_close(opt(x, y), add_mul(x, y))
    opt(torch.randn(3, 3), torch.randn(3, 3))  # new values, same metadata: still a hit
    assert backend.calls == 1
    assert len(dynamo.cache_entries(opt)) == 1


@pytest.mark.parametrize("change", ["dtype", "shape", "stride", "requires_grad", "ndim"])
def test_metadata_change_recompiles(change, backend, no_fallback):
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    variants = {
        "dtype": lambda t: t.double(),
        "shape": lambda t: t[:2],
        "stride": lambda t: t.t(),
        "requires_grad": lambda t: t.clone().requires_grad_(),
        "ndim": lambda t: t.reshape(2, 2, 4),
    }
    opt = dynamo.optimize(backend)(add_mul)
    opt(x, y)
    x2 = variants[change](x)
    y2 = y.reshape(2, 2, 4) if change == "ndim" else y[:2] if change == "shape" else y
    torch.testing.assert_close(opt(x2, y2), add_mul(x2, y2))
    assert backend.calls == 2
    opt(x2, y2)
    opt(x, y)  # both entries stay valid
    assert backend.calls == 2
    old_guards = dynamo.cache_entries(opt)[0].guards
    failing = [g for g in old_guards
               if not eval(g.expr, guard_namespace(add_mul, x=x2, y=y2))]
    assert failing, "the first entry's guards must reject the changed input"


def test_constant_argument_is_specialised_and_guarded(backend, no_fallback):
    x = torch.arange(4)
    opt = dynamo.optimize(backend)(scaled)
    assert opt(x, 3).tolist() == [0, 3, 6, 9]
    assert opt(x, 3).tolist() == [0, 3, 6, 9]
    assert backend.calls == 1
    assert opt(x, 5).tolist() == [0, 5, 10, 15]
    assert backend.calls == 2
    # 1, 1.0 and True compare equal but give different dtypes: the type guard separates them
    assert opt(x, 1.0).dtype == torch.float32
    assert opt(x, True).dtype == torch.int64
    assert backend.calls == 4
    graph_code = backend.graphs[1].code
    assert "5" in graph_code and "n" not in [n.name for n in backend.graphs[1].graph.nodes]


def test_guards_read_as_python(backend, no_fallback):
    x = torch.randn(8, 8)
    opt = dynamo.optimize(backend)(scaled)
    opt(x, 3)
    (entry,) = dynamo.cache_entries(opt)
    text = [str(g) for g in entry.guards]
    for expected in ["type(x) is torch.Tensor", "x.dtype == torch.float32",
                     "x.device == torch.device('cpu')", "x.size() == (8, 8)",
                     "x.stride() == (8, 1)", "x.requires_grad == False", "x.ndim == 2",
                     "n == 3", "type(n) is int"]:
        assert expected in text
    namespace = guard_namespace(scaled, x=x, n=3)
    assert all(eval(g, namespace) for g in text)
    assert not all(eval(g, guard_namespace(scaled, x=x, n=4)) for g in text)
    assert entry.check_fn(scaled.__globals__, {}, x=x, n=3)
    assert not entry.check_fn(scaled.__globals__, {}, x=x.half(), n=3)
    assert entry.code is scaled.__code__


def test_string_and_dtype_constants_guard_safely(backend, no_fallback):
    def pick(x, mode, dtype):
        return x.to(dtype) if mode == "a'b\"c" else x

    x = torch.randn(2)
    opt = dynamo.optimize(backend)(pick)
    assert opt(x, "a'b\"c", torch.float64).dtype == torch.float64
    assert opt(x, "other", torch.float64).dtype == torch.float32
    assert backend.calls == 1  # the second specialisation returns x itself: no graph
    for entry in dynamo.cache_entries(opt):
        namespace = guard_namespace(pick, x=x, mode="a'b\"c", dtype=torch.float64)
        results = [eval(g.expr, namespace) for g in entry.guards]
        assert all(results) == (entry is dynamo.cache_entries(opt)[0])


def test_global_constant_change_recompiles(backend, no_fallback):
    global OFFSET
    x = torch.zeros(2)
    opt = dynamo.optimize(backend)(uses_global)
    try:
        assert opt(x).tolist() == [1.0, 1.0]
        OFFSET = 2.0
        assert opt(x).tolist() == [2.0, 2.0]
    finally:
        OFFSET = 1.0
    assert backend.calls == 2
    assert "G['OFFSET'] == 1.0" in [str(g) for g in dynamo.cache_entries(opt)[0].guards]


def test_closure_change_recompiles(backend, no_fallback):
    def make(k):
        def inner(x):
            return x * k
        return inner

    x = torch.ones(2)
    assert dynamo.optimize(backend)(make(2))(x).tolist() == [2.0, 2.0]
    assert dynamo.optimize(backend)(make(3))(x).tolist() == [3.0, 3.0]
    assert backend.calls == 2  # one code object, two entries told apart by C['k']


def test_grad_mode_is_guarded(backend, no_fallback):
    x = torch.randn(3, requires_grad=True)
    opt = dynamo.optimize(backend)(lambda t: t * 2)
    assert opt(x).requires_grad
    with torch.no_grad():
        assert not opt(x).requires_grad
    assert backend.calls == 2


def test_aliased_arguments(backend, no_fallback):
    def fn(a, b):
        a.add_(1)
        return b * 2

    x = torch.zeros(2)
    assert dynamo.optimize(backend)(fn)(x, x).tolist() == [2.0, 2.0]
    y, z = torch.zeros(2), torch.zeros(2)
    assert dynamo.optimize(backend)(fn)(y, z).tolist() == [0.0, 0.0]
    assert y.tolist() == [1.0, 1.0]
    assert backend.calls == 2


def test_recompile_limit(backend, monkeypatch):
    monkeypatch.setattr(dynamo.config, "recompile_limit", 3)
    opt = dynamo.optimize(backend, dynamic=False)(add_mul)  # else sizes go symbolic
    with pytest.warns(dynamo.FallbackWarning) as record:
        for n in range(1, 7):
            x, y = torch.randn(n), torch.randn(n)
            torch.testing.assert_close(opt(x, y), add_mul(x, y))
    assert backend.calls == 3
    messages = [str(w.message) for w in record if w.category is dynamo.FallbackWarning]
    assert len(messages) == 1
    assert "recompile limit" in messages[0] and "x.size() == (3,)" in messages[0]
    opt(torch.randn(2), torch.randn(2))  # an old entry still hits
    assert backend.calls == 3


def test_reset_clears_entries(backend, no_fallback):
    opt = dynamo.optimize(backend)(add_mul)
    opt(torch.randn(2), torch.randn(2))
    assert dynamo.cache_entries(add_mul)
    dynamo.reset()
    assert dynamo.cache_entries(opt) == []
    opt(torch.randn(2), torch.randn(2))
    assert backend.calls == 2


def test_different_backends_do_not_share_entries(backend, no_fallback):
    second_calls = []

    def second(gm, example_inputs):
        second_calls.append(gm)
        return gm.forward

    x, y = torch.randn(2), torch.randn(2)
    dynamo.optimize(backend)(add_mul)(x, y)
    dynamo.optimize(second)(add_mul)(x, y)
    assert backend.calls == len(second_calls) == 1


def test_graphs_are_marked_as_guarding_their_autograd_signature(backend, no_fallback):
    """A backend may pick its autograd variant once (aotautograd's [Note: a signature the
    caller guards]) because grad mode and each input's requires_grad are guarded: the graph
    says so, and a call that differs in either compiles again."""
    x = torch.randn(3)
    w = torch.randn(3, requires_grad=True)
    opt = dynamo.optimize(backend)(add_mul)
    opt(x, w)
    with torch.no_grad():
        opt(x, w)
    opt(x, w.detach())
    assert backend.calls == 3
    assert all(gm.meta["signature_guarded"] for gm in backend.graphs)
