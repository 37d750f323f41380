"""Corpus: plain Python around tensors (control flow, containers, builtins, functions).

Every case runs through corpus.run_case: compiled vs eager, twice, then with new shapes;
one graph, no fallback.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import math
import operator

import pytest
import torch
import torch.nn.functional as F


def one(n):
    return (torch.randn(n, n),)


def two(n):
    return (torch.randn(n, n), torch.randn(n, n))


def listed(n):
    return ([torch.randn(n) for _ in range(3)],)


# -- control flow ------------------------------------------------------------------------
def cf_for_range(x):
    for i in range(3):
        x = x * 2 + i
    return x


def cf_for_range_step(x):
    for i in range(10, 0, -3):
        x = x - i
    return x


def cf_while(x):
    i = 0
    while i < 4:
        x = x.sin()
        i += 1
    return x


def cf_break_continue(x):
    for i in range(10):
        if i % 2:
            continue
        if i > 5:
            break
        x = x + i
    return x


def cf_for_else(x):
    for i in range(3):
        x = x + i
    else:
        x = x * 10
    return x


def cf_nested_loops(x):
    for i in range(2):
        for j in range(3):
            x = x + i * j
    return x


def cf_shape_branch(x):
    if x.shape[0] > 4:
        return x.sum(0)
    return x.mean(0)


def cf_ndim_branch(x):
    return x.flatten() if x.dim() == 2 else x


def cf_ternary_chain(x):
    n = x.size(0)
    k = 1 if n == 4 else 2 if n == 6 else 3
    return x * k


def cf_and_or(x):
    flag = x.shape[0] > 2 and x.shape[1] < 100 or False
    return x + 1 if flag else x - 1


def cf_not(x):
    if not x.is_cuda:
        return x.cos()
    return x


def cf_none_check(x, y=None):
    if y is None:
        y = torch.ones_like(x)
    return x * y


def cf_is_not_none(x):
    scale = 2.0
    if scale is not None:
        x = x * scale
    return x


def cf_loop_over_tensor(x):
    total = torch.zeros(x.shape[1])
    for row in x:
        total = total + row
    return total


def cf_while_shape(x):
    while x.shape[0] > 1:
        x = x[: x.shape[0] // 2] + x[x.shape[0] // 2 : 2 * (x.shape[0] // 2)]
    return x


def cf_assert(x):
    assert x.dim() == 2, "expects a matrix"
    return x.t()


def cf_enumerate(xs):
    out = 0
    for i, x in enumerate(xs):
        out = out + x * i
    return out


def cf_zip(xs):
    ws = [1.0, 2.0, 3.0]
    return [x * w for x, w in zip(xs, ws)]


def cf_reversed(xs):
    return [x + i for i, x in enumerate(reversed(xs))]


def cf_dict_loop(x):
    d = {"a": 1, "b": 2}
    for k, v in d.items():
        x = x + v if k == "a" else x * v
    return x


def cf_dict_keys(x):
    d = {"p": x, "q": x * 2}
    return [d[k].sum() for k in d.keys()]


def cf_dict_values(x):
    d = {"p": x, "q": x * 2}
    return sum(d.values())


# -- containers ----------------------------------------------------------------------------
def ct_list_append(x):
    out = []
    for i in range(3):
        out.append(x + i)
    return torch.stack(out)


def ct_list_mutations(x):
    xs = [x, x + 1, x + 2]
    xs.insert(0, x - 1)
    last = xs.pop()
    xs.extend([last * 2])
    del xs[1]
    xs.reverse()
    return torch.cat(xs)


def ct_list_setitem(x):
    xs = [x, x, x]
    xs[1] = x * 5
    xs[-1] = xs[1] + 1
    return xs


def ct_list_slice(xs):
    return xs[1:], xs[::-1], xs[:1]


def ct_list_concat(xs):
    ys = xs + [xs[0] * 2]
    ys += [ys[-1]]
    return ys


def ct_list_mul(x):
    return [x] * 3


def ct_alias(x):
    a = []
    b = a
    b.append(x)
    return len(a), a[0] + 1


def ct_tuple_ops(x):
    t = (x, x * 2)
    u = t + (x * 3,)
    return u[1:], len(u), u.index(u[0]) if False else 0


def ct_unpack_star(xs):
    first, *rest = xs
    return first, torch.stack(rest)


def ct_unpack_middle(xs):
    a, *mid, b = xs
    return a + b, len(mid)


def ct_swap(x, y):
    x, y = y, x
    return x - y


def ct_dict_build(x):
    d = {"x": x, "y": x * 2}
    d["z"] = d["x"] + d["y"]
    del d["x"]
    return d


def ct_dict_methods(x):
    d = dict(a=x, b=x + 1)
    d.update({"c": x * 3})
    got = d.get("missing", x * 0)
    popped = d.pop("a")
    return got + popped + d["c"], "b" in d, len(d), sorted(d)


def ct_dict_merge(x):
    base = {"a": 1, "b": 2}
    more = {**base, "c": 3}
    return x * sum(more.values())


def ct_dict_comprehension(x):
    d = {f"k{i}": x * i for i in range(3)}
    return d


def ct_set(x):
    s = {1, 2, 3}
    s.add(4)
    return x * len(s) if 4 in s else x


def ct_list_comprehension(xs):
    return [x * 2 for x in xs if x.shape[0] > 0]


def ct_nested_comprehension(x):
    return [[x * i * j for j in range(2)] for i in range(2)]


def ct_generator_expression_sum(xs):
    return sum(x.sum() for x in xs)


Point = collections.namedtuple("Point", ["x", "y"])


def ct_namedtuple_global(x):
    p = Point(x, y=x + 1)
    q = p._replace(y=p.y * 2)
    return q, q.x + q[1]


def ct_struct_sequence(x):  # [Note: struct sequences]: fields, items, and the type returned
    s, m = torch.sort(x, dim=-1, descending=True), x.max(dim=0)
    top = x.topk(2)
    return s.values[:, :2] + top.values, s.indices, m.values * m[1], m


def ct_itertools(x):  # torch.nn's _pair(0) is tuple(repeat(0, 2))
    pad = tuple(itertools.repeat(1, 2))
    ys = list(itertools.chain([x], (x * 2, x * 3)))
    return sum(y * a * b for y, (a, b) in zip(ys, itertools.product([1, 2], [pad[0], 3])))


def ct_slice_tensor(x):
    return x[1:, :2], x[..., 0], x[None, 0], x[::2]


def ct_tensor_setitem(x):
    x = x.clone()
    x[0] = 1.0
    x[:, 1] = x[:, 2] * 2
    return x


def ct_fstring_unused(x):
    name = f"layer{x.shape[0]}"
    return x * len(name)


def ct_in_tuple(x):
    mode = "gelu"
    if mode in ("relu", "gelu"):
        return F.gelu(x)
    return x


def ct_dict_arg(d):
    return d["a"] * d["b"]


def ct_list_arg_mutation(xs):
    xs.append(xs[0] * 2)
    return len(xs)


def ct_dict_arg_mutation(d):
    d["sum"] = d["a"] + d["b"]
    return d["sum"].mean()


# -- builtins -------------------------------------------------------------------------------
def bi_len(xs):
    return xs[0] * len(xs)


def bi_isinstance(x):
    if isinstance(x, torch.Tensor) and not isinstance(x, (list, tuple)):
        return x + 1
    return x


def bi_getattr(x):
    fn = getattr(torch, "tanh")  # noqa: B009
    return fn(x) + getattr(x, "T")  # noqa: B009


def bi_hasattr(x):
    return x * 2 if hasattr(x, "shape") and not hasattr(x, "nope") else x


def bi_min_max(x):
    n = min(x.shape[0], 3)
    m = max([1, 5, 2])
    return x[:n] * m


def bi_abs(x):
    return abs(x) + abs(-3)


def bi_sum(xs):
    return sum(xs)


def bi_sum_start(xs):
    return sum(xs, torch.ones(xs[0].shape))


def bi_any_all(x):
    flags = [x.shape[0] > 1, x.dim() == 2]
    return x + 1 if all(flags) and any(flags) else x


def bi_sorted(x):
    dims = sorted([1, 0])
    return x.permute(*dims)


def bi_map(xs):
    return list(map(torch.relu, xs))


def bi_map_lambda(xs):
    return list(map(lambda t: t * 3, xs))


def bi_filter(x):
    keep = list(filter(lambda i: i % 2 == 0, range(5)))
    return x * len(keep)


def bi_range_len(x):
    return x * len(range(2, 9, 3))


def bi_int_float(x):
    n = int(x.shape[0] / 2)
    s = float(n) * 1.5
    return x * s + n


def bi_round(x):
    return x * round(2.6) + round(x.shape[0] / 3)


def bi_tuple_list(x):
    shape = list(x.shape)
    shape[0] = -1
    return x.reshape(tuple(shape))


def bi_type(x):
    return x + 1 if type(x) is torch.Tensor else x


def bi_math(x):
    return x * math.sqrt(x.shape[-1]) + math.pi + math.log(2.0) + math.exp(1)


def bi_operator(x):
    return operator.add(x, 1), operator.mul(x, x), operator.getitem(x, 0)


def bi_divmod_pow(x):
    q, r = divmod(x.shape[0], 3)
    return x * q + r + pow(2, 3)


def bi_str_ops(x):
    name = "Linear"
    return x * 2 if name.lower().startswith("lin") else x


def bi_callable(x):
    return x + 1 if callable(torch.relu) else x


def bi_iter_next(xs):
    it = iter(xs)
    a = next(it)
    b = next(it)
    return a + b


def bi_enumerate_start(xs):
    return [x * i for i, x in enumerate(xs, start=1)]


def bi_zip_dict(xs):
    return dict(zip(["a", "b", "c"], xs))


def bi_tensor_len(x):
    return x * len(x)


def bi_shape_arith(x):
    b, n = x.shape
    return x.reshape(b * n // 2, 2).sum(-1), x.numel() // 2, x.size(-1) ** 2


# -- functions, closures, lambdas, partial --------------------------------------------------
def helper(x, scale=2.0, *, shift=0.0):
    return x * scale + shift


def fn_call_helper(x):
    return helper(x) + helper(x, 3.0, shift=1.0)


def fn_kwargs_call(x):
    kw = {"scale": 0.5, "shift": 2.0}
    return helper(x, **kw)


def fn_star_args(x):
    args = (x, 4.0)
    return helper(*args)


def varargs(*xs, **named):
    return sum(xs) + sum(named.values())


def fn_varargs(x):
    return varargs(x, x * 2, a=x, b=x * 3)


def fn_lambda(x):
    sq = lambda t: t * t  # noqa: E731
    return sq(x) + sq(x + 1)


def fn_closure(x):
    k = 3

    def inner(t):
        return t * k

    return inner(x)


def fn_closure_late_binding(x):
    k = 1

    def inner(t):
        return t + k

    k = 5
    return inner(x)


def fn_nonlocal(x):
    count = 0

    def bump(t):
        nonlocal count
        count += 1
        return t + count

    y = bump(x)
    y = bump(y)
    return y * count


def fn_nested_def_default(x):
    def inner(t, p=2):
        return t ** p

    return inner(x) + inner(x, p=3)


def fn_recursive_helper(x, n=3):
    return x if n == 0 else fn_recursive_helper(x + 1, n - 1)


def fn_partial(x):
    scaled = functools.partial(helper, scale=4.0)
    return scaled(x, shift=1.0)


def fn_partial_torch(x):
    soft = functools.partial(F.softmax, dim=-1)
    return soft(x)


SCALE = 3.0


def fn_global_scale(x):
    return x * SCALE


def make_adder(k):
    def add(x):
        return x + k

    return add


ADD_TWO = make_adder(2.0)


def fn_real_closure(x):
    return ADD_TWO(x)


def fn_returns_function_result_tuple(x):
    def split(t):
        return t[:1], t[1:]

    a, b = split(x)
    return b.sum(0) - a.sum(0)


def fn_higher_order(x):
    def apply(f, t):
        return f(t)

    return apply(torch.sigmoid, x) + apply(lambda t: t * 2, x)


def fn_sorted_key_free(xs):
    return sorted([3, 1, 2])[0] * xs[0]


def fn_staticmethod_call(x):
    return Util.double(x) + Util().triple(x)


class Util:
    @staticmethod
    def double(t):
        return t * 2

    def triple(self, t):
        return t * 3


@dataclasses.dataclass
class Config:
    hidden: int = 4
    scale: float = 0.5
    act: str = "relu"


CONFIG = Config()


def fn_dataclass_global(x):
    y = x * CONFIG.scale
    return F.relu(y) if CONFIG.act == "relu" else y


def fn_dataclass_create(x):
    cfg = Config(hidden=x.shape[0], scale=2.0)
    return x * cfg.scale + cfg.hidden


class Counter:
    def __init__(self):
        self.calls = 0


COUNTER = Counter()


def fn_object_attr_write(x):
    COUNTER.calls = 7
    return x + COUNTER.calls


def fn_torch_no_grad(x):
    with torch.no_grad():
        y = x * 2
    return y + x


def fn_enable_grad(x):
    with torch.no_grad():
        with torch.enable_grad():
            y = x * 2
    return y


def fn_set_grad_enabled(x):
    with torch.set_grad_enabled(False):
        y = x.exp()
    return y


def fn_global_write(x):
    global LAST_SHAPE
    LAST_SHAPE = tuple(x.shape)
    return x + 1


LAST_SHAPE = None

CASES = {
    name: value for name, value in dict(globals()).items()
    if name.startswith(("cf_", "ct_", "bi_", "fn_")) and callable(value)
}
LISTED = {"cf_enumerate", "cf_zip", "cf_reversed", "ct_list_slice", "ct_list_concat",
          "ct_unpack_star", "ct_unpack_middle", "ct_list_comprehension",
          "ct_generator_expression_sum", "bi_len", "bi_sum", "bi_sum_start", "bi_map",
          "bi_map_lambda", "bi_iter_next", "bi_enumerate_start", "bi_zip_dict",
          "fn_sorted_key_free", "ct_list_arg_mutation"}
TWO = {"ct_swap"}
NO_OPS = {"bi_zip_dict", "ct_list_mul", "ct_list_slice"}  # only rearrange inputs: no graph
DICT = {"ct_dict_arg", "ct_dict_arg_mutation"}


def args_for(name):
    if name in LISTED:
        return listed
    if name in TWO:
        return two
    if name in DICT:
        return lambda n: ({"a": torch.randn(n), "b": torch.randn(n)},)
    return one


@pytest.mark.parametrize("name", sorted(CASES))
def test_python_corpus(name, backend, corpus):
    fn = CASES[name]
    corpus(fn, args_for(name), graphs=0 if name in NO_OPS else 1)
    assert backend.calls <= 2, f"{backend.calls} graphs for {name}"  # + one for new shapes


def test_requires_grad_inputs_keep_autograd(backend):
    x = torch.randn(3, requires_grad=True)
    out = __import__("dynamo").optimize(backend)(fn_torch_no_grad)(x)
    out.sum().backward()
    assert torch.equal(x.grad, torch.ones(3))


def test_struct_sequence_keeps_its_type(backend):
    x = torch.randn(4, 4)
    out = __import__("dynamo").optimize(backend)(ct_struct_sequence)(x)
    assert type(out[-1]) is torch.return_types.max
    assert torch.equal(out[-1].indices, x.max(dim=0).indices)


def test_global_write_is_replayed(corpus):
    corpus(fn_global_write, one, graphs=1)
    assert LAST_SHAPE == (6, 6)
