"""Giving up well: eager fallback with one warning, fullgraph/strict errors, user errors."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import dynamo
import pytest
import torch
from dynamo.exc import BackendCompilerFailed
from dynamo.symbolic_convert import InstructionTranslator


def print_in_with(x):
    with torch.no_grad():
        print("inside")
        x = x + 1
    return x


def generator_fn(x):
    yield x + 1


def with_print(x):
    y = x * 2
    print("y is", y.shape)
    return y + 1


def with_item(x):
    return x * x.sum().item()


def shape_mismatch(x, y):
    return torch.add(x, y)


def missing_attribute(x):
    return x.no_such_attribute


def missing_global(x):
    return x + not_defined_anywhere  # noqa: F821


def fallback_warnings(record):
    return [str(w.message) for w in record if issubclass(w.category, dynamo.FallbackWarning)]


@pytest.mark.parametrize("fn, reason", [
    (print_in_with, "while grad mode is switched"),
])
def test_unsupported_falls_back_with_one_warning(fn, reason, backend, capsys):
    opt = dynamo.optimize(backend)(fn)
    x = torch.randn(3)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(3):
            torch.testing.assert_close(opt(x), fn(x))
    (message,) = fallback_warnings(record)
    assert 'stage "dynamo"' in message and reason in message
    assert "test_fallback.py:" in message
    assert backend.calls == 0
    assert dynamo.cache_entries(opt) == []


def test_warning_names_the_source_line(backend, capsys):
    with pytest.warns(dynamo.FallbackWarning) as record:
        dynamo.optimize(backend)(print_in_with)(torch.randn(2))
    line = print_in_with.__code__.co_firstlineno + 2
    assert f'test_fallback.py:{line}: print("inside")' in str(record[0].message)


def test_generator_falls_back(backend):
    opt = dynamo.optimize(backend)(generator_fn)
    x = torch.randn(2)
    with pytest.warns(dynamo.FallbackWarning, match="RETURN_GENERATOR|GEN"):
        torch.testing.assert_close(next(opt(x)), x + 1)


@pytest.mark.parametrize("how", ["fullgraph", "env"])
def test_fullgraph_and_strict_raise(how, backend, monkeypatch):
    if how == "env":
        monkeypatch.setenv("MINIPT2_STRICT", "1")
    opt = dynamo.optimize(backend, fullgraph=(how == "fullgraph"))(with_print)
    with pytest.raises(dynamo.Unsupported) as info:
        opt(torch.randn(2))
    assert "print()" in str(info.value) and 'print("y is", y.shape)' in str(info.value)
    assert info.value.reason == "print() is a side effect a graph cannot replay"


@pytest.mark.parametrize("fn, args", [
    (shape_mismatch, (torch.randn(3, 4), torch.randn(5))),
    (missing_attribute, (torch.randn(2),)),
    (missing_global, (torch.randn(2),)),
    (lambda x: x.view(7), (torch.randn(4),)),
    (lambda x, y: x @ y, (torch.randn(2, 3), torch.randn(2, 3))),
    (lambda x: (1, 2)[5], (torch.randn(2),)),
])
def test_user_errors_surface_as_in_eager(fn, args, backend, no_fallback):
    with pytest.raises(Exception) as eager:
        fn(*args)
    with pytest.raises(type(eager.value)) as compiled:
        dynamo.optimize(backend)(fn)(*args)
    assert type(compiled.value) is type(eager.value)
    assert str(compiled.value) == str(eager.value)
    assert backend.calls == 0


def test_user_error_even_under_fullgraph(backend):
    with pytest.raises(RuntimeError):
        dynamo.optimize(backend, fullgraph=True)(shape_mismatch)(torch.randn(3), torch.randn(4))


@torch.library.custom_op("minipt2_test::strict_meta", mutates_args=())
def strict_meta(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@strict_meta.register_fake
def _(x):
    raise ValueError("this fake kernel is stricter than the real one")


@torch.library.custom_op("minipt2_test::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x):
    return torch.empty_like(x)


twice.register_autograd(lambda ctx, grad: grad * 2)


class BackendRefusingAnOp(Exception):
    eager_ops = frozenset({"minipt2_test::twice"})


def with_twice(x, w):
    return twice(torch.tanh(x @ w)).sin().sum()


def test_an_op_a_backend_names_runs_between_two_graphs():
    """[Note: ops kept out of the graph]: a backend that fails on an op while autograd
    records, and names it, gets the frame traced again with a graph break at the op; the op
    runs eagerly, autograd records it, and without grad it stays in the graph."""
    graphs = []

    def refusing(gm, inputs):
        graphs.append(gm)
        if torch.is_grad_enabled() and any("twice" in str(n.target) for n in gm.graph.nodes):
            raise BackendRefusingAnOp("cannot trace its backward")
        return gm.forward

    x, w = torch.randn(3, 4), torch.randn(4, 4, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dynamo.FallbackWarning)
        opt = dynamo.optimize(refusing)(with_twice)
        opt(x, w).backward()
    grad, w.grad = w.grad, None
    with_twice(x, w).backward()
    torch.testing.assert_close(grad, w.grad)
    assert dynamo.config.eager_ops == {"minipt2_test::twice"}
    assert len(graphs) == 3  # refused, then the graphs before and after the op
    assert not any("twice" in str(n.target) for gm in graphs[1:] for n in gm.graph.nodes)
    with torch.no_grad():
        torch.testing.assert_close(opt(x, w), with_twice(x, w))
    assert any("twice" in str(n.target) for n in graphs[-1].graph.nodes)
    dynamo.reset()
    assert not dynamo.config.eager_ops
    with pytest.raises(BackendCompilerFailed):  # no graph break allowed: the backend's error
        dynamo.optimize(refusing, fullgraph=True)(with_twice)(x, w)


def test_a_custom_op_called_by_its_python_name_is_in_the_graph(backend, no_fallback):
    """``torch.library.custom_op`` returns a callable object, not the OpOverload: calling
    it is calling the op it registered (it crashed the trace: no ``__name__``)."""
    def fn(x):
        return twice(x.sin()) + 1

    x = torch.randn(3)
    torch.testing.assert_close(dynamo.optimize(backend)(fn)(x), fn(x))
    report = dynamo.explain(fn)(x)
    assert report.graph_count == 1 and report.graph_break_count == 0
    assert "twice" in str(report)


def test_a_trace_only_error_runs_eagerly_once_warned(backend, monkeypatch):
    """[Note: user errors]: eager succeeds where the trace raised, so the trace was wrong;
    the frame runs eagerly from then on, with one warning, and is not traced again."""
    import dynamo.convert_frame as cf

    traces = []
    convert = cf.convert_frame
    monkeypatch.setattr(cf, "convert_frame", lambda *a, **k: traces.append(1) or convert(*a, **k))

    def fn(x):
        return torch.ops.minipt2_test.strict_meta(x) + 1

    opt = dynamo.optimize(backend)(fn)
    x = torch.randn(3)
    with pytest.warns(dynamo.FallbackWarning, match="stricter than the real one") as caught:
        torch.testing.assert_close(opt(x), x * 2 + 1)
    # the traced line that raised, which may be deep inside a library, not only the frame's
    assert "return torch.ops.minipt2_test.strict_meta(x) + 1)" in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(opt(x), x * 2 + 1)
    assert len(traces) == 1 and backend.calls == 0


def test_a_function_reading_values_inside_breaks_the_graph(backend):
    """``F.gaussian_nll_loss`` checks ``torch.any(var < 0)``: the meta run cannot answer,
    which is a graph break at that call (not a user error)."""
    import torch.nn.functional as F

    def fn(x, var):
        return F.gaussian_nll_loss(x.sin(), x, var) * 2

    x, var = torch.randn(4, 3), torch.rand(4, 3) + 0.1
    report = dynamo.explain(fn)(x, var)
    assert report.graph_break_count == 1 and "reads the values" in report.breaks[0].reason
    torch.testing.assert_close(dynamo.optimize(backend)(fn)(x, var), fn(x, var))


def test_bad_call_arguments_raise_like_eager(backend, no_fallback):
    with pytest.raises(TypeError, match="positional argument"):
        dynamo.optimize(backend)(shape_mismatch)(torch.randn(2))


class InductorLikeError(Exception):
    pass


InductorLikeError.__module__ = "inductor.lowering"


def failing_backend(gm, example_inputs):
    raise InductorLikeError("no lowering for aten.sin")


def test_backend_error_falls_back_with_stage_name():
    x = torch.randn(3)
    opt = dynamo.optimize(failing_backend)(lambda t: torch.sin(t) + 1)
    with pytest.warns(dynamo.FallbackWarning) as record:
        torch.testing.assert_close(opt(x), torch.sin(x) + 1)
    (message,) = fallback_warnings(record)
    assert 'stage "inductor"' in message and "no lowering for aten.sin" in message
    with pytest.raises(dynamo.exc.BackendCompilerFailed):
        dynamo.optimize(failing_backend, fullgraph=True)(lambda t: torch.cos(t))(x)


def test_backend_returning_non_callable():
    with pytest.warns(dynamo.FallbackWarning, match="not a callable"):
        out = dynamo.optimize(lambda gm, ex: 42)(lambda t: t * 3)(torch.ones(1))
    assert out.tolist() == [3.0]


def test_bad_arguments_to_optimize(backend):
    with pytest.raises(TypeError, match="backend"):
        dynamo.optimize("inductor")
    with pytest.raises(TypeError, match="fullgraph"):
        dynamo.optimize(backend, fullgraph="yes")
    with pytest.raises(TypeError, match="fn"):
        dynamo.optimize(backend)(42)


class Holder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)
        self.scale = torch.tensor(2.0)

    def forward(self, x):
        return self.linear(x) * self.scale

    def plain(self, x, y):
        return x + y


def test_methods_touching_self_are_captured(backend, no_fallback):
    holder, x = Holder(), torch.randn(4, 3)
    torch.testing.assert_close(dynamo.optimize(backend)(holder.forward)(x), holder(x))
    assert backend.calls == 1


def test_method_that_only_carries_self(backend, no_fallback):
    holder, x, y = Holder(), torch.randn(2), torch.randn(2)
    torch.testing.assert_close(dynamo.optimize(backend)(holder.plain)(x, y), x + y)
    assert backend.calls == 1


def test_explain(backend):
    def fn(x):
        return torch.sin(x) * 2

    report = dynamo.explain(fn)(torch.randn(3))
    assert report.graph_count == 1 and report.break_reasons == []
    assert report.ops_per_graph[0][0] == "sin"
    assert "x.size() == (3,)" in [str(g) for g in report.guards]
    assert "graphs: 1, graph breaks: 0" in str(report)
    report = dynamo.explain(with_print)(torch.randn(3))
    assert report.graph_count == 2 and report.graph_break_count == 1
    assert "print()" in report.breaks[0].reason
    assert 'test_fallback.py' in report.breaks[0].location
    assert "graph breaks: 1" in str(report)
    eager = dynamo.explain(print_in_with)(torch.randn(3))
    assert eager.graph_count == 0 and "while grad mode is switched" in eager.break_reasons[0]


REQUIRED_OPCODES = {
    "3.11": ["RESUME", "NOP", "CACHE", "PRECALL", "CALL", "PUSH_NULL", "KW_NAMES", "LOAD_FAST",
             "STORE_FAST", "LOAD_CONST", "LOAD_GLOBAL", "LOAD_ATTR", "LOAD_METHOD", "BINARY_OP",
             "UNARY_NEGATIVE", "UNARY_POSITIVE", "UNARY_INVERT", "COMPARE_OP", "BUILD_TUPLE",
             "BUILD_LIST", "RETURN_VALUE", "POP_TOP", "COPY", "SWAP", "BINARY_SUBSCR",
             "BUILD_SLICE", "COPY_FREE_VARS", "MAKE_CELL", "LOAD_DEREF", "UNPACK_SEQUENCE"],
    "3.12": ["RETURN_CONST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "BINARY_SLICE",
             "CALL_INTRINSIC_1", "STORE_SLICE", "POP_JUMP_IF_FALSE"],
    "3.13": ["LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST", "CALL_KW",
             "TO_BOOL"],
}


@pytest.mark.parametrize("version", sorted(REQUIRED_OPCODES))
def test_opcode_handlers_exist(version):
    missing = [op for op in REQUIRED_OPCODES[version] if not hasattr(InstructionTranslator, op)]
    assert missing == []


GLOBAL_LINEAR = torch.nn.Linear(3, 2)


def calls_global_module(x):
    return GLOBAL_LINEAR(x) + 1


def test_calling_a_global_module_is_inlined(backend, no_fallback):
    x = torch.randn(2, 3)
    torch.testing.assert_close(dynamo.optimize(backend)(calls_global_module)(x),
                               calls_global_module(x))
    assert backend.calls == 1


# -- every give-up says how to reproduce it ([Note: reproduce] in exc.py) ----------------

def test_reproduce_line_names_the_command(monkeypatch, tmp_path):
    import types

    from dynamo.exc import reproduce_line

    script = tmp_path / "train model.py"
    script.write_text("")
    main = types.ModuleType("__main__")
    main.__spec__ = None
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(sys, "argv", [str(script), "--steps", "3"])
    assert reproduce_line("f") == \
        f"reproduce: MINIPT2_STRICT=1 python '{script}' --steps 3"
    main.__spec__ = types.SimpleNamespace(name="driver.__main__")
    monkeypatch.setattr(sys, "argv", ["/x/driver/__main__.py", "explain", "m.py:f"])
    assert reproduce_line("f") == "reproduce: MINIPT2_STRICT=1 python -m driver explain m.py:f"
    main.__spec__ = None
    monkeypatch.setattr(sys, "argv", ["-c"])
    assert reproduce_line("Net.forward") == ("reproduce: set MINIPT2_STRICT=1 and call "
                                             "Net.forward() again to raise at the failing line")


SCRIPT = '''
import torch, dynamo

def f(x):
    with torch.no_grad():
        print("inside")
    return x + 1

dynamo.optimize(lambda gm, ex: gm.forward)(f)(torch.randn(2))
'''


def test_reproduce_command_raises_at_the_failing_line(tmp_path):
    """Run a script, read its warning's last line, run that command: it must raise there."""
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "MINIPT2_STRICT"}
    # the child runs in tmp_path: a relative PYTHONPATH (stages/01_dynamo) would not resolve
    env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in sys.path if p)
    first = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           env=env, cwd=tmp_path, timeout=120)
    assert first.returncode == 0, first.stderr
    (line,) = [ln.strip() for ln in first.stderr.splitlines() if "reproduce:" in ln]
    command = line.removeprefix("reproduce: ")
    assert command == f"MINIPT2_STRICT=1 python {script}"
    python_dir = os.path.dirname(sys.executable)  # "python" must be this interpreter
    env["PATH"] = python_dir + os.pathsep + env.get("PATH", "")
    if not os.path.exists(os.path.join(python_dir, "python")):
        command = command.replace(" python ", f" {sys.executable} ", 1)
    second = subprocess.run(command, shell=True, capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=120)
    assert second.returncode != 0
    assert "dynamo.exc.Unsupported: print()" in second.stderr
    assert f'{script}:6: print("inside")' in second.stderr


