"""Test helpers: the training models (defined in ``workload_models``), compilers that run
the graphs they are given, and the eager-vs-compiled training check (outputs, gradients,
buffers)."""

from __future__ import annotations

import copy

import primtorch
import torch
from aotautograd import aot_module_simplified
from workload_models import GPT, MLP, ResNet

TABLE = primtorch.decomposition_table


class GraphRecorder:
    """A compiler that checks the graph's contract (every node has a meta tensor in
    ``meta["val"]``), remembers it, and runs it as it is."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        for node in gm.graph.nodes:
            if node.op not in ("output",) and node.op != "get_attr":
                val = node.meta.get("val")
                assert val is not None or node.op == "placeholder", node.format_node()
                if isinstance(val, torch.Tensor):
                    assert val.device.type == "meta", node.format_node()
        self.graphs.append((gm, list(example_inputs)))
        return gm.forward


def compile_module(module, inputs, partitioner="min_cut", decompositions=TABLE):
    return aot_module_simplified(module, inputs, GraphRecorder(), GraphRecorder(),
                                 decompositions=decompositions, partitioner=partitioner)


def model_and_inputs(name: str, seed: int = 0):
    torch.manual_seed(seed)
    if name == "mlp":
        return MLP(), [torch.randn(6, 8), torch.randn(6, 4)]
    if name == "gpt2":
        return GPT(), [torch.randint(0, 64, (2, 16)), torch.randint(0, 64, (2, 16))]
    if name == "convnet":
        return ResNet().train(), [torch.randn(4, 3, 8, 8), torch.randint(0, 5, (4,))]
    raise ValueError(name)


MODELS = ["mlp", "gpt2", "convnet"]


def fresh(inputs: list) -> list:
    """Copies of the inputs, as new leaves (so eager and compiled runs get their own .grad)."""
    return [x.detach().clone().requires_grad_(x.requires_grad)
            if isinstance(x, torch.Tensor) else x for x in inputs]


def assert_same_training(eager, compiled_model, compiled, inputs, rtol=1e-4, atol=1e-5):
    """One forward and backward (output 0 is the loss, or gets a random upstream gradient):
    outputs, gradients of the inputs and of ``compiled_model``'s parameters (None for a
    function), and buffers after the call equal eager's."""
    ins_c, ins_e = fresh(inputs), fresh(inputs)
    out_c, out_e = compiled(*ins_c), eager(*ins_e)
    out_e = out_e if isinstance(out_e, tuple) else (out_e,)
    for c, e in zip(out_c, out_e, strict=True):
        torch.testing.assert_close(c, e, rtol=rtol, atol=atol)
    grad = torch.ones_like(out_e[0]) if out_e[0].dim() == 0 else torch.randn_like(out_e[0])
    out_c[0].backward(grad)
    out_e[0].backward(grad)
    pairs = [(f"input {i}", c, e) for i, (c, e) in enumerate(zip(ins_c, ins_e))
             if isinstance(e, torch.Tensor)]
    if compiled_model is not None:
        pairs += [(name, c, e) for (name, c), e in zip(compiled_model.named_parameters(),
                                                      eager.parameters(), strict=True)]
    for name, c, e in pairs:
        assert (c.grad is None) == (e.grad is None), name
        if e.grad is not None:
            torch.testing.assert_close(c.grad, e.grad, rtol=rtol, atol=atol, msg=name)
    if compiled_model is not None:
        for (name, b_c), b_e in zip(compiled_model.named_buffers(), eager.buffers(),
                                    strict=True):
            torch.testing.assert_close(b_c, b_e, rtol=rtol, atol=atol, msg=name)


def twin(model):
    return model, copy.deepcopy(model)
