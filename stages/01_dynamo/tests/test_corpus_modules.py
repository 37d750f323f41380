"""Corpus: nn.Modules — layers, containers, attributes, training mode, and two real-model
shapes (a GPT-2-style transformer, a ResNet-style CNN with BatchNorm)."""

from __future__ import annotations

import math
import types
import warnings

import dynamo
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F


def compare(backend, module, make_input, graphs=1, calls=((2, 4), (2, 4), (3, 6))):
    """Compiled module vs eager module (a deep copy), on each input shape in ``calls``."""
    import copy

    reference = copy.deepcopy(module)
    opt = dynamo.optimize(backend)(module.forward)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dynamo.FallbackWarning)
        for i, shape in enumerate(calls):
            torch.manual_seed(i)
            x = make_input(*shape)
            torch.testing.assert_close(opt(x), reference(x))
            if i == 1 and graphs is not None:
                assert backend.calls == graphs
    for (name, a), b in zip(module.state_dict().items(), reference.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)  # buffers updated alike (BatchNorm)
    return opt


def randn(b, n):
    return torch.randn(b, n)


class MLP(nn.Module):
    def __init__(self, n=8, hidden=16, act="gelu"):
        super().__init__()
        self.fc1 = nn.Linear(n, hidden)
        self.fc2 = nn.Linear(hidden, n)
        self.act = act
        self.drop = nn.Dropout(0.0)

    def forward(self, x):
        h = self.fc1(x)
        h = F.gelu(h) if self.act == "gelu" else F.relu(h)
        return self.fc2(self.drop(h))


class Residual(nn.Module):
    def __init__(self, n=8):
        super().__init__()
        self.norm = nn.LayerNorm(n)
        self.mlp = MLP(n)

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class Stack(nn.Module):
    def __init__(self, n=8, depth=3):
        super().__init__()
        self.blocks = nn.ModuleList([Residual(n) for _ in range(depth)])
        self.head = nn.Sequential(nn.Linear(n, n), nn.ReLU(), nn.Linear(n, 2))

    def forward(self, x):
        for i, block in enumerate(self.blocks):
            x = block(x) if i % 2 == 0 else block(x) * 0.5
        return self.head(x)


class Heads(nn.Module):
    def __init__(self, n=8):
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(n, 3), "b": nn.Linear(n, 4)})
        self.register_buffer("offset", torch.ones(1))
        self.scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, x):
        outs = {name: head(x) * self.scale for name, head in self.heads.items()}
        return torch.cat([outs["a"], outs["b"]], dim=-1) + self.offset + len(self.heads)


class UsesHelpers(nn.Module):
    def __init__(self, n=8):
        super().__init__()
        self.proj = nn.Linear(n, n, bias=False)
        self.eps = 1e-5

    @property
    def weight_norm(self):
        return self.proj.weight.norm()

    def normalize(self, x):
        return x / (x.norm(dim=-1, keepdim=True) + self.eps)

    def forward(self, x):
        return self.normalize(self.proj(x)) * self.weight_norm


class TrainingSwitch(nn.Module):
    def __init__(self, n=8):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        y = self.lin(x)
        return y * 2 if self.training else y - 1


class Embedder(nn.Module):
    def __init__(self, vocab=11, n=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, n)
        self.out = nn.Linear(n, vocab)
        self.out.weight = self.emb.weight  # tied weights: one tensor, two names

    def forward(self, idx):
        return self.out(self.emb(idx))


class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        return torch.flatten(self.pool(F.relu(self.bn(self.conv(x)))), 1)


class Counts(nn.Module):
    """A module that writes a Python attribute during forward (a side effect)."""

    def __init__(self, n=8):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.calls = 0

    def forward(self, x):
        self.last_batch = x.shape[0]
        return self.lin(x)


class NoGradPart(nn.Module):
    def __init__(self, n=8):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        with torch.no_grad():
            target = self.lin(x).detach()
        return self.lin(x) - target


class ChildrenLoop(nn.Module):
    def __init__(self, n=8):
        super().__init__()
        self.a = nn.Linear(n, n)
        self.b = nn.Linear(n, n)

    def forward(self, x):
        for child in self.children():
            x = child(x)
        return x + sum(p.sum() for p in self.parameters())


class SuperCall(nn.Linear):
    def forward(self, x):
        return super().forward(x) * 2


