"""Exercise aotautograd-record-op: ``Tracer.record`` in aotautograd/proxy_tensor.py."""

import primtorch
import torch
from aotautograd import TracerTensor, trace

aten = torch.ops.aten


def test_one_node_per_op_with_meta_val():
    x, y = torch.randn(2, 3), torch.randn(3)
    gm = trace(lambda x, y: torch.mul(x, y).sum(0), [x, y])
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert [n.target for n in calls] == [aten.mul.Tensor, aten.sum.dim_IntList]
    assert calls[0].meta["val"].shape == (2, 3) and calls[0].meta["val"].device.type == "meta"
    assert calls[1].meta["val"].shape == (3,)
    torch.testing.assert_close(gm(x, y)[0], (x * y).sum(0))


def test_outputs_are_tracer_tensors_with_the_real_device_and_dtype():
    seen = []

    def fn(x):
        y = x.to(torch.float64)
        seen.append(y)
        return y

    trace(fn, [torch.randn(4)])
    (y,) = seen
    assert isinstance(y, TracerTensor)
    assert (y.shape, y.dtype, y.device) == ((4,), torch.float64, torch.device("cpu"))
    assert y.meta.device.type == "meta"


def test_constants_and_scalars_are_baked_in():
    c = torch.tensor([1.0, 2.0])
    gm = trace(lambda x: x * c + 3, [torch.ones(2)])
    assert len([n for n in gm.graph.nodes if n.op == "get_attr"]) == 1
    add = [n for n in gm.graph.nodes if n.target == aten.add.Tensor][0]
    assert add.args[1] == 3
    assert gm(torch.ones(2))[0].tolist() == [4.0, 5.0]


def test_factories_keep_their_device_and_prims_are_recorded():
    def fn(x):
        return x + torch.zeros(2, 2, dtype=torch.float64)

    gm = trace(fn, [torch.ones(2)])
    zeros = [n for n in gm.graph.nodes if n.target == aten.zeros.default][0]
    assert zeros.kwargs["device"] == torch.device("cpu")
    assert zeros.meta["val"].device.type == "meta" and zeros.meta["val"].shape == (2, 2)
    gm = trace(fn, [torch.ones(2)], primtorch.decomposition_table)
    assert primtorch.coverage(gm)["prim"]["minipt2.add.default"] == 1
    assert gm(torch.ones(2))[0].dtype == torch.float64


def test_multi_output_ops_use_getitem():
    gm = trace(lambda x: torch.sort(x)[1], [torch.tensor([3.0, 1.0, 2.0])])
    assert gm(torch.tensor([3.0, 1.0, 2.0]))[0].tolist() == [1, 2, 0]
