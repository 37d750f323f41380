"""[Note: the matmul template] and [Note: template or library]: under ``max-autotune`` a
matrix multiply may run as a Triton kernel of our own with the next kernel as its epilogue.
Eager is the oracle for values and gradients; the operands' layouts, the stored product,
3-D epilogues and the choice (timed with a fake clock, then cached) are each checked.

Without a GPU the templates run in Triton's interpreter, forced on by
``MINIPT2_MM_TEMPLATE=1`` (nothing can be timed there); with one they compile for real.
"""

from __future__ import annotations

import importlib
import json

import pytest
import torch
from inductor import autotune, later, mm_template
from inductor_testing import device_for

import driver

DEV = device_for("triton")
compile_fx = importlib.import_module("inductor.compile_fx")  # (the package exports a function)
TOL = {torch.float32: {"atol": 1e-4, "rtol": 1e-4}, torch.bfloat16: {"atol": 3e-2, "rtol": 3e-2},
       torch.float16: {"atol": 5e-3, "rtol": 5e-3}}


@pytest.fixture
def templates(monkeypatch, tmp_path):
    """Templates on for every eligible mm, a fresh cache directory."""
    monkeypatch.setenv("MINIPT2_MM_TEMPLATE", "1")
    monkeypatch.setenv("MINIPT2_CACHE_DIR", str(tmp_path))
    autotune.clear_memory_cache()
    yield tmp_path
    autotune.clear_memory_cache()


def compiled(fn, mode="max-autotune"):
    return driver.compile(fn, mode=mode, options={"target": "triton"})


def wrappers(c) -> str:
    return "\n".join(g.artifacts["wrapper"].split("def call")[1] for g in c.graphs)


def kernel_sources(c) -> list[str]:
    return [v for g in c.graphs for k, v in g.artifacts.items() if "kernels/" in k]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_linear_gelu_is_one_template_with_its_epilogue(templates, dtype):
    torch.manual_seed(0)
    layer = torch.nn.Linear(29, 45).to(DEV, dtype)
    x = torch.randn(37, 29, device=DEV, dtype=dtype)
    fn = lambda a: torch.nn.functional.gelu(layer(a)) * 2  # noqa: E731
    c = compiled(fn)
    with torch.no_grad():
        torch.testing.assert_close(c(x), fn(x), **TOL[dtype])
    (source,) = kernel_sources(c)  # the bias add, GELU and scale live in the template
    assert "tl.dot(" in source and "erf" in source
    text = wrappers(c)
    assert "triton_tem_mm" in text and "fallback" not in text and "linear(" not in text


OPERANDS = {  # case -> (fn, shape of a, shape of b)
    "x @ w.t()": (lambda p, q: torch.relu(p @ q.t()), (40, 48), (33, 48)),
    "a.t() @ b": (lambda p, q: torch.relu(p.t() @ q), (40, 48), (40, 33)),
    "slices": (lambda p, q: torch.relu(p[3:37, 5:29] @ q[7:31, 1:32]), (40, 48), (40, 33)),
    "x.t() @ x": (lambda p, q: torch.relu(p.t() @ p) + q, (40, 48), (48, 48)),
}


@pytest.mark.parametrize("case", list(OPERANDS))
def test_operands_are_read_through_their_own_layouts(templates, case):
    torch.manual_seed(1)
    fn, a_shape, b_shape = OPERANDS[case]
    a, b = torch.randn(a_shape, device=DEV), torch.randn(b_shape, device=DEV)
    c = compiled(fn)
    torch.testing.assert_close(c(a, b), fn(a, b), **TOL[torch.float32])
    assert "triton_tem_mm" in wrappers(c)


def test_a_product_read_elsewhere_is_stored_too(templates):
    torch.manual_seed(2)
    a, b = torch.randn(32, 24, device=DEV), torch.randn(24, 20, device=DEV)

    def fn(p, q):
        y = p @ q
        return torch.sigmoid(y), y  # the epilogue, and the product itself

    c = compiled(fn)
    for got, want in zip(c(a, b), fn(a, b)):
        torch.testing.assert_close(got, want, **TOL[torch.float32])
    (template,) = [s for s in kernel_sources(c) if "tl.dot(" in s]
    assert template.count("tl.store(") == 2  # the product and the sigmoid


