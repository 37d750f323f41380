"""[Note: direct launches]: the first launch of each specialization goes through Triton, the
later ones call the compiled variant's launcher with every parameter in order."""

from __future__ import annotations

import re
import threading

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

    def __init__(self, run=None):
        self.slow, self.run = [], run  # run: the launcher object each variant gets

    def __getitem__(self, grid):
        def launch(*args, **options):
            self.slow.append((grid(options) if callable(grid) else grid, args, options))
            compiled = Compiled(len(self.slow))
            if self.run is not None:
                compiled.run = self.run
            return compiled
        return launch


def make(run=None):
    fn = JitFn(run)
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
    # every parameter, a tensor as its address ([Note: addresses, not tensors]), the
    # constexpr XBLOCK last
    assert call[9:] == (x.data_ptr(), out.data_ptr(), 64, 32)


class CudaLauncherLike:
    """Triton 3.6's ``CudaLauncher``: a Python ``__call__`` around the C ``launch``."""

    def __init__(self, scratch):
        self.global_scratch_size, self.profile_scratch_size = scratch, 0
        self.launch_cooperative_grid, self.launch_pdl = False, True
        self.calls, self.launches = [], []

    def __call__(self, *args):
        self.calls.append(args)

    def launch(self, *args):
        self.launches.append(args)


@pytest.mark.parametrize("scratch", [0, 128])
def test_the_c_launch_is_called_directly_unless_the_variant_needs_scratch(scratch, monkeypatch):
    monkeypatch.setattr(launcher, "_c_launch_known", lambda: True)  # (any installed Triton)
    run = CudaLauncherLike(scratch)
    fn, launch = make(run)
    x = torch.zeros(64)
    launch[grid(64)](x, x, 64, XBLOCK=32)  # Triton's path
    launch[grid(64)](x, x, 64, XBLOCK=32)
    launch[(7, 1, 1)](x, x, 64, XBLOCK=32)  # a static grid, as the wrapper writes it
    if scratch:  # Triton's __call__ allocates the scratch memory
        assert run.launches == [] and len(run.calls) == 2
        return
    assert run.calls == []
    head = (1234, "fn1", False, True, None, None, "meta", None, None, None)
    assert run.launches == [(2, 1, 1, *head, x.data_ptr(), x.data_ptr(), 64, 32),
                            (7, 1, 1, *head, x.data_ptr(), x.data_ptr(), 64, 32)]


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


@pytest.mark.parametrize("change", ["misaligned", "size", "options", None])
def test_keys_without_dtypes_still_tell_specializations_apart(change):
    """[Note: keys without dtypes]: a launcher told its kernel takes 2 buffers of fixed
    dtypes keys on their addresses modulo 16, the sizes and the options."""
    fn = JitFn()
    launch = launcher.Launcher(fn, pointers=2)
    launch.current_device, launch.stream_of = (lambda: 0), (lambda device: 1234)
    base = torch.zeros(65)
    args, options = [base[:64], torch.zeros(64), 64], {"XBLOCK": 32}
    first = launch[grid(64)](*args, **options)
    if change == "misaligned":
        args[0] = base[1:]
    elif change == "size":
        args[2] = 63
    elif change == "options":
        options = {"XBLOCK": 16}
    else:  # the same specialization, other buffers: a direct launch with their addresses
        args[:2] = [torch.zeros(64), torch.zeros(64)]
    launch[grid(64)](*args, **options)
    assert len(fn.slow) == (1 if change is None else 2)
    if change is None:
        (call,) = first.calls
        assert call[9:] == (args[0].data_ptr(), args[1].data_ptr(), 64, 32)


def test_wrapper_kernels_get_keys_without_dtypes_only_when_dtypes_are_fixed():
    """``fixed_dtype_pointers``: a kernel launched by two wrapper lines with buffers of
    different dtypes keeps the full key; one whose lines agree gets its buffer count."""
    import importlib

    from inductor.codegen.triton import KernelSource

    compile_fx = importlib.import_module("inductor.compile_fx")
    dtypes = {"a": torch.float32, "b": torch.float32, "c": torch.bfloat16, "d": torch.float32}
    buffer = type("B", (), {"__init__": lambda self, d: setattr(self, "d", d),
                            "get_dtype": lambda self: self.d})
    graph = type("G", (), {"buffer_by_name": {n: buffer(d) for n, d in dtypes.items()}})()

    def kernel(name, *args):
        return KernelSource(name, "", list(args), 64, {"XBLOCK": 64})

    kernels = [kernel("k0", "a", "b"), kernel("k0", "d", "a"),  # same dtypes: fixed
               kernel("k1", "a", "b"), kernel("k1", "c", "b"),  # float32 then bfloat16
               kernel("k2", "a", "missing")]  # a buffer the graph does not know
    assert compile_fx.fixed_dtype_pointers(kernels, graph) == {"k0": 2}


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


