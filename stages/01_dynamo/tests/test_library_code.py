"""Python that libraries write (HuggingFace's models are the example): breaks inside try
blocks, configs with custom attribute access, imports in function bodies, the
``is_compiling`` question, registries subclassing dict, C methods of objects, and installed
packages that are the user's code, not a library's. Each is checked against eager."""

import abc
import collections
import collections.abc
import contextlib
import contextvars
import copy
import dataclasses
import enum
import functools
import inspect
import operator
import os
import sys
import types

import dynamo
import pytest
import torch
from dynamo.eval_frame import _is_library_file

LOG: list[str] = []


def breaks(x, fail):
    print("a break inside the callee", file=sys.stderr)
    if fail:
        raise ValueError("boom")
    return x * 3


class TryFinally(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, fail=False):
        LOG.append("enter")
        try:
            h = self.lin(x).relu()
            h = breaks(h, fail)  # the callee breaks: the break lands inside the try
            h = h + 1
        finally:
            LOG.append("finally")
        return h * 2


def test_break_inside_try_finally(backend, no_fallback):
    m = TryFinally()
    opt = dynamo.optimize(backend)(m.forward)
    x = torch.randn(2, 4)
    LOG.clear()
    torch.testing.assert_close(opt(x), m(x))
    assert LOG == ["enter", "finally"] * 2
    assert len(backend.graphs) >= 2  # the work before and after the break is compiled
    assert any("linear" in str(g.graph) for g in backend.graphs)


def test_break_inside_try_runs_finally_when_the_break_raises(backend):
    m = TryFinally()
    opt = dynamo.optimize(backend)(m.forward)
    x = torch.randn(2, 4)
    opt(x)  # compiled without failing
    LOG.clear()
    with pytest.raises(ValueError, match="boom"):
        opt(x, True)
    assert LOG == ["enter", "finally"]  # the finally block ran, as in eager


def try_except(x, fail):
    y = x.sin()
    try:
        y = breaks(y, fail)
    except ValueError:
        y = y - 100
    return y.cos()


@pytest.mark.parametrize("fail", [False, True])
def test_break_inside_try_except(backend, fail):
    opt = dynamo.optimize(backend)(try_except)
    x = torch.randn(5)
    for _ in range(2):
        torch.testing.assert_close(opt(x, fail), try_except(x, fail))


class Config:
    """A config whose names are aliases (HuggingFace's ``attribute_map``)."""

    attribute_map = {"hidden_size": "n_embd"}

    def __init__(self):
        self.n_embd = 4
        self.scale = 2.0

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


CONFIG = Config()


def uses_config(x):
    return x.reshape(-1, CONFIG.hidden_size) * CONFIG.scale


def test_custom_getattribute_is_read_and_guarded(backend, no_fallback):
    opt = dynamo.optimize(backend)(uses_config)
    x = torch.randn(8)
    torch.testing.assert_close(opt(x), uses_config(x))
    CONFIG.scale = 3.0  # the guard reads it again: a recompile, not a stale answer
    try:
        torch.testing.assert_close(opt(x), uses_config(x))
    finally:
        CONFIG.scale = 2.0
    assert len(backend.graphs) == 2


def imports_inside(x):
    import math

    from torch.nn import functional as F

    return F.relu(x) * math.pi


def asks_is_compiling(x):
    if torch.compiler.is_compiling():
        return x + 1
    return x - 1


def test_import_in_function_body(backend, no_fallback):
    opt = dynamo.optimize(backend)(imports_inside)
    x = torch.randn(4)
    torch.testing.assert_close(opt(x), imports_inside(x))
    assert len(backend.graphs) == 1


def test_is_compiling_is_true_inside_the_trace(backend, no_fallback):
    opt = dynamo.optimize(backend)(asks_is_compiling)
    x = torch.randn(4)
    torch.testing.assert_close(opt(x), x + 1)  # the compiled path: what libraries expect
    torch.testing.assert_close(asks_is_compiling(x), x - 1)
    assert len(backend.graphs) == 1


class Registry(dict):
    def get(self, model):
        return super().get(str(model.__class__)) or {}


REGISTRY = Registry()
VAR = contextvars.ContextVar("collector", default=None)


class Registered(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        flags = REGISTRY.get(self)
        token = VAR.set({k: [] for k in flags})  # a C method of an object: a break
        try:
            out = self.lin(x).relu()
        finally:
            VAR.reset(token)
        return out * len(flags)


def test_dict_subclass_super_get_and_bound_c_methods(backend, no_fallback):
    m = Registered()
    opt = dynamo.optimize(backend)(m.forward)
    x = torch.randn(2, 4)
    torch.testing.assert_close(opt(x), m(x))
    REGISTRY[str(Registered)] = {"hidden_states": 1, "attentions": 2}
    try:  # the registry changed: the guard on dict.get(...) sees it
        torch.testing.assert_close(opt(x), m(x))
        torch.testing.assert_close(opt(x), m(x))
    finally:
        REGISTRY.clear()
    assert VAR.get() is None  # every token was reset


def test_installed_packages_are_user_code():
    assert _is_library_file(torch.__file__)
    assert _is_library_file(os.__file__)
    assert _is_library_file(types.__file__)
    assert _is_library_file("<string>")
    site = os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), "somemodels",
                        "modeling.py")
    assert not _is_library_file(site)  # e.g. transformers/models/bert/modeling_bert.py
    assert not _is_library_file(__file__)


class CheckpointingLayer(torch.nn.Module):
    """HuggingFace's ``GradientCheckpointingLayer``: ``__call__`` overridden in Python."""

    gradient_checkpointing = False

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def __call__(self, *args, **kwargs):
        if self.gradient_checkpointing and self.training:
            raise AssertionError("not in this test")
        return super().__call__(*args, **kwargs)

    def forward(self, x):
        return self.lin(x).tanh()


