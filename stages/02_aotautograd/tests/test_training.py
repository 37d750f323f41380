"""Training through aot_module_simplified: joint graphs, functionalization, partitioners and
the runtime, checked against eager (outputs, gradients of parameters and inputs, buffers)."""

import copy

import pytest
import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F
from aot_testing import (
    MODELS,
    TABLE,
    GraphRecorder,
    assert_same_training,
    compile_module,
    model_and_inputs,
    twin,
)
from aotautograd import AOTUnsupported, aot_module_simplified
from aotautograd.partitioners import (
    default_partition,
    min_cut_rematerialization_partition,
    only_reduced,
    save_cost,
)

PARTITIONERS = ["default", "min_cut"]


@pytest.mark.parametrize("decompose", [False, True], ids=["aten", "prims"])
@pytest.mark.parametrize("partitioner", PARTITIONERS)
@pytest.mark.parametrize("name", MODELS)
def test_models_train_like_eager(name, partitioner, decompose):
    eager, model = twin(model_and_inputs(name)[0])
    inputs = model_and_inputs(name)[1]
    compiled = compile_module(model, inputs, partitioner, TABLE if decompose else None)
    assert compiled.partition is not None and compiled.bw_graph is not None
    phases = {n.meta.get("phase") for n in compiled.joint_graph.graph.nodes if n.op != "output"}
    assert phases == {"forward", "backward"}
    assert_same_training(eager, model, compiled, inputs)


@pytest.mark.parametrize("name", MODELS)
def test_min_cut_never_saves_more_than_default(name):
    model, inputs = model_and_inputs(name)
    compiled = compile_module(model, inputs, "min_cut")
    program = compiled.program
    baseline, min_cut = default_partition(program), min_cut_rematerialization_partition(program)
    nodes = {n.name: n for n in program.graph_module.graph.nodes}
    reduced = only_reduced(program.graph_module.graph)

    def cost(partition):  # what the cut minimizes: [Note: saving a value the forward ...]
        return sum(save_cost(nodes[name], reduced) for name in partition.saved)
    assert cost(min_cut) <= cost(baseline)
    assert (min_cut.saved_bytes - min_cut.saved_input_bytes
            < baseline.saved_bytes - baseline.saved_input_bytes)
    assert min_cut.recomputed and not baseline.recomputed
    recomputed_targets = {n.target for n in min_cut.backward.graph.nodes
                          if n.name in min_cut.recomputed}
    assert not any("mm" in str(t) or "rand" in str(t) for t in recomputed_targets)


@pytest.mark.parametrize("name", MODELS)
def test_five_sgd_steps_match_eager(name):
    """Five steps on one batch (so the loss must fall), with parameters, gradients,
    momentum buffers and BatchNorm statistics carried from step to step."""
    eager, model = twin(model_and_inputs(name)[0])
    inputs = model_and_inputs(name, seed=1)[1]
    compiled = compile_module(model, inputs)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    opt_c = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses_e, losses_c = [], []
    for _ in range(5):
        for opt, losses, run in ((opt_e, losses_e, eager), (opt_c, losses_c, compiled)):
            opt.zero_grad()
            loss = run(*inputs)
            loss = loss[0] if isinstance(loss, tuple) else loss
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert len(compiled.entries) == 1  # compiled once
    torch.testing.assert_close(losses_c, losses_e, rtol=1e-4, atol=1e-5)
    assert losses_e[-1] < losses_e[0]


def test_slices_of_one_projection_save_the_projection():
    """[Note: saving a slice]: q, k and v sliced out of one matmul, each needed by the
    backward: the forward saves the matmul's output, not three slices of it (the bytes are
    equal; a saved slice would be a copy), the backward slices it again, and the gradients
    match eager's. From a slice much smaller than its base, only the small values are saved."""

    def attention(x, w):
        q, k, v = (x @ w).split(8, dim=-1)
        return ((q * k).sum(-1, keepdim=True).sigmoid() * v).sum()

    def last(x, w):
        return (x @ w)[:, -1:].tanh().sum()

    for fn in (attention, last):
        x, w = torch.randn(6, 5, requires_grad=True), torch.randn(5, 24, requires_grad=True)
        compiled, _ = check_function(fn, [x, w])
        saved = {n for n in compiled.fw_graph.graph.nodes if n.name in
                 compiled.partition.saved}
        slices = [n for n in saved if n.op == "call_function" and "slice" in str(n.target)]
        if fn is attention:
            assert not slices
            assert any("mm" in str(n.target) for n in saved)
        else:  # what is saved is (6, 1), not the (6, 24) product
            assert not any("mm" in str(n.target) for n in saved)
            assert compiled.partition.saved_bytes - compiled.partition.saved_input_bytes <= 24


