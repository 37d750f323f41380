"""Lowerings that move or make data: slice, iota, cat (masked loads), gather/scatter/
scatter_add (indirect indexing, bounds), and rand (Philox in the kernel). Each is checked
against eager on both printers, and for fusing: no FallbackKernel, the expected kernel count.
"""

from __future__ import annotations

import os
import subprocess
import sys

import inductor
import pytest
import torch
import torch.nn.functional as F
from inductor_testing import assert_close, device_for, prims_graph, shape_of, to_target

import driver

TARGETS = ["cpp", "triton"]


def compile_and_run(fn, inputs, target):
    inputs = to_target(inputs, target)
    compiled = inductor.compile_fx_inner(prims_graph(fn, inputs), inputs, target=target)
    return compiled, compiled(*inputs)


def forward_kernels(record) -> list[str]:
    """The forward graph's kernels (a training graph also has ``backward/kernels/...``)."""
    return [key for key in record.artifacts if key.startswith("kernels/")]


def assert_no_library_call(compiled, *names):
    """None of the prims ``names`` ran as a library call (FallbackKernel)."""
    ir = compiled.artifacts["loop_ir"]
    for name in names:
        assert f"FallbackKernel(minipt2.{name}" not in ir, ir


def make(shape, dtype, transposed=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g).to(dtype)
    else:
        x = torch.randint(-50, 50, shape, generator=g).to(dtype)
    return x.transpose(0, -1).contiguous().transpose(0, -1) if transposed else x


# ---- slice and iota: index arithmetic --------------------------------------------------

