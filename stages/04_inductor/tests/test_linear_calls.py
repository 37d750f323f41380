"""[Note: linear]: ``mm(x, w.t())`` over a whole row-major weight is printed as
``linear(x, w)``; any other view of a matrix keeps ``reinterpret``. Eager is the oracle for
values and gradients."""

from __future__ import annotations

import importlib
import re

import pytest
import torch
from inductor_testing import device_for

import driver


def wrapper_text(compiled) -> str:
    return "\n".join(g.artifacts["wrapper"] for g in compiled.graphs)


@pytest.mark.parametrize("target", ["cpp", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_linear_layer_calls_linear_without_a_view(target, dtype):
    torch.manual_seed(0)
    dev = device_for(target)
    layer = torch.nn.Linear(48, 24, bias=False).to(dev, dtype)
    x = torch.randn(5, 48, device=dev, dtype=dtype)
    compiled = driver.compile(lambda a: torch.relu(layer(a)), options={"target": target})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), torch.relu(layer(x)))
    text = wrapper_text(compiled)
    assert "= linear(" in text and "reinterpret(" not in text.split("def call")[1]


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_other_views_of_a_weight_keep_reinterpret(target):
    """A slice of a weight's rows, transposed, is not a whole matrix: no linear."""
    torch.manual_seed(1)
    dev = device_for(target)
    w = torch.randn(32, 16, device=dev)
    x = torch.randn(4, 16, device=dev)
    fn = lambda a, m: a @ m[8:24].t()  # noqa: E731
    compiled = driver.compile(fn, options={"target": target})
    torch.testing.assert_close(compiled(x, w), fn(x, w))
    text = wrapper_text(compiled).split("def call")[1]
    assert "linear(" not in text and "reinterpret(" in text


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_gradients_through_linear_calls(target):
    torch.manual_seed(2)
    dev = device_for(target)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 8)).to(dev)
    ref = [p.detach().clone().requires_grad_() for p in model.parameters()]
    x = torch.randn(6, 16, device=dev)
    compiled = driver.compile(model, options={"target": target})
    compiled(x).square().sum().backward()
    w1, b1, w2, b2 = ref
    eager = torch.nn.functional.linear(torch.nn.functional.gelu(
        torch.nn.functional.linear(x, w1, b1)), w2, b2)
    eager.square().sum().backward()
    for p, r in zip(model.parameters(), ref):
        torch.testing.assert_close(p.grad, r.grad, rtol=1e-4, atol=1e-5)
    assert "= linear(" in wrapper_text(compiled)


@pytest.mark.parametrize("target", ["cpp", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bias_add_read_only_by_a_library_call_folds_into_linear(target, dtype):
    """The Linear's sum feeds a matrix multiply, so its bias add fuses into nothing: it
    becomes linear(x, w, b), and no kernel adds."""
    torch.manual_seed(3)
    dev = device_for(target)
    layer = torch.nn.Linear(16, 24).to(dev, dtype)
    m = torch.randn(24, 8, device=dev, dtype=dtype)
    x = torch.randn(2, 5, 16, device=dev, dtype=dtype)
    fn = lambda a: layer(a) @ m  # noqa: E731
    compiled = driver.compile(fn, options={"target": target})
    with torch.no_grad():
        got, want = compiled(x), fn(x)
        exact = (x.double() @ layer.weight.double().t() + layer.bias.double()).to(dtype)
        exact = exact.double() @ m.double()
    torch.testing.assert_close(got, want, **({} if dtype == torch.float32 else
                                              {"rtol": 2e-2, "atol": 2e-2}))
    torch.testing.assert_close(got.double(), exact, rtol=2e-2 if dtype != torch.float32
                               else 1e-5, atol=2e-2 if dtype != torch.float32 else 1e-5)
    graph = compiled.graphs[0]
    text = graph.artifacts["wrapper"].split("def call")[1]
    assert text.count("linear(") == 1 and "arg1, arg2)  # aten.addmm" in text
    assert "_add" not in text and "folded into the library call" in graph.artifacts["fusion"]


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_bias_add_that_fuses_stays_in_its_kernel(target):
    """A bias add followed by pointwise work fuses with it: linear without the bias, then
    one kernel that adds, multiplies and adds."""
    torch.manual_seed(4)
    dev = device_for(target)
    layer = torch.nn.Linear(16, 24).to(dev)
    x = torch.randn(5, 16, device=dev)
    fn = lambda a: layer(a) * 2 + 1  # noqa: E731
    compiled = driver.compile(fn, options={"target": target})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), fn(x))
    graph = compiled.graphs[0]
    text = graph.artifacts["wrapper"].split("def call")[1]
    assert "folded" not in graph.artifacts["fusion"] and "# aten.mm" in text
    assert text.count("_fused_add_mul") == 1


