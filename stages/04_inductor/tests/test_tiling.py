"""2-D tiled Triton pointwise kernels: transposes read and write coalesced ([Note: tiling]).

Each case runs against eager (in the interpreter without a GPU) and checks whether the kernel
was tiled, and where the loop variables were cut into y and x.
"""

from __future__ import annotations

import re

import inductor
import pytest
import torch
from inductor.codegen.triton import TritonKernel, tiling_split
from inductor.graph import GraphLowering
from inductor.scheduler import Scheduler
from inductor_testing import assert_close, device_for, prims_graph, to_target


def compile_and_run(fn, inputs, target="triton"):
    inputs = to_target(inputs, target)
    compiled = inductor.compile_fx_inner(prims_graph(fn, inputs), inputs, target=target)
    return compiled, compiled(*inputs)


def kernels(compiled) -> list[str]:
    return [v for k, v in compiled.artifacts.items() if k.startswith("kernels/")]


def is_tiled(source: str) -> bool:
    return "YBLOCK: tl.constexpr" in source and "tl.program_id(1)" in source


def make(shape, dtype):
    if dtype.is_floating_point:
        return torch.randn(shape).to(dtype)
    if dtype == torch.bool:
        return torch.randn(shape) > 0
    return torch.randint(-1000, 1000, shape, dtype=dtype)


def transpose_copy(p, a):  # x.t().contiguous(), spelled with prims
    return p.convert_element_type(p.permute(a, [1, 0]), a.meta["val"].dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
@pytest.mark.parametrize("shape", [(37, 53), (1, 53), (64, 128), (5, 3)])
def test_transposed_copy(dtype, shape):
    x = make(shape, dtype)
    compiled, (out,) = compile_and_run(transpose_copy, [x])
    (source,) = kernels(compiled)
    assert is_tiled(source) == (shape[0] > 1)  # a [1, n] transpose is a flat copy
    assert out.is_contiguous() and out.dtype == dtype
    assert_close(out, x.t().contiguous())


@pytest.mark.parametrize("target", ["triton", "cpp"])
def test_add_own_transpose(target):
    x = torch.randn(37, 37)
    compiled, (out,) = compile_and_run(lambda p, a: p.add(a, p.permute(a, [1, 0])), [x],
                                       target)
    (source,) = kernels(compiled)
    assert is_tiled(source) == (target == "triton")
    assert_close(out, x + x.t())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_batched_transpose(dtype):
    x = make((3, 37, 53), dtype)  # [B, M, N] -> [B, N, M]: y is (b, n), x is m
    compiled, (out,) = compile_and_run(
        lambda p, a: p.mul(p.permute(a, [0, 2, 1]), p.scalar(2.0, p.permute(a, [0, 2, 1]))),
        [x])
    (source,) = kernels(compiled)
    assert is_tiled(source)
    assert "y1 = yindex % 53" in source and "y0 = (yindex // 53)" in source
    assert_close(out, x.permute(0, 2, 1) * 2)


def test_rotation_permute():
    x = torch.randn(5, 6, 7)  # [A, B, C] -> [C, A, B]: (a, b) collapse into x, c is y
    compiled, (out,) = compile_and_run(lambda p, a: p.neg(p.permute(a, [2, 0, 1])), [x])
    (source,) = kernels(compiled)
    assert is_tiled(source) and "x1" not in source  # a 2-D transpose after collapsing
    assert_close(out, -x.permute(2, 0, 1))


def test_channels_last():
    x = torch.randn(2, 3, 5, 7)  # NCHW -> NHWC
    compiled, (out,) = compile_and_run(lambda p, a: p.exp(p.permute(a, [0, 2, 3, 1])), [x])
    (source,) = kernels(compiled)
    assert is_tiled(source)
    assert_close(out, x.permute(0, 2, 3, 1).exp())


def test_attention_head_permute_stays_flat():
    x = torch.randn(2, 5, 7, 16)  # permute(0, 2, 1, 3): rows of 16 stay contiguous
    compiled, (out,) = compile_and_run(lambda p, a: p.sin(p.permute(a, [0, 2, 1, 3])), [x])
    (source,) = kernels(compiled)
    assert not is_tiled(source)
    assert_close(out, x.permute(0, 2, 1, 3).sin())


def test_broadcasts_stay_flat():
    a, b = torch.randn(37), torch.randn(53)

    def fn(p, u, v):
        return p.add(p.broadcast_in_dim(u, [37, 53], [0]), p.broadcast_in_dim(v, [37, 53], [1]))

    compiled, (out,) = compile_and_run(fn, [a, b])
    (source,) = kernels(compiled)
    assert not is_tiled(source)
    assert_close(out, a[:, None] + b[None, :])


def test_transpose_with_broadcast_bias():
    x, bias = torch.randn(37, 53), torch.randn(37)

    def fn(p, a, c):
        return p.add(p.permute(a, [1, 0]), p.broadcast_in_dim(c, [53, 37], [1]))

    compiled, (out,) = compile_and_run(fn, [x, bias])
    (source,) = kernels(compiled)
    assert is_tiled(source)
    assert_close(out, x.t() + bias)


@pytest.mark.parametrize("make_input", [
    lambda: torch.randn(53, 37).t(),  # a transposed input, read into a contiguous result
    lambda: torch.randn(53, 74)[:, ::2].t(),  # transposed and strided
    lambda: torch.randn(4, 53, 37).permute(0, 2, 1)[1:3],  # an offset into the storage
], ids=["transposed", "strided", "offset"])
def test_strided_inputs(make_input):
    x = make_input()
    y = torch.randn(x.shape)
    compiled, (out,) = compile_and_run(lambda p, a, b: p.mul(a, b), [x, y])
    (source,) = kernels(compiled)
    assert is_tiled(source)
    assert_close(out, x * y)


def test_several_outputs_in_one_tiled_kernel():
    x = torch.randn(29, 41)

    def fn(p, a):
        t = p.permute(a, [1, 0])
        return p.sin(t), p.mul(t, p.scalar(3.0, t)), p.sin(a)

    compiled, (s, m, plain) = compile_and_run(fn, [x])
    sources = kernels(compiled)
    assert len(sources) == 2 and sum(map(is_tiled, sources)) == 1
    assert_close(s, x.t().sin())
    assert_close(m, x.t() * 3)
    assert_close(plain, x.sin())


@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (1, 1)])
def test_empty_and_single(shape):
    x = torch.randn(shape)
    compiled, (out,) = compile_and_run(lambda p, a: p.abs(p.permute(a, [1, 0])), [x])
    assert_close(out, x.t().abs())


