"""[Note: the last program finishes] (codegen/last_program.py) against eager.

Splitting only happens for CUDA tensors; these tests let CPU tensors split too, so the
Triton interpreter runs the one-launch form (one program at a time, the last one last) and
the GPU run of the suite (``MINIPT2_TEST_DEVICE=cuda``) runs it with programs in parallel.
"""

from __future__ import annotations

import re

import inductor
import pytest
import torch
from inductor import launcher
from inductor import split_reduction as sr
from inductor.codegen.last_program import tiling
from inductor_testing import assert_close, device_for, prims_graph, results, to_target


@pytest.fixture(autouse=True)
def split_on_cpu(monkeypatch):
    monkeypatch.setattr(sr, "SPLIT_DEVICES", {"cuda", "cpu"})


def counters(compiled):
    """The stream's tile counters, as many as the kernels' comments say they use."""
    kernels = [t for k, t in compiled.artifacts.items() if k.startswith("kernels/")]
    count = max(int(n) for t in kernels for n in re.findall(r"counter: (\d+) tile", t))
    return launcher.last_program_scratch(device_for("triton"))[0][:count]


def compile_and_run(fn, inputs, target="triton"):
    inputs = to_target(inputs, target)
    compiled = inductor.compile_fx_inner(prims_graph(fn, inputs), inputs, target=target)
    return compiled, inputs


