"""End to end: functions through all four stages, compared with eager PyTorch.

Eager is the oracle. Each case runs on both code generators (Triton under the interpreter on a
CPU, C++/OpenMP) and checks the number of kernels where fusion makes it predictable.
"""

import copy
import os
import warnings

import dynamo
import pytest
import torch

import driver

# MINIPT2_TEST_DEVICE=cuda runs the same cases on a GPU (Triton compiled for real).
DEVICE = os.environ.get("MINIPT2_TEST_DEVICE", "cpu")
TARGETS = ["triton"] if DEVICE == "cuda" else ["triton", "cpp"]
# Value checks also run on the fallback target (the prims graph op by op: what MPS gets).
ALL_TARGETS = [*TARGETS, "fallback"]


def assert_loss_and_grads_match(got: torch.Tensor, module: torch.nn.Module, eager) -> None:
    """``got`` (a compiled loss, not yet backpropagated) and the gradients it gives
    ``module``'s parameters equal eager's (``eager()`` recomputes the loss)."""
    got.backward()
    grads = [p.grad.clone() for p in module.parameters()]
    module.zero_grad()
    want = eager()
    want.backward()
    torch.testing.assert_close(got, want)
    for g, p in zip(grads, module.parameters()):
        torch.testing.assert_close(g, p.grad)


def kernels_of(compiled) -> list[str]:
    return [k for r in compiled.graphs for k in r.artifacts if k.startswith("kernels/")]


def demo(x, y):
    return (x.sin() + y.cos()) * 2 - x


@pytest.fixture(autouse=True)
def _fresh():
    driver.reset()
    torch.set_default_device(DEVICE)
    yield
    torch.set_default_device(None)
    driver.reset()


@pytest.mark.parametrize("target", TARGETS)
def test_demo_is_one_kernel_and_matches_eager(target):
    x, y = torch.randn(1000), torch.randn(1000)
    compiled = driver.compile(demo, options={"target": target})
    torch.testing.assert_close(compiled(x, y), demo(x, y))
    assert len(kernels_of(compiled)) == 1
    torch.testing.assert_close(compiled(y, x), demo(y, x))  # cached: same guards
    assert len(compiled.graphs) == 1


@pytest.mark.parametrize("target", ALL_TARGETS)
@pytest.mark.parametrize(
    "shapes",
    [((4, 5), (5,)), ((3, 1), (1, 7)), ((1,), (6, 2)), ((2, 3, 4), (2, 1, 4)), ((), (3,))],
    ids=str,
)
def test_broadcasting(target, shapes):
    x, y = torch.randn(shapes[0]), torch.randn(shapes[1])
    compiled = driver.compile(demo, options={"target": target})
    torch.testing.assert_close(compiled(x, y), demo(x, y))


@pytest.mark.parametrize("target", ALL_TARGETS)
def test_non_contiguous_inputs(target):
    base = torch.randn(6, 10)
    x, y = base.t(), base[:, ::2].repeat(1, 2).t()[:, :6]  # transposed and strided views
    assert not x.is_contiguous() and not y.is_contiguous()
    compiled = driver.compile(demo, options={"target": target})
    torch.testing.assert_close(compiled(x, y), demo(x, y))