class WarmupFn:
    """Stands in for a @triton.jit function's ``warmup``: records each request; raises for
    an XBLOCK of 0, as a compile error would."""

    def __init__(self):
        self.warmed = []

    def warmup(self, *args, grid, **options):
        if options.get("XBLOCK") == 0:
            raise ValueError("no such block")
        self.warmed.append((args, grid, options))


class Variant:
    """Stands in for a compiled variant: ``_init_handles`` builds its launcher (the thread
    that did is recorded); one of them cannot load."""

    def __init__(self, fails):
        self.fails, self.thread = fails, None

    def _init_handles(self):
        self.thread = threading.current_thread().name
        if self.fails:
            raise RuntimeError("out of shared memory")


def test_precompile_builds_launchers_on_its_threads():
    """[Note: launchers in parallel]: after the compiles, every compiled variant is made
    launchable on the pool's threads; one that fails to load is left for its first launch."""
    pytest.importorskip("triton.runtime._async_compile")
    variants = [Variant(fails=False), Variant(fails=True), Variant(fails=False)]

    class Warm:
        def __init__(self, variant):
            self.variant = variant

        def warmup(self, *args, grid, **options):
            return type("Future", (), {"kernel": self.variant})()

    jobs = [(Warm(v), (torch.float32, 64), {"XBLOCK": 64}) for v in variants]
    assert launcher.precompile(jobs) == 3
    assert all(v.thread is not None and v.thread.startswith("minipt2-compile")
               for v in variants)


def test_precompile_warms_every_variant_and_skips_the_ones_that_fail():
    pytest.importorskip("triton.runtime._async_compile")
    a, b = WarmupFn(), WarmupFn()
    jobs = [(a, (torch.float32, torch.bfloat16, 4096), {"XBLOCK": 1024, "num_warps": 8}),
            (a, (torch.float32, torch.bfloat16, 4096), {"XBLOCK": 0, "num_warps": 8}),
            (b, (torch.bool, 7), {"XBLOCK": 8, "num_warps": 1})]
    assert launcher.precompile(jobs) == 2
    assert a.warmed == [((torch.float32, torch.bfloat16, 4096), (1,),
                         {"XBLOCK": 1024, "num_warps": 8})]
    assert b.warmed == [((torch.bool, 7), (1,), {"XBLOCK": 8, "num_warps": 1})]
    assert launcher.precompile(jobs[:1]) == 1  # one kernel too: its launcher builds beside it


def test_a_launcher_is_built_beside_its_kernel(monkeypatch):
    """[Note: a launcher built beside its kernel]: the hook Triton calls before a compile
    starts a build of exactly the launcher source Triton's ``CudaLauncher`` builds for that
    variant (so the variant's first load finds it in the cache), once per source; it calls
    the hook installed before, and puts it back afterwards."""
    pytest.importorskip("triton.backends.nvidia.driver")
    from triton import knobs
    from triton.backends.nvidia import driver as nvidia
    from triton.compiler.compiler import ASTSource
    from triton.runtime import build

    built, earlier = [], []
    monkeypatch.setattr(build, "compile_module_from_src", lambda **kw: built.append(kw["src"]))
    monkeypatch.setattr(nvidia, "library_dirs", lambda: [])  # (asks for libcuda: no GPU here)

    def installed_before(**kwargs):
        earlier.append(kwargs["key"])
    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", installed_before)
    monkeypatch.setattr(launcher, "_LAUNCHERS_STARTED", set())
    signature = {"in_ptr0": "*fp32", "out_ptr0": "*bf16", "xnumel": "i32", "XBLOCK": "constexpr"}
    constants = {(3,): 1024}
    threads = []
    with launcher._building_launchers(threads):
        for key in ("first", "same signature again"):
            knobs.runtime.jit_cache_hook(key=key, compile={"signature": signature,
                                                           "constants": constants})
    for thread in threads:
        thread.join()
    assert knobs.runtime.jit_cache_hook is installed_before
    assert earlier == ["first", "same signature again"]
    assert len(built) == 1

    class Stop(Exception):
        pass

    def triton_builds(src, **kwargs):
        built.append(src)
        raise Stop
    monkeypatch.setattr(nvidia, "compile_module_from_src", triton_builds)
    fn = type("Fn", (), {"__name__": "k", "arg_names": list(signature)})()
    with pytest.raises(Stop):
        nvidia.CudaLauncher(ASTSource(fn, signature, constants), object())
    assert built[1] == built[0]  # the very source Triton builds at the first load


