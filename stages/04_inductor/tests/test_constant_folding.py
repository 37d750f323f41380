"""Constant folding ([Note: constant folding] in inductor/constant_folding.py): what the traced
code computes from constants alone is computed at compile time, and a 0-dim result is a
number in the kernels, whatever device it was made on."""

from __future__ import annotations

import importlib
import warnings

import dynamo
import inductor
import pytest
import torch
import torch.fx
from inductor.constant_folding import fold_constants, foldable
from inductor.exc import CompileError
from inductor_testing import PrimsBuilder, assert_close, device_for, meta_of, to_target
from primtorch import prims

import driver

TARGETS = ["cpp", "triton"]
compile_fx = importlib.import_module("inductor.compile_fx")  # the module, not the function


@pytest.fixture(autouse=True)
def _fresh_caches():
    driver.reset()  # the functions below are compiled again under each parameter
    yield
    driver.reset()


def graph_with_constants(fn, inputs: list[torch.Tensor],
                         constants: dict[str, torch.Tensor]) -> torch.fx.GraphModule:
    """A prims graph ``fn(p, *input_nodes, *constant_nodes)`` whose constants are tensor
    attributes read by ``get_attr`` nodes (what tracing makes of ``torch.tensor(...)``)."""
    p = PrimsBuilder(inputs[0].device)
    nodes = []
    for i, t in enumerate(inputs):
        nodes.append(p.graph.placeholder(f"x{i}"))
        nodes[-1].meta["val"] = meta_of(t)
    root = torch.nn.Module()
    for name, value in constants.items():
        root.register_buffer(name, value)
        nodes.append(p.graph.get_attr(name))
        nodes[-1].meta["val"] = meta_of(value)
    out = fn(p, *nodes)
    p.graph.output(tuple(out) if isinstance(out, (list, tuple)) else (out,))
    return torch.fx.GraphModule(root, p.graph)


def deberta_scale(p, x, d_head):
    """``x / torch.sqrt(torch.tensor(d_head, dtype=torch.float) * 2)``, as prims."""
    scale = p.sqrt(p.mul(d_head, p.full([], 2.0, dtype=torch.float32, device="cpu")))
    return p.div(x, p.bcast(scale, list(x.meta["val"].shape)))


def targets(gm: torch.fx.GraphModule) -> list[str]:
    return [n.target.__name__ if callable(n.target) else n.target for n in gm.graph.nodes
            if n.op in ("call_function", "get_attr")]


def test_a_cpu_scalar_in_a_graph_on_another_device_becomes_a_number():
    """DeBERTa's case: the CPU constant and the ops on it become one ``full`` on the
    graph's device (here said to be CUDA; the graph is only inspected)."""
    gm = graph_with_constants(deberta_scale, [torch.randn(3, 4)],
                              {"_tensor_constant0": torch.tensor(64.0)})
    removed = fold_constants(gm, torch.device("cuda"))
    (full,) = [n for n in gm.graph.nodes if n.target is prims.full]
    assert full.kwargs == {"dtype": torch.float32, "device": torch.device("cuda")}
    assert full.args == ([], torch.sqrt(torch.tensor(64.0) * 2).item())
    assert targets(gm) == ["full.default", "broadcast_in_dim.default", "div.default"]
    assert removed == 3  # the get_attr, the full of 2.0 and the mul; sqrt became the full


def test_compile_with_constants_accepts_a_cpu_scalar_beside_other_devices(monkeypatch):
    """The whole tensor-constants path with inputs on another device than the CPU ("meta"
    stands for the GPU; the compile after folding is recorded, not run): the 0-dim CPU
    constant no longer makes a CompileError; a CPU constant with dims still does."""
    seen = []
    monkeypatch.setattr(compile_fx, "compile_fx_inner",
                        lambda gm, inputs, **kwargs: seen.append((gm, inputs)) or
                        inductor.CompiledGraph(lambda *args: (), {}, 0))
    x = torch.empty(3, 4, device="meta")
    gm = graph_with_constants(deberta_scale, [x], {"_tensor_constant0": torch.tensor(64.0)})
    compile_fx.compile_with_constants(gm, [x], "triton", "default")
    (compiled, inputs), = seen
    assert len(inputs) == 1  # no constant left to pass
    assert all(n.op != "get_attr" for n in compiled.graph.nodes)
    assert [n.kwargs["device"] for n in compiled.graph.nodes if n.target is prims.full] == \
        [torch.device("meta")]

    def plus_vector(p, x, v):
        return p.add(x, p.bcast(p.sqrt(v), [3, 4]))

    gm = graph_with_constants(plus_vector, [x], {"v": torch.arange(4.0)})
    with pytest.raises(CompileError, match="lives on cpu"):
        compile_fx.compile_with_constants(gm, [x], "triton", "default")
    # one that no op reads, only returned: [Note: a constant the graph returns]
    gm = graph_with_constants(lambda p, x, v: (p.add(x, x), v), [x], {"v": torch.arange(4.0)})
    compile_fx.compile_with_constants(gm, [x], "triton", "default")
    assert len(seen) == 2