@pytest.mark.parametrize("target", ALL_TARGETS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_float_dtypes(target, dtype):
    """bfloat16: the kernel rounds once, at the store ([Note: one rounding, at the store]),
    so its result is the exact one rounded to bfloat16, within one step of it; eager's,
    rounded after every op, can be several steps off where ``2 * (sin + cos) - x``
    cancels. So bfloat16 is checked against float64 arithmetic on the same inputs."""
    x, y = torch.randn(33, 17, dtype=dtype), torch.randn(33, 17, dtype=dtype)
    compiled = driver.compile(demo, options={"target": target})
    out = compiled(x, y)
    assert out.dtype == dtype
    if dtype == torch.bfloat16 and target != "fallback":
        exact = demo(x.double(), y.double())
        torch.testing.assert_close(out.double(), exact, rtol=2**-8, atol=1e-6)
    else:
        torch.testing.assert_close(out, demo(x, y))


@pytest.mark.parametrize("target", ALL_TARGETS)
def test_integer_arithmetic_and_promotion(target):
    def f(a, b, c):
        return (a * 3 + b) - a // 1 * 0 + c * 0.5

    a = torch.randint(-50, 50, (7, 3), dtype=torch.int32)
    b = torch.randint(-50, 50, (7, 3), dtype=torch.int64)
    c = torch.randn(3)
    compiled = driver.compile(f, options={"target": target})
    torch.testing.assert_close(compiled(a, b, c), f(a, b, c))


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_every_named_backend_matches_eager(backend):
    x, y = torch.randn(8, 8), torch.randn(8)
    compiled = driver.compile(demo, backend=backend)
    torch.testing.assert_close(compiled(x, y), demo(x, y))


def test_callable_backend_receives_graph_and_example_inputs():
    seen = []

    def my_backend(gm, example_inputs):
        seen.append((gm, example_inputs))
        return gm.forward

    x, y = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(driver.compile(demo, backend=my_backend)(x, y), demo(x, y))
    (gm, inputs), = seen
    assert isinstance(gm, torch.fx.GraphModule)
    assert [t.shape for t in inputs] == [x.shape, y.shape]


def test_works_as_a_decorator():
    @driver.compile(options={"target": TARGETS[-1]})
    def f(x):
        return x.exp() - 1

    x = torch.randn(10)
    torch.testing.assert_close(f(x), x.exp() - 1)


@pytest.mark.parametrize(
    "kwargs, error, name",
    [
        ({"backend": 3}, TypeError, "backend"),
        ({"backend": "nope"}, ValueError, "backend"),
        ({"mode": "fastest"}, ValueError, "mode"),
        ({"dynamic": "yes"}, TypeError, "dynamic"),
        ({"fullgraph": 1}, TypeError, "fullgraph"),
        ({"options": ["target"]}, TypeError, "options"),
        ({"options": {"target": "tpu"}}, ValueError, "target"),
        ({"options": {"speed": 11}}, ValueError, "speed"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, error, name):
    with pytest.raises(error, match=name):
        driver.compile(demo, **kwargs)


def test_not_callable_model_is_a_type_error():
    with pytest.raises(TypeError, match="model"):
        driver.compile(42)


def test_module_wrapper_passes_through():
    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("unused", torch.zeros(1))
            self.tag = "scale"

        def forward(self, x):
            return x * 2 + 1

    module = Scale()
    compiled = driver.compile(module, options={"target": TARGETS[-1]})
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x), module(x))
    assert compiled.tag == "scale"
    assert list(compiled.state_dict()) == ["unused"]
    compiled.eval()
    assert module.training is False
    compiled.tag = "changed"
    assert module.tag == "changed"


def break_inside_with(x):
    with torch.no_grad():
        print("a graph break inside a with block: not resumable, the frame runs eagerly")
        y = x + 1
    return y * 2


def test_unsupported_code_falls_back_with_one_warning():
    import dynamo

    compiled = driver.compile(break_inside_with)
    x = torch.randn(4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.testing.assert_close(compiled(x), break_inside_with(x))
        torch.testing.assert_close(compiled(x), break_inside_with(x))
    ours = [w for w in caught if issubclass(w.category, dynamo.FallbackWarning)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    message = str(ours[0].message)
    assert "dynamo" in message and "test_end_to_end.py" in message
    assert "reproduce: MINIPT2_STRICT=1" in message or "set MINIPT2_STRICT=1" in message


def with_a_print(x):
    y = x.sin()
    print("a graph break")
    return y + 1


def test_a_graph_break_splits_the_frame_and_stays_right(capsys):
    compiled = driver.compile(with_a_print, options={"target": TARGETS[-1]})
    x = torch.randn(8)
    torch.testing.assert_close(compiled(x), with_a_print(x))
    assert len(compiled.graphs) == 2
    assert capsys.readouterr().out.count("a graph break") == 2  # compiled run + eager run


def test_fullgraph_turns_a_graph_break_into_an_error():
    import dynamo

    with pytest.raises(dynamo.Unsupported, match="test_end_to_end.py"):
        driver.compile(with_a_print, fullgraph=True)(torch.randn(4))


def test_user_errors_surface_as_in_eager():
    def bad(x, y):
        return x + y

    with pytest.raises(RuntimeError):
        driver.compile(bad)(torch.randn(3), torch.randn(4))


def test_debug_dir_gets_every_artifact(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIPT2_DEBUG_DIR", str(tmp_path))
    compiled = driver.compile(demo, options={"target": TARGETS[-1]})
    compiled(torch.randn(16), torch.randn(16))
    folder = tmp_path / "demo" / "graph_0"
    names = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    for expected in ["captured_graph.py", "guards.txt", "prims_graph.txt", "loop_ir.txt",
                     "fusion.txt", "wrapper.py"]:
        assert expected in names
    assert [n for n in names if n.startswith("kernels/")]


def test_torch_compile_with_our_backend():
    x, y = torch.randn(64), torch.randn(64)
    compiled = torch.compile(demo, backend=driver.backend)
    torch.testing.assert_close(compiled(x, y), demo(x, y))


def test_our_dynamo_with_pytorchs_inductor():
    x, y = torch.randn(64), torch.randn(64)
    compiled = driver.compile(demo, backend="torch-inductor")
    torch.testing.assert_close(compiled(x, y), demo(x, y))


def test_fallback_target_runs_without_kernels():
    x, y = torch.randn(10), torch.randn(10)
    compiled = driver.compile(demo, options={"target": "fallback"})
    torch.testing.assert_close(compiled(x, y), demo(x, y))
    assert kernels_of(compiled) == []


@pytest.mark.parametrize("target", TARGETS[-1:])
def test_convnet_with_batchnorm_trains_like_eager(target, monkeypatch):
    """Conv + BatchNorm (train mode: running stats mutated) + ReLU, forward and backward
    through inductor; the conv's backward returns None for the absent bias gradient."""
    import copy

    monkeypatch.setenv("MINIPT2_STRICT", "1")  # a fallback would hide a bug: raise instead
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1, bias=False),
                                torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 6 * 6, 3))
    twin = copy.deepcopy(model)
    compiled = driver.compile(twin, options={"target": target})
    x, t = torch.randn(5, 3, 6, 6), torch.randint(0, 3, (5,))
    for m, f in ((model, model), (twin, compiled)):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(2):
            loss = torch.nn.functional.cross_entropy(f(x), t)
            opt.zero_grad()
            loss.backward()
            opt.step()
    for (name, a), (_, b) in zip(model.state_dict().items(), twin.state_dict().items()):
        torch.testing.assert_close(b, a, msg=name)


class ClassAttention(torch.nn.Module):
    """CaiT's class attention: a one-token query of (B, heads, 1, D) from a permute."""

    def __init__(self):
        super().__init__()
        self.q, self.kv = torch.nn.Linear(32, 32), torch.nn.Linear(32, 64)

    def forward(self, x):
        b, n, _ = x.shape
        q = self.q(x[:, :1]).reshape(b, 1, 4, 8).permute(0, 2, 1, 3)
        k, v = self.kv(x).reshape(b, n, 2, 4, 8).permute(2, 0, 3, 1, 4).unbind(0)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v).sum()


