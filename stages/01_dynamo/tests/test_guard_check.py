"""The compiled guard check ([Note: compiled guard check] in guards.py) is fast and exactly as
strict as the guard list it was made from.

Each test changes one thing between two calls and checks three facts: the first entry's
check rejects the changed call (so the call recompiles and matches eager), the guards that
the printed list says fail are the ones that reject it, and the check made *without* those
guards accepts the changed call — so the test fails if that guard is dropped.
"""

from __future__ import annotations

import ast

import dynamo
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from dynamo.convert_frame import Frame
from dynamo.guards import compile_guards, first_failing_guard


class Net(nn.Module):
    """A ModuleList of blocks, a buffer, dropout and a tied weight: every kind of module state."""

    def __init__(self, width: int = 8, depth: int = 3) -> None:
        super().__init__()
        self.emb = nn.Embedding(16, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width)) for _ in range(depth))
        self.drop = nn.Dropout(0.5)
        self.register_buffer("scale", torch.full((width,), 0.5))
        self.head = nn.Linear(width, 16, bias=False)
        self.head.weight = self.emb.weight  # tied

    def forward(self, idx):
        x = self.emb(idx)  # (B, T, width)
        for block in self.blocks:
            x = x + F.gelu(block(x))
        return self.head(self.drop(x) * self.scale)  # (B, T, 16)


class LayerNormSubclass(nn.LayerNorm):
    """The same forward, another class: modules are guarded by class ([Note: module guards])."""


def frame_of(model: nn.Module, **arguments) -> Frame:
    forward = type(model).forward
    return Frame(forward.__code__, forward.__globals__, {}, {"self": model, **arguments})


def compiled_net(backend):
    torch.manual_seed(0)
    model = Net().eval()
    idx = torch.randint(16, (2, 5))
    opt = dynamo.optimize(backend)(model.forward)
    torch.testing.assert_close(opt(idx), model(idx))
    (entry,) = dynamo.cache_entries(opt)
    return model, idx, opt, entry


def assert_rejected(entry, frame: Frame, relax: bool = True) -> None:
    """The entry's check rejects ``frame``, and so does its printed guard list. With
    ``relax``: the check made without the failing guards accepts ``frame``, so the
    rejection is theirs (the test fails if they are dropped), not an accident."""
    assert entry.check(frame) is None
    guards = list(entry.guards)
    failing = first_failing_guard(guards, frame.namespace())
    assert failing is not None, "the printed guards must reject the change too"
    while relax and failing is not None:
        guards = [g for g in guards if (g.kind, g.source) != (failing.kind, failing.source)]
        failing = first_failing_guard(guards, frame.namespace())
    if relax:
        relaxed = compile_guards(guards, list(frame.arguments), [], frame.namespace())
        assert relaxed(frame.f_globals, frame.closure, **frame.arguments) is not None