def _spec(args):
    return tuple(a.dtype if isinstance(a, torch.Tensor) else
                 a if isinstance(a, torch.dtype) else int(a) for a in args)


@pytest.mark.parametrize("mode", ["default", "max-autotune"])
def test_precompiled_variants_are_the_ones_the_wrapper_launches(monkeypatch, mode):
    """What ``precompile`` is handed must be what the first launches ask Triton for (dtype
    per tensor, the ints, the options): otherwise the precompiled variants are never used.
    On the CPU it runs under the interpreter, with the GPU-only step switched on; both ends
    are recorded."""
    import importlib

    from inductor import autotune

    import driver

    compile_fx = importlib.import_module("inductor.compile_fx")  # the module, not the function
    jobs, launched = [], set()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        monkeypatch.setattr(compile_fx, "interpreting", lambda: False)
    monkeypatch.setattr(compile_fx, "precompile", lambda j: jobs.extend(j) or len(j))
    monkeypatch.setattr(autotune, "can_time", lambda: False)  # heuristic: launches config 0

    def first_launch(self, grid, key, args, options):
        launched.add((self.fn.__name__, _spec(args), tuple(sorted(options.items()))))
        return self.fn[grid](*args, **options)
    monkeypatch.setattr(launcher.Launcher, "_first_launch", first_launch)

    def f(x, w, mask):
        h = torch.where(mask, (x @ w).relu(), 0.0)
        return torch.softmax(h.to(torch.bfloat16), -1), h.sum(0)

    x, w = torch.randn(64, 32, device=device), torch.randn(32, 48, device=device)
    mask = torch.rand(64, 48, device=device) > 0.5
    compiled = driver.compile(f, options={"target": "triton"}, mode=mode)
    for got, want in zip(compiled(x, w, mask), f(x, w, mask)):
        torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    warmed = {(fn.__name__, _spec(args), tuple(sorted(options.items())))
              for fn, args, options in jobs}
    assert len(launched) >= 2
    assert launched <= warmed  # every launch was precompiled ...
    if mode == "default":
        assert warmed == launched  # ... and nothing else was
    else:  # every config the autotuner may time, not only the one launched here
        assert len(warmed) > len(launched)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compiles for a GPU")
def test_first_call_on_the_gpu_compiles_every_kernel_before_launching(monkeypatch):
    """[Note: parallel precompile]: every variant the first call launches was compiled by
    ``precompile`` (a warmup), none by a launch; [Note: launchers in parallel]: and made
    launchable on the pool's threads, not at its first launch."""
    from triton.compiler import compiler
    from triton.runtime import jit

    import driver

    warmups, loads = [], []
    original = jit.JITFunction._do_compile
    original_init = compiler.CompiledKernel._init_handles

    def record(self, key, signature, device, constexprs, options, attrs, warmup):
        warmups.append(warmup)
        return original(self, key, signature, device, constexprs, options, attrs, warmup)

    def record_init(self):
        if self.module is None:  # (a loaded variant returns at once)
            loads.append(threading.current_thread().name)
        return original_init(self)
    monkeypatch.setattr(jit.JITFunction, "_do_compile", record)
    monkeypatch.setattr(compiler.CompiledKernel, "_init_handles", record_init)

    def f(x, y):  # the constant makes these kernels new to this process
        return ((x.sin() + y) * 1.2345).softmax(-1), (x * y - 0.6789).sum(0)

    x, y = (torch.randn(256, 512, device="cuda") for _ in range(2))
    compiled = driver.compile(f, options={"target": "triton"})
    for got, want in zip(compiled(x, y), f(x, y)):
        torch.testing.assert_close(got, want)
    assert len(warmups) >= 2 and all(warmups)
    assert len(loads) >= 2 and all(name.startswith("minipt2-compile") for name in loads)