class Stack(torch.nn.Module):
    def __init__(self, n=12, used=10):
        super().__init__()
        self.layers = torch.nn.ModuleList(CheckpointingLayer() for _ in range(n))
        self.used = used

    def forward(self, x):
        for layer in self.layers[: self.used]:  # a slice of the ModuleList (Llama does)
            x = layer(x)
        return x


def test_overridden_call_and_module_list_slice_are_one_graph(backend, no_fallback):
    m = Stack()
    opt = dynamo.optimize(backend)(m.forward)
    x = torch.randn(2, 4)
    for _ in range(3):
        torch.testing.assert_close(opt(x), m(x))
    assert len(backend.graphs) == 1  # before: a break per layer, a recompile per position
    assert sum("linear" in str(n.target) for n in backend.graphs[0].graph.nodes) == 10


def chunked(x, a, b):
    return x * a + b


class Interface:
    """A class-level mapping read through an instance (HuggingFace's attention interfaces)."""

    _mapping = {"relu": torch.relu, "tanh": torch.tanh}

    def __init__(self, kind):
        self.kind = kind

    def chunk(self, x, a, b):
        return x * a - b


INTERFACE = Interface("tanh")


def apply_chunking(x):
    # HuggingFace's apply_chunking_to_forward counts the callback's parameters first
    assert callable(chunked) and callable(INTERFACE.chunk)
    n = len(inspect.signature(chunked).parameters)
    m = len(inspect.signature(INTERFACE.chunk).parameters)  # a bound method: no self
    fn = INTERFACE._mapping[INTERFACE.kind]
    return fn(chunked(x, *[2.0] * (n - 1)) + INTERFACE.chunk(x, *[3.0] * (m - 1)))


def test_callable_signature_and_class_level_mapping(backend, no_fallback):
    opt = dynamo.optimize(backend, fullgraph=True)(apply_chunking)  # no break either
    x = torch.randn(4)
    torch.testing.assert_close(opt(x), apply_chunking(x))
    assert len(backend.graphs) == 1
    Interface._mapping["tanh"] = torch.sigmoid  # the guard on the mapping sees it
    try:
        torch.testing.assert_close(opt(x), apply_chunking(x))
    finally:
        Interface._mapping["tanh"] = torch.tanh
    assert len(backend.graphs) == 2


def relative_buckets(position, num_buckets=8):
    """T5's ``_relative_position_bucket`` starts from an int and adds tensors to it."""
    buckets = 0
    buckets += (position > 0).to(torch.long) * num_buckets
    n = position.shape[0]
    n -= 1  # a size, rebound
    buckets += torch.abs(position).clamp(max=num_buckets - 1)
    return buckets, n


def test_augmented_assignment_to_an_int_is_not_an_inplace_write(backend, no_fallback):
    """``0 += tensor`` is ``0 + tensor`` (ints have no ``__iadd__``): the graph holds an
    ``add``, which the graph's own Python can print (an ``iadd`` of a literal could not)."""
    opt = dynamo.optimize(backend, fullgraph=True)(relative_buckets)
    position = torch.arange(-3, 4)[None, :] - torch.arange(5)[:, None]
    got, want = opt(position), relative_buckets(position)
    assert torch.equal(got[0], want[0]) and got[1] == want[1]
    iadds = [n for g in backend.graphs for n in g.graph.nodes if n.target is operator.iadd]
    assert all(isinstance(n.args[0], torch.fx.Node) for n in iadds)  # tensor += tensor


def masked_scores(scores, mask):
    """A HuggingFace attention mask: the dtype's lowest value where the mask is off."""
    lowest = torch.finfo(scores.dtype).min
    scores = scores.masked_fill(~mask, lowest)
    top = torch.iinfo(torch.int8).max
    return scores.softmax(-1) * top, torch.finfo(torch.bfloat16).eps


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_finfo_and_iinfo_fold_to_constants(backend, no_fallback, dtype):
    opt = dynamo.optimize(backend, fullgraph=True)(masked_scores)
    scores, mask = torch.randn(2, 5).to(dtype), torch.rand(2, 5) > 0.3
    got, want = opt(scores, mask), masked_scores(scores, mask)
    torch.testing.assert_close(got[0], want[0])
    assert got[1] == want[1]
    assert len(backend.graphs) == 1


class LastLayer(torch.nn.Module):
    """T5's block reads its feed-forward layer as ``self.layer[-1]``, next to ``layer[1]``:
    two sources whose placeholder names print alike."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        return self.layer[-1](self.layer[1](x)) + self.layer[0](x)


def test_sources_whose_names_print_alike_are_two_inputs(backend, no_fallback):
    m = LastLayer()
    opt = dynamo.optimize(backend, fullgraph=True)(m.forward)
    x = torch.randn(2, 4)
    torch.testing.assert_close(opt(x), m(x))
    targets = [n.target for n in backend.graphs[0].graph.nodes if n.op == "placeholder"]
    assert len(targets) == len(set(targets)) == 7


def masks_from_callables(x):
    """HuggingFace composes mask functions as closures and asks ``callable()`` of each."""
    limit = 2

    def inner_mask(i):
        return i < limit

    parts = [inner_mask, torch.sin, x.abs, functools.partial(torch.add, other=1)]
    count = sum(1 for fn in parts if callable(fn)) + callable(x) + callable(limit)
    return x * count + inner_mask(x)


def test_callable_of_closures_partials_and_methods(backend, no_fallback):
    opt = dynamo.optimize(backend, fullgraph=True)(masks_from_callables)
    x = torch.arange(4.0)
    torch.testing.assert_close(opt(x), masks_from_callables(x))
    assert len(backend.graphs) == 1


class Output(collections.OrderedDict):
    """The shape of HuggingFace's ``ModelOutput``: a dataclass and an ordered dict whose
    entries are the fields that are not None."""

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None:
                self[field.name] = value

    def __getitem__(self, key):
        return dict(self.items())[key] if isinstance(key, str) else self.to_tuple()[key]

    def __setattr__(self, name, value):  # a field and its entry change together
        if name in {f.name for f in dataclasses.fields(self)} and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


@dataclasses.dataclass
class LMOutput(Output):
    logits: torch.Tensor | None = None
    loss: torch.Tensor | None = None
    hidden: tuple | None = None


class OutputModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def inner(self, x):
        return LMOutput(self.lin(x), hidden=(x,))

    def forward(self, x):
        out = self.inner(x)
        loss = out.logits.square().mean() + out["logits"].sum() + out[0].mean()
        assert list(out.keys()) == ["logits", "hidden"] and "loss" not in out
        first, hidden = out.to_tuple()
        return LMOutput(logits=first * 2, loss=loss + len(out), hidden=hidden)


def test_model_outputs_are_built_after_the_graph(backend, no_fallback):
    """[Note: model outputs]: one graph; the returned object is the class's own, built by
    its constructor from the graph's outputs."""
    m = OutputModel()
    opt = dynamo.optimize(backend, fullgraph=True)(m.forward)
    x = torch.randn(2, 4)
    got, want = opt(x), m(x)
    assert type(got) is LMOutput and list(got.keys()) == list(want.keys())
    for key in want:
        torch.testing.assert_close(got[key], want[key])
    assert got.hidden[0] is x and len(backend.graphs) == 1


