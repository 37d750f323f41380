"""Launching a compiled Triton kernel without Triton's per-launch Python.

Input: a ``@triton.jit`` kernel as the wrapper calls it, ``kernel[grid](*args, **launch)``.
Output: ``Launcher``, which the wrapper's namespace binds under the kernel's name in place of
the jit function: the same spelling, the same results, less host time per launch.
Chapter: book/docs/performance.md ("The Python between launches").

# --8<-- [start:direct-launches]
# [Note: direct launches]
# ``kernel[grid](...)`` goes through ``JITFunction.run`` on every call: it asks the driver
# for the device and stream, binds the arguments to the signature, computes each argument's
# *specialization* (a pointer aligned to 16 bytes, an int that is 1 or a multiple of 16, the
# dtypes) and from it the key of the compiled variant, checks the globals the kernel read,
# builds launch metadata for profiling hooks, and only then calls the variant's launcher, a
# small C function. Profiled on the H200 host (cProfile, which inflates it) that was about
# 30 us a launch; a training step of the benchmark convnet launches 22 Triton kernels, a
# GPT-2 decode step about 150, and the GPU finishes many of them in less time than that.
#
# The first call of each specialization goes Triton's way, which compiles the variant and
# returns it. We keep the variant under our own key and later call its launcher directly.
# Our key is stricter than Triton's, so a hit can only find the variant Triton would have
# picked: per tensor its dtype and whether its address is 16-byte aligned (the one property
# of a pointer Triton specializes on); per int or float its exact value (Triton specializes
# ints on being 1, on divisibility by 16 and on fitting 32 bits: all functions of the value);
# plus the keyword arguments, which are the constexprs and launch options. The sizes of a
# static graph never change, so a kernel has one or two entries; a dynamic-shape graph has
# one per size seen. What the direct call skips is only what cannot change between two calls
# with equal keys, with one exception we check for: profiling hooks installed through
# ``triton.knobs`` need Triton's launch metadata, so while any is set every launch takes
# Triton's path. Under the interpreter a launch returns no compiled variant, so every launch
# takes Triton's path there.
# --8<-- [end:direct-launches]
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import operator
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

from inductor.exc import CompileError


def _key_and_pointers(args: tuple, options: dict[str, Any]) -> tuple[tuple, list]:
    """The variant's key ([Note: direct launches]: per tensor its dtype and 16-byte
    alignment, per int its value, per other value its type and value, then the options) and
    the arguments as the C launcher takes them, each tensor as its address
    ([Note: addresses, not tensors]). One loop makes both: each tensor is asked for its
    address once."""
    key: list[Any] = []
    pointers: list[Any] = []
    for a in args:
        if isinstance(a, torch.Tensor):
            address = a.data_ptr()
            key.append((a.dtype, not address & 15))
            pointers.append(address)
        else:
            key.append(a if type(a) is int else (type(a), a))
            pointers.append(a)
    return (*key, *options.items()), pointers


# --8<-- [start:addresses]
# [Note: addresses, not tensors]
# Triton's C launcher accepts a pointer argument as a tensor or as an int. Given a tensor it
# calls ``data_ptr()`` and then asks the CUDA driver (``cuPointerGetAttribute``) whether the
# address is device memory, to raise a clear error for a CPU tensor: one driver call per
# pointer per launch, and our kernels take up to a dozen pointers. Given an int it takes the
# value as it is. The direct path passes ints: it only runs for a key that Triton's own path
# launched before, every buffer of a compiled graph lives on the graph's device (dynamo
# guards the inputs' device, the wrapper allocates the rest there), and the key needs each
# address anyway for its alignment bit. Triton's launcher object (``CudaLauncher`` in 3.6)
# is a Python ``__call__`` that allocates scratch memory for the kernels that need some and
# then calls the C function ``launch``; for a variant that needs none we call ``launch``
# ourselves. Both skips are checked per variant, when it is stored: a Triton whose launcher
# looks different, or a Triton other than the 3.6 whose argument order this follows, keeps
# its own ``run``. The wrapper helps as well: a kernel is launched with its grid as a tuple,
# ``kernel[((s0 + 1023) // 1024, 1, 1)](...)`` over symbolic sizes (and, over static ones,
# bound once: [Note: launch sites]), instead of a ``grid(...)`` lambda that every launch
# called with its options.
# --8<-- [end:addresses]
def _direct_call(compiled: Any) -> tuple[Callable[..., Any], tuple]:
    """(function, the arguments between the stream and the kernel's own): the C ``launch``
    where the variant needs no scratch memory, else the variant's ``run``."""
    run = compiled.run
    head = (compiled.function, compiled.packed_metadata, None, None, None)
    if (_c_launch_known() and callable(getattr(run, "launch", None))
            and getattr(run, "global_scratch_size", 1) == 0
            and getattr(run, "profile_scratch_size", 1) == 0
            and hasattr(run, "launch_cooperative_grid") and hasattr(run, "launch_pdl")):
        return run.launch, (compiled.function, run.launch_cooperative_grid, run.launch_pdl,
                            None, None, *head[1:])  # (no global, no profile scratch)
    return run, head


def _c_launch_known() -> bool:
    """Whether this Triton's C ``launch`` takes its arguments in the order ``_direct_call``
    passes them (read from Triton 3.6's ``backends/nvidia/driver.py``)."""
    import triton

    return triton.__version__.startswith("3.6.")


# --8<-- [start:site-keys]
# [Note: keys without dtypes]
# ``_key_and_pointers`` asks every argument what it is, and every tensor for its dtype: about
# 0.4 us an argument on the H200's host, and a BatchNorm backward kernel takes 22. Most of
# that is needless for our own wrapper. A kernel's parameters are its buffers, then its sizes,
# so its first ``pointers`` arguments are always tensors and the rest always ints (sizes,
# evaluated by the wrapper); and when every line of the wrapper that launches the kernel passes
# buffers of the same dtypes (the wrapper knows each buffer's dtype, and dynamo's guards fix the
# inputs'), the dtypes cannot change from one launch to the next either. For such a kernel
# (``Launcher(fn, pointers=n)``) the key is each pointer's address modulo 16 (finer than
# Triton's one alignment bit, so still never a variant Triton would not pick), the sizes as
# they are, and the options. Any other kernel keeps the full key.
def _site_key(args: tuple, options: dict[str, Any], pointers: int) -> tuple[tuple, list]:
    """(key, launch arguments) of a kernel whose first ``pointers`` arguments are tensors of
    fixed dtypes and whose other arguments are ints ([Note: keys without dtypes])."""
    addresses = [a.data_ptr() for a in args[:pointers]]
    return (*[p & 15 for p in addresses], *args[pointers:], *options.items()), \
        [*addresses, *args[pointers:]]
# --8<-- [end:site-keys]


class Launcher:
    """``kernel[grid](*args, **options)`` with direct launches; see [Note: direct launches].
    ``pointers``: see [Note: keys without dtypes]; None for the full key."""

    def __init__(self, fn: Any, pointers: int | None = None) -> None:
        from triton import knobs

        self.fn = fn
        self.pointers = pointers
        # key -> (launch function, its arguments before the kernel's, the constexprs, the
        # compiled variant)
        self.variants: dict[tuple, tuple[Any, tuple, list[Any], Any]] = {}
        self.grid: Any = None
        self.names = [p.name for p in getattr(fn, "params", [])]  # parameters, in order
        self.runtime_knobs = knobs.runtime
        self.stream_of: Any = None  # device -> its current CUDA stream (set by the first
        self.current_device: Any = None  # launch that returns a variant: on a GPU only)
        self.refused: set[tuple] = set()  # keys whose direct launch raised: Triton's way

    def __getitem__(self, grid: Any) -> Launcher:
        self.grid = grid
        return self

    def __call__(self, *args: Any, **options: Any) -> Any:
        grid = self.grid
        if self.pointers is None:
            key, pointers = _key_and_pointers(args, options)
        else:
            key, pointers = _site_key(args, options, self.pointers)
        found = self.variants.get(key)
        knobs = self.runtime_knobs
        if found is None or _hooked(knobs.launch_enter_hook) or _hooked(knobs.launch_exit_hook):
            return self._first_launch(grid, key, args, options)  # (hooks want Triton's path)
        launch, head, rest, compiled = found
        g = grid(options) if callable(grid) else grid  # the wrapper's grids are (x, y, z)
        if len(g) != 3:
            g = (*g, 1, 1)[:3]
        try:
            launch(*g, self.stream_of(self.current_device()), *head, *pointers, *rest)
        except TypeError:  # [Note: a refused direct launch]
            self.refuse(args, options)
            return _tritons_way(self.fn, grid, args, options)
        return compiled

    def refuse(self, args: tuple, options: dict[str, Any]) -> None:
        """Launch this variant Triton's way from now on ([Note: a refused direct launch])."""
        key = self._key(args, options)
        self.refused.add(key)
        self.variants.pop(key, None)

    def variant(self, args: tuple, options: dict[str, Any]) -> tuple | None:
        """What a direct launch of ``args`` would call, (launch, head, constexprs, compiled),
        or None while Triton's path has not yet compiled and stored that variant."""
        return self.variants.get(self._key(args, options))

    def _key(self, args: tuple, options: dict[str, Any]) -> tuple:
        return (_key_and_pointers(args, options) if self.pointers is None else
                _site_key(args, options, self.pointers))[0]

    def _first_launch(self, grid: Any, key: tuple, args: tuple, options: dict) -> Any:
        compiled = _tritons_way(self.fn, grid, args, options)
        rest_names = self.names[len(args):]
        if (getattr(compiled, "function", None) is not None and hasattr(compiled, "run")
                and all(n in options for n in rest_names)):
            if self.stream_of is None:
                from triton.runtime import driver

                self.stream_of = driver.active.get_current_stream
                # Triton asks ``torch.cuda.current_device()``, which checks CUDA's lazy
                # initialization first; a variant exists, so CUDA is up: ask torch's C getter
                self.current_device = getattr(torch._C, "_cuda_getDevice",
                                              driver.active.get_current_device)
            # the parameters after the positional ones are the constexprs (XBLOCK, ...):
            # the launcher takes every parameter in order and skips the constexprs itself
            if key not in self.refused:
                self.variants[key] = (*_direct_call(compiled),
                                      [options[n] for n in rest_names], compiled)
        return compiled


# --8<-- [start:launch-sites]
# [Note: launch sites]
# Most lines of a wrapper launch a kernel whose grid, sizes and constexprs are numbers fixed at
# compile time: only the buffers change from one call to the next. Such a line is bound once,
# when the wrapper is loaded, to a ``LaunchSite`` (``bind_launch`` below), and the line passes
# only the buffers: ``triton_poi_fused_add_0_launch(buf0, arg1, buf2)``. The site keeps the
# compiled variant's launch function with everything after the addresses already in a tuple,
# so a launch is: the buffers' addresses, one check, the C launch. The check is that every
# address is 16-byte aligned (the variant was compiled assuming so; an input can be an
# unaligned view, and then the launch goes the Launcher's way, which keys on it) and that no
# profiling hook is installed. The dtypes need no check: a site's buffers are graph inputs,
# whose dtypes dynamo guards, or buffers the wrapper allocates with fixed dtypes. On the H200
# host a launch through ``Launcher`` had cost about 13 us inside a training step, against
# 5 us for the bare C launch. With the C launch replaced by a no-op (four buffers, on the
# CPU machine while it ran other work too), a site's Python took 2.6 us where the
# Launcher's took 4.5 us. Under the interpreter, or for a kernel an autotuner launches, the
# bound line is a plain ``kernel[grid](*buffers, *sizes, **options)``.
class LaunchSite:
    """``launcher[grid](*buffers, *sizes, **options)`` with everything but the buffers fixed;
    see [Note: launch sites]."""

    __slots__ = ("launcher", "grid", "sizes", "options", "direct", "home")

    def __init__(self, launcher: Launcher, grid: tuple[int, int, int], sizes: tuple,
                 options: dict[str, Any]) -> None:
        self.launcher, self.grid, self.sizes, self.options = launcher, grid, sizes, options
        # (launch, head, sizes + constexprs) once known; False after a refused direct launch
        self.direct: tuple | None | bool = None
        # (the wrapper's namespace, the name this site is bound to there): where the
        # generated launch function goes once the direct launch is known ([Note: a launch
        # site as one function]); None where nobody said
        self.home: tuple[dict[str, Any], str] | None = None

    def __call__(self, *buffers: torch.Tensor) -> Any:
        direct = self.direct
        if direct:
            addresses = [b.data_ptr() for b in buffers]
            knobs = self.launcher.runtime_knobs
            if not (functools.reduce(operator.or_, addresses, 0) & 15
                    or _hooked(knobs.launch_enter_hook) or _hooked(knobs.launch_exit_hook)):
                launch, head, tail = direct
                launcher = self.launcher
                try:
                    return launch(*self.grid, launcher.stream_of(launcher.current_device()),
                                  *head, *addresses, *tail)
                except TypeError:  # [Note: a refused direct launch]
                    return self.refused(buffers)
        return self._through_launcher(buffers)

    def _through_launcher(self, buffers: tuple) -> Any:
        """Launch the Launcher's way; after an all-aligned launch, keep its variant."""
        args = (*buffers, *self.sizes)
        compiled = self.launcher[self.grid](*args, **self.options)
        if self.direct is None and not any(b.data_ptr() & 15 for b in buffers):  # (not False)
            found = self.launcher.variant(args, self.options)
            if found is not None:
                launch, head, constexprs, _ = found
                self.direct = (launch, head, (*self.sizes, *constexprs))
                if self.home is not None:
                    namespace, name = self.home
                    namespace[name] = self.function(len(buffers), name)
        return compiled

    def refused(self, buffers: tuple) -> Any:
        """A direct launch raised TypeError ([Note: a refused direct launch]): Triton's way
        from now on, this site object bound again in place of its generated function."""
        self.direct = False
        self.launcher.refuse((*buffers, *self.sizes), self.options)
        if self.home is not None:
            namespace, name = self.home
            namespace[name] = self
        return self.launcher[self.grid](*buffers, *self.sizes, **self.options)

    # --8<-- [start:site-function]
    def function(self, count: int, name: str) -> Callable[..., Any]:
        """The generated launch function of this site for ``count`` buffers ([Note: a launch
        site as one function])."""
        launch, head, tail = self.direct
        launcher = self.launcher
        knobs = launcher.runtime_knobs
        constants = {"___launch": launch, "___stream": launcher.stream_of,
                     "___device": launcher.current_device, "___knobs": knobs,
                     "___enter": knobs.launch_enter_hook, "___exit": knobs.launch_exit_hook,
                     "___hooked": _hooked, "___site": self}
        chains = all(isinstance(getattr(constants[k], "calls", None), list)
                     for k in ("___enter", "___exit"))  # Triton's HookChain (3.4 and later)
        hooks = HOOKS_CHANGED if chains else ("___hooked(___knobs.launch_enter_hook) or "
                                              "___hooked(___knobs.launch_exit_hook)")
        fixed = []
        for value in (*head, *tail):
            if value is None or type(value) in (int, bool):
                fixed.append(repr(value))
            else:
                fixed.append(f"___k{len(constants)}")
                constants[fixed[-1]] = value
        buffers = [f"b{i}" for i in range(count)]
        pointers = [f"p{i}" for i in range(count)]
        arguments = ", ".join([*map(str, self.grid), "___stream(___device())",
                               *fixed[:len(head)], *pointers, *fixed[len(head):]])
        text = (f"def {name}({', '.join(buffers)}):\n"
                + "".join(f"    {p} = {b}.data_ptr()\n" for p, b in zip(pointers, buffers))
                + f"    if ({' | '.join(pointers)}) & 15 or {hooks}:\n"
                f"        return ___site._through_launcher(({', '.join(buffers)},))\n"
                f"    try:\n"
                f"        return ___launch({arguments})\n"
                f"    except TypeError:  # [Note: a refused direct launch]\n"
                f"        return ___site.refused(({', '.join(buffers)},))\n")
        exec(compile(text, f"<launch site {name}>", "exec"), constants)
        fn = constants[name]
        fn.source_text = text  # for debugging and the book
        return fn
    # --8<-- [end:site-function]


# (device index, stream) or (type, index) -> ((counters, partials), their lengths); the
# lengths as ints, since ``len`` of a tensor is Python code in torch (a few microseconds)
_SCRATCH: dict[tuple, tuple] = {}
# bound once: an attribute lookup on ``torch._C`` is a dict lookup each call (CPU builds of
# torch lack the CUDA ones, and never call them)
_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None)
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_cuda_device = getattr(torch._C, "_cuda_getDevice", None)


