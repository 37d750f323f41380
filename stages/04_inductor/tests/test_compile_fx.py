"""compile_fx, the dynamo-backend entry point: torch-level graph -> aotautograd -> inductor."""

from __future__ import annotations

import copy

import inductor
import pytest
import torch
import torch.fx
import torch.nn.functional as F
from inductor.compile_fx import SIGNATURE_GUARDED
from inductor_testing import assert_close, device_for, to_target

aotautograd = pytest.importorskip("aotautograd")
needs_aot = pytest.mark.skipif(not hasattr(aotautograd, "aot_module_simplified"),
                               reason="aotautograd.aot_module_simplified not written yet")


def chain(x, y):
    return ((x.sin() + y.cos()) * 2 - x,)


def test_bad_options():
    gm = torch.fx.symbolic_trace(chain)
    x = torch.randn(3)
    with pytest.raises(ValueError, match="target"):
        inductor.compile_fx(gm, [x, x], options={"target": "gpu"})
    with pytest.raises(TypeError, match="options"):
        inductor.compile_fx(gm, [x, x], options="cpp")


@needs_aot
@pytest.mark.parametrize("target", ["cpp", "triton", "fallback"])
def test_compile_fx_torch_graph(target):
    gm = torch.fx.symbolic_trace(chain)
    x, y = torch.randn(5, 6), torch.randn(6).expand(5, 6)
    gx, gy = to_target([x, y], target)
    fn = inductor.compile_fx(gm, [gx, gy], options={"target": target})
    (out,) = fn(gx, gy)
    assert_close(out, chain(x, y)[0])
    assert "wrapper" in fn.artifacts
    if target != "fallback":
        assert fn.kernel_count == 1
        # each device is made once, at the top of the module (``device_name``), not per
        # allocation
        head, body = fn.artifacts["wrapper"].split("def call")
        device = gx.device.type + (f":{gx.device.index}" if gx.device.index is not None else "")
        name = "device_" + device.replace(":", "_")
        assert head.count(f"{name} = torch.device('{device}')") == 1
        assert "torch.device(" not in body and f"device={name}," in body


@needs_aot
@pytest.mark.parametrize("marked", [False, True])
def test_a_graph_dynamo_marked_is_called_without_dispatch(marked):
    """``compile_fx`` hands aotautograd the graph's ``signature_guarded`` mark: the entry is
    then what dynamo calls ([Note: a signature the caller guards])."""
    gm = torch.fx.symbolic_trace(chain)
    if marked:
        gm.meta[SIGNATURE_GUARDED] = True
    x, y = torch.randn(5, 6), torch.randn(6).expand(5, 6)
    fn = inductor.compile_fx(gm, [x, y], options={"target": "cpp"})
    assert (fn is next(iter(fn.entries.values()))) == marked
    assert_close(fn(x, y)[0], chain(x, y)[0])


MODELS = {
    "relu_bias": lambda x, b: (torch.relu(x + b),),
    "gelu_tanh": lambda x, b: (F.gelu(x, approximate="tanh") * b,),
    "softmax": lambda x, b: (torch.softmax(x, -1),),
    "silu_and_count": lambda x, b: (F.silu(x) + 3, (x > 0).sum()),
    "promotion": lambda x, b: (x.double() * 2 + b.half(),),
}