@pytest.mark.parametrize("kind", ["sum", "amax", "amin", "mean"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_full_reduction_is_one_launch(kind, dtype):
    x = torch.randn(3, 1 << 14).to(dtype)

    def fn(p, a):
        wide = p.convert_element_type(a, torch.float32)
        if kind == "mean":
            total = p.sum(wide, [0, 1])
            return (p.div(total, p.scalar(float(x.numel()), total)),)
        return (getattr(p, kind)(wide, [0, 1]),)

    compiled, inputs = compile_and_run(fn, [x])
    assert compiled.kernel_count == 1
    assert "_then_" in compiled.artifacts["wrapper"]
    want = {"sum": x.float().sum(), "amax": x.float().amax(), "amin": x.float().amin(),
            "mean": x.float().mean()}[kind]
    for _ in range(3):  # the counter is back at zero after every launch
        (out,) = compiled(*inputs)
        assert_close(out, want, rtol=1e-5, atol=1e-5)
    call = compiled.artifacts["wrapper"].split("def call")[1]
    assert call.count("empty_strided(") == 1  # the result; the partials are in the scratch
    assert not counters(compiled).any()


def test_every_call_gives_the_same_number():
    """The last program adds the partials in their order, as the second kernel did, and
    leaves the counter at zero for the next call. (The interpreter runs the programs in one
    order; on a GPU, ``MINIPT2_TEST_DEVICE=cuda``, they finish in a different one each time.)"""
    x = torch.randn(1 << 16)
    compiled, inputs = compile_and_run(lambda p, a: (p.sum(a, [0]),), [x])
    first = compiled(*inputs)[0].item()
    assert all(compiled(*inputs)[0].item() == first for _ in range(5))
    assert_close(torch.tensor(first), x.sum(), rtol=1e-5, atol=1e-4)


def test_two_losses_share_the_kernel_and_its_last_program():
    """A mean and an MSE over the same rows fuse horizontally: one kernel, two partials."""
    x, y = torch.randn(512, 256), torch.randn(512, 256)

    def fn(p, a, b):
        d = p.sub(a, b)
        total, squares = p.sum(a, [0, 1]), p.sum(p.mul(d, d), [0, 1])
        count = p.scalar(float(x.numel()), total)
        return (p.div(total, count), p.div(squares, count))

    compiled, inputs = compile_and_run(fn, [x, y])
    assert compiled.kernel_count == 1
    assert set(compiled.kernel_groups.values()) == {0}  # the report colours one kernel
    mean, mse = compiled(*inputs)
    assert_close(mean, x.mean(), rtol=1e-5, atol=1e-6)
    assert_close(mse, torch.nn.functional.mse_loss(x, y), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_column_sum_is_one_launch_with_a_counter_per_tile(dtype):
    """A bias gradient: partials laid out [S, columns], a tile's last writer finishes it."""
    x = torch.randn(4096, 96).to(dtype)

    def fn(p, a):
        return (p.sum(p.convert_element_type(a, torch.float32), [0]),)

    compiled, inputs = compile_and_run(fn, [x])
    assert compiled.kernel_count == 1
    for _ in range(3):
        assert_close(compiled(*inputs)[0], x.float().sum(0), rtol=1e-4, atol=1e-3)
    tiles = counters(compiled)
    assert tiles.numel() > 1 and not tiles.any()  # one per tile, all back at zero


def test_kernels_with_more_tiles_find_their_counters_at_zero():
    """Partials must never land where a counter lives: a column sum of 64 columns (2 tiles)
    then one of 2048 (64 tiles), and again. With the partials in the counters' buffer after
    the first kernel's two counters, the second kernel's counters 32 and on held the first's
    partials and its sums came out wrong (on the H200: off by 93 %)."""
    small, large = torch.randn(4096, 64), torch.randn(4096, 2048)
    first, (a,) = compile_and_run(lambda p, x: (p.sum(x, [0]),), [small])
    second, (b,) = compile_and_run(lambda p, x: (p.sum(x, [0]),), [large])
    assert first.kernel_count == second.kernel_count == 1
    for _ in range(2):
        assert_close(first(a)[0], small.sum(0), rtol=1e-4, atol=1e-3)
        assert_close(second(b)[0], large.sum(0), rtol=1e-4, atol=1e-3)


def test_rows_that_split_are_one_launch():
    """A few long rows (fewer than [Note: rows that need no split] leaves whole): the
    partials are [rows, S], and each row's programs feed one tile."""
    x = torch.randn(8, 1 << 15)
    compiled, inputs = compile_and_run(lambda p, a: (p.amax(a, [1]),), [x])
    assert compiled.kernel_count == 1
    assert_close(compiled(*inputs)[0], x.amax(1))


def test_mean_and_m2_of_everything():
    """Welford's split ([Note: welford]): the chunks' means and m2, then their combination,
    which reads the combined mean too."""
    x = torch.randn(1 << 16).double() * 3 + 1
    compiled, inputs = compile_and_run(lambda p, a: tuple(results(p, p.mean_m2(a, [0]), 2)),
                                       [x.float()])
    mean, m2 = compiled(*inputs)
    assert_close(mean.double(), x.mean(), rtol=1e-4, atol=1e-5)
    assert_close(m2.double(), x.var(correction=0) * x.numel(), rtol=1e-4, atol=1e-2)


def test_tiling():
    """Which tile a program feeds ([Note: the last program finishes])."""
    full = tiling(False, rows1=1024, t1=8, outputs=1, t2=1, splits=1024)
    assert (full.tile, full.need, full.count) == ("pid // 128", 128, 1)  # one tile
    rows = tiling(False, rows1=16 * 64, t1=4, outputs=16, t2=2, splits=64)
    assert (rows.tile, rows.need, rows.count) == ("pid // 32", 32, 8)
    columns = tiling(True, rows1=8 * 2048, t1=32, outputs=2048, t2=64, splits=8)
    assert (columns.tile, columns.need, columns.count) == ("(pid % 64) // 2", 16, 32)
    assert tiling(True, rows1=8 * 2048, t1=64, outputs=2048, t2=32, splits=8) is None
    assert tiling(False, rows1=1000, t1=16, outputs=1, t2=1, splits=1000) is None


def test_pairs_that_print_alike_but_differ_in_size_are_two_kernels():
    """Two sums whose kernels print alike ([Note: one kernel for equal loops]) have
    different sizes, which the combined kernels write as numbers: two names, two sources.
    (Under one name, the second would run the first's code: a wrong answer.)"""
    x, y = torch.randn(1 << 16), torch.randn(1 << 17)
    compiled, inputs = compile_and_run(lambda p, a, b: (p.sum(a, [0]), p.sum(b, [0])), [x, y])
    names = [k for k in compiled.artifacts if k.startswith("kernels/")]
    assert len(names) == 2 and all("_then_" in n for n in names)
    got = compiled(*inputs)
    assert_close(got[0], x.sum(), rtol=1e-5, atol=1e-4)
    assert_close(got[1], y.sum(), rtol=1e-5, atol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_under_cuda_graphs_a_recording_has_its_own_counters():
    import driver

    compiled = driver.compile(lambda a: (a * 2).mean(), mode="reduce-overhead")
    for seed in range(4):  # warm-up, recording, then replays on new values
        torch.manual_seed(seed)
        x = torch.randn(1 << 20, device="cuda")
        assert_close(compiled(x), ((x * 2).mean()).cpu(), rtol=1e-5, atol=1e-6)
    assert "_then_" in compiled.graphs[0].artifacts["wrapper"]


def test_a_bias_gradient_is_one_launch_with_the_weight_gradient_between():
    """A Linear's backward: the gradient (a pointwise loop), the weight gradient (a library
    multiply that reads it) and the bias gradient. The column sum joins the gradient's kernel
    ([Note: a column sum's producer]), before the multiply; the sum of its partials, after
    the multiply, is still finished by that kernel's last programs (``reader_step``)."""
    g, a, x = torch.randn(4096, 96), torch.randn(4096, 96), torch.randn(4096, 32)

    def fn(p, g, a, x):
        grad = p.mul(g, p.tanh(a))
        weight = p.call(torch.ops.aten.mm.default, p.permute(grad, [1, 0]), x)
        return (weight, p.sum(grad, [0]))

    compiled, inputs = compile_and_run(fn, [g, a, x])
    assert compiled.kernel_count == 1, compiled.artifacts["fusion"]
    weight, bias = compiled(*inputs)
    grad = g * torch.tanh(a)
    assert_close(weight, grad.t() @ x, rtol=1e-4, atol=1e-3)
    assert_close(bias, grad.sum(0), rtol=1e-4, atol=1e-3)


def test_results_written_into_inputs_in_place():
    """A column sum added into an input and a mean copied into another (the inputs' new
    values, [Note: writing an input in place]), beside an amax: the second stages write
    the inputs themselves, from inside the first kernels."""
    import driver

    device = device_for("triton")

    def f(x, y, acc):
        acc.add_(x.sum(0))
        y.copy_(x.mean())
        return (x * 2).amax()

    x = torch.randn(1024, 64, device=device)
    y, acc = torch.zeros((), device=device), torch.ones(64, device=device)
    y_eager, acc_eager = y.clone(), acc.clone()
    compiled = driver.compile(f, options={"target": "triton"}, fullgraph=True)
    for _ in range(2):
        assert_close(compiled(x, y, acc), f(x, y_eager, acc_eager).cpu())
        assert_close(y, y_eager.cpu(), rtol=1e-5, atol=1e-6)
        assert_close(acc, acc_eager.cpu(), rtol=1e-5, atol=1e-4)
    assert compiled.graphs[0].artifacts["wrapper"].count("_then_") >= 2


def test_a_transformer_layer_with_every_reduction_split_trains_like_eager(monkeypatch):
    """Thresholds lowered so that layer norms, bias gradients and the loss all split: the
    pairs of a real training graph, each one launch, against eager's loss and gradients."""
    import driver

    monkeypatch.setattr(sr, "MIN_CHUNK", 8)
    monkeypatch.setattr(sr, "OUTER_MIN_CHUNK", 4)
    monkeypatch.setattr(sr, "ENOUGH_ROWS", 1 << 30)
    device = device_for("triton")
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    model = torch.nn.Sequential(layer, torch.nn.Linear(32, 16)).to(device)
    twin = torch.nn.Sequential(
        torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True),
        torch.nn.Linear(32, 16)).to(device)
    twin.load_state_dict(model.state_dict())
    x, y = torch.randn(4, 16, 32, device=device), torch.randint(16, (4 * 16,), device=device)
    loss_of = lambda m, a: torch.nn.functional.cross_entropy(m(a).flatten(0, 1), y)  # noqa: E731
    compiled = driver.compile(lambda a: loss_of(model, a), options={"target": "triton"},
                              fullgraph=True)
    loss = compiled(x)
    loss.backward()
    want = loss_of(twin, x)
    want.backward()
    assert_close(loss, want.cpu(), rtol=1e-5, atol=1e-6)
    for got, ref in zip(model.parameters(), twin.parameters()):
        assert_close(got.grad, ref.grad.cpu(), rtol=1e-4, atol=1e-5)
    (record,) = compiled.graphs
    wrappers = record.artifacts["wrapper"] + record.artifacts["backward/wrapper"]
    merged = set(re.findall(r"(triton_\w+_then_\w+?)_launch\b", wrappers))
    assert len(merged) >= 8, merged  # 11 now: Welford, softmax, the loss, column sums


def test_switched_off_it_is_two_launches(monkeypatch):
    monkeypatch.setenv("MINIPT2_LAST_PROGRAM", "0")
    x = torch.randn(1 << 16)
    compiled, inputs = compile_and_run(lambda p, a: (p.sum(a, [0]),), [x])
    assert compiled.kernel_count == 2
    assert_close(compiled(*inputs)[0], x.sum(), rtol=1e-5, atol=1e-4)


def test_the_cpp_printer_keeps_two_kernels():
    x = torch.randn(1 << 16)
    compiled, inputs = compile_and_run(lambda p, a: (p.sum(a, [0]),), [x], target="cpp")
    assert compiled.kernel_count == 2
    assert_close(compiled(*inputs)[0], x.sum(), rtol=1e-5, atol=1e-4)


def test_a_training_step_with_a_mean_loss_matches_eager():
    """Through every stage: the loss's and the bias gradient's two launches become one
    each; gradients as eager's."""
    import driver

    torch.manual_seed(0)
    device = device_for("triton")
    model = torch.nn.Linear(256, 256).to(device)
    x, y = torch.randn(512, 256, device=device), torch.randn(512, 256, device=device)
    eager = torch.nn.Linear(256, 256).to(device)
    eager.load_state_dict(model.state_dict())
    compiled = driver.compile(lambda a, b: torch.nn.functional.mse_loss(model(a), b),
                              options={"target": "triton"}, fullgraph=True)
    loss = compiled(x, y)
    loss.backward()
    want = torch.nn.functional.mse_loss(eager(x), y)
    want.backward()
    assert_close(loss, want.cpu(), rtol=1e-5, atol=1e-6)
    assert_close(model.weight.grad, eager.weight.grad.cpu(), rtol=1e-4, atol=1e-5)
    assert_close(model.bias.grad, eager.bias.grad.cpu(), rtol=1e-4, atol=1e-5)
    (record,) = compiled.graphs
    assert "_then_" in record.artifacts["wrapper"]  # the loss
    assert "_then_" in record.artifacts["backward/wrapper"]  # the bias gradient