def from_pairs(x):
    return LMOutput([x + 1]).logits[0] * 2  # the only field set is not a tensor


def test_a_model_output_of_one_non_tensor_field_breaks_and_stays_correct(backend):
    opt = dynamo.optimize(backend)(from_pairs)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x), from_pairs(x))


class Projected(torch.nn.Module):
    """CLIP replaces a field of its submodule's output: ``out.pooler_output = proj(...)``."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x):
        out = LMOutput(logits=x, loss=x.sum(), hidden=(x,))
        out.hidden = (self.proj(out.logits),)
        out["loss"] = out.hidden[0].sum()
        return out


def test_a_model_output_field_written_after_construction(backend, no_fallback):
    m = Projected()
    opt = dynamo.optimize(backend, fullgraph=True)(m.forward)
    x = torch.randn(2, 4)
    got, want = opt(x), m(x)
    assert list(got.keys()) == list(want.keys()) == ["logits", "loss", "hidden"]
    assert len(backend.graphs) == 1
    for key in want:
        torch.testing.assert_close(got[key], want[key])


BYTES_TABLE = {b"k": 2.0}


def bytes_keys(x):
    return x * BYTES_TABLE[b"k"]


def test_a_dict_with_bytes_keys_is_guarded(backend, no_fallback):
    opt = dynamo.optimize(backend, fullgraph=True)(bytes_keys)
    x = torch.ones(3)
    torch.testing.assert_close(opt(x), x * 2)


def use_gqa(x):
    """HuggingFace's sdpa integration reads a switch from the environment in every layer."""
    if os.environ.get("MINIPT2_TEST_FORCE", "0") == "1":
        return x * 3
    if "MINIPT2_TEST_ABSENT" in os.environ:
        return x * 5
    return x.sin() + 1


def test_environment_reads_are_guarded(backend, no_fallback, monkeypatch):
    """[Note: environment variables]: one graph; a changed variable recompiles."""
    monkeypatch.delenv("MINIPT2_TEST_FORCE", raising=False)
    monkeypatch.delenv("MINIPT2_TEST_ABSENT", raising=False)
    opt = dynamo.optimize(backend, fullgraph=True)(use_gqa)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x), x.sin() + 1)
    torch.testing.assert_close(opt(x), x.sin() + 1)
    assert len(backend.graphs) == 1
    monkeypatch.setenv("MINIPT2_TEST_FORCE", "1")
    torch.testing.assert_close(opt(x), x * 3)
    monkeypatch.setenv("MINIPT2_TEST_FORCE", "0")
    monkeypatch.setenv("MINIPT2_TEST_ABSENT", "")
    torch.testing.assert_close(opt(x), x * 5)
    assert len(backend.graphs) == 3


class AttentionRegistry(collections.abc.MutableMapping):
    """HuggingFace's attention registry: ``get`` is ``Mapping.get``, a try/except KeyError."""

    def __init__(self, table):
        self._table = dict(table)

    def __getitem__(self, key):
        return self._table[key]

    def __setitem__(self, key, value):
        self._table[key] = value

    def __delitem__(self, key):
        del self._table[key]

    def __iter__(self):
        return iter(self._table)

    def __len__(self):
        return len(self._table)


ATTENTION = AttentionRegistry({"sdpa": torch.sin})


def probe_with_exceptions(x):
    attend = ATTENTION.get("eager", torch.cos)  # missing: the default
    try:
        scale = {"a": 2.0}["b"]
    except (IndexError, KeyError) as error:
        scale = 3.0 if isinstance(error, KeyError) else 4.0
    try:
        extra = x.no_such_attribute
    except AttributeError:
        extra = 1.0
    finally:
        scale = scale + 1
    return attend(x) * scale + extra


def test_lookup_errors_caught_by_the_traced_code(backend, no_fallback):
    """[Note: except blocks in traced code]: one graph, the except branches taken."""
    opt = dynamo.optimize(backend, fullgraph=True)(probe_with_exceptions)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x), probe_with_exceptions(x))
    assert len(backend.graphs) == 1


def uncaught(x):
    try:
        return x * {"a": 1}["b"]
    except IndexError:
        return x


def test_an_uncaught_lookup_error_is_the_users(backend):
    opt = dynamo.optimize(backend)(uncaught)
    with pytest.raises(KeyError, match="b"):
        opt(torch.randn(3))