SLICES = [  # (shape, starts, limits, strides)
    ((7, 9), [1, 0], [7, 9], [2, 3]),
    ((7, 9), [0, 4], [7, 5], [1, 1]),  # a size-1 result dim
    ((3, 1, 8), [1, 0, 2], [3, 1, 8], [1, 1, 5]),
    ((5, 6), [2, 3], [2, 6], [1, 1]),  # empty
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("case", range(len(SLICES)))
def test_slice_is_a_view(target, dtype, case):
    shape, starts, limits, strides = SLICES[case]
    x = make(shape, dtype, transposed=case % 2 == 0)
    compiled, (out,) = compile_and_run(
        lambda p, a: p.add(p.slice(a, starts, limits, strides),
                           p.slice(a, starts, limits, strides)), [x], target)
    want = x[tuple(slice(s, e, st) for s, e, st in zip(starts, limits, strides))]
    assert_close(out, want + want)
    assert_no_library_call(compiled, "slice")
    assert compiled.kernel_count == 1


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("start,step,length", [(0, 1, 13), (5, -2, 9), (-7, 3, 1)])
@pytest.mark.parametrize("dtype", [torch.int64, torch.float32])
def test_iota_fuses_into_its_user(target, start, step, length, dtype):
    x = make((3, length), torch.float32)
    device = device_for(target)  # where the kernel's output lives (a GPU for Triton, if any)

    def fn(p, a):
        positions = p.iota(length, start=start, step=step, dtype=dtype, device=device)
        row = p.convert_element_type(positions, torch.float32)
        return p.add(a, p.broadcast_in_dim(row, shape_of(a), [1]))

    compiled, (out,) = compile_and_run(fn, [x], target)
    want = torch.arange(length) * step + start
    assert_close(out, x + want.float())
    assert_no_library_call(compiled, "iota")
    assert compiled.kernel_count == 1
    _, (positions,) = compile_and_run(
        lambda p, a: p.iota(length, start=start, step=step, dtype=dtype, device=device), [x],
        target)
    assert torch.equal(positions.cpu(), want.to(dtype))


# ---- cat: nested where over masked loads -----------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_cat_of_pointwise_values_is_one_kernel(target, dim, dtype):
    a, b = make((4, 5, 3), dtype, transposed=True), make((4, 5, 3), dtype, seed=1)
    c = make((4, 5, 3), dtype, seed=2)
    shapes = {0: [(2, 5, 3), (1, 5, 3)], 1: [(4, 2, 3), (4, 1, 3)], -1: [(4, 5, 2), (4, 5, 1)]}
    b = b[tuple(slice(0, n) for n in shapes[dim][0])].clone()
    c = c[tuple(slice(0, n) for n in shapes[dim][1])].clone()

    def fn(p, x, y, z):
        if dtype == torch.bool:
            return p.cat([p.logical_not(x), y, z], dim % 3)
        return p.cat([p.abs(x), p.add(y, y), z], dim % 3)

    compiled, (out,) = compile_and_run(fn, [a, b, c], target)
    want = torch.cat([~a, b, c] if dtype == torch.bool else [a.abs(), b + b, c], dim)
    assert_close(out, want)
    assert_no_library_call(compiled, "cat")
    assert compiled.kernel_count == 1


@pytest.mark.parametrize("target", TARGETS)
def test_cat_skips_empty_inputs_and_reads_no_other_input(target):
    """The loads of each input carry the mask of its range: Triton masks them, C++ reads
    inside an if. (Reading out of range would show up as garbage or a crash.)"""
    x, y = torch.randn(3, 1), torch.randn(3, 6)
    compiled, (out,) = compile_and_run(
        lambda p, a, e, b: p.cat([a, e, b], 1), [x, torch.randn(3, 0), y], target)
    assert_close(out, torch.cat([x, y], 1))
    source = next(v for k, v in compiled.artifacts.items() if k.startswith("kernels/"))
    if target == "triton":
        assert source.count("tl.load(") == 2 and source.count("xmask & tmp") == 2, source
    else:
        assert source.count("if (tmp") == 2, source


# ---- gather and friends: indirect loads ------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_gather(target, dim, dtype):
    a = make((6, 5), dtype, transposed=True)
    g = torch.Generator().manual_seed(3)
    index = torch.randint(0, a.shape[dim], (4, 5) if dim == 0 else (6, 7), generator=g)
    index = index[:, :5] if dim == 0 else index
    compiled, (out,) = compile_and_run(lambda p, x, i: p.gather(p.neg(x), dim, i),
                                       [a, index], target)
    assert_close(out, torch.gather(-a, dim, index))
    assert_no_library_call(compiled, "gather")
    assert compiled.kernel_count == 1


@pytest.mark.parametrize("target", TARGETS)
def test_gather_from_a_buffer_of_the_same_kernel_space_is_not_fused(target):
    """The gathered element was written by another iteration: the producer must finish
    first, so it is a kernel of its own ([Note: indirect indexing])."""
    x, index = torch.randn(8, 4), torch.tensor([[7, 0, 3, 3]] * 8)

    def fn(p, a, i):
        shared = p.mul(p.sin(a), p.cos(a))  # two users: realized
        return p.gather(shared, 0, i), p.add(shared, shared)

    compiled, (out, twice) = compile_and_run(fn, [x, index], target)
    want = x.sin() * x.cos()
    assert_close(out, torch.gather(want, 0, index))
    assert_close(twice, want + want)
    assert "another iteration's element" in compiled.artifacts["fusion"]
    assert compiled.kernel_count == 2


@pytest.mark.parametrize("target", TARGETS)
def test_out_of_range_index_reads_nothing_by_default(target):
    """Default mode: an out-of-range index (torch raises) gives 0 and reads no memory
    outside the tensor; see [Note: indirect indexing]."""
    x, index = torch.randn(10, 4), torch.tensor([1, 10, -1, 9, 1 << 40])

    def fn(p, a, i):
        return p.gather(a, 0, p.broadcast_in_dim(i, [5, 4], [0]))

    _, (out,) = compile_and_run(fn, [x, index], target)
    want = torch.zeros(5, 4)
    want[[0, 3]] = x[[1, 9]]
    assert_close(out, want)


DEBUG_SCRIPT = """
import sys, torch, inductor
sys.path.insert(0, {tests!r})
from inductor_testing import prims_graph, to_target
x, index = torch.randn(10, 4), torch.tensor([1, 12, 3])
inputs = to_target([x, index], {target!r})
gm = prims_graph(lambda p, a, i: p.gather(a, 0, p.broadcast_in_dim(i, [3, 4], [0])), inputs)
compiled = inductor.compile_fx_inner(gm, inputs, target={target!r})
try:
    compiled(*inputs)
except Exception as e:
    print("raised:", e)
"""


@pytest.mark.parametrize("target", TARGETS)
def test_debug_asserts_stop_on_an_out_of_range_index(target):
    """MINIPT2_DEBUG_ASSERTS=1: the kernel checks the index where it reads, and stops as
    torch would raise (C++: a message and abort; Triton: device_assert, or IndexError
    under the interpreter). A subprocess, since the C++ check ends the process."""
    env = dict(os.environ, MINIPT2_DEBUG_ASSERTS="1")
    script = DEBUG_SCRIPT.format(tests=os.path.dirname(__file__), target=target)
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300)
    output = run.stdout + run.stderr
    assert "index out of bounds" in output and "< 10" in output, output
    if target == "cpp":
        assert run.returncode != 0 and "got 12" in output
    elif device_for(target).type == "cpu":
        assert "raised:" in output and "12" in output