@pytest.mark.parametrize("target", TARGETS)
def test_a_one_token_query_reaches_attention_with_aligned_strides(target):
    """[Note: strides of size-1 dims]: the query's size-1 sequence dim had stride 1, which
    CUDA's memory-efficient attention refuses; now the row-major stride, and the values and
    gradients are eager's."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Strides(TorchDispatchMode):
        seen: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if "scaled_dot_product" in str(func) and "backward" not in str(func):
                self.seen.append(args[0].stride())
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    model, x = ClassAttention(), torch.randn(2, 5, 32)
    twin = copy.deepcopy(model)
    fast = driver.compile(model, options={"target": target})
    fast(x).backward()
    want = twin(x)
    want.backward()
    with Strides() as mode:
        got = fast(x)
    torch.testing.assert_close(got, want)
    assert mode.seen and all(s[2] == 8 for s in mode.seen), mode.seen
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a.grad, b.grad)


@pytest.mark.parametrize("target", ["cpp"])
def test_grouped_query_attention_forward_and_backward(target):
    """``enable_gqa=True`` (HuggingFace's Llama on the CPU): two key/value heads for four
    query heads. The CPU kernel takes the heads as they are; its decomposition assumed equal
    heads and reshaped the keys to the queries' count (a crash)."""
    import torch.nn.functional as F

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True) * 2

    q, k, v = (torch.randn(2, h, 16, 8, device="cpu", requires_grad=True) for h in (4, 2, 2))
    fast = driver.compile(attend, options={"target": target})
    got = fast(q, k, v)
    want = attend(q, k, v)
    torch.testing.assert_close(got, want)
    grads = torch.autograd.grad(got.sum(), (q, k, v))
    for g, w in zip(grads, torch.autograd.grad(want.sum(), (q, k, v))):
        torch.testing.assert_close(g, w)