@torch.jit.script
def log_bucket(position: torch.Tensor, buckets: int) -> torch.Tensor:
    """DeBERTa's relative-position helpers are TorchScript functions."""
    sign = torch.sign(position)
    return sign * torch.log1p(position.abs().float()).clamp(max=float(buckets))


def scripted_helper(x):
    return x + log_bucket(torch.arange(-3, 3), 2).sum()


def test_a_torchscript_function_is_traced_through_its_python(backend, no_fallback):
    opt = dynamo.optimize(backend, fullgraph=True)(scripted_helper)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x), scripted_helper(x))
    assert len(backend.graphs) == 1
    assert not any(isinstance(n.target, torch.jit.ScriptFunction)
                   for g in backend.graphs for n in g.graph.nodes)


class Settings:
    """A plain object from outside the frame, whose attributes come and go."""


SETTINGS = Settings()


def probe_settings(x):
    try:
        scale = SETTINGS.scale
    except AttributeError:
        scale = 2.0
    shift = 1.0 if hasattr(SETTINGS, "shift") else 0.0
    try:
        extra = float(os.environ["MINIPT2_TEST_EXTRA"])
    except KeyError:
        extra = 0.0
    return x * scale + shift + extra


def test_what_the_trace_found_missing_is_guarded(backend, no_fallback, monkeypatch):
    """An attribute or variable the trace found absent (and went on without) that appears
    later recompiles: the graph it made assumed the absence."""
    monkeypatch.delenv("MINIPT2_TEST_EXTRA", raising=False)
    opt = dynamo.optimize(backend, fullgraph=True)(probe_settings)
    x = torch.ones(3)
    torch.testing.assert_close(opt(x), x * 2)
    SETTINGS.scale, SETTINGS.shift = 5.0, True
    try:
        torch.testing.assert_close(opt(x), x * 5 + 1)
        monkeypatch.setenv("MINIPT2_TEST_EXTRA", "10")
        torch.testing.assert_close(opt(x), x * 5 + 11)
    finally:
        del SETTINGS.scale, SETTINGS.shift
    assert len(backend.graphs) == 3


class Rotary(torch.nn.Module):
    """``@torch.no_grad()`` on a method (HuggingFace's rotary embeddings): the decorator keeps
    a no_grad object and enters ``self.__class__()`` of it at every call."""

    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", torch.rand(4))

    @torch.no_grad()
    def forward(self, x):
        return (x * self.inv_freq).cos()


