"""What runs after a graph at a break, made cheaper: the rebuild as one generated function
([Note: the rebuild as one function]), which must compute what the interpreted trackers
compute, value for value and object for object, with the break's call made once and in order;
and a graph whose outputs only feed ``.item()`` run without grad ([Note: a graph whose
outputs only feed .item()]), with every gradient still eager's."""

from __future__ import annotations

import io

import dynamo
import pytest
import torch
from dynamo import codegen


def entries(fn):
    return [e for e in dynamo.cache_entries(fn)]


def compiled(fn):
    return dynamo.optimize(lambda gm, ex: gm.forward)(fn)


SINK = io.StringIO()


def prints(x):
    y = x * 2
    print("y", y.shape[0], file=SINK)
    return y + 1


def test_a_print_break_is_one_generated_call():
    """``print(..., file=...)`` is called directly by the generated function (it is not a
    Python function ``invoke`` would compile), with its keyword, and the frame continues."""
    SINK.seek(0), SINK.truncate()
    opt, x = compiled(prints), torch.randn(4)
    for _ in range(3):
        torch.testing.assert_close(opt(x), x * 2 + 1)
    assert SINK.getvalue() == "y 4\n" * 3
    (entry,) = [e for e in entries(prints) if e.break_point is not None]
    text = entry.rebuild.source_text
    assert entry.calls_in_rebuild and "invoke(" not in text and "file=" in text, text


def helper(t, out):
    out.append(t.sum().item())  # a Python function of the user's: compiled on its own
    return t * 3


def calls_helper(x):
    found = []
    y = helper(x + 1, found)  # the break: ``helper`` itself breaks at ``.item()``
    return y - 1, found


def test_a_user_function_goes_through_invoke():
    opt, x = compiled(calls_helper), torch.ones(3)
    y, found = opt(x)
    torch.testing.assert_close(y, (x + 1) * 3 - 1)
    assert found == [6.0]
    (root,) = [e for e in entries(calls_helper) if e.break_point is not None]
    assert root.calls_in_rebuild and "invoke(" in root.rebuild.source_text  # compiled on its own
    assert entries(helper), "the callee was not compiled on its own"


class Box:
    pass


def shares_a_list(x):
    xs = [x + 1, x + 2]
    ys = xs
    print("break", file=SINK)
    ys.append(x)  # after the break, both names must still be the one list
    return xs, ys


def test_one_list_however_many_slots_hold_it():
    opt, x = compiled(shares_a_list), torch.ones(2)
    xs, ys = opt(x)
    assert xs is ys and len(xs) == 3
    (entry,) = [e for e in entries(shares_a_list) if e.break_point is not None]
    assert entry.rebuild is not None and entry.rebuild.source_text.count("___v0 = [") == 1


def method_break(x):
    y = x.sin()
    if y.sum().item() > 0:
        return y + 1
    return y - 1


def test_a_tensor_method_is_called_directly_and_both_branches_resume():
    opt = compiled(method_break)
    for x in (torch.ones(3), -torch.ones(3), torch.ones(3)):
        torch.testing.assert_close(opt(x), method_break(x))
    (entry,) = [e for e in entries(method_break) if e.break_point is not None]
    text = entry.rebuild.source_text
    assert ".item\n" in text and "invoke(" not in text, text


def returns_structure(x):
    return (x + 1, [x * 2, 3], "tag")


def test_the_return_value_is_rebuilt_as_code():
    opt, x = compiled(returns_structure), torch.ones(2)
    out = opt(x)
    assert isinstance(out, tuple) and isinstance(out[1], list) and out[1][1] == 3
    assert out[2] == "tag"
    torch.testing.assert_close(out[0], x + 1)
    (entry,) = entries(returns_structure)
    assert entry.rebuild is not None


def keeps_a_dict(x):
    d = {"a": x + 1}
    print("break", file=SINK)
    return d["a"] * 2


def test_an_unknown_tracker_keeps_the_interpreted_path():
    """A dict built in the frame has no generated code: the entry has no rebuild function and
    the interpreted path gives the same answer."""
    opt, x = compiled(keeps_a_dict), torch.ones(2)
    for _ in range(2):
        torch.testing.assert_close(opt(x), (x + 1) * 2)
    (entry,) = [e for e in entries(keeps_a_dict) if e.break_point is not None]
    assert entry.rebuild is None


def test_values_are_read_before_the_call():
    """The interpreted path rebuilds every value before the break's call runs; so does the
    generated function (a read after the call could see what the call changed)."""
    def traced(x, box):
        y = x + 1
        print("break", file=SINK)
        return y

    opt, x = compiled(traced), torch.ones(2)
    opt(x, Box())
    (entry,) = [e for e in entries(traced) if e.break_point is not None]
    lines = entry.rebuild.source_text.splitlines()
    call = next(i for i, line in enumerate(lines) if "___result" in line)
    reads = [i for i, line in enumerate(lines) if line.strip().startswith("___s")]
    assert reads and max(reads) < call, lines