class ScaledByConstants(torch.nn.Module):
    """DeBERTa's attention scale: a tensor made in ``forward`` from a Python number (DeBERTa's
    is on the CPU whatever device the model is on: ``scalar_device``), and a constant
    vector on the model's device."""

    def __init__(self, scalar_device=None):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.scalar_device = scalar_device

    def forward(self, x):
        device = self.scalar_device or x.device
        scale = torch.sqrt(torch.tensor(x.shape[-1], dtype=torch.float, device=device) * 2)
        offset = torch.tensor([1.0, 2.0, 3.0, 4.0], device=x.device)
        return ((self.lin(x) / scale.to(x.dtype) + offset) ** 2).mean()


@pytest.mark.parametrize("scalar_device", [None, "cpu"], ids=["model's", "cpu"])
@pytest.mark.parametrize("target", TARGETS)
def test_tensors_made_in_the_graph_from_python_values(target, scalar_device):
    """[Note: tensor constants] (inductor/compile_fx.py): forward and gradients as in eager,
    with compiled kernels (the lowering crashed on the constants); a CPU scalar in a GPU
    graph too ([Note: constant folding]: it ran eagerly, its launch having failed)."""
    model = ScaledByConstants(scalar_device)
    fast = driver.compile(model, options={"target": target})
    x = torch.randn(3, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = fast(x)
    assert not [w for w in caught if issubclass(w.category, dynamo.FallbackWarning)]
    assert_loss_and_grads_match(got, model, lambda: model(x))
    assert kernels_of(fast)


def layer_drop(x):
    """BART's layer drop: a random number made on the CPU (the default device), compared
    in a graph whose tensors are on the GPU; the comparison then decides a branch."""
    if torch.rand([], device="cpu") < 2.0:  # always taken
        x = x * 2
    return x + 1


@pytest.mark.parametrize("target", TARGETS)
def test_a_cpu_random_number_in_a_graph(target):
    """On a GPU the CPU number's comparison ran as a Triton kernel on host memory, and the
    launch failed; its buffer now says CPU, so it stays a library call."""
    fast = driver.compile(layer_drop, options={"target": target})
    x = torch.randn(4)
    torch.testing.assert_close(fast(x), x * 2 + 1)


@pytest.mark.parametrize("target", TARGETS)
def test_cpu_attention_stays_the_library_kernel(target):
    """[Note: attention on the CPU] (inductor/compile_fx.py): causal attention on CPU tensors
    is PyTorch's own kernel in the wrapper, forward and backward, with eager's values."""
    import torch.nn.functional as F

    if DEVICE != "cpu":
        pytest.skip("the CPU attention op")

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).sin()

    q, k, v = (torch.randn(2, 4, 16, 8, requires_grad=True) for _ in range(3))
    fast = driver.compile(attend, options={"target": target})
    got, want = fast(q, k, v), attend(q, k, v)
    torch.testing.assert_close(got, want)
    for g, w in zip(torch.autograd.grad(got.sum(), (q, k, v)),
                    torch.autograd.grad(want.sum(), (q, k, v))):
        torch.testing.assert_close(g, w)
    wrappers = "".join(v for r in fast.graphs for k, v in r.artifacts.items()
                       if k.endswith("wrapper"))
    assert "flash_attention_for_cpu.default" in wrappers
    assert "flash_attention_for_cpu_backward.default" in wrappers