def test_fallback_warning_and_explain_end_with_reproduce(backend):
    with pytest.warns(dynamo.FallbackWarning) as record:
        dynamo.optimize(backend)(print_in_with)(torch.randn(2))
    message = str(record[0].message)
    assert message.splitlines()[-1].strip().startswith("reproduce: ")
    report = str(dynamo.explain(print_in_with)(torch.randn(2)))
    assert message.splitlines()[-1].strip() in report


def test_recompile_limit_says_how_to_reproduce_and_strict_raises(backend, monkeypatch):
    monkeypatch.setattr(dynamo.config, "recompile_limit", 2)

    def scale(x, k):
        return x * k

    opt = dynamo.optimize(backend)(scale)
    x = torch.randn(2)
    with pytest.warns(dynamo.FallbackWarning, match="recompile limit") as record:
        for k in range(3):
            opt(x, k)
    assert str(record[0].message).splitlines()[-1].strip().startswith("reproduce: ")
    monkeypatch.setenv("MINIPT2_STRICT", "1")
    with pytest.raises(dynamo.Unsupported, match="recompile limit") as info:
        opt(x, 5)
    assert "guard failed: k == 1" in str(info.value)  # the last entry's failing guard
    assert "def scale(x, k):" in str(info.value)
    torch.testing.assert_close(opt(x, 1), x)  # a cached specialisation still runs