class UsesRotary(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.rotary = Rotary()

    def forward(self, x):
        h = self.lin(x)
        return h * self.rotary(h) + h.sin()


def test_a_method_decorated_with_no_grad_is_traced(backend, no_fallback):
    m = UsesRotary()
    opt = dynamo.optimize(backend, fullgraph=True)(m.forward)
    x = torch.randn(2, 4)
    out = opt(x)
    torch.testing.assert_close(out, m(x))
    out.sum().backward()
    grad = m.lin.weight.grad.clone()
    m.lin.weight.grad = None
    m(x).sum().backward()  # the rotary part gives no gradient, in both
    torch.testing.assert_close(grad, m.lin.weight.grad)
    assert len(backend.graphs) == 1
    opt(x)
    assert len(backend.graphs) == 1


def maybe_autocast(enabled):
    """HuggingFace's helper: autocast only when it would do something, else a nullcontext."""
    if torch.is_autocast_enabled("cpu") or enabled:
        return torch.autocast("cpu", enabled=enabled)
    return contextlib.nullcontext()


def rotate(x, enabled):
    with maybe_autocast(enabled):
        h = x.sin() * 2
    with contextlib.nullcontext(x) as same_x:
        h = h + same_x
    return h


@pytest.mark.parametrize("enabled", [False, True])
def test_with_a_nullcontext(backend, no_fallback, enabled):
    opt = dynamo.optimize(backend, fullgraph=True)(rotate)
    x = torch.randn(2, 4)
    torch.testing.assert_close(opt(x, enabled), rotate(x, enabled))
    assert len(backend.graphs) == 1


class ScaledNorm(torch.nn.LayerNorm):
    """SqueezeBERT's pattern: a LayerNorm subclass reaching its parent's forward through
    the class."""

    def forward(self, x):
        y = torch.nn.LayerNorm.forward(self, x.transpose(1, 2)).transpose(1, 2)
        return y * 2


def test_a_method_called_through_its_class_is_inlined(backend, no_fallback):
    """[Note: a method called through its class]: one graph, eager's values."""
    m = ScaledNorm(6)
    opt = dynamo.optimize(backend, fullgraph=True)(m.forward)
    x = torch.randn(2, 6, 5)
    torch.testing.assert_close(opt(x), m(x))
    assert backend.calls == 1 and "layer_norm" in str(backend.graphs[0].graph)


def test_a_c_method_called_through_its_class_still_runs(backend):
    """``torch.Tensor.add`` is written in C: a graph break, and eager's answer."""
    def fn(x):
        return torch.Tensor.add(x.sin(), 1).cos()

    opt = dynamo.optimize(backend)(fn)
    x = torch.randn(4)
    torch.testing.assert_close(opt(x), fn(x))


def test_a_constant_tuple_plus_a_traced_one(backend, no_fallback):
    """XLNet collects its layers' memories as ``mems = (); mems = mems + (h,)``: the empty
    tuple is a constant and the right side a traced tuple; their sum is one tuple."""
    def fn(x):
        mems = ()
        for i in range(3):
            x = x.sin() + i
            mems = mems + (x.detach(),)
        return mems, x

    opt = dynamo.optimize(backend, fullgraph=True)(fn)
    x = torch.randn(4)
    got, want = opt(x), fn(x)
    assert isinstance(got[0], tuple) and len(got[0]) == 3
    torch.testing.assert_close(got, want)
    assert backend.calls == 1


def test_an_ordered_dict_made_in_the_graph_leaves_it_as_one(backend, no_fallback):
    """torchvision's ``IntermediateLayerGetter`` and segmentation heads return a fresh
    ``OrderedDict`` per call: built in the graph, and returned with its class and order."""
    def fn(x, pairs):
        out = collections.OrderedDict()
        out["b"] = x.sin()
        out["a"] = x.cos()
        more = collections.OrderedDict(pairs, c=x + 1)
        return out, more, isinstance(out, collections.OrderedDict)

    opt = dynamo.optimize(backend, fullgraph=True)(fn)
    x = torch.randn(3)
    got, want = opt(x, [("z", 1.0)]), fn(x, [("z", 1.0)])
    for g, w in zip(got[:2], want[:2]):
        assert type(g) is collections.OrderedDict and list(g) == list(w)
        for key in w:
            torch.testing.assert_close(g[key], w[key])
    assert got[2] is True and backend.calls == 1


@functools.lru_cache
def _feature_available():
    return False


@functools.lru_cache(maxsize=8)
def _scale_for(n):
    return 1.0 / n


def test_a_function_behind_lru_cache_is_traced_through(backend, no_fallback):
    """[Note: a function behind functools.lru_cache]: transformers' memoized feature checks
    used to break the graph at every call."""
    def fn(x):
        x = x.sin()
        if _feature_available():
            x = x * 2
        return x.cos() * _scale_for(x.shape[0])

    opt = dynamo.optimize(backend, fullgraph=True)(fn)
    x = torch.randn(4)
    torch.testing.assert_close(opt(x), fn(x))
    assert backend.calls == 1


class _WithNorm(torch.nn.Module):
    def __init__(self, norm, extra):
        super().__init__()
        self.norm, self.extra = norm, extra

    def forward(self, x):
        if self.norm:  # ProphetNet: ``if self.embeddings_layer_norm:``
            x = self.norm(x)
        if self.extra:  # a container is true when it is not empty
            x = self.extra(x)
        return x.sin()


@pytest.mark.parametrize("extra", [torch.nn.Sequential(), torch.nn.Sequential(torch.nn.ReLU())],
                         ids=["empty", "one"])
def test_the_truth_of_a_module(backend, no_fallback, extra):
    m = _WithNorm(torch.nn.LayerNorm(8), extra)
    opt = dynamo.optimize(backend, fullgraph=True)(m.forward)
    x = torch.randn(2, 8)
    torch.testing.assert_close(opt(x), m(x))
    m.extra = torch.nn.Sequential() if len(extra) else torch.nn.Sequential(torch.nn.ReLU())
    torch.testing.assert_close(opt(x), m(x))  # the length guard sees the change
    assert backend.calls == 2


class _Outputs(collections.OrderedDict):
    def to_tuple(self):  # HuggingFace's ModelOutput.to_tuple, reduced
        return tuple(self[k] for k in self.keys())


def test_a_dict_subclass_reads_its_own_keys(backend, no_fallback):
    """[Note: a builtin base's reading methods]: ``self.keys()`` and ``self[k]`` in a dict
    subclass's own method read the real dict, guarded by its keys."""
    def fn(d):
        first = d.to_tuple()[0]
        return first + sum(v.sum() for v in d.values()) + len(list(d.items()))

    opt = dynamo.optimize(backend, fullgraph=True)(fn)
    x = torch.randn(2, 3)
    for d in (_Outputs(a=x, b=x * 2), _Outputs(a=x, b=x * 2), _Outputs(b=x * 3, a=x)):
        torch.testing.assert_close(opt(d), fn(d))
    assert backend.calls == 2  # the keys' order changed: a guard failed, one recompile


def test_indexing_a_model_output_handed_in(backend, no_fallback):
    """ProphetNet indexes ``outputs[1]`` of a ``ModelOutput`` from before a graph break."""
    outputs = pytest.importorskip("transformers.modeling_outputs")

    def fn(out):
        return out[1][0] + out[0] + out["last_hidden_state"] * 2

    opt = dynamo.optimize(backend, fullgraph=True)(fn)
    x = torch.randn(2, 8)
    out = outputs.BaseModelOutput(last_hidden_state=x.sin(), hidden_states=(x.cos(),))
    torch.testing.assert_close(opt(out), fn(out))


def test_the_union_of_two_dicts(backend, no_fallback):
    """``kwargs | {"dt_limit": ...}`` (Mamba2) had been a break."""
    def scaled(x, scale=1.0, shift=0.0):
        return x * scale + shift

    def fn(x, **kwargs):
        fused = kwargs | {"shift": x.cos(), "scale": 3.0}
        ordered = collections.OrderedDict(a=1) | {"b": 2}
        right = {"a": 1} | collections.OrderedDict(b=2, a=3)  # the subclass decides
        return scaled(x.sin(), **fused) * len(ordered), type(ordered), type(right), \
            list(right.items())

    opt = dynamo.optimize(backend, fullgraph=True)(fn)
    x = torch.randn(4)
    got, want = opt(x, scale=2.0), fn(x, scale=2.0)
    torch.testing.assert_close(got[0], want[0])
    assert got[1:] == want[1:] and got[2] is collections.OrderedDict


def _selective_scan(A, B, C, G=2.0):  # Mamba's signature: parameters named like guards'
    out = []
    for t in range(A.shape[0]):
        out.append((A[t] * B + C).sin() * G)
    twice = lambda: C * 2  # noqa: E731 (a closure over the parameter: a cell variable)
    return torch.stack(out) + twice()


def _breaks_with_c(A, C):
    if (A * C).sum().item() > 0:
        return A + C
    return A - C


def test_parameters_named_like_the_guards_namespace(backend, no_fallback):
    """[Note: a local named like a guard's namespace]: ``C``, ``G``, ``torch`` as parameter
    names; a graph break resumes with them too."""
    x = torch.randn(4, 3)
    opt = dynamo.optimize(backend, fullgraph=True)(_selective_scan)
    torch.testing.assert_close(opt(x, x, x), _selective_scan(x, x, x))
    torch.testing.assert_close(opt(x, x, C=x * 2, G=3.0), _selective_scan(x, x, C=x * 2, G=3.0))
    opt = dynamo.optimize(backend)(_breaks_with_c)
    for c in (x, -x.abs() - 1):
        torch.testing.assert_close(opt(x.abs(), c), _breaks_with_c(x.abs(), c))
    assert _selective_scan.__code__.co_varnames[:3] == ("A", "B", "C")  # the user's own code


def test_an_identity_guard_names_a_function_its_package_shadows():
    """``torch._higher_order_ops.associative_scan`` is both a submodule and, on the package,
    the function of that name; a guard's path through the package would reach the function
    and fail, so it goes through ``sys.modules`` (Mamba's scan, after a graph break)."""
    from dynamo.guards import GUARD_GLOBALS, python_path

    pytest.importorskip("torch._higher_order_ops.associative_scan")
    from torch._higher_order_ops.associative_scan import associative_scan

    for obj in (associative_scan, torch.nn.functional.relu, collections.OrderedDict):
        path = python_path(obj)
        assert path is not None and eval(path, dict(GUARD_GLOBALS)) is obj, path


class _SiLUActivation(torch.nn.Module):  # transformers' ACT2FN["silu"] makes one per lookup
    def __init__(self, beta=1.0):
        super().__init__()
        self.beta = beta

    def forward(self, x):
        return x * torch.sigmoid(self.beta * x)


def test_a_stateless_module_made_inside_the_forward(backend, no_fallback):
    """[Note: a module made inside a forward]: one made from constants and holding no
    parameters is made at trace time; one with parameters still breaks the graph."""
    def fn(x):
        return _SiLUActivation(beta=2.0)(x.sin()).cos()

    opt = dynamo.optimize(backend, fullgraph=True)(fn)
    x = torch.randn(4)
    state = torch.random.get_rng_state()
    torch.testing.assert_close(opt(x), fn(x))
    assert torch.equal(torch.random.get_rng_state(), state)  # the trace drew nothing

    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4))  # fresh at every call in eager

        def forward(self, x):
            return x * self.w

    def with_weights(x):
        return Scale()(x)
    with pytest.raises(dynamo.Unsupported, match="holds parameters"):
        dynamo.optimize(backend, fullgraph=True)(with_weights)(x)