class StepCounter(nn.Module):
    """``self.steps += 1`` on a buffer: an in-place add, then a store of the same tensor."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.steps += 1
        return self.fc(x) * self.steps


MODULES = {
    "mlp": (lambda: MLP(), randn),
    "mlp_relu": (lambda: MLP(act="relu"), randn),
    "residual": (lambda: Residual(), randn),
    "stack": (lambda: Stack(), randn),
    "heads": (lambda: Heads(), randn),
    "helpers": (lambda: UsesHelpers(), randn),
    "training": (lambda: TrainingSwitch(), randn),
    "embedder": (lambda: Embedder(), lambda b, n: torch.randint(0, 11, (b, n))),
    "conv_bn": (lambda: Conv(), lambda b, n: torch.randn(b, 3, n, n)),
    "conv_bn_eval": (lambda: Conv().eval(), lambda b, n: torch.randn(b, 3, n, n)),
    "no_grad_part": (lambda: NoGradPart(), randn),
    "children_loop": (lambda: ChildrenLoop(), randn),
    "super_call": (lambda: SuperCall(8, 8), randn),
    "counts": (lambda: Counts(), randn),
    "sequential": (lambda: nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 8)), randn),
    "layer_norm": (lambda: nn.LayerNorm(8), randn),
    "step_counter": (lambda: StepCounter(), randn),
    # padding_mode="reflect" pads first, then convolves with _pair(0): itertools.repeat
    "conv_reflect": (lambda: nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"),
                     lambda b, n: torch.randn(b, 3, n, n)),
    # reads ``query.is_nested`` before anything else: one graph, not a break
    "encoder_layer": (lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0,
                                                         batch_first=True),
                      lambda b, n: torch.randn(b, n, 8)),
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_corpus(name, backend):
    make, make_input = MODULES[name]
    torch.manual_seed(0)
    compare(backend, make(), make_input,
            calls=((2, 8), (2, 8), (3, 8)) if name not in ("conv_bn", "conv_bn_eval",
                                                          "conv_reflect")
            else ((2, 5), (2, 5), (3, 6)))


def test_encoder_inference_is_one_graph(backend):
    """Without autograd, ``nn.TransformerEncoder`` checks its fast path: ``len()`` of every
    layer's hook dicts, which are OrderedDicts, read like dicts (guarded by type and keys)."""
    torch.manual_seed(0)
    encoder = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True), 2,
        enable_nested_tensor=False).eval()
    with torch.no_grad():
        compare(backend, encoder, lambda b, n: torch.randn(b, n, 8))
        report = dynamo.explain(encoder)(torch.randn(2, 4, 8))
    assert report.graph_break_count == 0 and report.graph_count == 1, str(report)


def test_parameters_are_graph_inputs(backend):
    model = MLP()
    compare(backend, model, randn, calls=((2, 8), (2, 8)))
    sources = [n.meta["source"] for n in backend.graphs[0].graph.nodes if n.op == "placeholder"]
    assert sources == ["x", "self.fc1.weight", "self.fc1.bias", "self.fc2.weight",
                       "self.fc2.bias"]


def test_eval_recompiles_and_stays_right(backend):
    model = TrainingSwitch()
    opt = dynamo.optimize(backend)(model.forward)
    x = torch.randn(2, 8)
    torch.testing.assert_close(opt(x), model(x))
    model.eval()
    torch.testing.assert_close(opt(x), model(x))
    assert backend.calls == 2
    assert any("self.training == False" in str(g) for g in dynamo.cache_entries(opt)[1].guards)


def test_attribute_change_is_guarded(backend):
    model = MLP()
    opt = dynamo.optimize(backend)(model.forward)
    x = torch.randn(2, 8)
    opt(x)
    model.act = "relu"
    torch.testing.assert_close(opt(x), model(x))
    with torch.no_grad():
        model.fc1.weight.mul_(2)  # in place: same graph, new values
    torch.testing.assert_close(opt(x), model(x))
    model.fc2 = nn.Linear(16, 8)  # a new submodule of the same class: its weights, same graph
    torch.testing.assert_close(opt(x), model(x))
    assert backend.calls == 2
    model.fc2 = nn.Linear(16, 8, bias=False)  # a bias the graph does not have: recompiles
    torch.testing.assert_close(opt(x), model(x))
    model.fc2 = nn.Sequential(nn.Linear(16, 8))  # another class: recompiles
    torch.testing.assert_close(opt(x), model(x))
    assert backend.calls == 4