@pytest.mark.parametrize("fn", [prints, shares_a_list, method_break, returns_structure])
def test_generated_and_interpreted_agree(fn, monkeypatch):
    """With generated rebuilds turned off, every case above gives the same results."""
    x = torch.ones(3)
    want = compiled(fn)(x)
    dynamo.reset()
    monkeypatch.setattr(codegen, "rebuild_function", lambda *a, **k: None)
    import dynamo.convert_frame as cf
    monkeypatch.setattr(cf, "rebuild_function", lambda *a, **k: None)
    got = compiled(fn)(x)
    assert [e.rebuild for e in entries(fn)] == [None] * len(entries(fn))
    assert same(got, want)


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    return a == b


# -- [Note: a graph whose outputs only feed .item()] ------------------------------------------
def mean_then_item(x, w):
    h = torch.tanh(x @ w)
    print("step", file=SINK)  # the break that leaves the mean a graph of its own
    if h.mean().item() > -2:
        return (h * 2).sum()
    return h.sum()


def mean_kept(x, w):
    h = torch.tanh(x @ w)
    m = h.mean()
    if m.item() > -2:
        return (h * m).sum()  # the mean is live after the break: it needs its gradient
    return h.sum()


def grad_modes(fn, *args):
    """(grad mode at each graph's compile, grad mode at each graph's calls), in order."""
    compiled_in, called_in = [], []

    def backend(gm, example_inputs):
        compiled_in.append(torch.is_grad_enabled())
        index = len(compiled_in) - 1

        def run(*inputs):
            called_in.append((index, torch.is_grad_enabled()))
            return gm.forward(*inputs)
        return run

    out = dynamo.optimize(backend)(fn)(*args)
    return out, compiled_in, called_in


def test_a_graph_read_only_by_item_runs_without_grad():
    x, w = torch.randn(4, 4), torch.randn(4, 4, requires_grad=True)
    out, compiled_in, called_in = grad_modes(mean_then_item, x, w)
    assert compiled_in == [True, False, True], compiled_in  # the mean's graph is the second
    assert [mode for _, mode in called_in] == [True, False, True]
    assert torch.is_grad_enabled()  # restored after the graph
    out.backward()
    want_w = w.detach().clone().requires_grad_()
    mean_then_item(x, want_w).backward()
    torch.testing.assert_close(w.grad, want_w.grad)


def test_a_mean_that_stays_live_keeps_its_gradient():
    x, w = torch.randn(4, 4), torch.randn(4, 4, requires_grad=True)
    out, compiled_in, _ = grad_modes(mean_kept, x, w)
    assert all(compiled_in), compiled_in
    out.backward()
    want_w = w.detach().clone().requires_grad_()
    mean_kept(x, want_w).backward()
    torch.testing.assert_close(w.grad, want_w.grad)


def test_the_item_graph_through_the_inductor_backend():
    """Through aotautograd and inductor the mean's graph is served by the inference entry
    (no autograd.Function), and the training step around it matches eager."""
    import driver

    x, w = torch.randn(8, 8), torch.randn(8, 8, requires_grad=True)
    fn = driver.compile(mean_then_item)
    for _ in range(2):
        w.grad = None
        fn(x, w).backward()
    got = w.grad.clone()
    w.grad = None
    mean_then_item(x, w).backward()
    torch.testing.assert_close(got, w.grad)
    from dynamo import eval_frame

    graphs = [e.compiled_fn for entries_ in eval_frame._cache.values() for e in entries_
              if e.compiled_fn is not None]
    (run,) = [g for g in graphs if hasattr(g, "__wrapped__")]  # the mean's graph
    assert "wrapper" in run.__wrapped__.artifacts
    assert "backward/wrapper" not in run.__wrapped__.artifacts  # an inference graph
    trained = [g for g in graphs if not hasattr(g, "__wrapped__")]
    assert trained and all("backward/wrapper" in g.artifacts for g in trained)


def rows_then_tolist(x, w):
    h = torch.tanh(x @ w)
    print("step", file=SINK)
    picked = (h[:2] * 3).tolist()  # the break: .tolist() of the graph's only output
    return h.sum() * len(picked)


def test_tolist_reads_like_item():
    x, w = torch.randn(4, 4), torch.randn(4, 4, requires_grad=True)
    out, compiled_in, _ = grad_modes(rows_then_tolist, x, w)
    assert compiled_in == [True, False, True], compiled_in
    out.backward()
    want_w = w.detach().clone().requires_grad_()
    rows_then_tolist(x, want_w).backward()
    torch.testing.assert_close(w.grad, want_w.grad)