@pytest.mark.parametrize("target", TARGETS)
def test_embedding_plus_position_is_one_kernel(target):
    torch.manual_seed(0)
    emb, pos = torch.nn.Embedding(50, 16), torch.randn(9, 16)
    device = device_for(target)
    emb, pos = emb.to(device), pos.to(device)

    def fn(tokens):
        return emb(tokens) + pos  # (B, T, C)

    tokens = torch.randint(0, 50, (4, 9), device=device)
    compiled = driver.compile(fn, options={"target": target})
    assert_close(compiled(tokens), fn(tokens).cpu())
    (record,) = compiled.graphs
    assert len(forward_kernels(record)) == 1
    assert "FallbackKernel" not in record.artifacts["loop_ir"]


# ---- scatter and scatter_add: indirect stores ------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_scatter_with_unique_indices(target, dim, dtype):
    """Unique indices only: with repeated ones, which value wins is unspecified (torch too).
    """
    a = make((6, 5), dtype, transposed=True)
    index = torch.stack([torch.randperm(a.shape[dim], generator=torch.Generator()
                                        .manual_seed(k))[:3] for k in range(5)], 1)
    index = index if dim == 0 else index.t()[:4]  # (3, 5) or (4, 3)
    src = make(tuple(index.shape), dtype, seed=4)
    compiled, (out,) = compile_and_run(lambda p, x, i, s: p.scatter(p.neg(x), dim, i, s),
                                       [a, index, src], target)
    assert_close(out, torch.scatter(-a, dim, index, src))
    assert_no_library_call(compiled, "scatter")
    assert compiled.kernel_count == 2  # the copy of the base, then the scatter


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.float64])
def test_scatter_add_accumulates_repeated_indices(target, dtype):
    a = make((6, 5), dtype, transposed=True)
    index = torch.randint(0, 6, (40, 5), generator=torch.Generator().manual_seed(1))
    src = make((40, 5), dtype, seed=2)

    def fn(p, x, i, s):
        out = p.scatter_add(x, 0, i, p.mul(s, s))
        return p.add(out, out)  # reads the result: after both loops

    compiled, (out,) = compile_and_run(fn, [a, index, src], target)
    want = torch.scatter_add(a, 0, index, src * src)
    assert_close(out, want + want)
    assert_no_library_call(compiled, "scatter_add")


