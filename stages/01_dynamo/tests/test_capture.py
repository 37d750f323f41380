"""Differential tests: straight-line functions captured by dynamo vs. eager PyTorch."""

from __future__ import annotations

import operator
import re
import warnings

import dynamo
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

W = torch.randn(4, 3)
SCALE = 0.5


def assert_same(actual, expected):
    """Same structure, same types; tensors equal in value, dtype and shape."""
    assert type(actual) is type(expected)
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e)
    elif isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected, equal_nan=True)
        assert actual.shape == expected.shape and actual.dtype == expected.dtype
    else:
        assert actual == expected


def clone_args(args):
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def check(backend, fn, *args, graphs: int = 1):
    """Run fn eagerly and through dynamo on fresh copies of args; compare; count graphs."""
    expected = fn(*clone_args(args))
    actual = dynamo.optimize(backend)(fn)(*clone_args(args))
    assert_same(actual, expected)
    assert backend.calls == graphs
    return actual


def fn_torch_calls(x, y):
    return torch.sin(x) + torch.cos(y) * torch.relu(x - y)


def fn_functional(x, y):
    return F.softmax(x, dim=-1) + F.gelu(y) - F.relu(x)


def fn_methods(x, y):
    a = x.sum(dim=1, keepdim=True).exp()
    b = x.reshape(-1).view(4, 4).permute(1, 0).contiguous()
    return a * b + y.unsqueeze(0).clamp(min=0.0), x.mean(), x.transpose(0, 1).softmax(-1)


def fn_constants(x, y):
    return x * 2 + 1.5, 2 - x, 3 / (y + 10), 2 ** x, x ** 2, x // 0.7, x % 0.3


def fn_unary(x, y):
    return -x, +y, abs(x), ~(x > 0)


def fn_compare(x, y):
    return x > y, x == y, x <= 0.5, x != y, x >= y, x < 0


def fn_single(x, y):
    return x @ y


def fn_list_return(x, y):
    return [x + 1, y - 1]


def fn_mixed_return(x, y):
    return x.sin(), 3, None, "done", (y * 2, 1.5), [torch.float32]


def fn_constant_only(x, y):
    return 3


def fn_kwargs(x, y):
    return torch.sum(x, dim=1, keepdim=True), torch.cat([x, y], dim=0), torch.stack((x, y), 1)


def fn_indexing(x, y):
    return x[0], x[1:3], x[:, 0], x[..., None], x[1:3, ::2], x[-1, 1:], y[None]


def fn_tensor_index(x, idx):
    return x[idx], x[:, idx]


def fn_broadcast(x, y):
    return x + y, x * y[:, None], torch.where(x > 0, x, y)


def fn_int_tensor(x, y):
    return x * 2, x // 3, x & 3, x | y, x ^ y, x << 1, x.sum(), (x + y).float() / 2


def fn_bf16(x, y):
    return x * 1.5 + y, (x @ y.T).to(torch.float32), x.dtype


def fn_shapes(x, y):
    b, c = x.shape
    flat = x.view(x.shape[0], -1)
    return flat * x.size(1) + b + c, len(x), x.ndim, x.dim(), x.numel(), x.shape


def fn_swap_and_inplace(x, y):
    x, y = y, x
    z = x.clone()
    z.add_(1)
    z[0] = 5.0
    z *= 2
    return z, y


def fn_split(x, y):
    a, b = torch.split(x, 2)
    r0, r1, r2, r3 = x  # iterating a tensor walks its first dimension
    return a + b, r0 - r3, r1 * r2


def fn_global_tensor(x, y):
    return x @ W * SCALE


def fn_factories(x, y):
    ones = torch.ones(x.shape, dtype=x.dtype)
    return torch.zeros_like(x) + ones, torch.arange(4) * 2, torch.full((2,), 3.0) + y[:2]


def fn_attrs(x, y):
    return x.T, x.mT, x.dtype == torch.float32, x.is_cuda, x.device, x.requires_grad