@pytest.mark.parametrize("target", TARGETS)
def test_folded_constants_leave_the_kernels(target):
    """The multiply and square root of the constant run once, at compile time: the kernel
    reads the result as a literal and computes only the division."""
    x = torch.randn(3, 4)
    (gx,) = to_target([x], target)  # on a GPU, beside the CPU constant: DeBERTa's case
    gm = graph_with_constants(deberta_scale, [gx], {"_tensor_constant0": torch.tensor(64.0)})
    compiled = inductor.compile_fx_inner(gm, [gx], target=target)
    (out,) = compiled(gx)
    assert_close(out, x / torch.sqrt(torch.tensor(64.0) * 2))
    assert compiled.kernel_count == 1
    assert "sqrt" not in compiled.artifacts["loop_ir"]
    literal = repr(torch.sqrt(torch.tensor(128.0)).item())  # the float32 root, exactly
    assert f"ops.constant({literal}, torch.float32)" in compiled.artifacts["loop_ir"]


def test_a_constant_with_dims_folds_to_one_new_constant():
    """``sqrt(v) * 2`` of a vector constant is one new constant of the same size (the
    ``full`` of 2.0 as large as ``v`` is computed for it); its broadcast to the input's
    shape, larger than ``v``, stays a view in the kernel."""
    x, v = torch.randn(3, 4), torch.arange(4.0)

    def fn(p, x, v):
        twice = p.mul(p.sqrt(v), p.full([4], 2.0, dtype=torch.float32, device="cpu"))
        return p.add(x, p.bcast(twice, [3, 4]))

    gm = graph_with_constants(fn, [x], {"v": v})
    fold_constants(gm, torch.device("cpu"))
    assert targets(gm) == ["_folded_constant0", "broadcast_in_dim.default", "add.default"]
    assert_close(gm._folded_constant0, v.sqrt() * 2, rtol=0, atol=0)
    compiled = inductor.compile_fx_inner(gm, [x], target="cpp")
    assert_close(compiled(x)[0], x + v.sqrt() * 2, rtol=0, atol=0)


def test_nothing_larger_than_the_constants_is_folded():
    """A scalar broadcast to [1000, 1000] and summed: the broadcast would hold a million
    elements where the constant has one, so neither it nor the sum is computed."""
    x = torch.randn(3)

    def fn(p, x, c):
        big = p.sum(p.broadcast_in_dim(c, [1000, 1000], []), [0, 1])
        return p.mul(x, p.broadcast_in_dim(big, [3], []))

    gm = graph_with_constants(fn, [x], {"c": torch.tensor(0.5)})
    fold_constants(gm, torch.device("cpu"))
    assert targets(gm) == ["full.default", "broadcast_in_dim.default", "sum.default",
                           "broadcast_in_dim.default", "mul.default"]  # c became the full


def test_random_and_extern_ops_are_not_folded():
    """A random number is drawn at each call, and only prims are run at compile time."""
    assert not foldable_target(prims.rand) and not foldable_target(prims.seed)
    assert not foldable_target(prims.scatter_add) and not foldable_target(torch.ops.aten.mm.default)
    assert foldable_target(prims.sqrt)
    x = torch.randn(3)

    def fn(p, x, c):
        seed = p.seed(torch.device("cpu"))
        noise = p.rand([], seed, 0, dtype=torch.float32, device=torch.device("cpu"))
        return p.mul(x, p.broadcast_in_dim(p.mul(c, noise), [3], []))

    gm = graph_with_constants(fn, [x], {"c": torch.tensor(0.5)})
    fold_constants(gm, torch.device("cpu"))
    assert "rand.default" in targets(gm) and "seed.default" in targets(gm)


def foldable_target(target) -> bool:
    return foldable(torch.fx.Node(torch.fx.Graph(), "n", "call_function", target, (), {}))


def test_a_returned_constant_is_computed_at_each_call():
    """The value a graph returns stays computed in it (a fresh tensor for the caller, on
    the device eager makes it on); its other readers get the folded number."""
    x = torch.randn(3)

    def fn(p, x, c):
        root = p.sqrt(c)
        return p.mul(x, p.broadcast_in_dim(root, [3], [])), root

    gm = graph_with_constants(fn, [x], {"c": torch.tensor(2.0)})
    fold_constants(gm, torch.device("cpu"))
    assert targets(gm) == ["c", "full.default", "sqrt.default", "broadcast_in_dim.default",
                           "mul.default"]
    compiled = inductor.compile_fx_inner(gm, [x], target="cpp")
    out, root = compiled(x)
    assert_close(root, torch.tensor(2.0).sqrt(), rtol=0, atol=0)
    assert_close(out, x * torch.tensor(2.0).sqrt(), rtol=0, atol=0)


# ---- through all four stages ----------------------------------------------------------


