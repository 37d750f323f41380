"""The runtime wrapper (aotautograd/runtime.py and ``aot_module_simplified``'s ``forward``):
what it must still do at each call after [Note: per-call cost] moved work to compile time:
read the parameters as they are now, assemble outputs in any mix of kinds, and never walk
``named_parameters()`` per call."""

from __future__ import annotations

import pytest
import torch
from aot_testing import compile_module
from torch import nn
from workload_models import GPT


class Linear2(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(3, 4)
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, x):
        return (self.inner(x) * self.scale,)


@pytest.mark.parametrize("grad", [False, True])
def test_replaced_parameters_and_buffers_are_read_at_the_next_call(grad):
    model, x = Linear2(), torch.randn(2, 3)
    with torch.set_grad_enabled(grad):
        compiled = compile_module(model, [x])
        model.inner.weight = nn.Parameter(torch.randn(4, 3))  # a new tensor, same name
        model.scale = torch.tensor(-1.0)  # a buffer replaced by assignment
        torch.testing.assert_close(compiled(x)[0], model(x)[0])
        model.inner = nn.Linear(3, 4)  # a new submodule: its parameters are read too
        torch.testing.assert_close(compiled(x)[0], model(x)[0])


def test_tied_weight_is_one_primal():
    model = GPT()
    idx, tgt = torch.randint(0, 64, (2, 16)), torch.randint(0, 64, (2, 16))
    with torch.no_grad():
        compiled = compile_module(model, [idx, tgt])
        distinct = {id(t) for t in [*model.parameters(), *model.buffers()]}
        assert compiled.program.num_primals == 2 + len(distinct)
        torch.testing.assert_close(compiled(idx, tgt)[0], model(idx, tgt))


def test_calls_do_not_walk_named_parameters(monkeypatch):
    """The per-call cost this file's Note is about: after compiling, a call looks the
    parameters up by path instead of walking the module tree."""
    model = GPT()
    idx, tgt = torch.randint(0, 64, (2, 16)), torch.randint(0, 64, (2, 16))
    compiled = compile_module(model, [idx, tgt])  # training: parameters require grad
    with torch.no_grad():
        compiled(idx, tgt)  # compiles the inference entry (tracing does walk the module)
    walks = []
    for method in ("named_parameters", "named_buffers", "named_modules"):
        original = getattr(nn.Module, method)
        monkeypatch.setattr(nn.Module, method, lambda self, *a, _o=original, _m=method, **k:
                            walks.append(_m) or _o(self, *a, **k))
    compiled(idx, tgt)[0].backward()
    with torch.no_grad():
        compiled(idx, tgt)
    assert walks == []


def test_outputs_of_every_kind_in_any_order():
    """Mutated inputs, graph outputs, the input itself, views of it, constants: the
    epilogue puts each where eager returns it (the general path of ``make_epilogue``)."""

    def fn(x, y):
        y.add_(1)  # written back to the caller's y
        return x.t(), 3, x * 2, x, x[1:], y * y

    x, y = torch.randn(4, 5), torch.randn(3)
    x_eager, y_eager = x.clone(), y.clone()
    expected = fn(x_eager, y_eager)
    compiled = compile_module(fn, [x, y.clone()])
    out = compiled(x, y)
    assert torch.equal(y, y_eager)
    assert len(out) == len(expected)
    for got, want in zip(out, expected):
        if isinstance(want, torch.Tensor):
            torch.testing.assert_close(got, want)
            assert got.stride() == want.stride()
        else:
            assert got == want
    assert out[3] is x
    for view in (out[0], out[4]):  # x.t() and x[1:] share x's storage, as in eager
        assert view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


def test_mutated_input_and_graph_outputs_with_autograd():
    """The training runtime's epilogue: a written buffer and outputs with gradients."""

    def fn(x, running):
        running.mul_(0.5)
        return (x * x).sum(), x.t()

    x, running = torch.randn(3, 3, requires_grad=True), torch.ones(3)
    compiled = compile_module(fn, [x, running.clone()])
    loss, view = compiled(x, running)
    assert torch.equal(running, torch.full((3,), 0.5))
    assert view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    loss.backward()
    torch.testing.assert_close(x.grad, 2 * x.detach())