class Decaying(torch.nn.Module):
    """A buffer written in place that the backward reads: its new value (``after``) or its
    old one (``before``), through the module or as an argument."""

    def __init__(self, read: str):
        super().__init__()
        self.read = read
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 6))

    def forward(self, x, running):
        if self.read == "after":
            self.scale.mul_(0.5)
            running.mul_(0.5)
            return (x * self.scale * running).sum()
        z = self.scale * 2 * running  # what the backward needs: from the old values
        self.scale.add_(1)
        running.add_(1)
        return (x * z).square().sum()


@pytest.mark.parametrize("target", ALL_TARGETS)
@pytest.mark.parametrize("read", ["after", "before"])
def test_written_input_read_by_backward(target, read):
    """[Note: a written input the backward reads]: over three steps the loss, the gradient
    and both written tensors equal eager's (the backward used to read the input's memory
    after the copy-back, and raised autograd's in-place error)."""
    net, ref = Decaying(read), Decaying(read)
    compiled = driver.compile(net, options={"target": target})
    running, ref_running = torch.linspace(1.0, 3.0, 6), torch.linspace(1.0, 3.0, 6)
    for step in range(3):
        x = torch.linspace(-1.0, 1.0, 24).reshape(4, 6).add(step).requires_grad_()
        x_ref = x.detach().clone().requires_grad_()
        got, want = compiled(x, running), ref(x_ref, ref_running)
        got.backward()
        want.backward()
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(x.grad, x_ref.grad)
        torch.testing.assert_close(net.scale, ref.scale)
        torch.testing.assert_close(running, ref_running)


@pytest.mark.parametrize("target", ALL_TARGETS)
@pytest.mark.parametrize("geometry", [(3, 2, 1, 1, False), (2, 1, 0, 1, False),
                                      (3, 2, 1, 2, True)])
def test_max_pool_gradient(target, geometry):
    """Compiled: the input's gradient through a max pool (ties included, overlapping windows
    adding up) equals eager's, in one graph with the ReLU before it."""
    kernel, stride, padding, dilation, ceil_mode = geometry

    def fn(x):
        y = torch.nn.functional.max_pool2d(torch.relu(x), kernel, stride, padding, dilation,
                                           ceil_mode)
        return (y * torch.linspace(-1.0, 1.0, y.shape[-1])).sum()

    x = (torch.arange(2 * 3 * 9 * 8) % 7 - 3.0).reshape(2, 3, 9, 8).requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    compiled = driver.compile(fn, options={"target": target})
    compiled(x).backward()
    fn(x_ref).backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    assert len(compiled.graphs) == 1