def test_torch_modules_made_inside_the_forward(backend, no_fallback):
    """CANINE builds ``nn.MaxPool1d`` and ``nn.ConstantPad1d`` in its forward: torch's own
    stateless modules are made at trace time too; a ``nn.Linear`` made there still breaks."""
    def fn(x):
        pooled = torch.nn.MaxPool1d(kernel_size=4, stride=4)(x)
        return torch.nn.ConstantPad1d((1, 2), 0.5)(pooled).relu() + 1

    x = torch.randn(2, 3, 16)
    torch.testing.assert_close(dynamo.optimize(backend, fullgraph=True)(fn)(x), fn(x))
    with pytest.raises(dynamo.Unsupported, match="holds parameters"):
        dynamo.optimize(backend, fullgraph=True)(lambda x: torch.nn.Linear(16, 2)(x))(x)


_FLAG = {"on": False}


@functools.lru_cache
def _flag_is_on(name):
    return _FLAG[name]


def test_a_cached_answer_is_guarded_by_asking_again(backend, no_fallback):
    """A memoized function called with constants is asked at trace time; the guard asks
    again at every call, so clearing its cache after the answer changed recompiles."""
    def fn(x):
        return x + 1 if _flag_is_on("on") else x - 1

    opt = dynamo.optimize(backend, fullgraph=True)(fn)
    x = torch.zeros(2)
    torch.testing.assert_close(opt(x), fn(x))
    _FLAG["on"] = True
    torch.testing.assert_close(opt(x), x - 1)  # the cache still answers False, as in eager
    _flag_is_on.cache_clear()
    torch.testing.assert_close(opt(x), fn(x))  # now True: a guard failed, one recompile
    assert backend.calls == 2
    _FLAG["on"] = False
    _flag_is_on.cache_clear()


class Layers(collections.abc.Sequence):
    """transformers 5's per-layer view of a config, in small: a Sequence that writes only
    ``__len__`` and ``__getitem__``."""

    def __init__(self, scales):
        self.scales = scales

    def __len__(self):
        return len(self.scales)

    def __getitem__(self, i):
        if i >= len(self.scales):
            raise IndexError(i)
        return self.scales[i]


LAYERS = Layers([1.0, 2.0, 3.0])


def iterates_layers(x):
    for scale in LAYERS:
        x = torch.sin(x) * scale
    return x, [s for s in LAYERS]


def test_iterating_a_sequence_unrolls_over_its_length(backend, no_fallback):
    """[Note: iterating a Sequence]: one graph, three layers; a longer view recompiles."""
    opt = dynamo.optimize(backend)(iterates_layers)
    x = torch.randn(4)

    def same(got, want):
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1]
    same(opt(x), iterates_layers(x))
    assert len(backend.graphs) == 1
    assert sum(1 for n in backend.graphs[0].graph.nodes if n.target is torch.sin) == 3
    LAYERS.scales.append(4.0)
    try:
        same(opt(x), iterates_layers(x))
    finally:
        LAYERS.scales.pop()
    assert len(backend.graphs) == 2


def hooked_model(log):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    model[0].register_forward_hook(lambda mod, args, out: log.append(tuple(out.shape)))
    model[2].register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    model[2].register_forward_hook(lambda mod, args, out: out + args[0].sum())
    return model