def deberta_attention_scale(q):
    """transformers' modeling_deberta_v2: ``scale`` is made on the CPU, whatever device
    ``q`` is on, and cast to ``q``'s dtype."""
    scale = torch.sqrt(torch.tensor(q.size(-1), dtype=torch.float) * 3)
    return q / scale.to(dtype=q.dtype)


def float32_scalar(q):
    """A float32 0-dim tensor beside ``q`` (no cast): eager keeps ``q``'s dtype, as for a
    Python number, and computes with the scalar's own float32 value."""
    return q * torch.sqrt(torch.tensor(q.size(-1), dtype=torch.float) * 3)


def float64_scalar(q):
    return q / (torch.tensor(q.size(-1), dtype=torch.float64) * 0.1)


def vector_constant(q):
    return q + torch.tensor([1.0, 2.0, 3.0, 4.0]).sqrt().to(q.dtype) * 2


@pytest.mark.parametrize("fn", [deberta_attention_scale, float32_scalar, float64_scalar,
                                vector_constant], ids=lambda fn: fn.__name__)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("target", TARGETS)
def test_constants_made_in_traced_code_match_eager(fn, dtype, target):
    """Forward and gradient as eager computes them (to the bit on the CPU); no sqrt left in
    the graphs. On a GPU, ``q`` is there and the constants on the CPU, as in DeBERTa."""
    q = torch.randn(2, 3, 4).to(dtype).to(device_for(target)).requires_grad_()
    if fn is vector_constant and q.device.type != "cpu":
        pytest.skip("eager itself refuses a CPU vector next to a GPU tensor")
    exact = {"rtol": 0, "atol": 0} if q.device.type == "cpu" else {}
    fast = driver.compile(fn, options={"target": target})
    with warnings.catch_warnings():
        warnings.simplefilter("error", dynamo.FallbackWarning)
        got = fast(q)
    want = fn(q)
    assert got.dtype == want.dtype
    assert_close(got, want.cpu(), **exact)
    (grad,) = torch.autograd.grad(got.sum(), q)
    assert_close(grad, torch.autograd.grad(want.sum(), q)[0].cpu(), **exact)
    graphs = [v for r in fast.graphs for k, v in r.artifacts.items() if "prims_graph" in k]
    assert len(graphs) == 2 and not any("sqrt" in g for g in graphs)


def test_folding_removes_the_backward_kernel_of_the_constant():
    """Unfolded, the backward graph recomputed ``sqrt(tensor(4) * 3)`` in a kernel of its
    own, before the one that uses it."""
    q = torch.randn(3, 4, requires_grad=True)
    fast = driver.compile(lambda q: (deberta_attention_scale(q) ** 2).sum(),
                          options={"target": "cpp"})
    fast(q).backward()
    kernels = [k for r in fast.graphs for k in r.artifacts if "kernels/" in k]
    assert len(kernels) == 2, kernels  # one forward, one backward
    assert_close(q.grad, 2 * q.detach() / 12, rtol=1e-6, atol=0)


def test_tensors_from_outside_the_frame_are_read_at_each_call():
    """Parameters, buffers and globals are graph inputs, never folded: changed in place
    after compiling, the compiled function sees the change."""
    lin = torch.nn.Linear(4, 4)
    fast = driver.compile(lambda x: lin(x) * torch.tensor(2.0), options={"target": "cpp"})
    x = torch.randn(3, 4)
    assert_close(fast(x), lin(x) * 2)
    with torch.no_grad():
        lin.weight.mul_(3)
        lin.bias.fill_(1.0)
    assert_close(fast(x), lin(x) * 2)


@pytest.mark.parametrize("target", ["cpp", "triton", "fallback"])
def test_a_returned_constant_is_a_fresh_tensor_at_every_call(target):
    """[Note: a constant the graph returns]: eager makes ``torch.tensor(0)`` anew at every
    call, so a write into one call's result must not show in the next one's."""
    x = to_target([torch.randn(3)], target)[0]
    gm = graph_with_constants(lambda p, x, c: (p.add(x, x), c, c), [x],
                              {"c": torch.tensor(7)})  # on the CPU, whatever x's device
    compiled = inductor.compile_fx_inner(gm, [x], target=target)
    first = compiled(x)
    first[1].add_(5)
    second = compiled(x)
    assert second[1].item() == 7 and second[1] is not first[1]
    assert second[2] is second[1]  # returned twice, one tensor, as in eager
    assert second[1].device == torch.device("cpu")  # read by no kernel: it may stay there
    assert_close(second[0], (x + x).cpu())


def test_a_constant_live_across_a_graph_break_is_fresh_at_every_call():
    def fn(x):
        count = torch.tensor(0)
        y = x + 1
        print("a graph break", file=__import__("io").StringIO())
        return y, count

    compiled = driver.compile(fn)
    x = torch.randn(3)
    compiled(x)[1].add_(5)
    assert compiled(x)[1].item() == 0