def test_an_epilogue_over_three_dims(templates):
    """A Linear over [B, T, C]: the epilogue loops over [B, T, N], the product is [B*T, N]."""
    torch.manual_seed(3)
    layer = torch.nn.Linear(32, 48).to(DEV)
    x = torch.randn(3, 17, 32, device=DEV)
    res = torch.randn(3, 17, 48, device=DEV)
    fn = lambda a, r: torch.tanh(layer(a)) + r  # noqa: E731
    c = compiled(fn)
    with torch.no_grad():
        torch.testing.assert_close(c(x, res), fn(x, res), **TOL[torch.float32])
    assert len(kernel_sources(c)) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_training_gradients_match_eager(templates, dtype):
    """Forward and backward matrix multiplies (transposed operands) all as templates."""
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 16)).to(DEV, dtype)
    ref = [p.detach().clone().requires_grad_() for p in model.parameters()]
    x = torch.randn(48, 32, device=DEV, dtype=dtype)
    c = compiled(model)
    loss = c(x).float().square().mean()
    loss.backward()
    w1, b1, w2, b2 = ref
    h = torch.nn.functional.gelu(torch.nn.functional.linear(x, w1, b1))
    want = torch.nn.functional.linear(h, w2, b2).float().square().mean()
    want.backward()
    torch.testing.assert_close(loss, want, **TOL[dtype])
    for p, r in zip(model.parameters(), ref):
        torch.testing.assert_close(p.grad, r.grad, **TOL[dtype])
    assert "triton_tem_mm" in wrappers(c)
    assert sum("tl.dot(" in s for s in kernel_sources(c)) >= 4  # 2 forward, 3 backward


def test_templates_only_under_max_autotune(templates):
    a, b = torch.randn(32, 32, device=DEV), torch.randn(32, 32, device=DEV)
    c = compiled(lambda p, q: torch.relu(p @ q), mode="default")
    c(a, b)
    assert "triton_tem_mm" not in wrappers(c)


def test_the_cheap_launch_rule_at_the_suites_sizes(monkeypatch):
    """[Note: a template untimed, compiled behind the library] on an H200 (132
    multiprocessors): graph_breaks' products and gradients take the template; the mlp's
    4096-cubed product (too many flops), float32, GPT-2's products (a dim of 768) do not;
    without a GPU nothing does."""
    monkeypatch.setattr(autotune, "can_time", lambda: True)
    monkeypatch.setattr(mm_template, "multiprocessors", lambda device: 132)

    def cheap(m, n, k, dtype=torch.bfloat16):
        return mm_template.launched_cheaply(m, n, k, dtype, torch.device("cuda"))
    assert cheap(4096, 2048, 2048) and cheap(2048, 2048, 4096)
    assert cheap(4096, 2048, 2048, torch.float16)
    assert not cheap(4096, 4096, 4096)
    assert not cheap(4096, 2048, 2048, torch.float32)
    assert not cheap(8192, 2304, 768) and not cheap(8192, 768, 3072)
    monkeypatch.setattr(autotune, "can_time", lambda: False)
    assert not cheap(4096, 2048, 2048)