def test_a_max_pool_is_not_recomputed_by_the_backward():
    """[Note: a decomposed window op]: the pool after a normalisation and a ReLU, decomposed
    into slices and comparisons, runs once, in the forward, which saves its index; the
    backward recomputes the cheap normalisation and ReLU but no part of the pool (it used to
    redo all nine window comparisons), and the gradients match eager's."""

    def stem(x, w, b):
        y = F.relu((x - x.mean((0, 2, 3), keepdim=True)) * w.view(1, -1, 1, 1)
                   + b.view(1, -1, 1, 1))
        return F.max_pool2d(y, 3, 2, 1).square().sum()

    x = torch.randn(2, 4, 8, 8, requires_grad=True)
    w, b = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    compiled, _ = check_function(stem, [x, w, b])
    recomputed = {n.name for n in compiled.bw_graph.graph.nodes} & set(
        compiled.partition.recomputed)
    pool = [n.name for n in compiled.fw_graph.graph.nodes if n.name in recomputed
            and "max_pool2d" in str(n.meta.get("original_aten"))]
    assert compiled.partition.recomputed and not pool, pool
    saved = [n for n in compiled.fw_graph.graph.nodes if n.name in compiled.partition.saved]
    assert any(n.meta["val"].dtype == torch.int64 for n in saved)  # the pool's index


def run_graph(gm, example_inputs):
    return gm.forward


def check_function(fn, inputs, partitioner="min_cut", tangent_seed=0, fx_trace=True, **tol):
    """Compiled ``fn`` vs eager: outputs, and gradients of every input requiring grad for
    random upstream gradients."""
    gm = fx.symbolic_trace(fn) if fx_trace else fn
    compiled = aot_module_simplified(gm, inputs, GraphRecorder(), decompositions=TABLE,
                                     partitioner=partitioner)
    ins_e = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    ins_c = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    out_e, out_c = fn(*ins_e), compiled(*ins_c)
    out_e = out_e if isinstance(out_e, tuple) else (out_e,)
    assert len(out_c) == len(out_e)
    for c, e in zip(out_c, out_e):
        torch.testing.assert_close(c, e, **tol)
        assert c.requires_grad == e.requires_grad
    torch.manual_seed(tangent_seed)
    pairs = [(c, e) for c, e in zip(out_c, out_e) if e.requires_grad]
    tangents = [torch.randn_like(e) for _, e in pairs]
    wanted = [i for i, x in enumerate(inputs) if x.requires_grad]
    grads_e = torch.autograd.grad([e for _, e in pairs], [ins_e[i] for i in wanted], tangents,
                                  allow_unused=True)
    grads_c = torch.autograd.grad([c for c, _ in pairs], [ins_c[i] for i in wanted], tangents,
                                  allow_unused=True)
    for c, e in zip(grads_c, grads_e):
        assert (c is None) == (e is None)
        if e is not None:
            torch.testing.assert_close(c, e, **tol)
    return compiled, ins_c


def test_multiple_outputs_some_without_grad():
    def fn(x, w, y):
        h = x @ w
        return h.relu(), h.argmax(-1), (y * 2).sum(), h.exp().mean()

    x, w, y = torch.randn(3, 4, requires_grad=True), torch.randn(4, 5), torch.randn(2)
    compiled, _ = check_function(fn, [x, w, y])
    assert compiled.program.grad_primals == [0]  # only x requires grad


def test_unused_input_gets_no_gradient():
    def fn(x, unused):
        return (x.sin() * 3,)

    x, unused = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    compiled, (xc, uc) = check_function(fn, [x, unused])
    compiled(xc, uc)[0].sum().backward()
    assert uc.grad is None and xc.grad is not None


