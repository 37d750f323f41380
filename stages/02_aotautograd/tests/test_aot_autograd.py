"""aot_module_simplified: one compile, results equal eager, compilers called as documented."""

import primtorch
import pytest
import torch
import torch.fx as fx
from aotautograd import AOTUnsupported, aot_module_simplified


class Counting:
    """A fw_compiler that records what it was given and runs the graph as is."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append((gm, example_inputs))
        return gm


def model_fn(x, w):
    return (torch.nn.functional.linear(x, w).relu() + 1).sum(-1), x.t()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiles_once_and_matches_eager(dtype):
    gm = fx.symbolic_trace(model_fn)
    x, w = torch.randn(4, 3, dtype=dtype), torch.randn(5, 3, dtype=dtype)
    compiler = Counting()
    compiled = aot_module_simplified(gm, [x, w], compiler,
                                     decompositions=primtorch.decomposition_table)
    assert len(compiler.graphs) == 1
    for _ in range(2):
        x2, w2 = torch.randn(4, 3, dtype=dtype), torch.randn(5, 3, dtype=dtype)
        out = compiled(x2, w2)
        assert isinstance(out, tuple)
        for a, e in zip(out, model_fn(x2, w2)):
            torch.testing.assert_close(a, e, rtol=2e-2, atol=2e-2)
    assert len(compiler.graphs) == 1
    fw_gm, example_inputs = compiler.graphs[0]
    assert example_inputs == [x, w] or all(a is b for a, b in zip(example_inputs, [x, w]))
    report = primtorch.coverage(fw_gm)
    assert not report["fallback"] and set(report["extern"]) == {"aten.mm.default"}


def test_dead_code_is_eliminated():
    def fn(x):
        unused = x.exp() * 3  # noqa: F841  (dead in eager too)
        return (x + 1,)

    compiler = Counting()
    aot_module_simplified(fx.symbolic_trace(fn), [torch.randn(3)], compiler,
                          decompositions=primtorch.decomposition_table)
    fw_gm = compiler.graphs[0][0]
    targets = [n.target for n in fw_gm.graph.nodes if n.op == "call_function"]
    assert primtorch.prims.exp not in targets and primtorch.prims.add in targets


def test_without_decompositions_keeps_aten_ops():
    compiler = Counting()
    compiled = aot_module_simplified(fx.symbolic_trace(model_fn),
                                     [torch.randn(4, 3), torch.randn(5, 3)], compiler)
    report = primtorch.coverage(compiler.graphs[0][0])
    assert not report["prim"] and report["fallback"]
    x, w = torch.randn(4, 3), torch.randn(5, 3)
    torch.testing.assert_close(compiled(x, w), model_fn(x, w))


def test_training_compiles_forward_and_backward():
    x = torch.randn(3, requires_grad=True)
    gm = fx.symbolic_trace(lambda x: x.sin())
    fw, bw = Counting(), Counting()
    compiled = aot_module_simplified(gm, [x], fw, bw)
    assert len(fw.graphs) == 1 and len(bw.graphs) == 1
    (y,) = compiled(x)
    y.sum().backward()
    torch.testing.assert_close(x.grad, x.detach().cos())
    with torch.no_grad():  # the same inputs under no_grad: an inference graph
        assert not compiled(x)[0].requires_grad
    assert len(fw.graphs) == 2 and len(bw.graphs) == 1


def test_without_bw_compiler_the_fw_compiler_compiles_both():
    compiler = Counting()
    aot_module_simplified(torch.nn.Linear(3, 2), [torch.randn(4, 3)], compiler)
    assert len(compiler.graphs) == 2


def test_aot_unsupported_is_the_way_to_give_up():
    with pytest.raises(AOTUnsupported):
        aot_module_simplified(fx.symbolic_trace(lambda x: x.sum().item()),
                              [torch.randn(3)], Counting())
