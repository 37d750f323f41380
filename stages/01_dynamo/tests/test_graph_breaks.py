"""Graph breaks: the graph so far runs compiled, the offending instruction runs in Python,
and a resume function continues the frame (compiled in turn). Side effects stay in order."""

from __future__ import annotations

import io
import sys
import warnings

import dynamo
import numpy as np
import pytest
import torch
import torch.nn as nn


def one(n):
    return (torch.randn(n, n),)


def br_print(x):
    y = x * 2
    print("y has shape", y.shape)
    return y + 1


def br_item_branch(x):
    y = x.sin()
    if y.sum().item() > 0:
        return y + 1
    return y - 1


def br_tensor_condition(x):
    if x.mean() > 0:
        return x * 2
    return x / 2


def br_loop_item(x):
    for i in range(4):
        x = x * 0.5 + i
        if x.sum().item() > 3:
            x = x - 1
    return x


def br_loop_list(x):
    total = x
    for w in [1.0, -2.0, 3.0]:
        total = total * w
        if total.max() > 1:
            total = total.clamp(max=1)
    return total


def br_tolist(x):
    values = x.sum(1).tolist()
    return x * len(values) + values[0]


def br_numpy(x):
    arr = x.numpy()
    return torch.from_numpy(np.abs(arr)) * 2


def br_unknown_c_function(x):
    y = x + 1
    z = torch.from_numpy(np.ascontiguousarray(y.numpy()))
    return z * 3


def br_side_effects_before(x, log):
    log.append("before")
    y = x * 2
    print("in the middle")
    log.append("after")
    return y + 1


STATE = {"steps": 0}


def br_global_mutation(x):
    STATE["steps"] = STATE["steps"] + 1
    print("step")
    return x * STATE["steps"]


def helper_with_print(t):
    print("helper")
    return t * 3


def br_in_inlined_call(x):
    y = x + 1
    z = helper_with_print(y)
    return z - 1


def br_nested_breaks(x):
    x = x + 1
    print("one")
    x = x * 2
    print("two")
    return x - 3


def br_locals_survive(x):
    a, b, c = x + 1, x * 2, 3
    print("break")
    return a + b + c


def br_returns_item(x):
    return x.sum().item() + 1


def br_comprehension_with_item(xs):
    return [x * (1 if x.sum().item() > 0 else -1) for x in xs]


CASES = {
    "print": (br_print, one, 2),
    "item_branch": (br_item_branch, one, 2),
    "tensor_condition": (br_tensor_condition, one, 2),
    "loop_item": (br_loop_item, one, None),
    "loop_list": (br_loop_list, one, None),
    "tolist": (br_tolist, one, None),
    "numpy": (br_numpy, one, None),
    "unknown_c_function": (br_unknown_c_function, one, None),
    "side_effects_before": (br_side_effects_before, lambda n: (torch.randn(n), []), 2),
    "in_inlined_call": (br_in_inlined_call, one, 3),
    "nested_breaks": (br_nested_breaks, one, 3),
    "locals_survive": (br_locals_survive, one, 2),
    "returns_item": (br_returns_item, one, 1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_graph_break_corpus(name, corpus, capsys):
    fn, make_args, graphs = CASES[name]
    corpus(fn, make_args, graphs=graphs)


def test_global_dict_mutation_replayed(corpus, capsys):
    STATE["steps"] = 0
    opt = dynamo.optimize(lambda gm, ex: gm.forward)(br_global_mutation)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x), x * 1)
    torch.testing.assert_close(opt(x), x * 2)
    assert STATE["steps"] == 2


def test_explain_reports_breaks(capsys):
    report = dynamo.explain(br_item_branch)(torch.randn(3))
    assert report.graph_count == 2 and report.graph_break_count == 1
    assert "Tensor.item()" in report.breaks[0].reason
    assert "test_graph_breaks.py" in report.breaks[0].location
    assert "if y.sum().item() > 0:" in report.breaks[0].location
    text = str(report)
    assert "graphs: 2, graph breaks: 1" in text and "Break reasons:" in text


def test_item_branch_guards_only_the_outcome(backend):
    opt = dynamo.optimize(backend)(br_item_branch)
    for _ in range(6):  # random data: the branch flips, the value changes every call
        x = torch.rand(8)  # sin(x) > 0: the same branch, a new value each call
        torch.testing.assert_close(opt(x), br_item_branch(x))
    assert backend.calls == 2  # no recompile for new values of the .item() result


def test_fullgraph_raises_with_source_line(backend):
    with pytest.raises(dynamo.Unsupported) as info:
        dynamo.optimize(backend, fullgraph=True)(br_item_branch)(torch.randn(3))
    assert "Tensor.item()" in str(info.value)
    assert "if y.sum().item() > 0:" in str(info.value)