@pytest.mark.parametrize("partitioner", PARTITIONERS)
def test_layernorm_gelu_softmax_cross_entropy(partitioner):
    def fn(x, w, b, target):
        h = F.layer_norm(x, (8,), w, b)
        h = F.gelu(h) + torch.softmax(h, -1)
        return F.cross_entropy(h, target), h

    x = torch.randn(4, 8, requires_grad=True)
    w, b = torch.randn(8, requires_grad=True), torch.randn(8, requires_grad=True)
    check_function(fn, [x, w, b, torch.randint(0, 8, (4,))], partitioner)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cross_entropy_saves_the_logits_not_the_log_softmax(dtype):
    """[Note: saving a value the forward only picks from]: the forward reads the
    log-softmax only through the target gather, so the cut saves the logits (a matrix
    multiply's output) and two numbers a row, and the backward recomputes the softmax."""
    def fn(h, w, target):
        return F.cross_entropy(h @ w.t(), target)

    h = torch.randn(6, 8, dtype=dtype, requires_grad=True)
    w = torch.randn(40, 8, dtype=dtype, requires_grad=True)
    tol = {} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    compiled, _ = check_function(fn, [h, w, torch.randint(0, 40, (6,))], **tol)
    nodes = {n.name: n for n in compiled.program.graph_module.graph.nodes}
    big = [nodes[name] for name in compiled.partition.saved
           if nodes[name].meta["val"].numel() == 6 * 40]
    assert [str(n.target) for n in big] == ["aten.mm.default"]  # the logits alone
    assert sum(1 for name in compiled.partition.saved
               if nodes[name].meta["val"].numel() == 6) >= 2  # the row statistics


def test_embedding():
    def fn(idx, weight):
        return (F.embedding(idx, weight) * 2).sum(1)

    idx = torch.tensor([[0, 2, 2], [1, 0, 3]])
    check_function(fn, [idx, torch.randn(5, 3, requires_grad=True)])


def test_in_place_ops_on_intermediates_train():
    def fn(x, w):
        h = x @ w
        h.mul_(2).add_(1)  # scalar mul_ and add_ save nothing for the backward
        h.relu_()
        return h.sum(-1), h

    check_function(fn, [torch.randn(3, 4, requires_grad=True),
                        torch.randn(4, 5, requires_grad=True)])


def test_mutated_input_is_copied_back_and_output_aliases_stay_aliases():
    def fn(x, counter, w):
        counter.add_(1)  # an input written in place (like num_batches_tracked)
        y = x * w
        return y, counter, w.t()  # counter is returned as itself, w.t() as a view of w

    x, w = torch.randn(2, 3, requires_grad=True), torch.randn(2, 3, requires_grad=True)
    counter = torch.zeros(2, 3)
    compiled = aot_module_simplified(fx.symbolic_trace(fn), [x, counter.clone(), w],
                                     run_graph, decompositions=TABLE)
    y, out_counter, wt = compiled(x, counter, w)
    assert out_counter is counter and torch.equal(counter, torch.ones(2, 3))
    assert wt.data_ptr() == w.data_ptr() and wt.stride() == (1, 3)
    (y.sum() + (wt * 3).sum()).backward()
    torch.testing.assert_close(w.grad, x.detach() + 3)
    compiled(x, counter, w)
    assert torch.equal(counter, torch.full((2, 3), 2.0))


def test_batchnorm_running_statistics_update_identically():
    eager, model = twin(nn.Sequential(nn.BatchNorm1d(4), nn.Linear(4, 2)).train())
    x = torch.randn(8, 4)
    compiled = compile_module(model, [x])
    targets = [n.target for n in compiled.fw_graph.graph.nodes if n.op == "call_function"]
    assert not any(t._schema.is_mutable for t in targets if hasattr(t, "_schema"))
    for _ in range(3):
        x = torch.randn(8, 4)
        compiled(x)[0].sum().backward()
        eager(x).sum().backward()
    for b_c, b_e in zip(model.buffers(), eager.buffers()):
        torch.testing.assert_close(b_c, b_e)
    assert model[0].num_batches_tracked.item() == 3


def test_instance_norm_running_statistics_written_through_an_alias():
    """``F.instance_norm`` writes its running statistics by ``alias(running_mean).copy_``:
    a view that is all of its base, so a write to the base ([Note: mutation through
    views] has that one exception)."""
    eager, model = twin(nn.InstanceNorm2d(3, affine=True, track_running_stats=True).train())
    x = torch.randn(2, 3, 5, 5)
    compiled = compile_module(model, [x])
    for _ in range(3):
        x = torch.randn(2, 3, 5, 5)
        compiled(x)[0].square().sum().backward()
        eager(x).square().sum().backward()
    for b_c, b_e in zip(model.buffers(), eager.buffers()):
        torch.testing.assert_close(b_c, b_e)
    torch.testing.assert_close(model.weight.grad, eager.weight.grad)