@needs_aot
@pytest.mark.parametrize("target", ["cpp", "triton"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_torch_level_functions(name, target):
    fn = MODELS[name]
    x, b = torch.randn(5, 7), torch.randn(7)
    gx, gb = to_target([x, b], target)
    compiled = inductor.compile_fx(torch.fx.symbolic_trace(fn), [gx, gb],
                                   options={"target": target})
    assert compiled.kernel_count >= 1
    for got, want in zip(compiled(gx, gb), fn(x, b)):
        assert_close(got, want)


@torch.library.custom_op("minipt2_test::scaled_with_count", mutates_args=())
def _scaled_with_count(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    return x * 2, x.shape[0]


@_scaled_with_count.register_fake
def _(x):
    return torch.empty_like(x), x.shape[0]


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_a_library_call_that_returns_a_number(target):
    """An extern op may return numbers beside tensors (cuDNN attention's max_q): the traced
    number serves, no buffer is made for it."""

    class Program(torch.nn.Module):
        def forward(self, x):
            out, n = torch.ops.minipt2_test.scaled_with_count(x)
            return (out + n,)

    gm = torch.fx.symbolic_trace(Program())
    for node in gm.graph.nodes:  # what aotautograd leaves: every node with its example
        if node.op == "placeholder":
            node.meta["val"] = torch.empty(5, 3, device="meta")
        elif node.op == "call_function":
            args = torch.fx.node.map_arg(node.args, lambda n: n.meta["val"])
            node.meta["val"] = node.target(*args)
    (x,) = to_target([torch.randn(5, 3)], target)
    compiled = inductor.compile_fx_inner(gm, [x], target=target)
    (out,) = compiled(x)
    assert_close(out, x.cpu() * 2 + 5)


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_a_none_input_reaches_the_library_call_that_takes_it(target):
    """A backward graph's saved value may be None (a result cuDNN attention left out): the
    graph takes it as an argument that binds nothing and hands None on."""

    (x,) = to_target([torch.randn(4)], target)
    graph = torch.fx.Graph()
    a, none = graph.placeholder("x"), graph.placeholder("missing")
    a.meta["val"], none.meta["val"] = torch.empty(4, device="meta"), None
    out = graph.call_function(torch.ops.aten.add.Tensor, (a, 1.0))
    out.meta["val"] = torch.empty(4, device="meta")
    graph.output((out,))
    compiled = inductor.compile_fx_inner(torch.fx.GraphModule({}, graph), [x, None],
                                         target=target)
    (got,) = compiled(x, None)
    assert_close(got, x.cpu() + 1)
    none.meta["val"] = 7  # a saved number (cuDNN attention's max_q) the same way
    compiled = inductor.compile_fx_inner(torch.fx.GraphModule({}, graph), [x, 7],
                                         target=target)
    assert_close(compiled(x, 7)[0], x.cpu() + 1)


@pytest.mark.parametrize("target", ["cpp", "triton"])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_trains_like_eager(target, mode):
    """``_embedding_bag`` is a library call whose bookkeeping results the CPU kernel sizes
    differently from CUDA's ([Note: metas that depend on the device] in aotautograd): the
    compiled model must run, and train, on both."""
    import driver

    device = device_for(target)
    torch.manual_seed(0)
    eager = torch.nn.EmbeddingBag(40, 8, mode=mode).to(device)
    model = copy.deepcopy(eager)
    compiled = driver.compile(model, options={"target": target})
    ids, offsets = torch.randint(40, (15,), device=device), torch.tensor([0, 3, 3, 10],
                                                                           device=device)
    want, got = eager(ids, offsets), compiled(ids, offsets)
    torch.testing.assert_close(got, want)
    want.square().sum().backward()
    got.square().sum().backward()
    torch.testing.assert_close(model.weight.grad, eager.weight.grad)


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_complex_rotary_embedding_trains_like_eager(target):
    """[Note: complex numbers]: ``view_as_complex`` and the complex product are library
    calls; the real ops around them are still compiled, and gradients flow through."""
    import driver

    device = device_for(target)
    angles = torch.outer(torch.arange(6.0), torch.rand(4)).to(device)
    freqs = torch.polar(torch.ones_like(angles), angles)

    def rotate(x):
        q = (x * 2).reshape(*x.shape[:-1], -1, 2)
        return torch.view_as_real(torch.view_as_complex(q) * freqs).flatten(-2).tanh()

    x = torch.randn(2, 6, 8, device=device, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    compiled = driver.compile(rotate, options={"target": target})
    want, got = rotate(x), compiled(x2)
    torch.testing.assert_close(got, want)
    want.sum().backward()
    got.sum().backward()
    torch.testing.assert_close(x2.grad, x.grad)
    assert compiled.graphs and compiled.graphs[0].artifacts  # compiled, not eager


@torch.library.custom_op("minipt2_test::layout_keeping_copy", mutates_args=(),
                         tags=(torch.Tag.nondeterministic_seeded,))  # (never recomputed)
def layout_keeping_copy(x: torch.Tensor) -> torch.Tensor:
    """A copy in ``x``'s own strides, as cuDNN attention's output follows its inputs'."""
    return x.clone()


@layout_keeping_copy.register_fake
def _(x):
    return torch.empty_like(x)


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_a_saved_library_result_is_read_in_its_real_strides(target, monkeypatch):
    """[Note: saved values in their real strides] (aotautograd): the library call (one that
    reads any strides) gets the transposed input's buffer, so its result is transposed, where
    the trace's meta tensors said row-major; the backward's kernel reading that saved result
    for ``w``'s gradient must read it in the strides the forward really returns."""
    import importlib

    import driver

    graph_module = importlib.import_module("inductor.graph")
    monkeypatch.setattr(graph_module, "ANY_STRIDES", graph_module.ANY_STRIDES
                        | {torch.ops.minipt2_test.layout_keeping_copy.default})

    device = device_for(target)

    def fn(x, w):
        y = layout_keeping_copy(x.t())  # (5, 3), strides (1, 5) for real
        return (y * w).sin().sum()

    x = torch.randn(3, 5, device=device)
    w = torch.randn(5, 3, device=device, requires_grad=True)
    w2 = w.detach().clone().requires_grad_()
    fn(x, w).backward()
    driver.compile(fn, options={"target": target})(x, w2).backward()
    torch.testing.assert_close(w2.grad, w.grad)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cpu_scalar_in_a_cuda_graph_trains():
    """``y[mask] = 0.0`` gives index_put a 0-dim CPU tensor, and its backward makes another
    (zeros like it): a CUDA graph computes that one with a library call, not a Triton
    kernel writing CPU memory."""
    import driver

    fc = torch.nn.Linear(8, 8).cuda()

    def fn(x):
        y = fc(x).clone()
        y[y < 0] = 0.0
        return y.sum() + y[:, ::2].mean()

    x = torch.randn(4, 8, device="cuda")
    want = fn(x)
    want.backward()
    grads = [p.grad.clone() for p in fc.parameters()]
    fc.zero_grad()
    got = driver.compile(fn)(x)
    got.backward()
    torch.testing.assert_close(got, want)
    for p, g in zip(fc.parameters(), grads):
        torch.testing.assert_close(p.grad, g)


def test_a_triton_kernel_of_a_gpu_graph_never_gets_a_cpu_buffer():
    """``WrapperCodeGen.check_devices``: a kernel touching a CPU buffer in a graph on a GPU
    (found with BART on the H200: its launch failed on a host pointer) is a CompileError,
    which compile_fx_inner answers by running the graph op by op."""
    import types

    import pytest
    from inductor.codegen.wrapper import WrapperCodeGen
    from inductor.exc import CompileError

    def buffer(device):
        return types.SimpleNamespace(layout=types.SimpleNamespace(device=torch.device(device)))

    graph = types.SimpleNamespace(buffer_by_name={"arg0": buffer("cuda:0"), "buf1": buffer("cpu"),
                                                  "buf2": buffer("cuda:0")},
                                  graph_outputs=[])
    wrapper = WrapperCodeGen(graph, [], set(), {}, "triton")
    wrapper.check_devices(types.SimpleNamespace(name="k0", args=["arg0", "buf2"]))  # fine
    with pytest.raises(CompileError, match="CPU buffer buf1"):
        wrapper.check_devices(types.SimpleNamespace(name="k1", args=["arg0", "buf1"]))
    cpu = types.SimpleNamespace(buffer_by_name={"arg0": buffer("cpu")}, graph_outputs=[])
    WrapperCodeGen(cpu, [], set(), {}, "triton").check_devices(
        types.SimpleNamespace(name="k2", args=["arg0"]))  # the interpreter's CPU graphs


def _graph_with_constant(value: torch.Tensor) -> torch.fx.GraphModule:
    """``x * c``, with ``c`` a tensor attribute of the module (what tracing makes of a
    ``torch.tensor(...)`` in the traced code)."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(4, device="meta")
    c = graph.get_attr("_tensor_constant0")
    c.meta["val"] = torch.empty(value.shape, device="meta")
    out = graph.call_function(torch.ops.aten.mul.Tensor, (x, c))
    out.meta["val"] = torch.empty(4, device="meta")
    graph.output((out,))
    root = torch.nn.Module()
    root.register_buffer("_tensor_constant0", value)
    return torch.fx.GraphModule(root, graph)


def test_tensor_constants_become_inputs_the_call_passes():
    """[Note: tensor constants]: the get_attr becomes a placeholder; the compiled call
    takes only the caller's arguments and passes the constant itself."""
    x = torch.randn(4)
    gm = _graph_with_constant(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    compiled = inductor.compile_fx_inner(gm, [x], target="cpp")
    assert_close(compiled(x)[0], x * torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert not any(n.op == "get_attr" for n in gm.graph.nodes)


def test_a_tensor_constant_on_another_device_is_a_compile_error():
    """A constant that is not where the inputs are (DeBERTa's CPU scalar in a GPU graph;
    here a meta tensor beside CPU inputs): not compiled, so dynamo runs the frame eagerly."""
    from inductor.exc import CompileError

    gm = _graph_with_constant(torch.empty((), device="meta"))
    with pytest.raises(CompileError, match="lives on meta"):
        inductor.compile_fx_inner(gm, [torch.randn(4)], target="cpp")


def test_a_graph_without_inputs_runs_where_its_factories_put_their_tensors():
    """[Note: a graph without inputs]: Funnel's positional embeddings come from factories on
    the GPU and no input; the graph's device is theirs, not the CPU's (whose C++ loops read
    the GPU's memory from the host and crashed). Without a GPU here, a graph naming CUDA
    gets the fallback target, and one naming only the CPU (or nothing) keeps C++."""
    import importlib

    from inductor.graph import GraphLowering

    cfx_module = importlib.import_module("inductor.compile_fx")

    def graph(device):
        g = torch.fx.Graph()
        a = g.call_function(torch.ops.aten.arange.default, (8,), {"device": device})
        g.output((g.call_function(torch.ops.aten.sin.default, (a,)),))
        return torch.fx.GraphModule(torch.nn.Module(), g)

    gpu, cpu = graph(torch.device("cuda", 0)), graph(torch.device("cpu"))
    assert cfx_module.factory_device(gpu) == torch.device("cuda", 0)
    assert cfx_module.factory_device(cpu) == torch.device("cpu")
    assert cfx_module.default_target([], gpu) == ("triton" if torch.cuda.is_available()
                                                  else "fallback")
    assert cfx_module.default_target([], cpu) == "cpp"
    assert cfx_module.default_target([torch.zeros(2)], gpu) == "cpp"  # inputs decide
    assert GraphLowering(gpu, []).device() == torch.device("cuda", 0)


def test_a_loop_on_another_device_is_a_library_call_whatever_its_kind():
    """``on_other_device``: a CPU scatter in a GPU graph (BEiT builds its relative-position
    index on the CPU with ``select_scatter``) must not become a Triton kernel, which would
    send the whole graph op by op; a pointwise loop on the CPU already was a library call."""
    from inductor.graph import GraphLowering
    from inductor.ir import Pointwise, Scatter

    g = torch.fx.Graph()
    g.output(())
    graph = GraphLowering(torch.fx.GraphModule(torch.nn.Module(), g),
                          [torch.empty(2, device="meta")])  # kernels "run" on meta
    cpu = torch.device("cpu")
    pointwise = Pointwise(cpu, torch.int64, lambda index: None, [4])
    scatter = Scatter(cpu, torch.int64, pointwise, lambda index: None, [4])
    assert graph.on_other_device(pointwise) and graph.on_other_device(scatter)
    on_meta = Scatter(torch.device("meta"), torch.int64, pointwise, lambda index: None, [4])
    assert not graph.on_other_device(on_meta)


def test_a_chain_of_cpu_ops_in_another_devices_graph_stays_on_the_cpu():
    """[Note: where a library call's result lives]: each op of a CPU chain in a graph whose
    kernels run elsewhere is a library call, and its result is labeled CPU, so the next op
    is one too; labeled with the graph's device, the third op became a kernel of that
    device reading host memory (BEiT's relative-position index on the H200)."""
    from inductor.graph import GraphLowering
    from inductor.ir import ComputedBuffer, ExternBuffer
    from primtorch import prims

    cpu = torch.device("cpu")
    g = torch.fx.Graph()
    x = g.placeholder("x")
    index = g.call_function(prims.iota, (8,), {"start": 0, "step": 1, "dtype": torch.int64,
                                                "device": cpu})
    two = g.call_function(prims.full, ([8], 2), {"dtype": torch.int64, "device": cpu})
    doubled = g.call_function(prims.mul, (index, two))
    shifted = g.call_function(prims.add, (doubled, two))  # no device argument: by its inputs
    g.output((shifted, g.call_function(prims.sin, (x,))))
    graph = GraphLowering(torch.fx.GraphModule(torch.nn.Module(), g),
                          [torch.empty(8, device="meta")])  # kernels "run" on meta
    graph.run(torch.empty(8, device="meta"))
    kernels = [op for op in graph.operations if isinstance(op, ComputedBuffer)]
    assert kernels and all(op.layout.device.type == "meta" for op in kernels)
    library = [b for b in graph.buffer_by_name.values() if isinstance(b, ExternBuffer)]
    assert len(library) >= 3 and all(b.layout.device == cpu for b in library)