def test_static_sizes_launch_with_a_constant_grid_and_symbolic_ones_with_a_division():
    """The wrapper works a static kernel's grid out once, as ``(x, y, z)`` programs; a
    kernel over symbolic sizes has the ceiling division in its launch line. Both run."""
    import driver

    def f(x):
        return (x.sin() * 2).cos()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(3000, device=device)
    compiled = driver.compile(f, options={"target": "triton"})
    torch.testing.assert_close(compiled(x), f(x))
    head, text = compiled.graphs[0].artifacts["wrapper"].split("def call")
    # [Note: launch sites]: bound once at the top; the line passes the buffers
    site = re.search(r"^(\w+_launch) = bind_launch\(\w+, \(3, 1, 1\), \(3000,\), XBLOCK=1024",
                     head, re.M)
    assert site and f"    {site.group(1)}(arg0, buf0)" in text
    dynamic = driver.compile(f, options={"target": "triton"}, dynamic=True)
    for n in (3000, 17):
        torch.testing.assert_close(dynamic(x[:n]), f(x[:n]))
    text = dynamic.graphs[0].artifacts["wrapper"].split("def call")[1]
    assert "[((s0 + 1023) // 1024, 1, 1)](" in text


def test_a_launch_site_launches_directly_after_its_first_launch():
    """[Note: launch sites]: the first launch goes Triton's way; later ones call the variant's
    launch with the site's fixed grid, the buffers' addresses, the sizes and constexprs."""
    fn, launch = make()
    site = launcher.bind_launch(launch, (2, 1, 1), (64,), XBLOCK=32, num_warps=4)
    x, out = torch.zeros(64), torch.zeros(64)
    first = site(x, out)
    assert fn.slow == [((2, 1, 1), (x, out, 64), {"XBLOCK": 32, "num_warps": 4})]
    y, out2 = torch.zeros(64), torch.zeros(64)
    site(y, out2)
    assert len(fn.slow) == 1
    (call,) = first.calls
    assert call[:7] == (2, 1, 1, 1234, "fn1", "meta", None)
    assert call[9:] == (y.data_ptr(), out2.data_ptr(), 64, 32)


@pytest.mark.parametrize("homed", [False, True], ids=["site", "generated"])
@pytest.mark.parametrize("change", ["misaligned", "hooked", "chain replaced"])
def test_a_launch_site_goes_the_launchers_way_when_its_variant_does_not_apply(change, homed,
                                                                             monkeypatch):
    """The site object, and the function it writes down once homed ([Note: a launch site as
    one function]), check the same two things before a direct launch."""
    fn, launch = make()
    site = launcher.bind_launch(launch, (2, 1, 1), (64,), XBLOCK=32)
    namespace = {"kernel_launch": site}
    if homed:
        site.home = (namespace, "kernel_launch")
    base = torch.zeros(65)
    namespace["kernel_launch"](base[:64], torch.zeros(64))
    assert (namespace["kernel_launch"] is site) != homed
    launch_line = namespace["kernel_launch"]
    if change == "misaligned":
        launch_line(base[1:], torch.zeros(64))  # a new specialization: Triton compiles it
        assert len(fn.slow) == 2
        launch_line(base[1:], torch.zeros(64))  # the Launcher has it now: direct, by its key
        assert len(fn.slow) == 2
        return
    chain = launch.runtime_knobs.launch_enter_hook
    if hasattr(chain, "calls") and change == "hooked":
        monkeypatch.setattr(chain, "calls", [lambda meta: None])
    else:  # a plain callable where the chain was: the generated test compares identities
        monkeypatch.setattr(launch.runtime_knobs, "launch_enter_hook", lambda meta: None)
    launch_line(base[:64], torch.zeros(64))
    assert len(fn.slow) == 2


def test_a_site_of_a_plain_kernel_is_its_launch_line():
    """Under the interpreter (a jit function, no Launcher) a site is
    ``kernel[grid](*buffers, *sizes, **options)``."""
    fn = JitFn()
    site = launcher.bind_launch(fn, (3, 1, 1), (64, 8), XBLOCK=32)
    x = torch.zeros(64)
    site(x, x)
    site(x, x)
    assert [args for _, args, _ in fn.slow] == [(x, x, 64, 8)] * 2