def test_backend_errors_name_the_stage_they_came_from():
    """A plain AttributeError raised inside inductor's code is inductor's, not "backend"."""
    namespace = {"__name__": "inductor.scheduler"}
    exec("def schedule(gm):\n    return None.device\n", namespace)

    def failing_backend(gm, example_inputs):
        return namespace["schedule"](gm)

    fn = dynamo.optimize(failing_backend)(lambda x: x + 1)
    with pytest.warns(dynamo.FallbackWarning, match='stage "inductor"'):
        torch.testing.assert_close(fn(torch.ones(2)), torch.ones(2) + 1)


def _failing_backend(runs: list):
    """A backend whose compiled code raises at every call (a library call that rejects the
    layout it was given, say); ``runs`` counts the calls."""
    def backend(gm, example_inputs):
        def compiled(*args):
            runs.append(1)
            raise RuntimeError("attn_bias is not correctly aligned")
        return compiled
    return backend


def pure(x):
    return (x * 2).sin()


def writes_input(x):
    x.add_(1)
    return x * 2


def writes_input_view(x):
    x[0].mul_(2)
    return x + 1


def test_a_graph_that_fails_at_its_first_call_runs_eagerly_from_then_on(monkeypatch):
    """[Note: a graph that fails at its first call]: one warning, eager's result, and the
    compiled code is not tried again; under fullgraph it raises."""
    monkeypatch.delenv("MINIPT2_STRICT", raising=False)
    runs = []
    opt = dynamo.optimize(_failing_backend(runs))(pure)
    x = torch.randn(5)
    with pytest.warns(dynamo.FallbackWarning, match="failed at its first call"):
        torch.testing.assert_close(opt(x), pure(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(opt(x), pure(x))
    assert runs == [1]
    strict = dynamo.optimize(_failing_backend([]), fullgraph=True)(lambda x: x.cos() + 1)
    with pytest.raises(RuntimeError, match="not correctly aligned"):
        strict(x)


@pytest.mark.parametrize("fn", [writes_input, writes_input_view])
def test_a_failing_graph_that_may_have_written_an_input_raises(fn, monkeypatch):
    """Running the frame again would write into the input twice: the error surfaces."""
    monkeypatch.delenv("MINIPT2_STRICT", raising=False)
    x = torch.randn(3, 4)
    with pytest.raises(RuntimeError, match="not correctly aligned"):
        dynamo.optimize(_failing_backend([]))(fn)(x.clone())


def augmented(x):
    x += 1
    return x * 2


def through_data(x):
    x.data.mul_(2)
    return x + 1


def into_out(x, y):
    torch.add(y, 1, out=x)
    return x * 2


@pytest.mark.parametrize("fn", [augmented, through_data, into_out])
def test_other_writes_into_an_input_also_raise(fn, monkeypatch):
    monkeypatch.delenv("MINIPT2_STRICT", raising=False)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    args = (x.clone(), y) if fn is into_out else (x.clone(),)
    with pytest.raises(RuntimeError, match="not correctly aligned"):
        dynamo.optimize(_failing_backend([]))(fn)(*args)