def test_forward_hooks_are_traced_like_call(backend, no_fallback):
    """[Note: forward hooks]: a pre hook that replaces the arguments, a hook that replaces the
    output and one that records: one graph, eager's values and side effects; a hook added
    later recompiles; a backward hook is still a break, never a wrong answer."""
    log = []
    model = hooked_model(log)
    x = torch.randn(4, 8)
    want = model(x)
    opt = dynamo.optimize(backend)(model.forward)  # Sequential.forward calls each hooked layer
    torch.testing.assert_close(opt(x), want)
    assert log == [(4, 16), (4, 16)] and len(backend.graphs) == 1
    assert sum("linear" in str(n.target) for n in backend.graphs[0].graph.nodes) == 2
    handle = model[1].register_forward_hook(lambda mod, args, out: out * 0.5)
    try:
        torch.testing.assert_close(opt(x), model(x))
        assert len(backend.graphs) == 2
    finally:
        handle.remove()
    handle = model[1].register_full_backward_hook(lambda mod, grad_in, grad_out: None)
    try:
        torch.testing.assert_close(opt(x), model(x))
    finally:
        handle.remove()


class CacheLayer(abc.ABC):
    """transformers' cache layers: an abstract base (``ABCMeta``) with two kinds of layer."""

    @abc.abstractmethod
    def update(self, keys: torch.Tensor) -> torch.Tensor: ...


class FullLayer(CacheLayer):
    def __init__(self):
        self.keys = None

    def update(self, keys):
        self.keys = keys if self.keys is None else torch.cat([self.keys, keys])
        return self.keys


class WindowLayer(FullLayer):
    def __init__(self, window: int):
        super().__init__()
        self.window = window

    def update(self, keys):
        return super().update(keys)[-self.window:]


LAYER_KINDS = {"full": FullLayer, "window": WindowLayer}  # a global dict, read in a listcomp


class LayerCache:
    def __init__(self, kinds: list[str], kwargs: list[dict]):
        self.layers = [LAYER_KINDS[kind](**kw) for kind, kw in zip(kinds, kwargs)]


def fills_a_new_cache(x):
    cache = LayerCache(["full", "window"], [{}, {"window": 2}])
    out = sum(layer.update(x * (i + 1)).sum() for i, layer in enumerate(cache.layers))
    return out, cache


def test_a_cache_of_abstract_layers_made_in_the_frame(backend, no_fallback):
    """transformers' ``DynamicCache(config=...)``, made in every decoder's forward: layers of
    an abstract base class, picked from a global dict inside a comprehension. The global read
    broke the graph ([Note: a container that did not change]: the comprehension's globals had
    been copied), and so did the ``ABCMeta`` metaclass; now one graph, the cache rebuilt after
    it with its layers' tensors."""
    opt = dynamo.optimize(backend, fullgraph=True)(fills_a_new_cache)
    x = torch.randn(3)
    (got, cache), (want, expected) = opt(x), fills_a_new_cache(x)
    torch.testing.assert_close(got, want)
    assert [type(layer) for layer in cache.layers] == [FullLayer, WindowLayer]
    assert cache.layers[1].window == 2
    for mine, theirs in zip(cache.layers, expected.layers):
        torch.testing.assert_close(mine.keys, theirs.keys)
    assert len(backend.graphs) == 1


def makes_an_abstract_layer(x):
    return CacheLayer(), x + 1


def test_constructing_an_abstract_class_raises_as_in_eager(backend):
    opt = dynamo.optimize(backend)(makes_an_abstract_layer)
    with pytest.raises(TypeError, match="abstract"):
        makes_an_abstract_layer(torch.ones(2))
    with pytest.raises(TypeError, match="abstract"):
        opt(torch.ones(2))


def keeps_a_constant_table(x):
    table = {"scale": (2.0, {"shift": 1.0})}
    mapping = LAYER_KINDS
    layer = FullLayer()  # a mutation (its __init__) while both dicts are live
    layer.update(x)
    return x * table["scale"][0] + table["scale"][1]["shift"], mapping is LAYER_KINDS


def test_an_object_made_in_the_frame_leaves_other_dicts_as_they_are(backend, no_fallback):
    """Swapping a mutated object's tracker everywhere rebuilt every plain dict and tuple it
    walked through, the user's own values among them ([Note: a container that did not
    change]): identity kept."""
    opt = dynamo.optimize(backend, fullgraph=True)(keeps_a_constant_table)
    x = torch.randn(3)
    got, same_mapping = opt(x)
    torch.testing.assert_close(got, keeps_a_constant_table(x)[0])
    assert same_mapping is True


def python_types_as_dtypes(x):
    pads = torch.zeros(x.shape[0], dtype=int)  # transformers' chunked-attention masks
    scale = torch.ones(2, dtype=float).sum()
    return x.to(float) * scale + pads.unsqueeze(-1), torch.full((2,), 1, dtype=bool)


def test_a_python_type_is_a_dtype(backend, no_fallback):
    """[Note: a Python type as a dtype]: ``dtype=int`` is int64, ``float`` float64, as in
    eager; it was a graph break."""
    x = torch.randn(3, 2)
    got, want = dynamo.optimize(backend, fullgraph=True)(python_types_as_dtypes)(x), \
        python_types_as_dtypes(x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w)


def states_per_layer(x, layers: int):
    states = dict.fromkeys(range(layers))  # transformers' Mamba cache
    ready = dict.fromkeys(range(layers), False)
    for i in states:
        states[i], ready[i] = x * i, True
    return sum(states.values()), ready


def test_dict_fromkeys(backend, no_fallback):
    x = torch.randn(3)
    got = dynamo.optimize(backend, fullgraph=True)(states_per_layer)(x, 3)
    want = states_per_layer(x, 3)
    torch.testing.assert_close(got[0], want[0])
    assert got[1] == want[1] == {0: True, 1: True, 2: True}