@pytest.mark.parametrize("target", TARGETS)
def test_scatter_add_of_bfloat16_is_a_library_call(target):
    a, src = torch.randn(4, 3).bfloat16(), torch.randn(6, 3).bfloat16()
    index = torch.randint(0, 4, (6, 3))
    compiled, (out,) = compile_and_run(lambda p, x, i, s: p.scatter_add(x, 0, i, s),
                                       [a, index, src], target)
    # on a GPU the library adds in bfloat16 in another order than the CPU: a step apart
    assert_close(out, torch.scatter_add(a, 0, index, src), rtol=2**-6, atol=2**-6)
    assert "FallbackKernel(minipt2.scatter_add" in compiled.artifacts["loop_ir"]


@pytest.mark.parametrize("target", TARGETS)
def test_embedding_backward_matches_eager(target):
    torch.manual_seed(0)
    device = device_for(target)
    emb = torch.nn.Embedding(30, 8).to(device)
    tokens = torch.randint(0, 30, (5, 7), device=device)  # repeats: atomic adds
    grad = torch.randn(5, 7, 8, device=device)

    def loss(t):
        return (emb(t) * grad).sum()

    compiled = driver.compile(loss, options={"target": target})
    compiled(tokens).backward()
    got, emb.weight.grad = emb.weight.grad.clone(), None
    loss(tokens).backward()
    assert_close(got, emb.weight.grad.cpu())
    artifacts = compiled.graphs[0].artifacts
    assert "FallbackKernel(minipt2.scatter_add" not in artifacts["backward/loop_ir"]


# ---- rand: Philox in the kernel ---------------------------------------------------------

def philox_reference(seed: int, offset: int, stream: int) -> int:
    """Philox-4x32-10, written from the Random123 paper's definition (first output word)."""
    mask = 0xFFFFFFFF
    c, k = [offset & mask, (offset >> 32) & mask, stream, 0], [seed & mask, seed >> 32]
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & mask, (p0 >> 32) ^ c[3] ^ k[1], p0 & mask]
        k = [(k[0] + 0x9E3779B9) & mask, (k[1] + 0xBB67AE85) & mask]
    return c[0]


def rand_graph(shape, offset, dtype, target="cpp"):
    """``rand`` makes a new tensor: on the device the target's kernels run on."""
    device = device_for(target)
    return lambda p, seed: p.rand(shape, seed, offset, dtype=dtype, device=device)


@pytest.mark.parametrize("target", TARGETS)
def test_rand_is_philox_and_uniform(target):
    assert philox_reference(0, 0, 0) == 0x6627E8D5  # Random123's known-answer vector
    seed = torch.tensor(123456789012345)
    compiled, (u,) = compile_and_run(rand_graph([400, 250], 1, torch.float32, target),
                                     [seed], target)
    u = u.cpu()
    assert_no_library_call(compiled, "rand")
    for element in (0, 1, 99999):
        assert u.view(-1)[element].item() == (philox_reference(int(seed), element, 1) >> 8) \
            * 2.0 ** -24
    assert 0 <= u.min() and u.max() < 1
    assert abs(u.mean().item() - 0.5) < 0.005 and abs(u.var().item() - 1 / 12) < 0.002
    counts = torch.histc(u, bins=10, min=0, max=1)
    assert (counts - 10000).abs().max() < 500  # ~5 sigma


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_rand_other_dtypes_stay_below_one(target, dtype):
    _, (u,) = compile_and_run(rand_graph([300, 100], 0, dtype, target), [torch.tensor(7)],
                              target)
    assert u.dtype == dtype and 0 <= u.min() and u.max() < 1
    assert abs(u.double().mean().item() - 0.5) < 0.01


