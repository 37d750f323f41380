"""The benchmark suite's workloads, forward and backward, decompose into prims and extern ops
only (no fallbacks), and the decomposed run computes what eager computes.

``Decompose`` is an eager stand-in for the tracer of stage 2: every aten op that has a
decomposition runs it (recursively, so its own aten calls are decomposed too); every other
op is a leaf, counted as prim, extern or fallback. In-place ops run as their functional
twin followed by a copy into the target, which is how the tracer functionalizes them.
The models are stage 2's ``workload_models`` (one definition for both stages);
``stages/02_aotautograd/tests/test_workloads_through_aot.py`` runs the same workloads
through the real tracer.
"""

import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from primtorch import decomposition_table, op_kind
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).parents[2] / "02_aotautograd" / "tests"))
from workload_models import GPT, MICRO, GeluMLP, ResNet  # noqa: E402

aten = torch.ops.aten
# In-place ops whose functional twin has another overload name.
FUNCTIONAL = {aten.bernoulli_.float: aten.bernoulli.p}


def functional_variant(func):
    if func in FUNCTIONAL:
        return FUNCTIONAL[func]
    name = func._schema.name.split("::")[-1]
    packet = getattr(aten, name[:-1], None) if name.endswith("_") else None
    return getattr(packet, func._overloadname, None) if packet is not None else None


def _has_tensors(args, kwargs) -> bool:
    leaves = torch.utils._pytree.tree_leaves((args, kwargs))
    return any(isinstance(t, torch.Tensor) for t in leaves)


class Decompose(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.leaves = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is aten.copy_.default or not _has_tensors(args, kwargs):
            return func(*args, **kwargs)  # a mutation's write-back; dtype arithmetic
        if func._schema.is_mutable and functional_variant(func) is not None:
            with self:
                out = functional_variant(func)(*args, **kwargs)
            return args[0].copy_(out)
        decomposition = decomposition_table.get(func)
        if decomposition is not None:
            with self:
                out = decomposition(*args, **kwargs)
            if func.is_view and any(out is a for a in args):
                return func(*args, **kwargs)  # a view that changes nothing must still alias
            if out is not NotImplemented:
                return out
        self.leaves[(op_kind(func), str(func))] += 1
        return func(*args, **kwargs)


def _workloads(dropout: float):
    torch.manual_seed(0)
    x, y = (torch.randn(8, 16, requires_grad=True) for _ in range(2))
    b, w = (torch.randn(16, requires_grad=True) for _ in range(2))
    gpt, resnet, mlp = GPT(dropout=dropout, flash=True), ResNet().train(), GeluMLP(16)
    idx = torch.randint(0, 64, (2, 16))
    images, labels = torch.randn(2, 3, 8, 8), torch.tensor([1, 4])
    return {
        "trig": lambda: MICRO["trig"](x, y),
        "gelu_bias": lambda: MICRO["gelu_bias"](x, b),
        "softmax": lambda: MICRO["softmax"](x),
        "layernorm": lambda: MICRO["layernorm"](x, w, b),
        "rmsnorm": lambda: MICRO["rmsnorm"](x, w),
        "rmsnorm_bf16": lambda: MICRO["rmsnorm"](x.bfloat16(), w.bfloat16()),
        "rms_norm": lambda: F.rms_norm(x, (16,), w),
        "group_norm": lambda: F.group_norm(x.view(2, 4, 16), 2, w[:4], b[:4]),
        "mlp_train": lambda: mlp(x),
        "gpt_train": lambda: gpt(idx, idx),
        "convnet_train": lambda: resnet(images, labels),
    }, [x, y, b, w, *mlp.parameters(), *gpt.parameters(), *resnet.parameters()], [
        *resnet.buffers()]


def _pick(name: str, dropout: float):
    fns, params, buffers = _workloads(dropout)
    return fns[name], params, buffers


def _run(fn, params, buffers):
    """The output, the gradients of every parameter it depends on (so that the whole
    backward runs), and the buffers (BatchNorm's running statistics) after the call."""
    out = fn()
    grads = torch.autograd.grad(out.float().sum(), params, allow_unused=True)
    return [out] + [g for g in grads if g is not None] + [b.clone() for b in buffers]


@pytest.mark.parametrize("name", list(_workloads(0.1)[0]))
def test_workloads_decompose_fully(name):
    workload = _pick(name, dropout=0.1)
    with Decompose() as mode:
        _run(*workload)
    fallbacks = sorted(op for (kind, op) in mode.leaves if kind == "fallback")
    assert not fallbacks, f"{name}: not decomposed and not extern: {fallbacks}"
    assert any(kind == "prim" for kind, _ in mode.leaves)


@pytest.mark.parametrize("name", ["gelu_bias", "layernorm", "rmsnorm", "mlp_train",
                                  "gpt_train", "convnet_train", "group_norm"])
def test_workloads_decomposed_match_eager(name):
    """Forward, gradients and running statistics through the decompositions equal eager's
    (no dropout)."""
    expected, workload = _run(*_pick(name, dropout=0.0)), _pick(name, dropout=0.0)
    with Decompose():
        actual = _run(*workload)
    assert len(actual) == len(expected) > 1
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)