@pytest.fixture
def cheap_rule(monkeypatch, tmp_path):
    """The default mode's rule as on a GPU of one multiprocessor, for products of 64 or more
    along each dim; nothing may be timed."""
    monkeypatch.setenv("MINIPT2_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("MINIPT2_MM_TEMPLATE", raising=False)
    monkeypatch.setattr(autotune, "can_time", lambda: True)
    monkeypatch.setattr(mm_template, "multiprocessors", lambda device: 1)
    monkeypatch.setattr(mm_template, "CHEAP_MIN_DIM", 64)
    monkeypatch.setattr(autotune, "benchmark", lambda launch, config: 1 / 0)
    builds = []  # the template builds, held back until the test runs them
    monkeypatch.setattr(compile_fx, "build_later", lambda *args: builds.append(args))
    yield builds
    later.wait()


def linear_gelu_step(dtype):
    """(the compiled model, its training step, the step of an eager twin): a Linear and
    GELU, 64 wide, whose step returns the loss and the weight's and bias's gradients."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 64).to(DEV, dtype)
    twin = torch.nn.Linear(64, 64).to(DEV, dtype)
    twin.load_state_dict(layer.state_dict())
    x = torch.randn(64, 64, device=DEV, dtype=dtype)
    c = compiled(lambda a: torch.nn.functional.gelu(layer(a)), mode="default")

    def step(model, module):
        module.zero_grad()
        loss = model(x).float().square().mean()
        loss.backward()
        return loss, module.weight.grad, module.bias.grad
    return c, lambda: step(c, layer), lambda: step(lambda a: torch.nn.functional.gelu(twin(a)),
                                                   twin)


def test_the_default_mode_runs_the_library_then_the_templates(cheap_rule):
    """The first calls run the library version; once its build has run, the forward and
    the backward run templates (the GELU in the forward's epilogue), and the loss and the
    gradients stay eager's throughout."""
    c, step, eager = linear_gelu_step(torch.bfloat16)
    for got, want in zip(step(), eager()):
        torch.testing.assert_close(got, want, **TOL[torch.bfloat16])
    assert len(cheap_rule) == 2  # the forward's, the backward's
    graphs = [args[0] for args in cheap_rule]  # their CompiledGraphs

    def running_templates(graph):
        return any(name.startswith("triton_tem_mm") for name in graph.call.__globals__)
    assert not any(map(running_templates, graphs))
    for args in cheap_rule:
        later.build_later(*args)
    later.wait()
    assert all(map(running_templates, graphs))
    texts = c.graphs[0].artifacts  # the final version's from the start
    for key in ("wrapper", "backward/wrapper"):
        assert "triton_tem_mm" in texts[key] and "linear(" not in texts[key]
    assert any("tl.dot(" in s and "erf" in s for s in kernel_sources(c))
    assert "linear(" in c.graphs[0].artifacts["library_wrapper"]
    for got, want in zip(step(), eager()):
        torch.testing.assert_close(got, want, **TOL[torch.bfloat16])


def test_the_default_mode_keeps_the_library_for_float32_and_after_a_failed_build(
        cheap_rule, monkeypatch):
    c, step, eager = linear_gelu_step(torch.float32)
    step()
    assert not cheap_rule and "triton_tem_mm" not in wrappers(c)
    driver.reset()

    def broken(*args):
        raise RuntimeError("Triton refused (a test)")

    c, step, eager = linear_gelu_step(torch.bfloat16)
    step()
    monkeypatch.setattr(compile_fx, "finish_wrapper", broken)  # the templates' build fails
    with pytest.warns(UserWarning, match="did not build .*Triton refused"):
        for args in cheap_rule:
            later.build_later(*args)
        later.wait()
    assert not any(name.startswith("triton_tem_mm") for args in cheap_rule
                   for name in args[0].call.__globals__)
    for got, want in zip(step(), eager()):
        torch.testing.assert_close(got, want, **TOL[torch.bfloat16])


def test_small_dims_and_the_switch_keep_the_library(templates, monkeypatch):
    a, b = torch.randn(32, 8, device=DEV), torch.randn(8, 32, device=DEV)  # K = 8 < 16
    c = compiled(lambda p, q: torch.relu(p @ q))
    torch.testing.assert_close(c(a, b), torch.relu(a @ b))
    assert "triton_tem_mm" not in wrappers(c)
    monkeypatch.setenv("MINIPT2_MM_TEMPLATE", "0")
    a = torch.randn(32, 32, device=DEV)
    b = torch.randn(32, 32, device=DEV)
    c = compiled(lambda p, q: torch.relu(p @ q))
    c(a, b)
    assert "triton_tem_mm" not in wrappers(c)


class Clock:
    """``autotune.benchmark``: runs each launch once, says the library takes
    ``library_ms`` and every template config 1.0 ms more the later it is listed."""

    def __init__(self, library_ms: float) -> None:
        self.library_ms, self.timed = library_ms, []

    def __call__(self, launch, config) -> float:
        launch()
        self.timed.append(config)
        return self.library_ms if "library" in config else 0.5 + len(self.timed)


@pytest.mark.parametrize("library_ms", [0.1, 100.0])
def test_the_faster_of_library_and_template_wins_and_is_cached(templates, monkeypatch,
                                                               library_ms):
    monkeypatch.delenv("MINIPT2_MM_TEMPLATE")
    clock = Clock(library_ms)
    monkeypatch.setattr(autotune, "can_time", lambda: True)
    monkeypatch.setattr(autotune, "benchmark", clock)
    monkeypatch.setattr(autotune, "host_ms", lambda launch: (launch(), 0.0)[1])
    a, b = torch.randn(40, 48, device=DEV), torch.randn(48, 36, device=DEV)
    fn = lambda p, q: torch.relu(p @ q)  # noqa: E731
    c = compiled(fn)
    torch.testing.assert_close(c(a, b), fn(a, b), **TOL[torch.float32])
    configs = mm_template.candidates(40, 36, 48, torch.float32)
    assert clock.timed[0] == {"library": 1} and clock.timed[1:len(configs) + 1] == configs
    template = library_ms > 1.0
    assert ("triton_tem_mm" in wrappers(c)) == template
    assert len(list(templates.glob("**/autotune/mm-*.json"))) == 1  # the choice, on disk
    if template:  # the first config was fastest, and the template keeps only it
        (source,) = kernel_sources(c)
        assert "tl.dot(" in source
    driver.reset()
    autotune.clear_memory_cache()

    def refuse(launch, config):
        raise AssertionError("timed again: the cached choice should have been used")

    monkeypatch.setattr(autotune, "benchmark", refuse)
    c = compiled(fn)
    torch.testing.assert_close(c(a, b), fn(a, b), **TOL[torch.float32])
    assert ("triton_tem_mm" in wrappers(c)) == template


@pytest.mark.parametrize("template_slower_ms, replayed, wins",
                         [(0.05, False, True), (0.5, False, False), (0.05, True, False)])
def test_a_tie_on_the_gpu_goes_to_the_cheaper_launch(templates, monkeypatch,
                                                     template_slower_ms, replayed, wins):
    """[Note: a launch's cost on the host]: a template a little slower on the GPU than the
    library, but 0.09 ms cheaper to launch, wins; one slower by more than that loses; where
    a CUDA graph replays the launches (pretended here), the GPU times alone decide. The
    costs are in the fusion log, and the host times in the cached choice."""
    monkeypatch.delenv("MINIPT2_MM_TEMPLATE")
    monkeypatch.setattr(mm_template, "launched_from_host", lambda mode, inputs: not replayed)
    monkeypatch.setattr(autotune, "can_time", lambda: True)
    monkeypatch.setattr(autotune, "benchmark", lambda launch, config: (launch(), (
        1.0 if "library" in config else 1.0 + template_slower_ms))[1])
    hosts = iter([0.1, 0.01])  # the library's launch is timed first, then the template's
    monkeypatch.setattr(autotune, "host_ms", lambda launch: (launch(), next(hosts))[1])
    a, b = torch.randn(40, 48, device=DEV), torch.randn(48, 36, device=DEV)
    fn = lambda p, q: torch.relu(p @ q)  # noqa: E731
    c = compiled(fn, mode="max-autotune-no-cudagraphs")
    torch.testing.assert_close(c(a, b), fn(a, b), **TOL[torch.float32])
    assert ("triton_tem_mm" in wrappers(c)) == wins
    host = 0.0 if replayed else 0.1
    assert f"library 1.0000 + {host:.4f} ms on the host" in c.graphs[0].artifacts["fusion"]
    (path,) = templates.glob("**/autotune/mm-*.json")
    entry = json.loads(path.read_text())
    assert (entry["library_host_ms"], entry["template_host_ms"]) == (0.1, 0.01)


def test_a_failed_timing_keeps_the_library_and_is_not_cached(templates, monkeypatch):
    """Timing runs on the GPU at compile time; if it fails (out of memory, say), the call
    stays a library call, the program runs, and the next compile tries again."""
    monkeypatch.delenv("MINIPT2_MM_TEMPLATE")
    monkeypatch.setattr(autotune, "can_time", lambda: True)

    def broken(launch, config):
        raise RuntimeError("CUDA out of memory (a test)")

    monkeypatch.setattr(autotune, "benchmark", broken)
    a, b = torch.randn(32, 48, device=DEV), torch.randn(48, 40, device=DEV)
    fn = lambda p, q: torch.relu(p @ q)  # noqa: E731
    c = compiled(fn)
    torch.testing.assert_close(c(a, b), fn(a, b), **TOL[torch.float32])
    assert "triton_tem_mm" not in wrappers(c)
    assert "timing failed: RuntimeError" in c.graphs[0].artifacts["fusion"]
    assert not list(templates.glob("**/autotune/mm-*.json"))


def test_a_template_beside_running_statistics(templates):
    """A BatchNorm (running statistics written in place) and a Linear head as a template in
    one training graph: the loss, every gradient and the running statistics match eager."""
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(24, 32), torch.nn.BatchNorm1d(32),
                                torch.nn.ReLU(), torch.nn.Linear(32, 16)).to(DEV)
    twin = torch.nn.Sequential(torch.nn.Linear(24, 32), torch.nn.BatchNorm1d(32),
                               torch.nn.ReLU(), torch.nn.Linear(32, 16)).to(DEV)
    twin.load_state_dict(model.state_dict())
    x = torch.randn(40, 24, device=DEV)
    c = compiled(model)
    c(x).square().mean().backward()
    twin(x).square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **TOL[torch.float32], msg=name)
    for name, buf in model.named_buffers():
        torch.testing.assert_close(buf, dict(twin.named_buffers())[name], msg=name)
    assert "triton_tem_mm" in wrappers(c)