def test_rand_same_seed_same_numbers_on_both_printers():
    seed, other = torch.tensor(2024), torch.tensor(2025)
    runs = {t: compile_and_run(rand_graph([64, 33], 0, torch.float32, t), [s], t)[1][0].cpu()
            for t in TARGETS for s in [seed]}
    assert torch.equal(runs["cpp"], runs["triton"])
    _, (again,) = compile_and_run(rand_graph([64, 33], 0, torch.float32), [seed], "cpp")
    _, (reseeded,) = compile_and_run(rand_graph([64, 33], 0, torch.float32), [other], "cpp")
    _, (stream,) = compile_and_run(rand_graph([64, 33], 1, torch.float32), [seed], "cpp")
    assert torch.equal(again, runs["cpp"])
    assert not torch.equal(reseeded, runs["cpp"]) and not torch.equal(stream, runs["cpp"])


@pytest.mark.parametrize("target", TARGETS)
def test_dropout_add_is_one_kernel_and_backward_uses_its_mask(target):
    device = device_for(target)
    x = torch.randn(300, 70, device=device, requires_grad=True)
    y = torch.randn(300, 70, device=device)

    def fn(a, b):
        return F.dropout(a, 0.25, training=True) + b

    compiled = driver.compile(fn, options={"target": target})
    torch.manual_seed(5)
    out = compiled(x, y)
    out.backward(torch.ones_like(out))
    kept = ((out - y) != 0).cpu()
    assert abs(kept.float().mean().item() - 0.75) < 0.01
    assert_close((out - y).cpu()[kept], (x.detach().cpu() / 0.75)[kept])
    assert_close(x.grad, kept.float() / 0.75)  # the backward drops what the forward did
    (record,) = compiled.graphs
    assert len(forward_kernels(record)) == 1  # seed is a library call; the rest one kernel
    assert "FallbackKernel(minipt2.rand" not in record.artifacts["loop_ir"]
    torch.manual_seed(5)
    assert torch.equal(compiled(x, y), out)  # torch.manual_seed makes it repeatable
    assert not torch.equal(compiled(x, y), out)


@pytest.mark.parametrize("target", TARGETS)
def test_training_with_dropout_learns(target):
    torch.manual_seed(0)
    device = device_for(target)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(32, 1)).to(device)
    x = torch.randn(64, 8, device=device)
    y = x.sum(1, keepdim=True)
    compiled = driver.compile(model, options={"target": target})
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = F.mse_loss(compiled(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-5:]) < 0.5 * sum(losses[:5])


def test_reshape_index_by_groups_matches_the_flat_split():
    """``lowering.unflatten`` splits a static reshape into groups of dims with equal sizes
    ([8, 1024, 768] -> [8192, 768] is [8, 1024] -> [8192] and [768] -> [768]); every
    address must be the one the whole flat position gives, size-1 dims included."""
    import itertools
    import math
    import random

    import sympy
    from inductor.ir import flat_index
    from inductor.lowering import _reshape_groups, _split, unflatten

    assert _reshape_groups((8192, 768), (8, 1024, 768)) == [([0], [0, 1]), ([1], [2])]
    assert _reshape_groups((4, 6), (6, 4)) == [([0, 1], [0, 1])]
    rng = random.Random(0)
    for _ in range(40):
        in_size = [rng.choice([1, 2, 3, 4, 6]) for _ in range(rng.randint(0, 4))]
        out_size, rest = [], math.prod(in_size)
        while rest > 1:
            factor = rng.choice([d for d in range(2, rest + 1) if rest % d == 0])
            out_size.append(factor)
            rest //= factor
        if rng.random() < 0.3:
            out_size.insert(rng.randint(0, len(out_size)), 1)
        syms = [sympy.Symbol(f"i{k}", integer=True, nonnegative=True)
                for k in range(len(out_size))]
        got = unflatten(tuple(syms), tuple(out_size), tuple(in_size))
        want = _split(flat_index(syms, out_size), in_size)
        for point in itertools.product(*map(range, out_size)):
            env = dict(zip(syms, point))
            assert [sympy.sympify(e).subs(env) for e in got] == \
                [sympy.sympify(e).subs(env) for e in want], (out_size, in_size, point)