def test_no_grad_gives_an_inference_graph():
    model, inputs = model_and_inputs("mlp")
    with torch.no_grad():
        compiled = compile_module(model, inputs)
        assert compiled.bw_graph is None and compiled.partition is None
        loss = compiled(*inputs)[0]
    assert not loss.requires_grad
    torch.testing.assert_close(loss, model(*inputs).detach())
    loss = compiled(*inputs)[0]  # grad mode on again: a second, training entry
    assert loss.requires_grad and len(compiled.entries) == 2


def test_a_guarded_signature_returns_the_entry_without_dispatch(monkeypatch):
    """[Note: a signature the caller guards]: with ``guarded=True`` the entry compiled for
    the example inputs is what is called; no signature is asked per call, and outputs and
    gradients are eager's."""
    import aotautograd.aot_autograd as aot

    w, b = torch.randn(4, 3, requires_grad=True), torch.randn(4, requires_grad=True)
    x = torch.randn(5, 3)

    def fn(x, w, b):
        return (torch.tanh(F.linear(x, w, b)).sum(),)

    compiled = aot_module_simplified(fx.symbolic_trace(fn), [x, w, b], run_graph,
                                     decompositions=TABLE, guarded=True)
    assert compiled is next(iter(compiled.entries.values()))
    monkeypatch.setattr(aot, "signature", lambda primals: pytest.fail("dispatched"))
    (loss,) = compiled(x, w, b)
    loss.backward()
    grads = w.grad.clone(), b.grad.clone()
    w.grad = b.grad = None
    fn(x, w, b)[0].backward()
    torch.testing.assert_close(loss, fn(x, w, b)[0])
    torch.testing.assert_close(grads, (w.grad, b.grad))