def test_no_zeros_are_made_for_outputs_without_a_gradient():
    """[Note: no zeros for gradients nobody sent]: BatchNorm's new running statistics are
    outputs of the forward graph that no gradient reaches; autograd must not fill zeros for
    them at every backward. An output the loss does not use still gets its zeros (the
    backward graph reads them), and the gradients match eager's."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(6)

        def forward(self, x):
            y = self.bn(x)
            return y.sum(), y * 2  # the second output: unused by the loss below

    torch.manual_seed(0)
    net, ref = Net(), Net()
    x = torch.randn(8, 6, requires_grad=True)
    compiled = compile_module(net, [x])
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        loss, _ = compiled(x)
        loss.backward()
    zeros = [e for e in prof.events() if e.name == "aten::zeros"]
    assert len(zeros) == 1  # the unused output's (4 with the running statistics' three)
    x_ref = x.detach().clone().requires_grad_()
    ref(x_ref)[0].backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(net.bn.weight.grad, ref.bn.weight.grad)
    torch.testing.assert_close(net.bn.running_mean, ref.bn.running_mean)


@pytest.mark.parametrize("grad", [False, True])
def test_copy_backs_of_mixed_dtypes_are_grouped(grad):
    """[Note: one copy for all running statistics]: two BatchNorms write six buffers of
    two dtypes (float32 statistics, int64 batch counts) and a plain function writes a
    transposed input; every buffer gets eager's value, with one ``_foreach_copy_`` per dtype
    (two calls, no per-buffer ``copy_``), at the first call and the ones after."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.BatchNorm1d(6), nn.BatchNorm1d(6, momentum=0.3)

        def forward(self, x):
            return (self.b(self.a(x)).square().sum(),)

    torch.manual_seed(0)
    net, ref = Net(), Net()
    x = torch.randn(8, 6, requires_grad=grad)
    compiled = compile_module(net, [x])
    for step in range(3):
        x = torch.randn(8, 6, requires_grad=grad)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            compiled(x)
        ref(x.detach())
        top = [e.name for e in prof.events() if e.cpu_parent is None
               or e.cpu_parent.name == "CompiledFunction"]  # the runtime's own calls
        assert top.count("aten::_foreach_copy_") == 2 and "aten::copy_" not in top, top
        for (name, got), want in zip(net.named_buffers(), ref.buffers()):
            torch.testing.assert_close(got, want, msg=f"step {step}: {name}")

    def fn(x, out):
        out.add_(x)
        return (x.sum(),)

    base = torch.zeros(6, 3)
    x = torch.arange(18.0).reshape(3, 6)
    compiled = compile_module(fn, [x, base.clone().t()])
    compiled(x, base.t())  # a strided input written in place: copied back through its strides
    torch.testing.assert_close(base, x.t())


def test_mutated_input_used_by_backward():
    """[Note: a written input the backward reads]: the backward reads the input's new value
    (saved as a clone), not the input's memory after the copy-back."""
    def fn(x, running):
        running.mul_(0.5)
        return (x * running).sum()

    x, running = torch.randn(3, 3, requires_grad=True), torch.ones(3)
    compiled = compile_module(fn, [x, running.clone()])
    compiled(x, running)[0].backward()
    torch.testing.assert_close(x.grad, torch.full((3, 3), 0.5))


def test_an_input_aliasing_a_mutated_input_sees_the_write():
    """[Note: a written input that another input sees]: the call that passes a view of the
    written argument runs eagerly (with a warning) and returns eager's values; a call whose
    arguments do not share memory runs compiled."""

    def fn(a, b):
        a.mul_(0.5).add_(1)
        return (b * 2,)

    example = torch.arange(16.0)
    compiled = compile_module(fn, [example, example.view(4, 4)])
    base, ref = torch.arange(16.0), torch.arange(16.0)
    with pytest.warns(UserWarning, match="shares memory with another input"):
        got = compiled(base, base.view(4, 4))
    torch.testing.assert_close(got[0], fn(ref, ref.view(4, 4))[0])
    torch.testing.assert_close(base, ref)
    a, b = torch.arange(16.0), torch.ones(4, 4)
    got = compiled(a, b)  # no sharing: the compiled graph, no warning
    torch.testing.assert_close(got[0], b * 2)
    torch.testing.assert_close(a, torch.arange(16.0) * 0.5 + 1)