@pytest.mark.parametrize("through", ["launcher", "site"])
def test_a_refused_direct_launch_goes_tritons_way_from_then_on(through):
    """[Note: a refused direct launch]: a C launch that rejects its arguments (it raises
    before touching the GPU) is retried Triton's way, and that key never goes direct again."""
    refused = []

    class Refusing(Compiled):
        def run(self, *args):
            refused.append(args)
            raise TypeError("function takes exactly 19 arguments (22 given)")

    class RefusingJitFn(JitFn):
        def __getitem__(self, grid):
            def launch_(*args, **options):
                super(RefusingJitFn, self).__getitem__(grid)(*args, **options)
                return Refusing(len(self.slow))
            return launch_

    fn = RefusingJitFn()
    launch = launcher.Launcher(fn)
    launch.current_device, launch.stream_of = (lambda: 0), (lambda device: 1234)
    x, out = torch.zeros(64), torch.zeros(64)
    if through == "site":
        site = launcher.bind_launch(launch, (2, 1, 1), (64,), XBLOCK=32)
        call = lambda: site(x, out)  # noqa: E731
    else:
        call = lambda: launch[grid(64)](x, out, 64, XBLOCK=32)  # noqa: E731
    call()  # Triton's way: compiles the variant
    call()  # direct: refused, then Triton's way again
    assert len(refused) == 1 and len(fn.slow) == 2
    call()
    call()
    assert len(refused) == 1 and len(fn.slow) == 4  # never direct again


class WrongLauncherFn(JitFn):
    """A jit function whose loaded variant's C launcher takes another count of arguments until
    it is built again ([Note: a launcher built again])."""

    def __init__(self, error="function takes exactly 18 arguments (17 given)", heals=True):
        super().__init__()
        self.error, self.heals, self.built_in = error, heals, []
        variant = type("Variant", (), {"_run": "the wrong launcher", "src": "src",
                                       "metadata": "meta"})()
        self.device_caches = {0: ({"key": variant}, {}, None, None, None)}
        self.variant = variant

    def __getitem__(self, grid):
        def launch_(*args, **options):
            super(WrongLauncherFn, self).__getitem__(grid)(*args, **options)
            if self.variant._run == "the wrong launcher" or not self.heals:
                raise TypeError(self.error)
            return Compiled(len(self.slow))
        return launch_


@pytest.fixture
def launcher_builds(monkeypatch):
    """Triton's driver as the rebuild sees it: each launcher built records the cache
    directory it was built in."""
    import triton.runtime
    from triton import knobs

    built = []

    def launcher_cls(src, metadata):
        built.append(knobs.cache.dir)
        return "a launcher built again"
    active = type("Active", (), {"launcher_cls": staticmethod(launcher_cls)})()
    monkeypatch.setattr(triton.runtime, "driver", type("Driver", (), {"active": active})())
    return built


@pytest.mark.parametrize("through", ["launcher", "site"])
def test_a_launcher_that_refuses_the_kernels_own_arguments_is_built_again(through,
                                                                         launcher_builds):
    """[Note: a launcher built again]: Triton's own launch raising "takes exactly" rebuilds the
    variant's launcher in a fresh cache directory and launches again."""
    from triton import knobs

    fn = WrongLauncherFn()
    launch = launcher.Launcher(fn)
    launch.current_device, launch.stream_of = (lambda: 0), (lambda device: 1234)
    x, out = torch.zeros(64), torch.zeros(64)
    if through == "site":
        launcher.bind_launch(launch, (2, 1, 1), (64,), XBLOCK=32)(x, out)
    else:
        launch[grid(64)](x, out, 64, XBLOCK=32)
    assert len(fn.slow) == 2 and fn.variant._run == "a launcher built again"
    (fresh,) = launcher_builds
    assert fresh != knobs.cache.dir and "minipt2-launcher-" in fresh


@pytest.mark.parametrize("error, heals", [("missing a required argument: 'xnumel'", True),
                                          ("function takes exactly 18 arguments (17 given)",
                                           False)])
def test_other_launch_errors_and_a_second_refusal_are_raised(error, heals, launcher_builds):
    """Only Triton's count error rebuilds, and only once: a wrong call from the wrapper, or a
    launcher still refusing after the rebuild, raises as it did."""
    fn = WrongLauncherFn(error, heals)
    with pytest.raises(TypeError, match=re.escape(error)):
        launcher.Launcher(fn)[grid(64)](torch.zeros(64), torch.zeros(64), 64, XBLOCK=32)
    assert len(launcher_builds) == (0 if "missing" in error else 1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="Triton's launchers need a GPU")