@pytest.mark.parametrize("target", ["cpp", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_stored_pre_activation_folds_its_bias_out_of_the_activation_kernel(target, dtype):
    """Training saves the pre-activation for GELU's backward: the bias add leaves the GELU
    kernel for linear(x, w, b), which writes the sum the kernel then only reads. The kernel
    gives up its bias add in the forward only (in inference the sum is never stored)."""
    torch.manual_seed(7)
    dev = device_for(target)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU("tanh"),
                                torch.nn.Linear(32, 8)).to(dev, dtype)
    ref = [p.detach().clone().requires_grad_() for p in model.parameters()]
    x = torch.randn(6, 16, device=dev, dtype=dtype)
    compiled = driver.compile(model, options={"target": target})
    out = compiled(x)
    out.float().square().sum().backward()
    w1, b1, w2, b2 = ref
    F = torch.nn.functional
    eager = F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2, b2)
    eager.float().square().sum().backward()
    tol = {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2,
                                                                        "atol": 2e-2}
    torch.testing.assert_close(out, eager, **tol)
    for p, r in zip(model.parameters(), ref):
        torch.testing.assert_close(p.grad, r.grad, **tol)
    fusion = compiled.graphs[0].artifacts["fusion"]
    assert "arg0 @ arg1.t() + arg2: the bias add folded into the library call (linear); " \
        in fusion
    text = compiled.graphs[0].artifacts["wrapper"].split("def call")[1]
    assert "linear(arg0, arg1, arg2)  # aten.addmm" in text
    gelu = [line for line in text.splitlines() if "tanh" in line][0]
    assert re.search(r"\(buf1(\.data_ptr\(\))?, buf\d+(\.data_ptr\(\))?(, \d|\))", gelu)  # in, out
    with torch.no_grad():
        inference = driver.compile(model, options={"target": target})
        torch.testing.assert_close(inference(x), eager.detach(), **tol)
    assert "read it" not in inference.graphs[0].artifacts["fusion"]  # GELU adds the bias


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_gradients_through_a_folded_bias(target):
    torch.manual_seed(5)
    dev = device_for(target)
    layer = torch.nn.Linear(16, 24).to(dev)
    m = torch.randn(24, 8, device=dev, requires_grad=True)
    ref = [p.detach().clone().requires_grad_() for p in (*layer.parameters(), m)]
    x = torch.randn(6, 16, device=dev)
    compiled = driver.compile(lambda a: layer(a) @ m, options={"target": target})
    compiled(x).square().sum().backward()
    w, b, mm = ref
    (torch.nn.functional.linear(x, w, b) @ mm).square().sum().backward()
    for p, r in zip((*layer.parameters(), m), ref):
        torch.testing.assert_close(p.grad, r.grad, rtol=1e-4, atol=1e-5)
    assert any("folded" in g.artifacts["fusion"] for g in compiled.graphs)


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_folded_bias_of_a_three_dimensional_sum_is_viewed_back(target):
    """A Linear over (2, 5, 16) whose sum is the graph's output: one linear call, its 2-D
    result viewed as (2, 5, 24), as eager's own."""
    torch.manual_seed(6)
    dev = device_for(target)
    layer = torch.nn.Linear(16, 24).to(dev)
    x = torch.randn(2, 5, 16, device=dev)
    compiled = driver.compile(layer, options={"target": target})
    with torch.no_grad():
        got = compiled(x)
        torch.testing.assert_close(got, layer(x), rtol=0, atol=0)
    assert got.shape == (2, 5, 24) and got.is_contiguous()
    text = compiled.graphs[0].artifacts["wrapper"].split("def call")[1]
    assert ".view((2, 5, 24))" in text and "num_warps=" not in text  # no Triton launch


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_an_output_that_is_a_whole_buffer_is_not_copied(target):
    """[Note: an output that is a whole buffer]: permute(permute(mm)) is mm's own buffer; a
    second such output, a view of an input, or a real transpose still gets a kernel."""
    import inductor
    from inductor_testing import prims_graph, to_target

    a, b = to_target([torch.randn(8, 6), torch.randn(6, 4)], target)

    def fn(p, x, y):
        m = p.call(torch.ops.aten.mm.default, x, y)
        back = p.permute(p.permute(m, [1, 0]), [1, 0])
        return (back, p.permute(p.permute(x, [1, 0]), [1, 0]), p.permute(m, [1, 0]),
                p.permute(p.permute(m, [1, 0]), [1, 0]))

    compiled = inductor.compile_fx_inner(prims_graph(fn, [a, b]), [a, b], target=target)
    outs = compiled(a, b)
    want = a @ b
    for got, ref in zip(outs, (want, a, want.t(), want)):
        torch.testing.assert_close(got, ref)
    ptrs = [o.data_ptr() for o in outs]
    assert a.data_ptr() not in ptrs and len(set(ptrs)) == 4  # nothing aliased
    # the first output is mm's result itself: of the two [8, 4] outputs one is copied
    fusion = compiled.artifacts["fusion"]
    copies = [line.split(": ")[1].split(", ") for line in fusion.splitlines()
              if line.startswith("kernel over [8, 4]:")]
    assert sum(map(len, copies)) == 1, fusion


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_library_calls_bind_torch_functions(target, monkeypatch):
    """[Note: torch.mm, not aten.mm.default]: a convolution, its backward and the mms of a
    linear head's backward: values and gradients as eager's; the wrapper binds
    ``torch.convolution`` and ``torch.mm``, and ``convolution_backward`` (no such function
    in ``torch``) its overload's C entry point."""
    torch.manual_seed(3)
    dev = device_for(target)
    conv = torch.nn.Conv2d(3, 4, 3, padding=1).to(dev)
    head = torch.nn.Linear(4 * 25, 6).to(dev)
    fn = lambda x: head(torch.relu(conv(x)).flatten(1)).square().sum()  # noqa: E731
    wrapper = importlib.import_module("inductor.codegen.wrapper")
    bound, real = [], wrapper.library_function
    monkeypatch.setattr(wrapper, "library_function", lambda op: bound.append(real(op)) or bound[-1])
    compiled = driver.compile(fn, options={"target": target})
    x = torch.randn(2, 3, 5, 5, device=dev, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    compiled(x).backward()
    grads = [p.grad.clone() for p in (*conv.parameters(), *head.parameters())]
    for p in (*conv.parameters(), *head.parameters()):
        p.grad = None
    fn(x_ref).backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    for got, p in zip(grads, (*conv.parameters(), *head.parameters())):
        torch.testing.assert_close(got, p.grad)
    assert torch.convolution in bound and torch.mm in bound
    assert torch.ops.aten.convolution_backward.default._op in bound


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_a_product_plus_gathered_rows_is_not_a_bias_add(target):
    """MobileBERT's embeddings add a projection and an embedding lookup. Checking whether
    that add is a bias add ran the gather's body under an ops handler without
    ``indirect_indexing``, and the graph fell back to eager. It compiles, and is right."""
    torch.manual_seed(0)
    dev = device_for(target)
    proj = torch.nn.Linear(16, 8, bias=False).to(dev)
    table = torch.nn.Embedding(10, 8).to(dev)
    x, ids = torch.randn(6, 16, device=dev), torch.tensor([3, 1, 4, 1, 5, 9], device=dev)

    def fn(x, ids):
        return torch.tanh(proj(x) + table(ids))

    compiled = driver.compile(fn, options={"target": target}, fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, ids), fn(x, ids))
    assert len(compiled.graphs) == 1


