"""mode="reduce-overhead": CUDA graphs around the wrapper (inductor/cudagraphs.py).

The bookkeeping (which inputs are copied, when a recording is busy) is tested on CPU tensors
with a stand-in for the recorded graph; recording and replaying for real needs a GPU.
"""

from __future__ import annotations

import pytest
import torch
from inductor import cudagraphs
from inductor.cudagraphs import (
    CudaGraphRunner,
    PassedThrough,
    Recording,
    is_placed,
    passed_through,
    placed_layout,
    placements,
)

import driver

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")


class FakeGraph:
    """Replays ``fn`` (static inputs -> writes into static outputs) like a recording would."""

    def __init__(self, fn):
        self.fn, self.replays = fn, 0

    def replay(self):
        self.replays += 1
        self.fn()


def make_recording(x_static, w):
    out = torch.empty(3)
    graph = FakeGraph(lambda: torch.mul(x_static, w.detach(), out=out))
    return Recording(graph, [x_static, placed_layout(w)], [False, True], (out,),
                     [out, x_static])


def test_a_recording_keeps_no_reference_to_a_placed_input():
    """[Note: a recording holds no placed input]: in a training step the backward's placed
    inputs are the forward recording's outputs; held, they kept it busy for good."""
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0, 3.0]))
    before = cudagraphs._use_count(w)
    rec = make_recording(torch.zeros(3), w)
    assert cudagraphs._use_count(w) == before
    assert not any(isinstance(a, torch.Tensor) and a.data_ptr() == w.data_ptr()
                   for a in rec.inputs)


def test_an_output_that_is_a_placed_input_is_the_calls_own_argument():
    w = torch.nn.Parameter(torch.arange(6.0))
    sources = {w.untyped_storage().data_ptr(): 1}
    assert passed_through(w, [None, w], sources) == PassedThrough(1)
    view = w[2:].view(2, 2)
    kept = passed_through(view, [None, w], sources)
    assert kept == PassedThrough(1, ((2, 2), (2, 1), 2))
    torch.testing.assert_close(kept.rebuild([None, w]), view)
    other = torch.ones(3)
    assert passed_through(other, [None, w], sources) is other
    out = torch.empty(3)
    rec = Recording(FakeGraph(lambda: torch.mul(w[:3].detach(), 2, out=out)),
                    [placed_layout(w)], [True], (out, PassedThrough(0)), [out])
    result = rec.replay([w])
    assert result[1] is w  # the argument itself, as the plain call returns it
    torch.testing.assert_close(result[0], w.detach()[:3] * 2)


def test_copied_inputs_are_copied_and_placed_ones_read_in_place():
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0, 3.0]))
    assert is_placed(w) and not is_placed(torch.ones(3))
    rec = make_recording(torch.zeros(3), w)
    x = torch.tensor([1.0, 1.0, 1.0])
    assert rec.accepts([x, w])
    assert not rec.accepts([x, torch.nn.Parameter(w.detach().clone())])  # other address
    assert not rec.accepts([torch.ones(4), w])  # other shape
    (out,) = rec.replay([x, w])
    torch.testing.assert_close(out, x * w.detach())


def test_a_held_output_makes_the_recording_busy():
    w = torch.nn.Parameter(torch.ones(3))
    rec = make_recording(torch.zeros(3), w)
    assert not rec.busy()
    (out,) = rec.replay([torch.ones(3), w])
    assert rec.busy()  # the caller holds ``out``: a replay would overwrite it
    view = out[1:]
    del out
    assert rec.busy()  # a view of it is enough
    del view
    assert not rec.busy()


def test_runner_never_overwrites_a_live_output(monkeypatch):
    """Two outputs alive: the second recording; three: a plain call. Values always right."""
    recorded = []

    def fake_record(self, args):
        static = torch.empty(3)
        static.copy_(args[0])
        rec = make_recording(static, args[1])
        recorded.append(rec)
        return rec

    monkeypatch.setattr(CudaGraphRunner, "record", fake_record)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(cudagraphs, "room_for_another", lambda args: True)
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0, 3.0]))
    runner = CudaGraphRunner(lambda x, w: (x * w.detach(),))
    xs = [torch.full((3,), float(i)) for i in range(5)]
    outs = [runner(x, w)[0] for x in xs]  # all kept alive
    assert len(recorded) == 2  # call 1 warms up, 2 and 3 record, 4 and 5 run plainly
    for x, out in zip(xs, outs):
        torch.testing.assert_close(out, x * w.detach())
    del outs
    out = runner(xs[1], w)[0]  # both recordings free again: replayed
    torch.testing.assert_close(out, xs[1] * w.detach())
    assert recorded[0].graph.replays + recorded[1].graph.replays == 3