CHANGES = {
    "weight requires_grad": lambda m: m.blocks[1][0].weight.requires_grad_(False),
    "buffer .data of another shape": lambda m: setattr(m.scale, "data", torch.ones(1)),
    "model.double(): .data of another dtype": lambda m: m.double(),
    "parameter replaced, new shape": lambda m: setattr(
        m.blocks[0][0], "bias", nn.Parameter(torch.randn(1))),
    "tied weight untied": lambda m: setattr(
        m.head, "weight", nn.Parameter(m.emb.weight.detach().clone())),
    "buffer replaced, new stride": lambda m: setattr(
        m, "scale", torch.full((8, 2), 0.5)[:, 0]),
    "training flag": lambda m: m.drop.train(),
    "attribute value": lambda m: setattr(m.blocks[1][1], "eps", 1e-2),
    "submodule replaced by another class": lambda m: m.blocks.__setitem__(1, nn.Sequential(
        nn.Linear(8, 8), LayerNormSubclass(8))),
    "block appended": lambda m: m.blocks.append(m.blocks[0]),
    "block deleted": lambda m: m.blocks.__delitem__(2),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_module_change_is_rejected(change, backend, no_fallback):
    model, idx, opt, entry = compiled_net(backend)
    CHANGES[change](model)
    assert_rejected(entry, frame_of(model, idx=idx), relax=change != "block deleted")
    torch.manual_seed(0)  # the same dropout mask for both, once it is on
    out = opt(idx)
    torch.manual_seed(0)
    torch.testing.assert_close(out, model(idx))
    assert backend.calls == 2


def test_parameter_replaced_by_a_like_one_is_a_hit_that_uses_it(backend, no_fallback):
    """Same metadata: no guard fails, and the graph reads the new weight (it is an input)."""
    model, idx, opt, entry = compiled_net(backend)
    model.blocks[1][0].weight = nn.Parameter(torch.randn(8, 8))
    torch.testing.assert_close(opt(idx), model(idx))
    assert backend.calls == 1


def test_instance_attribute_shadowing_a_parameter(backend, no_fallback):
    """The check reads ``m.weight`` from ``m._parameters`` directly; an instance attribute
    of that name (set past ``nn.Module.__setattr__``) would win in ``m.weight``, so it must
    turn the fast read into a miss, never into a read of the hidden parameter."""
    model, idx, opt, entry = compiled_net(backend)
    linear = model.blocks[0][0]
    object.__setattr__(linear, "weight", nn.Parameter(torch.randn(8, 8)))
    assert linear.weight is not linear._parameters["weight"]
    assert entry.check(frame_of(model, idx=idx)) is None
    torch.testing.assert_close(opt(idx), model(idx))
    assert backend.calls == 2


@pytest.mark.parametrize("change", ["shape", "dtype", "device", "stride"])
def test_input_change_is_rejected(change, backend, no_fallback):
    model, idx, opt, entry = compiled_net(backend)
    changed = {
        "shape": idx[:1],
        "dtype": idx.int(),
        "device": idx.to("meta"),
        "stride": torch.randint(16, (5, 2)).t(),
    }[change]
    assert_rejected(entry, frame_of(model, idx=changed))
    if change != "device":  # the model's weights are on the CPU
        torch.testing.assert_close(opt(changed), model(changed))
        assert backend.calls == 2


def scale(x, y):
    return x * 2 + y


def test_input_requires_grad_change_is_rejected(backend, no_fallback):
    opt = dynamo.optimize(backend)(scale)
    x, y = torch.randn(3), torch.randn(3)
    opt(x, y)
    (entry,) = dynamo.cache_entries(opt)
    x.requires_grad_()
    assert_rejected(entry, Frame(scale.__code__, scale.__globals__, {}, {"x": x, "y": y}))
    torch.testing.assert_close(opt(x, y), scale(x, y))


def branchy(x, y):
    if x.shape[0] > 4:
        return x * 2 + y
    return x * 3 + y


def test_dynamic_relation_change_is_rejected(backend, no_fallback):
    opt = dynamo.optimize(backend, dynamic=True)(branchy)
    x, y = torch.randn(8), torch.randn(8)
    torch.testing.assert_close(opt(x, y), branchy(x, y))
    (entry,) = dynamo.cache_entries(opt)
    relation = torch.randn(6), torch.randn(1)  # y broadcasts: the sizes are no longer equal
    branch = torch.randn(3), torch.randn(3)  # the other side of the branch
    for a, b in (relation, branch):
        frame = Frame(branchy.__code__, branchy.__globals__, {}, {"x": a, "y": b})
        assert_rejected(entry, frame)
        torch.testing.assert_close(opt(a, b), branchy(a, b))
    calls = backend.calls
    a = torch.randn(11)
    torch.testing.assert_close(opt(a, a), branchy(a, a))  # the first entry serves it
    assert backend.calls == calls


def test_check_never_calls_module_getattr(backend, no_fallback, monkeypatch):
    """Each source is fetched once, and module state straight from the module's tables:
    a hit runs no ``nn.Module.__getattr__`` (1 us each, the old check's main cost)."""
    model, idx, opt, entry = compiled_net(backend)
    calls = []
    original = nn.Module.__getattr__

    def counting(self, name):
        calls.append(name)
        return original(self, name)

    monkeypatch.setattr(nn.Module, "__getattr__", counting)
    assert entry.check(frame_of(model, idx=idx)) is not None
    assert calls == []


def test_check_returns_the_graph_inputs(backend, no_fallback):
    model, idx, opt, entry = compiled_net(backend)
    inputs = entry.check(frame_of(model, idx=idx))
    expected = [eval(source, {"self": model, "idx": idx})
                for source in [n.meta["source"] for n in entry.graph.graph.nodes
                               if n.op == "placeholder"]]
    assert len(inputs) == len(expected) and all(a is b for a, b in zip(inputs, expected))


def test_guard_list_stays_readable(backend, no_fallback):
    """The printed guards are the full list, in source terms; the generated code is apart."""
    model, idx, opt, entry = compiled_net(backend)
    text = [str(g) for g in entry.guards]
    assert "self.blocks[1][0].weight.size() == (8, 8)" in text
    assert "self.head.weight is self.emb.weight" in text
    assert "len(self.blocks) == 3" in text
    assert "self.drop.training == False" in text
    assert not any("___s" in t or "_parameters" in t for t in text)
    assert "___s" in entry.check_fn.source_text


@pytest.mark.parametrize("text", [
    "L['self']", "L['self']._modules['h']._modules['0'].weight",
    "L['x'].size()", "G['torch'].float32", "L['cache'][3]", "L['d']['it\\'s']",
    "L['self']._parameters['bias'].stride()",
])
def test_chain_text_is_the_unparsed_source(text):
    from dynamo.guards import _chain_text

    node = ast.parse(text, mode="eval").body
    assert _chain_text(node, {"L", "G"}) == ast.unparse(node)
    assert _chain_text(node, {"C"}) is None  # another root: not a chain of these


@pytest.mark.parametrize("text", ["L['x'].view(2)", "L[i]", "L['x'] + 1", "f(L)"])
def test_chain_text_refuses_what_is_not_a_chain(text):
    from dynamo.guards import _chain_text

    assert _chain_text(ast.parse(text, mode="eval").body, {"L"}) is None


def test_eval_source_reads_names_from_the_frame_and_evaluates_the_rest():
    """``eval_source``: a plain name the frame holds is a lookup; one it does not falls back to
    the guard globals (``torch``) as ``eval`` would; any other source is evaluated; a name
    found nowhere raises NameError, as ``eval`` does."""
    import pytest
    import torch
    from dynamo.utils import eval_source

    frame = {"x": [10, 20], "self": "me", "G": {"W": 3}}
    assert eval_source("self", frame) == "me"
    assert eval_source("x[1]", frame) == 20
    assert eval_source("G['W']", frame) == 3
    assert eval_source("torch", frame) is torch
    assert eval_source("torch", {"torch": "shadowed"}) == "shadowed"
    with pytest.raises(NameError):
        eval_source("missing", frame)