class LayeredConfig:
    """A flat encoder-decoder config, as transformers' legacy ones are."""

    def __init__(self):
        self.encoder_layers, self.decoder_layers, self.scale = 3, 2, 0.5
        self.labels = {0: "a", 1: "b"}

    def to_dict(self):
        return dict(self.__dict__)

    def decoder_view(self):  # transformers' ``get_text_config(decoder=True)``, reduced
        view = copy.deepcopy(self)
        for key in view.to_dict():
            if key.startswith("decoder_"):
                setattr(view, key[len("decoder_"):], getattr(view, key))
                delattr(view, key)
        return view


class CopiesItsConfig(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.config = LayeredConfig()

    def forward(self, x):
        view = self.config.decoder_view()
        view.scale = view.scale * 2
        return x * view.layers * view.scale, view


def test_a_deep_copy_of_a_config_is_made_while_tracing(backend, no_fallback):
    """[Note: a deep copy made while tracing]: one graph; the original is left alone, the copy
    leaves the graph as a fresh object at every call, and a change to the original's state
    recompiles (its guard)."""
    m = CopiesItsConfig()
    opt = dynamo.optimize(backend, fullgraph=True)(m.forward)
    x = torch.randn(3)
    (got, view), (want, expected) = opt(x), m(x)
    torch.testing.assert_close(got, want)
    assert vars(view) == vars(expected) and view is not expected
    assert not hasattr(view, "decoder_layers") and m.config.decoder_layers == 2
    assert m.config.scale == 0.5
    again = opt(x)[1]
    assert again is not view and vars(again) == vars(view)
    m.config.decoder_layers = 4  # read only through the copy: the state guard sees it
    torch.testing.assert_close(opt(x)[0], m(x)[0])
    m.config.labels[2] = "c"  # a nested change, too
    torch.testing.assert_close(opt(x)[0], m(x)[0])
    assert len(backend.graphs) == 3


def test_forgetting_the_entries_forgets_their_snapshots(backend, no_fallback):
    """The snapshots a copy's guard compares with live as long as the entries: ``reset``
    drops both, and a new trace snapshots again."""
    from dynamo.guards import SNAPSHOTS

    m = CopiesItsConfig()
    x = torch.randn(3)
    dynamo.optimize(backend, fullgraph=True)(m.forward)(x)
    assert SNAPSHOTS
    dynamo.reset()
    assert not SNAPSHOTS
    opt = dynamo.optimize(backend, fullgraph=True)(m.forward)
    torch.testing.assert_close(opt(x)[0], m(x)[0])
    m.config.decoder_layers = 5
    torch.testing.assert_close(opt(x)[0], m(x)[0])
    assert len(backend.graphs) == 3


class HoldsATensor:
    def __init__(self):
        self.weight = torch.ones(3)


def copies_a_tensor_holder(x, holder):
    mine = copy.deepcopy(holder)
    mine.weight.add_(1)
    return x * mine.weight


def test_a_deep_copy_of_tensors_is_not_made_while_tracing(backend):
    holder = HoldsATensor()
    x = torch.randn(3)
    got = dynamo.optimize(backend)(copies_a_tensor_holder)(x, holder)
    torch.testing.assert_close(got, x * 2)
    torch.testing.assert_close(holder.weight, torch.ones(3))


class Layout(str, enum.Enum):  # noqa: UP042 - timm's ``Format``: an enum that is a str too
    NCHW = "NCHW"
    NHWC = "NHWC"


class LaidOut(torch.nn.Module):
    def __init__(self, layout: Layout):
        super().__init__()
        self.layout = layout

    def forward(self, x):
        return x.permute(0, 2, 3, 1) if self.layout == Layout.NHWC else x * 1


def test_an_enum_member_is_guarded_by_identity(backend, no_fallback):
    """[Note: enum members]: the guard named the member by its repr, which is no expression
    for a str enum (an internal error: timm's Swin ran eagerly)."""
    m = LaidOut(Layout.NHWC)
    opt = dynamo.optimize(backend, fullgraph=True)(m.forward)
    x = torch.randn(1, 2, 3, 4)
    torch.testing.assert_close(opt(x), m(x))
    m.layout = Layout.NCHW  # the guard fails: traced again
    torch.testing.assert_close(opt(x), m(x))
    assert len(backend.graphs) == 2


class Slotted:
    __slots__ = ("scale",)

    def __init__(self):
        self.scale = 3.0


def copies_a_slotted_object(x, holder):
    return x * copy.deepcopy(holder).scale


def test_a_deep_copy_of_a_state_out_of_sight_is_not_made_while_tracing(backend):
    """Slots are state the walk behind the copy's guard cannot see: a graph break, not a
    copy whose guard could never hold."""
    x = torch.randn(3)
    opt = dynamo.optimize(backend)(copies_a_slotted_object)
    for _ in range(2):
        torch.testing.assert_close(opt(x, Slotted()), x * 3)


class Sized:
    def __init__(self, n):
        self.items = list(range(n))

    def __len__(self):
        return len(self.items)


class Flag:
    def __init__(self, on):
        self.on = on

    def __bool__(self):
        return self.on


def branches_on_objects(x, sized):
    flag = Flag(x.shape[0] > 2)  # made in the frame: its __bool__
    y = x + 1 if sized else x - 1  # from outside: its __len__
    return y * 2 if flag else y / 2, bool(Flag(False))


@pytest.mark.parametrize("n", [0, 3])
def test_the_truth_of_an_object(backend, no_fallback, n):
    """[Note: the truth of an object]: ``__bool__``, else ``__len__``, traced; it was a break
    (transformers asks ``if past_key_values:``)."""
    x = torch.randn(4)
    opt = dynamo.optimize(backend, fullgraph=True)(branches_on_objects)
    got, want = opt(x, Sized(n)), branches_on_objects(x, Sized(n))
    torch.testing.assert_close(got[0], want[0])
    assert got[1] is want[1] is False