def test_attribute_write_is_replayed(backend):
    model = Counts()
    compare(backend, model, randn, calls=((2, 8), (2, 8), (3, 8)))
    assert model.last_batch == 3


def test_forward_hooks_are_traced_and_backward_hooks_break_with_reason(backend, no_fallback):
    """[Note: forward hooks]: a forward hook is part of the graph; a backward hook is a
    graph break, with its reason."""
    model = MLP()
    model.fc1.register_forward_hook(lambda m, i, o: o * 2)
    x = torch.randn(2, 8)
    torch.testing.assert_close(dynamo.optimize(backend)(model.forward)(x), model(x))
    assert dynamo.explain(model.forward)(x).graph_break_count == 0
    model.fc2.register_full_backward_hook(lambda m, grad_in, grad_out: None)
    torch.testing.assert_close(dynamo.optimize(backend)(model.forward)(x), model(x))
    report = dynamo.explain(model.forward)(x)
    assert report.graph_break_count == 1 and "hooks" in report.breaks[0].reason


# -- a GPT-2-style transformer (nanoGPT's shape) --------------------------------------------
class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd = n_head, n_embd
        mask = torch.tril(torch.ones(block_size, block_size))
        self.register_buffer("bias", mask.view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.ModuleDict(dict(
            c_fc=nn.Linear(n_embd, 4 * n_embd), c_proj=nn.Linear(4 * n_embd, n_embd)))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        m = self.mlp
        return x + m.c_proj(F.gelu(m.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=32, block_size=16, n_layer=2, n_head=2, n_embd=16):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, n_embd), wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList([Block(n_embd, n_head, block_size) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd)))
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight

    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        assert t <= self.block_size, f"sequence of {t} is longer than {self.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return self.lm_head(x[:, [-1], :]), None


def test_gpt2_style_model(backend):
    torch.manual_seed(0)
    model = GPT().eval()
    compare(backend, model, lambda b, t: torch.randint(0, 32, (b, t)),
            calls=((2, 8), (2, 8), (1, 12)))


def test_gpt2_training_step_with_targets(backend, no_fallback):
    torch.manual_seed(0)
    model = GPT()
    idx, targets = torch.randint(0, 32, (2, 8)), torch.randint(0, 32, (2, 8))
    opt = dynamo.optimize(backend)(model.forward)
    logits, loss = opt(idx, targets)
    ref_logits, ref_loss = model(idx, targets)
    torch.testing.assert_close(loss, ref_loss)
    loss.backward()
    grad = model.lm_head.weight.grad.clone()
    model.zero_grad()
    ref_loss.backward()
    torch.testing.assert_close(grad, model.lm_head.weight.grad)
    assert backend.calls == 1


# -- a ResNet-style CNN with BatchNorm -------------------------------------------------------
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    def __init__(self, widths=(8, 16), num_classes=5):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        layers, inplanes = [], widths[0]
        for i, planes in enumerate(widths):
            layers.append(nn.Sequential(BasicBlock(inplanes, planes, 1 if i == 0 else 2),
                                        BasicBlock(planes, planes)))
            inplanes = planes
        self.layers = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(inplanes, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layers(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_resnet_style_model(backend, mode):
    torch.manual_seed(0)
    model = ResNet().train(mode == "train")
    compare(backend, model, lambda b, n: torch.randn(b, 3, n, n),
            calls=((2, 16), (2, 16), (3, 12)))


# -- torchvision's stochastic depth: a helper that logs its own name ---------------------------
def _log_usage_once(obj):
    """torchvision.utils._log_api_usage_once: a class's name, or a function's."""
    name = obj.__class__.__name__
    if isinstance(obj, types.FunctionType):
        name = obj.__name__
    torch._C._log_api_usage_once(f"{obj.__module__}.{name}")


def scaled_residual(x, p):
    _log_usage_once(scaled_residual)  # ``obj.__class__.__name__`` of a function
    return x * (1.0 - p)


class StochasticDepthLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return x + scaled_residual(self.fc(x), 0.2)


def test_a_function_asked_for_its_class_name_is_traced(backend, no_fallback):
    """MaxViT's stochastic depth broke the graph here (``.__name__`` of the function type),
    and every block of the model became a frame of its own; now it is one graph."""
    model = StochasticDepthLike()
    compare(backend, model, randn, calls=((2, 8), (2, 8), (3, 8)))
    report = dynamo.explain(model.forward)(torch.randn(2, 8))
    assert report.graph_count == 1 and report.graph_break_count == 0