def test_each_shape_gets_its_own_recordings_up_to_a_limit(monkeypatch):
    """[Note: a recording per shape]: a dynamic-shape graph called at several sizes replays
    a recording of each size; sizes beyond ``MAX_SHAPES`` run plainly, still right."""
    recorded = []

    def fake_record(self, args):
        static = torch.empty_like(args[0])
        static.copy_(args[0])
        out = torch.empty_like(static)
        w = args[1]
        graph = FakeGraph(lambda: torch.mul(static, w.detach(), out=out))
        rec = Recording(graph, [static, placed_layout(w)], [False, True], (out,), [out, static])
        recorded.append(rec)
        return rec

    monkeypatch.setattr(CudaGraphRunner, "record", fake_record)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(cudagraphs, "room_for_another", lambda args: True)
    monkeypatch.setattr(cudagraphs, "MAX_SHAPES", 2)
    w = torch.nn.Parameter(torch.tensor(3.0))
    runner = CudaGraphRunner(lambda x, w: (x * w.detach(),))
    for _ in range(3):
        for n in (2, 3, 4):  # call 1 (size 2) warms up; sizes 3 and 4 take the two shapes
            x = torch.arange(float(n))
            torch.testing.assert_close(runner(x, w)[0], x * 3)
    assert len(recorded) == 2 and len(runner.recordings) == 2
    assert runner.replays == 6  # sizes 3 and 4, every round; size 2 always plain
    assert sum("2 shapes recorded already" in line for line in runner.log) == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8])
def test_a_warm_up_copy_keeps_sizes_strides_and_alignment(dtype):
    """The recording's warm-up runs on copies of its placed inputs; a copy must lie at the
    same address modulo 16, or Triton would compile another variant than the one captured."""
    base = torch.arange(64).to(dtype)
    for t in (base[1:9], base[3:19].view(4, 4).t(), base[16:32]):
        copy = cudagraphs._like(t, same_alignment=True)
        assert copy.data_ptr() % 16 == t.data_ptr() % 16
        assert copy.shape == t.shape and copy.stride() == t.stride()
        assert torch.equal(copy, t) and copy.data_ptr() != t.data_ptr()


def test_no_further_recording_when_device_memory_runs_low(monkeypatch):
    """[Note: a recording per shape]: past the first recording, a shape is recorded only
    while a quarter of the device's memory is free; otherwise it runs plainly."""
    recorded = []

    def fake_record(self, args):
        out = torch.empty_like(args[0])
        static = args[0].clone()
        rec = Recording(FakeGraph(lambda: torch.mul(static, 2, out=out)), [static], [False],
                        (out,), [out, static])
        recorded.append(rec)
        return rec

    free = {"bytes": 100}
    monkeypatch.setattr(CudaGraphRunner, "record", fake_record)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free["bytes"], 1000))
    runner = CudaGraphRunner(lambda x: (x * 2,))
    for n in (2, 3, 4):  # warm-up, then the first recording whatever the memory
        runner(torch.ones(n))
    assert len(recorded) == 1 and "quarter of the device's memory" in runner.log[-1]
    free["bytes"] = 300
    torch.testing.assert_close(runner(torch.ones(4))[0], torch.full((4,), 2.0))
    assert len(recorded) == 2


def test_inputs_that_keep_their_address_are_placed():
    """[Note: static addresses]: a parameter, and a tensor found where it lay in the call
    before the recording (a running statistic); a batch at a new address is copied."""
    weight = torch.nn.Parameter(torch.ones(3))
    running_mean, batch, new_batch = torch.zeros(3), torch.ones(3), torch.ones(3)
    before = [weight.data_ptr(), running_mean.data_ptr(), batch.data_ptr(), None]
    assert placements([weight, running_mean, new_batch, 7], before) == [True, True, False,
                                                                        False]
    assert placements([weight, running_mean, batch, 7], None) == [True, False, False, False]


def test_reduce_overhead_on_cpu_runs_without_cuda_graphs():
    def f(x):
        return torch.relu(x) * 2

    compiled = driver.compile(f, mode="reduce-overhead")
    x = torch.randn(8)
    for _ in range(3):
        torch.testing.assert_close(compiled(x), f(x))


@cuda
def test_reduce_overhead_mlp_inference_and_training_on_gpu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 8)).cuda()
    twin = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                               torch.nn.Linear(64, 8)).cuda()
    twin.load_state_dict(model.state_dict())
    compiled = driver.compile(twin, mode="reduce-overhead")
    xs = [torch.randn(16, 32, device="cuda") for _ in range(4)]
    with torch.no_grad():
        outs = [compiled(x) for x in xs]  # held together: never overwritten
        for x, out in zip(xs, outs):
            torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)
    opt_a = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(twin.parameters(), lr=0.1)
    for step in range(5):
        for fn, opt in ((model, opt_a), (compiled, opt_b)):
            loss = fn(xs[step % 4]).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        torch.testing.assert_close(twin[0].weight, model[0].weight, rtol=1e-4, atol=1e-5)