@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (1, 1), (37, 53)])
def test_every_tiled_store_covers_the_whole_tile(shape):
    """[Note: dense stores]: tl.store broadcasts value and mask to the address, never the
    address; so each store's address varies along y and x, or is broadcast to the tile, and
    its mask names both edges. (A GPU refused the [0, 5] kernel: see
    test_triton_gpu_compile.py, which compiles these kernels for one.)"""
    x = torch.randn(shape)
    three = [shape[1], shape[0]]  # index-independent values, stored beside the transpose
    compiled, (out, full) = compile_and_run(
        lambda p, a: (p.abs(p.permute(a, [1, 0])),
                      p.full(three, 3.0, dtype=torch.float32, device=device_for("triton"))),
        [x])
    assert_close(out, x.t().abs())
    assert_close(full, torch.full(three, 3.0))
    stores = [line.strip() for source in kernels(compiled) if is_tiled(source)
              for line in source.splitlines() if line.strip().startswith("tl.store(")]
    assert stores or shape in [(5, 0), (1, 1)]  # those two stay flat (x has < 2 elements)
    for line in stores:
        address, mask = line[len("tl.store("):line.index(", ")], line[:-1].rsplit(", ", 1)[1]
        spans = re.search(r"\by\d", address) and re.search(r"\bx\d", address)
        assert spans or "tl.broadcast_to(" in address, line
        assert {"ymask", "xmask"} <= set(mask.split(" & ")), line


def splits(fn, inputs) -> list:
    graph = GraphLowering(prims_graph(fn, inputs), inputs)
    graph.run(*inputs)
    scheduler = Scheduler(graph.operations, {o.name for o in graph.graph_outputs})
    return [tiling_split(TritonKernel(g, scheduler.removed, graph.buffer_by_name))
            for g in scheduler.groups]


def test_tiling_split_reads_the_strides():
    x3 = torch.randn(3, 4, 5)
    assert splits(lambda p, a: p.neg(p.permute(a, [1, 0, 2])), [x3]) == [None]  # rows of 5
    assert splits(lambda p, a: p.neg(p.permute(a, [0, 2, 1])), [x3]) == [2]  # y: (b, n)
    # [A, B, C] -> [C, B, A]: c is y, so reads are dense along y; (b, a) is x
    assert splits(lambda p, a: p.neg(p.permute(a, [2, 1, 0])), [x3]) == [1]
    assert splits(lambda p, a: p.neg(a), [x3.transpose(0, 2)]) == [1]
    assert splits(lambda p, a: p.neg(a), [torch.randn(4, 10)[:, ::2].t()]) == [1]  # stride 2
    assert splits(lambda p, a: p.neg(a), [x3]) == [None]


def test_huge_y_extent_stays_flat():
    x = torch.empty_strided((2**22, 2), (1, 2**22))  # y would need 2**17 programs on axis 1
    gm = prims_graph(lambda p, a: p.neg(a), [x])
    compiled = inductor.compile_fx_inner(gm, [x], target="triton")  # compiled, not run
    (source,) = kernels(compiled)
    assert not is_tiled(source)
    small = torch.empty_strided((64, 2), (1, 64))
    compiled = inductor.compile_fx_inner(prims_graph(lambda p, a: p.neg(a), [small]),
                                         [small], target="triton")
    assert is_tiled(kernels(compiled)[0])
