"""[Note: direct launches]: the first launch of each specialization goes through Triton, the
later ones call the compiled variant's launcher with every parameter in order."""

from __future__ import annotations

import pytest
import torch
from inductor import launcher


class Compiled:
    """Stands in for Triton's CompiledKernel: records the launcher's calls."""

    def __init__(self, tag):
        self.tag, self.function, self.packed_metadata, self.calls = tag, f"fn{tag}", "meta", []

    def run(self, *args):
        self.calls.append(args)


class JitFn:
    """Stands in for a @triton.jit function with parameters (in_ptr0, out_ptr0, xnumel,
    XBLOCK): ``fn[grid](...)`` is Triton's own path; it compiles one variant per call here."""

    params = [type("P", (), {"name": n}) for n in ("in_ptr0", "out_ptr0", "xnumel", "XBLOCK")]

    def __init__(self):
        self.slow = []

    def __getitem__(self, grid):
        def launch(*args, **options):
            self.slow.append((grid(options), args, options))
            return Compiled(len(self.slow))
        return launch


def make():
    fn = JitFn()
    launch = launcher.Launcher(fn)
    launch.current_device = lambda: 0  # what the first GPU launch would look up
    launch.stream_of = lambda device: 1234
    return fn, launch


def grid(n):
    return lambda meta: ((n + meta["XBLOCK"] - 1) // meta["XBLOCK"], 1)


def test_second_launch_is_direct_with_constexprs_appended():
    fn, launch = make()
    x, out = torch.zeros(64), torch.zeros(64)
    first = launch[grid(64)](x, out, 64, XBLOCK=32, num_warps=4)
    assert len(fn.slow) == 1 and first.calls == []
    again = launch[grid(64)](x, out, 64, XBLOCK=32, num_warps=4)
    assert again is first and len(fn.slow) == 1
    (call,) = first.calls
    assert call[:7] == (2, 1, 1, 1234, "fn1", "meta", None)
    assert call[9:] == (x, out, 64, 32)  # every parameter, the constexpr XBLOCK last


@pytest.mark.parametrize("change", ["misaligned", "dtype", "size", "options"])
def test_a_different_specialization_takes_tritons_path(change):
    fn, launch = make()
    base = torch.zeros(65)
    args, options = [base[:64], torch.zeros(64), 64], {"XBLOCK": 32}
    launch[grid(64)](*args, **options)
    if change == "misaligned":
        args[0] = base[1:]  # 4 bytes past a 16-byte boundary
    elif change == "dtype":
        args[0] = args[0].double()
    elif change == "size":
        args[2] = 63
    else:
        options = {"XBLOCK": 16}
    launch[grid(64)](*args, **options)
    assert len(fn.slow) == 2


def test_profiling_hooks_force_tritons_path(monkeypatch):
    fn, launch = make()
    x = torch.zeros(8)
    launch[grid(8)](x, x, 8, XBLOCK=8)
    chain = launch.runtime_knobs.launch_enter_hook  # a HookChain in Triton 3.6
    if hasattr(chain, "calls"):
        monkeypatch.setattr(chain, "calls", [lambda meta: None])
    else:
        monkeypatch.setattr(launch.runtime_knobs, "launch_enter_hook", lambda meta: None)
    launch[grid(8)](x, x, 8, XBLOCK=8)
    assert len(fn.slow) == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="direct launches need a GPU")
def test_compiled_graph_launches_directly_on_the_gpu():
    import driver

    def f(x, y):
        return (x.sin() + y).relu() * 2

    compiled = driver.compile(f, options={"target": "triton"})
    base = torch.randn(4097, device="cuda")
    for x in (base[:4096], base[:4096], base[1:], torch.randn(4096, device="cuda")):
        y = torch.randn(4096, device="cuda")
        torch.testing.assert_close(compiled(x, y), f(x, y))