class ScaledTanhGelu(torch.autograd.Function):
    """A custom Function whose backward is not the forward's derivative (scaled by
    ``ctx.scale``), so the compiled gradient can only match eager's by calling it."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * ctx.scale * (1.0 + torch.tanh(x)), None


@pytest.mark.parametrize("target", ALL_TARGETS)
def test_custom_autograd_function(target):
    """[Note: a custom autograd.Function]: ``Fn.apply`` is one op of one graph; the forward,
    the user's own backward (with a context attribute and a non-tensor argument) and the
    no-grad call all give eager's values."""
    def fn(x, w):
        return (ScaledTanhGelu.apply(x @ w, 3.0) * 2).sum()

    x = torch.linspace(-2.0, 2.0, 32).reshape(4, 8)
    w = torch.linspace(-1.0, 1.0, 64).reshape(8, 8).requires_grad_()
    w_ref = w.detach().clone().requires_grad_()
    compiled = driver.compile(fn, options={"target": target}, fullgraph=True)
    got, want = compiled(x, w), fn(x, w_ref)
    got.backward()
    want.backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(w.grad, w_ref.grad)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, w), fn(x, w))
    assert len(compiled.graphs) == 2  # training and inference: one graph each


@pytest.mark.parametrize("target", ALL_TARGETS)
def test_a_view_output_written_in_place(target):
    """[Note: outputs that are views]: a Linear over a 3-d input returns a view of a 2-d
    product; the caller writes into it in place (wav2vec2's time masking) and the gradients
    are eager's. Autograd used to refuse the write ("a function that returns multiple
    views")."""
    lin = torch.nn.Linear(6, 5)

    def fn(x):  # wav2vec2's feature projection: the projection and its normalized input
        h = torch.nn.functional.layer_norm(x, (6,))
        return lin(h), h

    x = torch.linspace(-1.0, 1.0, 2 * 3 * 6).reshape(2, 3, 6).requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    compiled = driver.compile(fn, options={"target": target})
    grads = []
    for run, inp in ((compiled, x), (fn, x_ref)):
        h, normed = run(inp)
        h[:, 1] = 0.0  # a write into the output, as eager allows
        (h.square().sum() + normed.sum()).backward()
        grads.append((h.detach(), inp.grad, lin.weight.grad.clone()))
        lin.weight.grad = None
    for got, want in zip(*grads):  # (LayerNorm's backward: float32 rounding, ~1e-5)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
def test_a_parametrized_weight(target):
    """``weight_norm`` through ``torch.nn.utils.parametrize`` (wav2vec2's positional
    convolution): the weight is a property whose getter is a closure; its free variables
    are the closure's cells. One graph, eager's values and gradients."""
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(4, 4, 3, padding=1))

    def fn(x):
        return conv(x).tanh().sum()

    x = torch.linspace(-1.0, 1.0, 2 * 4 * 8).reshape(2, 4, 8)
    compiled = driver.compile(fn, options={"target": target}, fullgraph=True)
    assert_loss_and_grads_match(compiled(x), conv, lambda: fn(x))