class PrintItem(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        print("hidden norm", h.norm().item() >= 0)
        if h.sum().item() > 0:
            return torch.relu(h)
        return -h


def test_module_with_print_and_item_branch(backend, capsys):
    model = PrintItem()
    opt = dynamo.optimize(backend)(model.forward)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dynamo.FallbackWarning)
        x = torch.randn(2, 4)
        torch.testing.assert_close(opt(x), model(x))
    report = dynamo.explain(model.forward)(x)
    assert report.graph_break_count == 3  # .item(), print, .item()
    assert report.graph_count == 3


def test_recompile_limit_warns_with_guard(backend, monkeypatch):
    monkeypatch.setattr(dynamo.config, "recompile_limit", 3)

    def scale(x, k):
        return x * k

    opt = dynamo.optimize(backend)(scale)
    x = torch.randn(2)
    with pytest.warns(dynamo.FallbackWarning, match="recompile limit") as record:
        for k in range(6):
            torch.testing.assert_close(opt(x, k), x * k)
    assert "guard failed: k == 2" in str(record[0].message)
    assert backend.calls == 3


def test_break_inside_a_comprehension(corpus):
    """On 3.11 a comprehension is a nested function: the break resumes inside it. On 3.12
    it is inlined (PEP 709) and its block has an exception handler, so the frame runs
    eagerly with one warning saying why: right, never wrong."""
    def make_args(n):
        return ([torch.randn(n) for _ in range(3)],)

    if sys.version_info < (3, 12):
        corpus(br_comprehension_with_item, make_args, graphs=None)
        # compiled, not run eagerly: the comprehension (its iterator ``.0`` is an argument
        # named ``implicit0``) and its resume functions (its list arrives as ``___stack0``)
        names = [code.co_name for code, entries in dynamo.eval_frame._cache.items() if entries]
        assert "<listcomp>" in names, names
        assert any(n.startswith("__resume_at_") and n.endswith("<listcomp>") for n in names)
        return
    with pytest.warns(dynamo.FallbackWarning, match="comprehension"):
        corpus(br_comprehension_with_item, make_args, graphs=None, allow_fallback=True)


def test_the_continuation_is_planned_once_per_break():
    """The live-locals dataflow over the bytecode and the resume function are worked out the
    first time a break is reached; later calls reuse the entry's plan ([Note: the second
    call is cheap]; the dataflow alone was half a small training step's host time)."""
    from dynamo.resume_execution import live_locals

    opt = dynamo.optimize(lambda gm, ex: gm.forward)(br_item_branch)
    x = torch.ones(3)
    opt(x)
    before = live_locals.cache_info()
    (entry,) = [e for e in dynamo.cache_entries(br_item_branch) if e.break_point is not None]
    plans = dict(entry.continuations)
    for _ in range(3):
        torch.testing.assert_close(opt(x), br_item_branch(x))
    after = live_locals.cache_info()
    assert (after.misses, after.hits) == (before.misses, before.hits)
    assert entry.continuations == plans and len(plans) == 1


def make_scaled(k):
    def scaled(x):
        y = x + k
        print("break", file=io.StringIO())
        return y * k  # after the break: ``k`` is read from this closure's cell
    return scaled


def test_closures_of_one_code_object_resume_with_their_own_cells(backend):
    """Two closures share a code object, and so dynamo's cache; each must continue after the
    break with its own cells. (Resume functions were once cached per code object: the
    second closure resumed with the first one's ``k`` and returned (x + 3) * 2.)"""
    x = torch.ones(3)
    for k in (2, 3, 5):
        fn = make_scaled(k)
        torch.testing.assert_close(dynamo.optimize(backend)(fn)(x), (x + k) * k)


class Shift:
    def __init__(self, k):
        self.k = k

    def apply(self, x):
        print("shift", file=io.StringIO())  # breaks: the callee is compiled on its own
        return x + self.k


def shifted(x, shift):
    return shift.apply(x * 2) + 1


def test_a_callee_that_breaks_gets_one_wrapper_and_keeps_no_instance(backend, monkeypatch):
    """A call that broke the graph compiles the callee on its own; its optimized wrapper is
    made once per function, not at every call (``inspect.signature`` and all), and ``self``
    travels as an argument, so the wrapper keeps no instance alive (a new ``Shift`` every
    call would pile up otherwise)."""
    import gc
    import weakref

    from dynamo import eval_frame

    made = []
    wrap = eval_frame._wrap
    monkeypatch.setattr(eval_frame, "_wrap", lambda fn, *a: made.append(fn) or wrap(fn, *a))
    opt = dynamo.optimize(backend)(shifted)
    x = torch.randn(4)
    torch.testing.assert_close(opt(x, Shift(3)), x * 2 + 4)
    first = len(made)
    shift = Shift(3)
    alive = weakref.ref(shift)
    for _ in range(3):
        torch.testing.assert_close(opt(x, shift), x * 2 + 4)
    assert len(made) == first
    del shift
    gc.collect()
    assert alive() is None