def test_two_written_inputs_in_one_storage_run_eagerly():
    """Both arguments written, the second a view of the first: eager's second write sees
    the first (the check compares written arguments with each other too)."""

    def fn(a, b):
        a.add_(1)
        b.mul_(2)
        return (a + 0,)

    compiled = compile_module(fn, [torch.zeros(4), torch.zeros(4)])
    base, ref = torch.arange(4.0), torch.arange(4.0)
    with pytest.warns(UserWarning, match="shares memory with another input"):
        got = compiled(base, base[:])
    want = fn(ref, ref[:])
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(base, ref)
    a, b = torch.arange(4.0), torch.arange(4.0)
    got = compiled(a, b)  # apart: compiled
    torch.testing.assert_close(a, torch.arange(4.0) + 1)
    torch.testing.assert_close(b, torch.arange(4.0) * 2)
    empty = torch.zeros(0)  # storages of no bytes share nothing
    compiled_empty = compile_module(fn, [torch.zeros(0), torch.zeros(0)])
    compiled_empty(empty, torch.zeros(0))


def test_a_saved_none_stays_none_as_a_backward_example_input():
    """cuDNN attention leaves some results out (None); one saved for backward is an example
    input of the backward compiler too, as None, where it once raised in ``int(None)``."""
    from aotautograd.aot_autograd import example_value

    graph = torch.fx.Graph()
    missing, size, tensor = (graph.placeholder(n) for n in ("missing", "size", "tensor"))
    missing.meta["val"], size.meta["val"] = None, 7
    tensor.meta["val"] = torch.empty(2, 3).t()
    assert example_value(missing) is None
    assert example_value(size) == 7
    made = example_value(tensor)
    assert made.shape == (3, 2) and made.stride() == (1, 3)


@pytest.mark.parametrize("transforms", [False, True])
def test_the_function_is_applied_by_autograds_c_apply_unless_functorch_is_active(
        transforms, monkeypatch):
    """[Note: applying the Function]: without a functorch transform the runtime calls the C
    ``apply`` itself, skipping ``Function.apply``'s Python; with one, it goes through it."""
    x = torch.randn(4, 3, requires_grad=True)
    compiled = compile_module(lambda x: (x.sin() * 2).sum(), [x])
    entry = next(iter(compiled.entries.values()))
    python_applies = []
    c_apply = super(torch.autograd.Function, entry.autograd_function).apply

    def counted(*args):  # (the real one would take functorch's path: none is active)
        python_applies.append(len(args))
        return c_apply(*args)
    monkeypatch.setattr(entry.autograd_function, "apply", counted)
    with monkeypatch.context() as patch:
        patch.setattr(torch._C, "_are_functorch_transforms_active", lambda: transforms)
        loss = compiled(x)[0]
    loss.backward()
    assert len(python_applies) == (1 if transforms else 0)
    torch.testing.assert_close(x.grad, 2 * x.detach().cos())


def test_views_leave_the_function_as_tensors_of_their_own():
    """[Note: outputs that are views]: a view alone in its memory keeps that memory (no
    copy); one sharing it with another output, or with an input, is copied."""
    from aotautograd.runtime import fresh_outputs

    buffer, other, x = torch.arange(12.0), torch.arange(6.0), torch.arange(4.0)
    alone, twin_a, twin_b = buffer.view(3, 4), other[:3], other[3:]
    of_input = x.view(2, 2)
    got = fresh_outputs([alone, twin_a, twin_b, of_input, 7], [x])
    assert not any(t._is_view() for t in got[:4]) and got[4] == 7
    for g, want in zip(got[:4], [alone, twin_a, twin_b, of_input]):
        torch.testing.assert_close(g, want)
    assert got[0].data_ptr() == alone.data_ptr()  # the same memory, no copy
    assert all(g.data_ptr() != w.data_ptr() for g, w in zip(got[1:4], [twin_a, twin_b,
                                                                       of_input]))
    plain = [torch.ones(2), 3]
    assert fresh_outputs(plain, [x])[0] is plain[0]  # no view: nothing changes