def last_program_scratch(device: torch.device, counters: int = 1, partials: int = 0
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """(at least ``counters`` int32s, at least ``partials`` int32 slots) on ``device`` for
    the current stream's kernels whose last programs finish their work: the tile counters,
    zero when made and left at zero by each such launch, and room for the partials ([Note:
    the last program finishes] in codegen/last_program.py). The wrapper asks once per call
    of a graph that has such a kernel, so this is a few C calls and a dict lookup
    (``torch.cuda.current_stream`` costs microseconds)."""
    if device.type == "cuda":
        if _capturing():  # a CUDA graph records this call: its own, zeroed by each replay
            return (torch.zeros(counters, dtype=torch.int32, device=device),
                    torch.empty(partials, dtype=torch.int32, device=device))
        index = device.index if device.index is not None else _cuda_device()
        key: tuple = (index, _raw_stream(index))
    else:
        key = (device.type, device.index)
    found = _SCRATCH.get(key)
    if found is None or found[1] < counters or found[2] < partials:
        had = found or ((), 0, 0)
        counters, partials = max(counters, had[1]), max(partials, had[2])
        found = _SCRATCH[key] = (
            (torch.zeros(counters, dtype=torch.int32, device=device),
             torch.empty(partials, dtype=torch.int32, device=device)), counters, partials)
    return found[0]


def bind_launch(kernel: Any, grid: tuple[int, int, int], sizes: tuple,
                **options: Any) -> Callable[..., Any]:
    """What a wrapper line launching ``kernel`` over static sizes calls with its buffers:
    a ``LaunchSite`` for a ``Launcher``, else ``kernel[grid](*buffers, *sizes, **options)``."""
    if isinstance(kernel, Launcher):
        return LaunchSite(kernel, grid, tuple(sizes), options)

    def launch(*buffers: torch.Tensor) -> Any:
        return kernel[grid](*buffers, *sizes, **options)
    return launch
# --8<-- [end:launch-sites]


# --8<-- [start:site-function-note]
# [Note: a launch site as one function]
# A ``LaunchSite`` call is still generic Python: a list of addresses, ``functools.reduce``
# over it, the stored tuples unpacked into the C launch's arguments. Once the site's variant
# is known, everything but the buffers' addresses is fixed, so the site writes itself down as
# one function and puts it in the wrapper's namespace under its own name, where the wrapper's
# next call finds it:
#
#     def triton_poi_fused_add_0_launch(b0, b1):
#         p0 = b0.data_ptr()
#         p1 = b1.data_ptr()
#         if (p0 | p1) & 15 or not (___knobs.launch_enter_hook is ___enter and ...):
#             return ___site._through_launcher((b0, b1,))
#         try:
#             return ___launch(256, 1, 1, ___stream(___device()), ___k7, ..., p0, p1, 4096, 1024)
#         except TypeError:  # [Note: a refused direct launch]
#             return ___site.refused((b0, b1,))
#
# The same checks as the site's, in the same order; a refused launch binds the site object
# again. With the C launch a no-op, four buffers, on the CPU machine, the site's Python took
# 1.64 us a launch and the function 0.69 us. Whether a profiler added a launch hook is asked
# without a call: the two hook chains Triton had when the function was made are still the
# knobs' and both are empty (any other state of the knobs, a chain replaced or a hook added,
# goes the Launcher's way, which asks ``_hooked``). That is two Python calls a launch fewer;
# under cProfile on the H200's host they had been 2 % of the graph_breaks forward.
# --8<-- [end:site-function-note]


# --8<-- [start:refused]
# [Note: a refused direct launch]
# Once, in a sweep of eight models compiling side by side on one GPU host (RoBERTa
# inference), a direct launch raised ``TypeError: function takes exactly 19 arguments (22
# given)``: the C launch stored for that key took fewer arguments than the kernel has. It
# did not happen again when the model ran alone. A C launch checks its argument count
# before it touches the GPU, so nothing ran: the launch is retried Triton's way, which binds
# the arguments to the kernel's own signature and picks the variant itself, and that key (or
# launch site) never goes the direct way again. A wrong argument from the wrapper would
# fail Triton's way too, with Triton's error.
# --8<-- [end:refused]


# --8<-- [start:launcher-built-again]
# [Note: a launcher built again]
# Twice more, both times Swin-v2-T training with other models compiling in seven more
# processes on the same host, the retry failed as well (``function takes exactly 18
# arguments (17 given)``): Triton's own launch passes one argument per parameter of the
# kernel, so the C launcher that Triton had loaded for that variant was not the one built
# for it. Its C source is made from the variant's signature alone and cached on disk under
# the hash of that source, so the source was right and the module loaded for it was not;
# how (a race between processes or threads loading same-named ``__triton_launcher``
# modules) we have not pinned down. When Triton's launch raises that error, each variant of
# the kernel gets its launcher built again, from the same source but into a fresh directory
# (a new path and a new file, which no earlier load can be mistaken for), and the launch is
# retried once; any other error, or the same one again, is raised as it was.
def _tritons_way(fn: Any, grid: Any, args: tuple, options: dict[str, Any]) -> Any:
    """``fn[grid](*args, **options)``, retried once after its variants' launchers are built
    again where Triton's launcher refused the kernel's own arguments ([Note: a launcher
    built again])."""
    try:
        return fn[grid](*args, **options)
    except TypeError as error:
        if "takes exactly" not in str(error) or not _build_launchers_again(fn):
            raise
    return fn[grid](*args, **options)


def _build_launchers_again(fn: Any) -> bool:
    """Give every loaded variant of ``fn`` a launcher built in a fresh Triton cache directory;
    False where there is none (or this Triton keeps its variants elsewhere)."""
    try:
        from triton import knobs
        from triton.runtime import driver
    except ImportError:
        return False
    variants = [kernel for caches in getattr(fn, "device_caches", {}).values()
                for kernel in caches[0].values()
                if getattr(kernel, "_run", None) is not None and hasattr(kernel, "src")]
    if not variants:
        return False
    with tempfile.TemporaryDirectory(prefix="minipt2-launcher-") as fresh, knobs.cache.scope():
        knobs.cache.dir = fresh
        for kernel in variants:
            kernel._run = driver.active.launcher_cls(kernel.src, kernel.metadata)
    return True
# --8<-- [end:launcher-built-again]


# the site function's test that no launch hook was added ([Note: a launch site as one
# function]): the chains are the ones bound at its making, and both are empty
HOOKS_CHANGED = ("not (___knobs.launch_enter_hook is ___enter and ___knobs.launch_exit_hook is"
                 " ___exit and not ___enter.calls and not ___exit.calls)")


def _hooked(hook: Any) -> bool:
    """Whether a launch hook is installed: Triton 3.6 keeps a ``HookChain`` (its ``calls``,
    empty unless a profiler added one); a plain callable counts too."""
    return hook is not None and bool(getattr(hook, "calls", True))


# --8<-- [start:precompile]
# [Note: parallel precompile]
# Triton compiles a kernel when it is first launched with a new specialization, and the
# wrapper launches its kernels one after another, so a graph's first call compiles them in
# series: GPT-2 training has about 240, and on the H100 host that was most of a 35 s first
# call. One compile is Triton's Python front end (the kernel's AST to MLIR, which holds the
# GIL), then MLIR passes in C++ and ``ptxas`` in its own process (which mostly do not):
# profiled on the CPU machine, about a quarter of the time holds the GIL. So threads can
# compile several kernels at once. Compiling for sm_90 on the 2-core CPU machine, 24 of our
# kernels took 3.6 s one after the other and 1.8 s on two threads.
#
# ``precompile`` is handed every (kernel, arguments, launch options) the wrapper will use
# and asks Triton for each through ``JITFunction.warmup``, inside Triton's
# ``AsyncCompileMode`` with a thread pool. ``warmup`` runs Triton's own binding in this
# thread (so the variant's key is computed exactly as a launch computes it, for the current
# device) and hands only the compile to the pool; leaving the mode waits for every compile
# and files each variant in the kernel's cache, where the first launch finds it. A tensor
# is passed as its dtype: Triton then assumes the pointer 16-byte aligned, which every
# buffer from PyTorch's caching allocator is; an unaligned input, a kernel whose sizes are
# symbols, or any error here leaves that kernel to compile at its first launch, as before.
# Precompiling only moves work earlier: it never changes what runs.
def precompile(jobs: Sequence[tuple[Any, tuple, dict[str, Any]]]) -> int:
    """Compile each ``(jit function, args, options)`` variant on a thread pool; returns how
    many were submitted (0 where this Triton has no ``AsyncCompileMode``). ``args`` are the
    launch's arguments with a ``torch.dtype`` in place of each tensor."""
    try:
        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:  # an older Triton: kernels compile at their first launch
        return 0
    if not jobs:
        return 0
    workers = min(len(jobs), os.cpu_count() or 1, 32)
    submitted, pending = 0, []
    builds: list[threading.Thread] = []  # [Note: a launcher built beside its kernel]
    with concurrent.futures.ThreadPoolExecutor(workers, "minipt2-compile") as pool:
        with AsyncCompileMode(pool, ignore_errors=True), _building_launchers(builds):
            for fn, args, options in jobs:
                try:
                    pending.append(fn.warmup(*args, grid=(1,), **options))
                    submitted += 1
                except Exception:  # noqa: BLE001 (the first launch will say what is wrong)
                    continue
        # leaving the mode waited for the compiles: [Note: launchers in parallel]
        for build in builds:
            build.join()
        refused = [error for p in pending if (error := _refused(p)) is not None]
        if refused:  # [Note: a kernel Triton refuses]
            raise CompileError(f"Triton could not compile a kernel of this graph: {refused[0]}")
        compiled = [getattr(p, "kernel", None) for p in pending]
        loadable = [k for k in compiled if callable(getattr(k, "_init_handles", None))]
        device = torch.cuda.current_device() if torch.cuda.is_available() else None
        list(pool.map(lambda kernel: _load(kernel, device), loadable))
    return submitted
# --8<-- [end:precompile]


# [Note: a kernel Triton refuses]
# The interpreter, which CI runs, accepts some code that Triton's compiler rejects (an atomic
# add whose address is narrower than its value: [Note: an atomic add's address]). Such a
# kernel used to fail at its first launch, and when that launch was in the backward, the
# training step raised where eager ran. ``precompile`` compiles every kernel of a graph (the
# backward's too) before anything runs, so a front-end error (``CompilationError``: the
# kernel's source is wrong) there is a compile error of the graph, and dynamo runs the
# frame eagerly with one warning. Running out of a resource (shared memory) is left to the
# first launch, as before: another launch configuration may fit.
def _refused(pending: Any) -> BaseException | None:
    """The front-end error of a compile that ``precompile`` submitted, or None."""
    future = getattr(pending, "future", None)
    if getattr(pending, "kernel", None) is not None or future is None or not future.done():
        return None
    error = future.exception()
    try:
        from triton.compiler.errors import CompilationError
    except ImportError:
        return None
    return error if isinstance(error, CompilationError) else None


# --8<-- [start:launchers-in-parallel]
# [Note: launchers in parallel]
# A compiled variant is not yet launchable: at its first launch Triton builds its launcher,
# a small C module specialized to the kernel's signature, by running the C compiler in a
# subprocess (cached on disk afterwards, so only a machine's first run pays it), and loads
# the binary into the GPU context. On a fresh H200 host each build took about 0.2 s, one
# after the other on the main thread: 1.3 s of mlp_train's 3.6 s first step. After the
# compiles, ``precompile`` asks Triton for that step too (``_init_handles``, what the first
# launch would call) on the same threads: the compiler runs in subprocesses, which do not
# hold the GIL. A variant that cannot load (too much shared memory) raises here, silently,
# and raises again at its first launch, where the error belongs.
# --8<-- [start:launcher-beside-kernel]
# [Note: a launcher built beside its kernel]
# The launcher's C source depends only on the kernel's signature (which arguments are
# pointers, which ints, which constexprs), and Triton knows the signature before it compiles
# the kernel. So while a variant compiles (LLVM, then ``ptxas``: about 0.45 s for the
# benchmark's ``sin(x) + cos(y)`` on the H200 host), a thread of ours builds its launcher
# (about 0.2 s more, when it came after): Triton tells us the signature through its
# ``jit_cache_hook``, which it calls just before compiling, and we write the same source its
# ``make_launcher`` would and hand it to the same cached ``compile_module_from_src``. When the
# variant's first load asks for the launcher, it is on disk already. The hook is installed
# only while ``precompile`` submits our own kernels, and calls any hook that was installed
# before. Anything unexpected (another Triton, a kernel taking tensor descriptors) skips the
# early build, and the launcher is built at the first load, as before.
_LAUNCHERS_STARTED: set[str] = set()


@contextlib.contextmanager
def _building_launchers(builds: list[threading.Thread]):
    """While active, each compile Triton starts also starts a thread (appended to ``builds``)
    building that variant's launcher ([Note: a launcher built beside its kernel])."""
    try:
        from triton import knobs
        from triton.backends.nvidia import driver as nvidia
        from triton.runtime.build import compile_module_from_src
        make = nvidia.make_launcher
    except (ImportError, AttributeError):
        yield
        return
    before = knobs.runtime.jit_cache_hook

    def build(source: str) -> None:
        try:
            compile_module_from_src(src=source, name="__triton_launcher",
                                    library_dirs=nvidia.library_dirs(),
                                    include_dirs=nvidia.include_dirs, libraries=nvidia.libraries)
        except Exception:  # noqa: BLE001 (the first load builds it again and says why)
            pass

    def hook(*args: Any, compile: dict | None = None, **kwargs: Any) -> Any:  # noqa: A002
        try:
            signature, constants = compile["signature"], compile["constants"]
            if not any("tensordesc" in str(t) for t in signature.values()):
                source = make(constants, signature, None)
                if source not in _LAUNCHERS_STARTED:
                    _LAUNCHERS_STARTED.add(source)
                    thread = threading.Thread(target=build, args=(source,), daemon=True)
                    thread.start()
                    builds.append(thread)
        except Exception:  # noqa: BLE001 (an unexpected Triton: build at the first load)
            pass
        return before(*args, compile=compile, **kwargs) if before is not None else None

    knobs.runtime.jit_cache_hook = hook
    try:
        yield
    finally:
        knobs.runtime.jit_cache_hook = before
# --8<-- [end:launcher-beside-kernel]


def _load(kernel: Any, device: int | None) -> None:
    """Build ``kernel``'s launcher and load its binary on ``device`` (from a worker thread,
    whose current device is its own; None: no GPU)."""
    try:
        with torch.cuda.device(device) if device is not None else contextlib.nullcontext():
            kernel._init_handles()
    except Exception:  # noqa: BLE001 (the first launch raises it again)
        pass
# --8<-- [end:launchers-in-parallel]