class WeakWeights(nn.Module):
    """Reads its weight through a weak reference, as ``nn.GRU`` does: calling the reference
    breaks the graph inside this module's forward."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))
        self.names = ["w"]
        self.refs = [__import__("weakref").ref(self.w)]

    def forward(self, x):
        scale = len(self.names) * 2.0
        return x * self.refs[0]() * scale


def test_a_break_inside_a_callee_leaves_none_of_its_guards(backend):
    """[Note: a break inside a callee is traced again]: the caller's entry neither guards
    nor takes as input what the abandoned inlining of the callee read."""
    inner = WeakWeights()

    def outer(x):
        return inner(x.sin()) + 1

    opt = dynamo.optimize(backend)(outer)
    x = torch.randn(4)
    torch.testing.assert_close(opt(x), outer(x))
    (entry,) = dynamo.cache_entries(outer)
    assert entry.break_point is not None
    assert not [g for g in entry.guards if "names" in g.expr or "refs" in g.expr or
                ".w" in g.expr], [g.expr for g in entry.guards]
    assert [n for n in entry.graph.graph.nodes if n.op == "placeholder"] == [
        next(iter(entry.graph.graph.nodes))]  # x alone


class LayerDrop(torch.nn.Module):
    """BART's layer drop (transformers 5.17): in training, each layer is skipped when
    ``torch.rand([]) < self.layerdrop``, which configs set to 0.0."""

    def __init__(self, layerdrop, n=12):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(n)])
        self.layerdrop = layerdrop

    def forward(self, x):
        for layer in self.layers:
            to_drop = False
            if self.training:
                dropout_probability = torch.rand([])
                if dropout_probability < self.layerdrop:  # skip the layer
                    to_drop = True
            if not to_drop:
                x = layer(x).relu()
        return x


def test_comparing_rand_outside_its_range_is_known(backend, no_fallback):
    """torch.rand's values lie in [0, 1): ``rand < 0.0`` is False whatever they are, so
    the branch on it is decided at trace time ([Note: value bounds])."""
    m = LayerDrop(0.0)
    opt = dynamo.optimize(backend, fullgraph=True)(m.forward)
    x = torch.randn(2, 4)
    torch.testing.assert_close(opt(x), m(x))
    opt(x)
    assert len(backend.graphs) == 1
    code = backend.graphs[0].code
    assert "torch.rand(" in code  # still drawn, as in eager


@pytest.mark.parametrize("threshold", [0.5, float("nan")])
def test_comparing_rand_inside_its_range_still_breaks(backend, threshold):
    def f(x):
        if torch.rand([]) < threshold:
            return x + 1
        return x - 1

    x = torch.zeros(3)
    opt = dynamo.optimize(backend)(f)
    torch.manual_seed(0)
    got = opt(x)
    torch.manual_seed(0)
    torch.testing.assert_close(got, f(x))
    assert len(backend.graphs) >= 2  # the branch was taken in Python, after the graph


def test_a_size_read_from_a_tensor_breaks_the_graph_there(backend):
    """Longformer: ``torch.div(n, w, rounding_mode="trunc")`` is a 0-d tensor, used as a size
    of ``view``. The graph breaks at the ``view`` (which runs eagerly on the real value), and
    the rest still compiles; it had failed in aotautograd, taking the whole frame with it."""
    def fn(x):
        chunks = torch.div(x.size(1), 4, rounding_mode="trunc") - 1
        return x.view(x.size(0), chunks + 1, 4).sin().cos()

    x = torch.randn(2, 16)
    opt = dynamo.optimize(backend)(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dynamo.FallbackWarning)
        torch.testing.assert_close(opt(x), fn(x))
    report = dynamo.explain(fn)(x)
    assert any("a size that is a tensor's value" in str(b) for b in report.breaks)


def _relative_slice(q, emb, span):
    rel = emb[32 - span: 32 + span, :].unsqueeze(0)  # DeBERTa-v1's disentangled attention
    return torch.matmul(q, rel.transpose(-1, -2))


def test_slice_bounds_that_are_tensors_break_the_graph_there(backend, no_fallback):
    """[Note: slice bounds that are tensors]: a graph break at the slice, not an eager
    frame; the resumed frame is guarded on the slice's numbers, so another span recompiles;
    gradients flow through both graphs. The span is an input, whose value the trace does not
    know (DeBERTa's own ``torch.tensor(c)`` is known: [Note: constant tensors])."""
    q = torch.randn(2, 16, 8, requires_grad=True)
    emb = torch.randn(64, 8, requires_grad=True)
    span = torch.tensor(16)
    opt = dynamo.optimize(backend)(_relative_slice)
    got, want = opt(q, emb, span), _relative_slice(q, emb, span)
    torch.testing.assert_close(got, want)
    assert backend.calls == 2
    (grad,) = torch.autograd.grad(got.sum(), emb)
    (grad_want,) = torch.autograd.grad(want.sum(), emb)
    torch.testing.assert_close(grad, grad_want)
    short, span = torch.randn(2, 8, 8), torch.tensor(8)
    torch.testing.assert_close(opt(short, emb, span), _relative_slice(short, emb, span))