class Broken(torch.nn.Module):
    """Two graphs and a branch on ``.item()`` between them, trained: each forward saves its
    inputs (parameters, the previous graph's output) for its backward."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(32, 32), torch.nn.Linear(32, 32)

    def forward(self, x, target):
        h = torch.nn.functional.gelu(self.fc1(x))
        if h.mean().item() > -1:
            h = self.fc2(h) * 0.5
        return torch.nn.functional.mse_loss(torch.tanh(h), target)


@cuda
def test_reduce_overhead_training_steps_replay_their_recordings():
    """[Note: a recording holds no placed input]: from the third step on, every graph of a
    training step (forwards and backwards, across a graph break) replays a recording, and
    the weights follow eager's."""
    import gc

    torch.manual_seed(0)
    model, twin = Broken().cuda(), Broken().cuda()
    twin.load_state_dict(model.state_dict())
    compiled = driver.compile(twin, mode="reduce-overhead")
    opt_a = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(twin.parameters(), lr=0.1)
    x, target = torch.randn(16, 32, device="cuda"), torch.randn(16, 32, device="cuda")
    known = {id(o) for o in gc.get_objects() if isinstance(o, CudaGraphRunner)}
    steps = 8
    for _ in range(steps):
        for fn, opt in ((model, opt_a), (compiled, opt_b)):
            opt.zero_grad(set_to_none=True)
            loss = fn(x, target)
            loss.backward()
            opt.step()
        torch.testing.assert_close(twin.fc1.weight, model.fc1.weight, rtol=1e-4, atol=1e-5)
    runners = [o for o in gc.get_objects()
               if isinstance(o, CudaGraphRunner) and id(o) not in known and o.calls]
    assert len(runners) >= 4  # two forwards, two backwards (the mean's graph aside)
    for runner in runners:
        assert runner.failed is None, runner.failed
        assert runner.replays == runner.calls - 1, runner.log  # all but the warm-up


@cuda
def test_reduce_overhead_dynamic_shapes_replay_a_recording_per_size():
    """[Note: a recording per shape]: one symbolic graph called at four sizes, the outputs of
    a round held while the next round runs: every call but the warm-up replays."""
    import gc

    def f(x):
        return torch.nn.functional.gelu(x) * 2 + 1

    compiled = driver.compile(f, mode="reduce-overhead", dynamic=True)
    xs = [torch.randn(n, 64, device="cuda") for n in (8, 12, 20, 36)]
    known = {id(o) for o in gc.get_objects() if isinstance(o, CudaGraphRunner)}
    outs: list = []
    for _ in range(3):
        outs = [compiled(x) for x in xs]  # the previous round's outputs are still held
        for x, out in zip(xs, outs):
            torch.testing.assert_close(out, f(x))
    (runner,) = [o for o in gc.get_objects()
                 if isinstance(o, CudaGraphRunner) and id(o) not in known and o.calls]
    assert runner.calls == 12 and runner.replays == 11, runner.log
    assert len(runner.recordings) == 4


@cuda
def test_a_dropped_recordings_addresses_are_forgotten():
    """A tensor the allocator later puts where a dropped recording's output was is an
    ordinary input, not a placed one."""
    import gc

    def f(x):
        return torch.relu(x) + 1

    compiled = driver.compile(f, mode="reduce-overhead")
    x = torch.randn(64, device="cuda")
    outs = [compiled(x) for _ in range(3)]
    address = outs[-1].data_ptr()
    assert address in cudagraphs._STATIC_OUTPUT_PTRS
    del compiled, outs
    driver.reset()  # dynamo's cache drops the compiled graph, and with it the recordings
    gc.collect()
    assert address not in cudagraphs._STATIC_OUTPUT_PTRS


@cuda
def test_reduce_overhead_batchnorm_statistics_written_in_place_match_eager():
    """[Note: writing an input in place] under CUDA graphs: the running statistics keep
    their address, so the recording reads and writes them where they lie ([Note: static
    addresses]; its warm-up works on copies, so each step updates them once); five training
    steps give eager's statistics and weights."""
    torch.manual_seed(0)

    def make():
        return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                   torch.nn.ReLU()).cuda()

    model, twin = make(), make()
    twin.load_state_dict(model.state_dict())
    compiled = driver.compile(twin, mode="reduce-overhead")
    opt_a = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(twin.parameters(), lr=0.1)
    for _ in range(5):  # cuDNN on: its float32 BatchNorm decomposes like the native one
        x = torch.randn(4, 3, 8, 8, device="cuda")
        for fn, opt in ((model, opt_a), (compiled, opt_b)):
            loss = fn(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    for (name, got), want in zip(twin.named_buffers(), model.buffers()):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=name)
    torch.testing.assert_close(twin[0].weight, model[0].weight, rtol=1e-4, atol=1e-5)
    assert "written in place" in "\n".join(g.artifacts["wrapper"] for g in compiled.graphs)
