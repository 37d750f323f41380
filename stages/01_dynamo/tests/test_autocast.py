"""``with torch.autocast(...)`` inside the graph: enter/exit nodes, example dtypes, and the
same values and dtypes as eager, through the eager backend and the full aot_eager pipeline."""

from __future__ import annotations

import warnings

import dynamo
import pytest
import torch
import torch.nn.functional as F
from dynamo.utils import DeviceMeta


def same(actual, expected) -> None:
    """Equal values, dtypes and shapes, in the same structure."""
    if isinstance(expected, tuple):
        assert type(actual) is tuple and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            same(a, e)
        return
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual, expected)


def linear_block(x, w, b):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = F.linear(x, w, b)  # bfloat16 under autocast
        z = torch.relu(y) * 2 + 1
        s = z @ w.t()
    return z, s, s.float().sum(dim=0) + x.sum()


def linear_then_bias(x, w, b):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = F.linear(x, w) + b  # the bias apart: see test_aot_eager_pipeline_matches_eager
        z = torch.tanh(y) * 2 + 1
        s = z @ w.t()
    return z, s, s.float().sum(dim=0) + x.sum()


def nested_disabled(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
        with torch.autocast("cpu", enabled=False):
            full = x @ w  # float32 again
            mixed = y.float() @ w
        back = full @ w
    return y, full, mixed, back


def mixed_inputs(x, w):
    with torch.amp.autocast("cpu", dtype=torch.bfloat16):
        return x.double().float() @ w.bfloat16()  # only legal because autocast casts


def legacy_cpu_amp(x, w):
    with torch.cpu.amp.autocast():
        return (x @ w).sin()


@torch.autocast("cpu", dtype=torch.bfloat16)
def decorated(x, w):
    return torch.mm(x, w) + x


def calls_decorated(x, w):
    return decorated(x, w).exp()


pytestmark = pytest.mark.filterwarnings("ignore:.*torch.cpu.amp.autocast:FutureWarning")


def make_args(n):
    return torch.randn(n, 8), torch.randn(8, 8), torch.randn(8)


def two(n):
    return torch.randn(n, 8), torch.randn(8, 8)


def targets(gm) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("fn, args", [
    (linear_block, make_args), (linear_then_bias, make_args), (nested_disabled, two),
    (mixed_inputs, two),
    (legacy_cpu_amp, two), (decorated, two), (calls_decorated, two),
], ids=lambda v: getattr(v, "__name__", ""))
def test_autocast_matches_eager(fn, args, corpus, backend):
    corpus(fn, args, graphs=1)  # values, dtypes and shapes equal eager; one graph
    code = backend.graphs[0].code
    assert "_enter_autocast('cpu', torch.bfloat16, True" in code
    assert code.count("_exit_autocast(") == code.count("_enter_autocast(")
    assert not torch.is_autocast_enabled("cpu")  # tracing left no autocast behind


def test_enter_and_exit_bracket_the_block(backend, no_fallback):
    dynamo.optimize(backend)(nested_disabled)(*two(4))
    found = [t.__name__ for t in targets(backend.graphs[0]) if "autocast" in t.__name__]
    assert found == ["_enter_autocast", "_enter_autocast", "_exit_autocast", "_exit_autocast"]
    enters = [n for n in backend.graphs[0].graph.nodes if n.name.startswith("_enter")]
    assert [n.args[2] for n in enters] == [True, False]  # outer enabled, inner disabled


def test_example_values_carry_autocast_dtypes(backend, no_fallback):
    """[Note: example values under autocast]: meta examples alone would say float32."""
    dynamo.optimize(backend)(nested_disabled)(*two(4))
    dtypes = {n.name: n.meta["example_value"].dtype for n in backend.graphs[0].graph.nodes
              if "example_value" in n.meta}
    assert dtypes["matmul"] == torch.bfloat16
    assert dtypes["matmul_1"] == torch.float32  # inside enabled=False
    assert dtypes["matmul_3"] == torch.bfloat16  # back in the outer region
    meta = torch.empty(2, 3, device="meta")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert (meta @ meta.t()).dtype == torch.float32  # why DeviceMeta exists
        fake = DeviceMeta(meta, torch.device("cpu"))
        assert (fake @ fake.t()).dtype == torch.bfloat16


def test_autocast_state_is_guarded(backend, no_fallback):
    def fn(x, w):
        return x @ w

    opt = dynamo.optimize(backend)(fn)
    x, w = two(3)
    assert opt(x, w).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        same(opt(x, w), fn(x, w))  # the guard fails: a second graph, under autocast
    assert backend.calls == 2
    # one guard; on a CUDA machine it also names 'cuda'
    assert any("not torch.is_autocast_enabled('cpu')" in str(g)
               for g in dynamo.cache_entries(opt)[0].guards)


def test_requires_grad_survives_autocast(backend, no_fallback):
    x, w = torch.randn(3, 8), torch.randn(8, 8, requires_grad=True)
    out = dynamo.optimize(backend)(nested_disabled)(x, w)
    expected = nested_disabled(x, w)
    for a, e in zip(out, expected):
        assert a.requires_grad and a.dtype == e.dtype
    sum(o.float().sum() for o in out).backward()
    grad, w.grad = w.grad, None
    sum(o.float().sum() for o in expected).backward()
    torch.testing.assert_close(grad, w.grad)


def print_in_autocast(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ x
        print("inside")
    return y


def test_graph_break_inside_autocast_falls_back(backend, capsys):
    x = torch.randn(3, 3)
    with pytest.warns(dynamo.FallbackWarning, match="inside an autocast region") as record:
        out = dynamo.optimize(backend)(print_in_autocast)(x)
    same(out, print_in_autocast(x))
    assert 'print("inside")' in str(record[0].message)
    assert backend.calls == 0 and not torch.is_autocast_enabled("cpu")


@pytest.mark.parametrize("fn, args", [(linear_then_bias, make_args), (nested_disabled, two)],
                         ids=["linear_then_bias", "nested_disabled"])
def test_aot_eager_pipeline_matches_eager(fn, args):
    """The full pipeline (dynamo, aotautograd, primtorch): the same values and dtypes as
    eager, forward and backward, from one graph. (``F.linear(x, w, b)`` with its bias is
    left out here: primtorch decomposes it into ``mm`` then ``add``, two bfloat16
    roundings where eager's ``addmm`` has one, so it agrees only to bfloat16 precision.)"""
    import driver

    torch.manual_seed(0)
    x, w, *rest = args(4)
    w.requires_grad_(True)
    compiled = driver.compile(fn, backend="aot_eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error", dynamo.FallbackWarning)
        actual = compiled(x, w, *rest)
    expected = fn(x, w, *rest)
    same(actual, expected)
    assert len(dynamo.cache_entries(fn)) == 1
    sum(a.float().sum() for a in actual).backward()
    grad, w.grad = w.grad, None
    sum(e.float().sum() for e in expected).backward()
    torch.testing.assert_close(grad, w.grad)