def routed_experts(h, top_index, top_weight, w_up, w_down, k: int):
    """A mixture-of-experts layer the way transformers 5 writes it for bfloat16 (its
    ``grouped_mm_experts_forward``): sort the (token, expert) pairs by expert, count them
    per expert with ``histc``, turn the counts into int32 offsets, and run every expert's
    matrix multiply at once with ``torch._grouped_mm``; then weight and add back per token."""
    experts = w_up.shape[0]
    ids, perm = torch.sort(top_index.reshape(-1))
    x = h[perm // k]
    weight = top_weight.reshape(-1)[perm]
    counts = torch.histc(ids.int() if h.is_cuda else ids.float(), bins=experts, min=0,
                         max=experts - 1)  # (CUDA's histc counts ints, the CPU's floats)
    offsets = torch.cumsum(counts, dim=0, dtype=torch.int32)
    up = torch._grouped_mm(x, w_up.transpose(-2, -1), offs=offsets)
    down = torch._grouped_mm(torch.nn.functional.silu(up), w_down.transpose(-2, -1),
                             offs=offsets)
    out = torch.zeros_like(h)
    return out.index_add_(0, perm // k, down * weight[:, None])


@pytest.mark.skipif(not hasattr(torch, "_grouped_mm"), reason="needs torch._grouped_mm")
@pytest.mark.parametrize("target", TARGETS)
def test_routed_experts_with_grouped_matmul(target):
    """Mixtral's experts in bfloat16 (``routed_experts``): sort, gather, ``histc``, an int32
    ``cumsum`` and two ``_grouped_mm`` library calls in one graph; values and the gradients
    of the tokens and of both expert weights match eager's."""
    torch.manual_seed(0)
    tokens, hidden, ffn, experts, k = 64, 32, 64, 4, 2
    dt = torch.bfloat16
    top_weight, top_index = torch.topk(torch.randn(tokens, experts).softmax(-1), k, dim=-1)
    h = torch.randn(tokens, hidden, dtype=dt)
    w_up = torch.randn(experts, ffn, hidden, dtype=dt) * 0.1
    w_down = torch.randn(experts, hidden, ffn, dtype=dt) * 0.1
    values = [t.to(DEVICE) for t in (h, top_index, top_weight.to(dt), w_up, w_down)]
    runs = []
    for fn in (driver.compile(routed_experts, options={"target": target}, fullgraph=True),
               routed_experts):
        inputs = [v.clone().requires_grad_(v.is_floating_point() and v.ndim > 1)
                  for v in values]
        out = fn(*inputs, k)
        out.float().square().sum().backward()
        runs.append([out.detach()] + [inputs[i].grad for i in (0, 3, 4)])
    for got, want in zip(*runs):  # bfloat16 products: compare against each result's scale
        scale = want.float().abs().max().item()
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2 * scale)


@pytest.mark.parametrize("target", TARGETS)
def test_weight_and_spectral_norm_train_like_eager(target):
    """``nn.utils.parametrizations``: weight norm's backward is a library call that assumes a
    row-major gradient ([Note: library calls that read any strides]), and spectral norm's
    power iteration writes its vectors into the module's buffers with ``out=`` ([Note: an
    op with out=]). Two training steps: outputs, every gradient and both buffers match
    eager's, in one graph (``fullgraph=True``: no break), with no frame run eagerly."""
    norms = torch.nn.utils.parametrizations

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(norms.weight_norm(torch.nn.Linear(8, 16)), torch.nn.Tanh(),
                                   norms.spectral_norm(torch.nn.Linear(16, 4))).to(DEVICE)
    eager, model = make(), make()
    compiled = driver.compile(model, fullgraph=True, options={"target": target})
    for step in range(2):
        x = torch.randn(5, 8, generator=torch.Generator().manual_seed(step), device="cpu")
        x = x.to(DEVICE)
        with warnings.catch_warnings():
            warnings.simplefilter("error", dynamo.FallbackWarning)
            got = compiled(x)
        want = eager(x)
        torch.testing.assert_close(got, want)
        got.square().sum().backward()
        want.square().sum().backward()
        for (name, mine), theirs in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(mine.grad, theirs.grad, msg=name)
        for mine, theirs in zip(model.buffers(), eager.buffers()):
            torch.testing.assert_close(mine, theirs)
    assert len(compiled.graphs) == 1


@pytest.mark.parametrize("target", TARGETS)
def test_normal_samples_compile(target):
    """``torch.distributions``' ``rsample`` fills ``torch.empty(shape).normal_()``, and
    ``torch.normal(mean, std)``: traced, not run eagerly. The numbers are others than eager's
    ([Note: random prims]): the reparameterized sample's gradient with respect to its mean
    is exactly one, and a large draw has the mean and spread asked for."""
    mu = torch.zeros(200, 100, device=DEVICE, requires_grad=True)

    def sample(mu):
        z = mu + 2.0 * torch.empty(mu.shape, device=mu.device).normal_()
        return z, torch.normal(mu.detach() + 1.0, 0.5)

    compiled = driver.compile(sample, options={"target": target})
    with warnings.catch_warnings():
        warnings.simplefilter("error", dynamo.FallbackWarning)
        z, n = compiled(mu)
    z.sum().backward()
    torch.testing.assert_close(mu.grad, torch.ones_like(mu))
    assert abs(z.mean().item()) < 0.05 and abs(z.std().item() - 2) < 0.05
    assert abs(n.mean().item() - 1) < 0.02 and abs(n.std().item() - 0.5) < 0.02


@pytest.mark.parametrize("target", TARGETS)
def test_affine_grid_and_stft_compile(target):
    """ATen's ``affine_grid`` unsqueezes a temporary in place, ``stft`` transposes its
    result in place ([Note: a view op in place]): both compile to one graph now; values and
    the gradients of the image and of the transform match eager's."""
    torch.manual_seed(0)

    def warp(image, theta):
        grid = torch.nn.functional.affine_grid(theta, (2, 3, 8, 8), align_corners=False)
        return torch.nn.functional.grid_sample(image, grid, align_corners=False)

    def spectrum(signal):
        window = torch.hann_window(16, device=signal.device)
        return torch.stft(signal, 16, window=window, return_complex=True).abs()

    image = torch.randn(2, 3, 8, 8, requires_grad=True)
    theta = (torch.eye(2, 3) + 0.1 * torch.randn(2, 2, 3)).requires_grad_()
    signal = torch.randn(2, 128)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dynamo.FallbackWarning)
        got = driver.compile(warp, fullgraph=True, options={"target": target})(image, theta)
        got_spectrum = driver.compile(spectrum, fullgraph=True,
                                      options={"target": target})(signal)
    want = warp(image, theta)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_spectrum, spectrum(signal))
    want_grads = torch.autograd.grad(want.square().sum(), [image, theta])
    got_grads = torch.autograd.grad(got.square().sum(), [image, theta])
    for mine, theirs in zip(got_grads, want_grads):
        torch.testing.assert_close(mine, theirs)