def test_a_kernel_given_another_kernels_launcher_launches_right_on_the_gpu():
    """[Note: a launcher built again] on the real thing: a variant whose loaded C launcher is
    another kernel's (one more parameter) still launches, and computes the right values."""
    import triton
    import triton.language as tl

    @triton.jit
    def add_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)

    @triton.jit
    def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + i, tl.load(x_ptr + i, mask=i < n) + tl.load(y_ptr + i, mask=i < n),
                 mask=i < n)

    x = torch.randn(1000, device="cuda")
    out = torch.empty_like(x)
    one = add_one[(8,)](x, out, 1000, BLOCK=128)
    other = add[(8,)](x, x, out, 1000, BLOCK=128)
    one.run.launch = other.run.launch  # what a wrong load leaves behind
    with pytest.raises(TypeError, match="takes exactly"):
        add_one[(8,)](x, out, 1000, BLOCK=128)
    site = launcher.bind_launch(launcher.Launcher(add_one), (8, 1, 1), (1000,), BLOCK=128)
    for _ in range(3):  # Triton's way (the launcher built again), then direct
        out.zero_()
        site(x, out)
        torch.testing.assert_close(out, x + 1)


def test_precompile_turns_a_kernel_triton_refuses_into_a_compile_error():
    """[Note: a kernel Triton refuses]: a front-end error in any kernel of the graph fails the
    graph's compile (dynamo then runs the frame eagerly); running out of shared memory is
    left to the first launch; a compile that succeeded or came from Triton's cache is fine."""
    pytest.importorskip("triton.runtime._async_compile")
    import concurrent.futures

    from inductor.exc import CompileError
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources

    def failed(error):
        future = concurrent.futures.Future()
        future.set_exception(error)
        return type("FutureKernel", (), {"kernel": None, "future": future})()

    class Warm:
        def __init__(self, result):
            self.result = result

        def warmup(self, *args, grid, **options):
            return self.result

    ok = type("FutureKernel", (), {"kernel": None, "future": None})()  # a cache hit's stand-in
    resources = failed(OutOfResources(300000, 232448, "shared memory"))
    refused = failed(CompilationError("src", None, "Cannot broadcast"))
    jobs = [(Warm(r), (torch.float32, 64), {"XBLOCK": 64}) for r in (ok, resources)]
    assert launcher.precompile(jobs) == 2
    with pytest.raises(CompileError, match="Triton could not compile a kernel"):
        launcher.precompile([*jobs, (Warm(refused), (torch.float32, 64), {"XBLOCK": 64})])


# -- [Note: a launch site as one function] ----------------------------------------------------
def homed_site(launch, name="kernel_launch"):
    site = launcher.bind_launch(launch, (2, 1, 1), (64,), XBLOCK=32, num_warps=4)
    namespace = {name: site}
    site.home = (namespace, name)
    return site, namespace


def test_a_homed_site_becomes_one_function_that_launches_the_same_way():
    fn, launch = make()
    site, namespace = homed_site(launch)
    x, out = torch.zeros(64), torch.zeros(64)
    first = namespace["kernel_launch"](x, out)  # Triton's way; the variant is stored
    generated = namespace["kernel_launch"]
    assert generated is not site and "def kernel_launch(b0, b1):" in generated.source_text
    y, out2 = torch.zeros(64), torch.zeros(64)
    generated(y, out2)
    site(y, out2)  # the site object launches the same call
    assert len(fn.slow) == 1
    made, by_site = first.calls
    assert made == by_site
    assert made[:7] == (2, 1, 1, 1234, "fn1", "meta", None)
    assert made[9:] == (y.data_ptr(), out2.data_ptr(), 64, 32)


def test_a_refused_generated_launch_binds_the_site_again():
    refused = []

    class Refusing(Compiled):
        def run(self, *args):
            refused.append(args)
            raise TypeError("function takes exactly 19 arguments (22 given)")

    fn, launch = make()
    fn.run = Refusing(0).run
    site, namespace = homed_site(launch)
    x, out = torch.zeros(64), torch.zeros(64)
    namespace["kernel_launch"](x, out)  # Triton's way; the variant's launch is the refusing one
    namespace["kernel_launch"](x, out)  # generated: refused, then Triton's way
    assert len(refused) == 1 and len(fn.slow) == 2
    assert namespace["kernel_launch"] is site and site.direct is False
    namespace["kernel_launch"](x, out)
    assert len(refused) == 1 and len(fn.slow) == 3