def fn_conversions(x, y):
    return x.to(torch.float64), x.double(), x.to(y), x.int(), x.to("cpu"), x.cpu()


def fn_builtin_ops(x, y):
    return operator.add(x, y), max(2, 3) * x, x + len((1, 2, 3)), isinstance(x, torch.Tensor)


CASES = {
    "torch_calls": (fn_torch_calls, (4, 4), (4, 4)),
    "functional": (fn_functional, (4, 4), (4, 4)),
    "methods": (fn_methods, (4, 4), (4,)),
    "constants": (fn_constants, (4, 4), (4, 4)),
    "unary": (fn_unary, (4, 4), (4, 4)),
    "compare": (fn_compare, (4, 4), (4, 4)),
    "single": (fn_single, (4, 4), (4, 4)),
    "list_return": (fn_list_return, (4, 4), (4, 4)),
    "mixed_return": (fn_mixed_return, (4, 4), (4, 4)),
    "constant_only": (fn_constant_only, (4, 4), (4, 4)),
    "kwargs": (fn_kwargs, (4, 4), (4, 4)),
    "indexing": (fn_indexing, (4, 4), (4, 4)),
    "broadcast": (fn_broadcast, (4, 4), (4,)),
    "shapes": (fn_shapes, (4, 4), (4, 4)),
    "swap_and_inplace": (fn_swap_and_inplace, (4, 4), (4, 4)),
    "split": (fn_split, (4, 4), (4, 4)),
    "global_tensor": (fn_global_tensor, (4, 4), (4, 4)),
    "factories": (fn_factories, (4, 4), (4,)),
    "attrs": (fn_attrs, (4, 4), (4, 4)),
    "conversions": (fn_conversions, (4, 4), (4, 4)),
    "builtin_ops": (fn_builtin_ops, (4, 4), (4, 4)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_float_functions(name, backend, no_fallback):
    fn, x_shape, y_shape = CASES[name]
    torch.manual_seed(0)
    graphs = 0 if name == "constant_only" else 1  # no operation: no graph to compile
    check(backend, fn, torch.randn(x_shape), torch.randn(y_shape), graphs=graphs)


def test_int_tensors(backend, no_fallback):
    x, y = torch.randint(-8, 8, (4, 4)), torch.randint(0, 8, (4, 4))
    check(backend, fn_int_tensor, x, y)


def test_bfloat16(backend, no_fallback):
    x, y = torch.randn(4, 4, dtype=torch.bfloat16), torch.randn(4, 4, dtype=torch.bfloat16)
    check(backend, fn_bf16, x, y)


def test_tensor_index(backend, no_fallback):
    check(backend, fn_tensor_index, torch.randn(5, 5), torch.tensor([0, 3, 3]))


def test_graph_contents(backend, no_fallback):
    """The graph holds the torch calls, one placeholder per tensor arg, a tuple output."""
    dynamo.optimize(backend)(fn_torch_calls)(torch.randn(3), torch.randn(3))
    (gm,) = backend.graphs
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert targets[:3] == [torch.sin, torch.cos, operator.sub]
    assert [n.name for n in gm.graph.nodes if n.op == "placeholder"] == ["x", "y"]
    (output,) = [n for n in gm.graph.nodes if n.op == "output"]
    assert isinstance(output.args[0], tuple) and len(output.args[0]) == 1
    for node in gm.graph.nodes:
        if node.op.startswith("call_"):
            assert isinstance(node.meta["example_value"], torch.Tensor)
    assert "test_capture.py" in next(
        n for n in gm.graph.nodes if n.target is torch.sin).meta["stack_trace"]


def test_placeholder_order_and_constant_args(backend, no_fallback):
    def fn(a, n, b, flag, none):
        return a * n + b, flag, none

    check(backend, fn, torch.randn(3), 3, torch.randn(3), True, None)
    assert [n.name for n in backend.graphs[0].graph.nodes if n.op == "placeholder"] == ["a", "b"]


def test_closure_and_defaults(backend, no_fallback):
    bias = torch.randn(4)
    factor = 3

    def fn(x, alpha=2.0, *, beta=1.0):
        return x * alpha + bias * factor - beta

    x = torch.randn(4)
    opt = dynamo.optimize(backend)(fn)
    assert_same(opt(x), fn(x))
    assert_same(opt(x, 5.0, beta=0.5), fn(x, 5.0, beta=0.5))
    assert backend.calls == 2


def test_varargs_and_sequences(backend, no_fallback):
    def fn(xs, *rest):
        return torch.cat(xs) + rest[0].sum(), (xs[0], rest[1])

    xs = [torch.randn(2), torch.randn(3)]
    check(backend, fn, xs, torch.randn(5), torch.randn(1))


def test_returned_argument_identity(backend, no_fallback):
    def fn(x, items):
        return x, items

    x, items = torch.randn(2), [1, 2]
    out = dynamo.optimize(backend)(fn)(x, items)
    assert out[0] is x and out[1] is items


def test_autograd_through_graph(backend, no_fallback):
    def fn(x, w):
        return (torch.tanh(x @ w) * 2).sum()

    x, w = torch.randn(3, 4), torch.randn(4, 2, requires_grad=True)
    dynamo.optimize(backend)(fn)(x, w).backward()
    grad = w.grad.clone()
    w.grad = None
    fn(x, w).backward()
    torch.testing.assert_close(grad, w.grad)


def test_bound_method_with_carried_self(backend, no_fallback):
    class Scaler:
        def apply(self, x, k):
            return x * k + 1, self

    scaler = Scaler()
    out, same = dynamo.optimize(backend)(scaler.apply)(torch.ones(2), 3)
    assert same is scaler
    torch.testing.assert_close(out, torch.full((2,), 4.0))
    assert backend.calls == 1


BINARY = [operator.add, operator.sub, operator.mul, operator.truediv, operator.gt, operator.eq]


@settings(max_examples=30, deadline=None)
@given(
    shapes=st.sampled_from([((3, 4), (4,)), ((2, 1, 3), (4, 1)), ((5,), ()), ((1,), (2, 3))]),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.int32, torch.bfloat16]),
    op=st.sampled_from(BINARY),
    scalar=st.sampled_from([2, -1.5, True]),
)
def test_broadcasting_binary_ops_property(shapes, dtype, op, scalar):
    """Any broadcastable pair, any dtype: ``op(a, b) * scalar`` and ``scalar - a`` match eager."""
    dynamo.reset()

    def fn(a, b, s):
        return op(a, b) * s, s - a

    a = (torch.randn(shapes[0]) * 4).to(dtype)
    b = (torch.randn(shapes[1]) * 4).to(dtype) + (1 if dtype != torch.bfloat16 else 0.5)
    compiled = dynamo.optimize(lambda gm, ex: gm.forward)(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dynamo.FallbackWarning)
        try:
            expected = fn(a, b, scalar)
        except Exception as e:  # eager rejects it (bool - tensor): so must we, identically
            with pytest.raises(type(e), match=re.escape(str(e)[:40])):
                compiled(a, b, scalar)
            return
        assert_same(compiled(a, b, scalar), expected)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_devices_are_tracked_and_guarded(backend, no_fallback):
    def fn(x):
        y = x.cuda() * 2
        ones = torch.ones(3, device=y.device)
        return y + ones, y.device, y.is_cuda, x.to("cuda").get_device()

    opt = dynamo.optimize(backend)(fn)
    x = torch.randn(3)
    assert_same(opt(x), fn(x))
    assert_same(opt(x.cuda()), fn(x.cuda()))  # device guard: a second entry
    assert backend.calls == 2
    assert "x.device == torch.device('cpu')" in [str(g) for g in
                                                 dynamo.cache_entries(opt)[0].guards]