# -- [Note: an op whose backward cannot be traced] --------------------------------------------
@torch.library.custom_op("minipt2_e2e_test::scaled_groups", mutates_args=())
def scaled_groups(x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Row group i (``counts[i]`` rows) times i + 1, as transformers' grouped matrix
    multiply loops over its experts' token counts."""
    out, start = torch.empty_like(x), 0
    for i, n in enumerate(counts.tolist()):
        out[start:start + n] = x[start:start + n] * (i + 1)
        start += n
    return out


@scaled_groups.register_fake
def _(x, counts):
    return torch.empty_like(x)


def _scaled_groups_backward(ctx, grad):
    out, start = torch.empty_like(grad), 0
    for i, n in enumerate(ctx.counts.tolist()):  # a loop over data, as the op's own
        out[start:start + n] = grad[start:start + n] * (i + 1)
        start += n
    return out, None


scaled_groups.register_autograd(
    _scaled_groups_backward, setup_context=lambda ctx, inputs, output: setattr(
        ctx, "counts", inputs[1]))


class Grouped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)

    def forward(self, x, counts):
        h = torch.ops.minipt2_e2e_test.scaled_groups(torch.nn.functional.gelu(self.up(x)), counts)
        return self.down(h).square().mean()


@pytest.mark.parametrize("target", TARGETS)
def test_a_custom_op_whose_backward_reads_data_trains_between_two_graphs(target):
    """aotautograd cannot trace the op's backward; dynamo keeps the op out of the graph, so
    the step compiles around it (no fallback) and trains like eager."""
    torch.manual_seed(0)
    model = Grouped()
    x, counts = torch.randn(6, 8), torch.tensor([1, 2, 3], device="cpu")
    compiled = driver.compile(model, options={"target": target})
    with warnings.catch_warnings():
        warnings.simplefilter("error", dynamo.FallbackWarning)
        for _ in range(2):
            model.zero_grad()
            assert_loss_and_grads_match(compiled(x, counts), model, lambda: model(x, counts))
    explained = driver.explain(Grouped())(x, counts)
    assert explained.graph_count == 2 and "minipt2_e2e_test::scaled_groups" in str(
        explained.breaks[0])