@torch.library.custom_op("minipt2_aot_test::scaled_by", mutates_args=())
def scaled_by(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * scale


@scaled_by.register_fake
def _(x, scale):
    return torch.empty_like(x)


scaled_by.register_autograd(  # a backward that asks for a number: no tracer knows it
    lambda ctx, grad: (grad * ctx.scale.item(), None),
    setup_context=lambda ctx, inputs, output: setattr(ctx, "scale", inputs[1]))


def test_an_op_whose_backward_reads_data_is_named_in_the_error():
    """[Note: an op whose backward cannot be traced]: the error says which custom op, so
    that dynamo can keep it out of the graph; without grad the op traces as one node."""
    w = torch.randn(4, 4, requires_grad=True)
    x, scale = torch.randn(3, 4), torch.tensor(3.0)

    def fn(x, w, scale):
        return (torch.ops.minipt2_aot_test.scaled_by(torch.tanh(x @ w), scale).sum(),)

    gm = fx.symbolic_trace(fn)
    with pytest.raises(AOTUnsupported, match="minipt2_aot_test::scaled_by") as error:
        aot_module_simplified(gm, [x, w, scale], run_graph, decompositions=TABLE)
    assert error.value.eager_ops == {"minipt2_aot_test::scaled_by"}
    with torch.no_grad():
        compiled = aot_module_simplified(gm, [x, w, scale], run_graph, decompositions=TABLE)
        torch.testing.assert_close(compiled(x, w, scale)[0], fn(x, w, scale)[0])


def test_dropout_mask_is_the_same_in_forward_and_backward():
    def fn(x):
        return (F.dropout(x, 0.5, training=True) * 3,)

    x = torch.randn(200, 100, requires_grad=True)
    compiled = aot_module_simplified(fx.symbolic_trace(fn), [x], run_graph,
                                     decompositions=TABLE)
    (y,) = compiled(x)
    y.backward(torch.ones_like(y))
    kept = y != 0
    assert 0.45 < kept.float().mean().item() < 0.55  # eager's statistics: p = 0.5
    torch.testing.assert_close(y[kept], (x * 6)[kept])  # scaled by 1 / (1 - p)
    torch.testing.assert_close(x.grad, kept.float() * 6)  # the same mask in the backward
    (y2,) = compiled(x)
    assert not torch.equal(y2 != 0, kept)  # a fresh mask each call


def test_autocast_region_is_traced_with_its_casts():
    def fn(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = x @ w  # bfloat16 under autocast
        return (h.float().tanh(),)

    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 3, requires_grad=True)
    # (symbolic_trace would drop the with-block: trace the function itself)
    compiled, _ = check_function(fn, [x, w], fx_trace=False, rtol=2e-2, atol=2e-2)
    dtypes = {n.meta["val"].dtype for n in compiled.fw_graph.graph.nodes
              if isinstance(n.meta.get("val"), torch.Tensor)}
    assert torch.bfloat16 in dtypes


def test_backward_twice_needs_retain_graph_and_double_backward_raises():
    model, inputs = model_and_inputs("mlp")
    compiled = compile_module(model, inputs)
    loss = compiled(*inputs)[0]
    loss.backward(retain_graph=True)
    first = [p.grad.clone() for p in model.parameters()]
    loss.backward()  # retained: runs again and accumulates
    for p, g in zip(model.parameters(), first):
        torch.testing.assert_close(p.grad, 2 * g)
    with pytest.raises(RuntimeError, match="second time|freed"):
        loss.backward()
    x = inputs[0].clone().requires_grad_()
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(compiled(x, inputs[1])[0], [x], create_graph=True)


def test_closed_over_tensor_requiring_grad_is_rejected():
    w = torch.randn(3, requires_grad=True)
    with pytest.raises(AOTUnsupported, match="closed-over"):
        aot_module_simplified(lambda x: (x * w,), [torch.randn(3, requires_grad=True)],
                              run_graph)


def test_parameters_reached_by_get_attr_get_gradients():
    """A GraphModule whose parameters are attributes (get_attr), as symbolic_trace makes."""
    class Affine(nn.Module):
        def __init__(self):
            super().__init__()
            self.w, self.b = nn.Parameter(torch.randn(4, 3)), nn.Parameter(torch.randn(4))

        def forward(self, x):
            return F.linear(x, self.w, self.b).tanh()

    eager, model = twin(Affine())
    gm = fx.symbolic_trace(model)
    assert any(n.op == "get_attr" for n in gm.graph.nodes)
    x = torch.randn(5, 3)
    compiled = aot_module_simplified(gm, [x], run_graph, decompositions=TABLE)
    compiled(x)[0].sum().backward()
    eager(x).sum().backward()
    for p_c, p_e in zip(gm.parameters(), eager.parameters()):
        torch.testing.assert_close(p_c.grad, p_e.grad)


def test_bad_partitioner_name():
    with pytest.raises(ValueError, match="partitioner"):
        aot_module_simplified(lambda x: (x,), [torch.randn(1)], run_graph, partitioner="x")


def test_backward_compiler_gets_example_inputs_and_meta():
    fw, bw = GraphRecorder(), GraphRecorder()
    model, inputs = model_and_inputs("mlp")
    compiled = aot_module_simplified(copy.deepcopy(model), inputs, fw, bw,
                                     decompositions=TABLE)
    (bw_gm, examples), = bw.graphs
    placeholders = [n for n in bw_gm.graph.nodes if n.op == "placeholder"]
    assert [tuple(e.shape) for e in examples] == [tuple(p.meta["val"].shape)
                                                  for p in placeholders]
    assert compiled.partition.saved == [p.name for p in placeholders][:len(examples) - 1]


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_a_parameter_only_an_unused_output_reads_gets_no_gradient(target):
    """[Note: no gradient where nothing was sent]: a second head the loss leaves out keeps
    ``grad is None``, as in eager, so AdamW's weight decay leaves it alone; the head the loss
    uses, and the trunk both heads read, get eager's gradients."""
    import driver

    class TwoHeads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.trunk = torch.nn.Linear(8, 8)
            self.used, self.unused = torch.nn.Linear(8, 2), torch.nn.Linear(8, 2)

        def forward(self, x):
            h = torch.tanh(self.trunk(x))
            return self.used(h), self.unused(h)

    device = "cuda" if target == "triton" and torch.cuda.is_available() else "cpu"

    def make():
        torch.manual_seed(0)
        model = TwoHeads().to(device)
        return model, torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.5)
    (eager, eager_opt), (model, opt) = make(), make()
    compiled = driver.compile(model, options={"target": target})
    for step in range(2):
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(step)).to(device)
        for net, optimizer in ((eager, eager_opt), (compiled, opt)):
            optimizer.zero_grad()
            net(x)[0].square().sum().backward()
            optimizer.step()
        assert model.unused.weight.grad is None and eager.unused.weight.grad is None
        for (name, mine), theirs in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(mine, theirs, msg=name)