def test_a_view_that_is_its_whole_buffer_is_passed_as_it_is():
    """[Note: a view that is its whole buffer]: a library call reads the buffer itself when
    the view has its layout; a transpose or an offset still goes through ``reinterpret``."""
    import sympy
    from inductor.codegen.wrapper import literal, whole_buffer
    from inductor.ir import FixedLayout, InputBuffer, ReinterpretView

    def ints(*values):
        return [sympy.Integer(v) for v in values]

    base = InputBuffer("arg0", FixedLayout(torch.device("cpu"), torch.float32, ints(10, 16),
                                           ints(16, 1)))

    def view(size, stride, offset=0, dtype=torch.float32):
        layout = FixedLayout(torch.device("cpu"), dtype, ints(*size), ints(*stride))
        return ReinterpretView("arg0", layout, base, sympy.Integer(offset))
    assert whole_buffer(view((10, 16), (16, 1))) and literal(view((10, 16), (16, 1)), {}) == "arg0"
    # [Note: a view that is its whole buffer, transposed]: ``t()``; a part of it is not that
    assert literal(view((16, 10), (1, 16)), {}) == "arg0.t()"
    assert literal(view((16, 5), (1, 16)), {}) == "reinterpret(arg0, (16, 5), (1, 16), 0)"
    assert literal(view((16, 9), (1, 16), offset=16), {}).startswith("reinterpret(")
    assert not whole_buffer(view((10, 16), (16, 1), offset=16))
    assert not whole_buffer(view((5, 16), (16, 1)))
    assert not whole_buffer(view((10, 16), (16, 1), dtype=torch.int32))


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_gradients_when_library_calls_read_whole_buffers(target):
    """A classifier head without bias (the convnet's): the backward's ``mm`` reads the weight
    whole; values and gradients as eager's."""
    torch.manual_seed(3)
    dev = device_for(target)
    head = torch.nn.Linear(16, 10, bias=False).to(dev)
    x = torch.randn(6, 16, device=dev, requires_grad=True)
    target_ = torch.randint(10, (6,), device=dev)

    def loss_of(a):
        return torch.nn.functional.cross_entropy(head(torch.tanh(a)), target_)
    compiled = driver.compile(loss_of, options={"target": target})
    got = compiled(x)
    got_grads = torch.autograd.grad(got, [x, head.weight])
    want = loss_of(x)
    want_grads = torch.autograd.grad(want, [x, head.weight])
    torch.testing.assert_close(got, want)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_products_skip_the_layout_check_and_gradients_read_transposes(target):
    """[Note: results whose layout the library fixes] and [Note: a view that is its whole
    buffer, transposed]: the training graphs of a ``Linear`` and a batched product call
    ``mm``/``bmm`` without ``as_layout`` and hand the transposed gradient over as ``.t()``;
    values and gradients as eager's."""
    torch.manual_seed(4)
    dev = device_for(target)
    layer = torch.nn.Linear(12, 20).to(dev)
    x = torch.randn(7, 12, device=dev)
    a = torch.randn(3, 5, 6, device=dev, requires_grad=True)
    b = torch.randn(3, 6, 4, device=dev, requires_grad=True)

    def fn(x, a, b):
        return torch.tanh(layer(x)).sum() + torch.sigmoid(torch.bmm(a, b)).sum()
    compiled = driver.compile(fn, options={"target": target})
    got = compiled(x, a, b)
    got_grads = torch.autograd.grad(got, [layer.weight, layer.bias, a, b])
    want = fn(x, a, b)
    want_grads = torch.autograd.grad(want, [layer.weight, layer.bias, a, b])
    torch.testing.assert_close(got, want)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w)
    text = "\n".join(g.artifacts[key] for g in compiled.graphs
                     for key in ("wrapper", "backward/wrapper"))
    products = [line for line in text.splitlines() if "# aten.mm" in line or "# aten.bmm" in line]
    assert len(products) >= 4, text  # the forward's, and the backward's two per product
    for graph in compiled.graphs:
        for key in ("wrapper", "backward/wrapper"):
            assert "as_layout(" not in graph.artifacts[key].split("def call")[1], text
    assert ".t(), " in text, text  # the weight's gradient: mm(g.t(), x)
    assert ".transpose(-2, -1)" in text and "reinterpret(" not in text.split("def call")[-1]


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_products_read_and_write_dead_buffers(target):
    """[Note: library results in dead buffers]: in a three-layer MLP's backward, products
    write into buffers that died before them (``out=``), and what products read is reused;
    the gradients equal eager's and no two of them share memory."""
    torch.manual_seed(5)
    dev = device_for(target)
    mlp = torch.nn.Sequential(*[m for _ in range(3) for m in (torch.nn.Linear(16, 16),
                                                               torch.nn.GELU())]).to(dev)
    x = torch.randn(16, 16, device=dev)

    def fn(x):
        return mlp(x).square().mean()
    compiled = driver.compile(fn, options={"target": target})
    got = compiled(x)
    got_grads = torch.autograd.grad(got, list(mlp.parameters()))
    want = fn(x)
    want_grads = torch.autograd.grad(want, list(mlp.parameters()))
    torch.testing.assert_close(got, want)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w)
    assert len({g.data_ptr() for g in got_grads}) == len(got_grads)
    backward = compiled.graphs[0].artifacts["backward/wrapper"]
    into_dead = re.findall(r"(buf\d+) = fallback_\d+\(.*, out=(buf\d+)\); del \2", backward)
    assert len(into_dead) >= 2, backward
