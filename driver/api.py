"""``driver.compile``: the public entry point, shaped like ``torch.compile``.

Input: a function or ``nn.Module`` and the options ``torch.compile`` takes.
Output: a callable that runs the function through dynamo and the chosen backend, falling back
to eager (with one warning) where a stage gives up. For a module, an object whose attributes,
parameters, ``state_dict`` and ``train()``/``eval()`` pass through to the module.

Chapter: book/docs/driver.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field

import torch

from driver import debug, logs, progress
from driver.backends import Backend, lookup_backend

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
OPTIONS = {"target": ("triton", "cpp", "fallback")}


@dataclass
class GraphRecord:
    """What one backend call produced: the captured graph and each later stage's artifacts."""

    index: int
    gm: torch.fx.GraphModule
    example_inputs: list
    artifacts: MutableMapping[str, str] = field(default_factory=dict)  # graphs printed when read
    guards: list = field(default_factory=list)
    compiled: object = None  # what the backend returned


def _check_arguments(backend, mode, dynamic, fullgraph, options) -> dict:
    if not (isinstance(backend, str) or callable(backend)):
        raise TypeError(f"backend must be a name or a callable, got {type(backend).__name__}")
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"mode={mode!r} is unknown; choose one of {list(MODES)}")
    if dynamic not in (None, True, False):
        raise TypeError(f"dynamic must be None, True or False, got {dynamic!r}")
    if not isinstance(fullgraph, bool):
        raise TypeError(f"fullgraph must be a bool, got {type(fullgraph).__name__}")
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise TypeError(f"options must be a dict, got {type(options).__name__}")
    for key, value in options.items():
        if key not in OPTIONS:
            raise ValueError(f"options[{key!r}] is unknown; known options: {sorted(OPTIONS)}")
        if value not in OPTIONS[key]:
            raise ValueError(f"options[{key!r}]={value!r}; choose one of {list(OPTIONS[key])}")
    return dict(options)


class _Recorder:
    """Wraps a backend so that every graph it compiles is kept, with its artifacts."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.records: list[GraphRecord] = []
        # what dynamo's messages call us: the backend's own name, e.g. "inductor_backend"
        self.__name__ = getattr(backend, "__name__", type(backend).__name__)

    def __call__(self, gm, example_inputs):
        what = f"compiling graph {len(self.records)} ({len(gm.graph.nodes)} nodes)"
        with progress.compiling(what):
            compiled = self.backend(gm, example_inputs)
        record = GraphRecord(len(self.records), gm, list(example_inputs), compiled=compiled)
        # a copy that prints nothing yet: [Note: texts printed when read] (compile_fx.py)
        record.artifacts = (getattr(compiled, "artifacts", None) or {}).copy()
        self.records.append(record)
        # only the texts a log channel wants are printed (the guards come after the call:
        # debug.after_call)
        for key, title, text in debug.stage_sections(record, wanted=logs.artifact_logged):
            if key != "guards":
                logs.log_artifact(key, title, text)
        return compiled


class CompiledFunction:
    """The result of ``driver.compile(fn)``: call it like ``fn``."""

    def __init__(self, fn: Callable, recorder: _Recorder, fullgraph: bool,
                 dynamic: bool | None = None):
        import dynamo

        self._orig_fn = fn
        self._recorder = recorder
        self._optimized = dynamo.optimize(recorder, fullgraph=fullgraph, dynamic=dynamic)(fn)
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        out = self._optimized(*args, **kwargs)
        debug.after_call(self)
        return out

    @property
    def graphs(self) -> list[GraphRecord]:
        """One record per compiled graph, guards filled in from dynamo's cache."""
        import dynamo

        entries = {id(e.graph): e for e in dynamo.cache_entries(self._optimized)}
        for record in self._recorder.records:
            entry = entries.get(id(record.gm))
            if entry is not None:
                record.guards = list(entry.guards)
        return self._recorder.records


class OptimizedModule(CompiledFunction):
    """``driver.compile(module)``: runs the compiled ``forward``; the rest is the module's."""

    def __init__(self, module: torch.nn.Module, recorder: _Recorder, fullgraph: bool,
                 dynamic: bool | None = None):
        object.__setattr__(self, "_orig_mod", module)
        super().__init__(module.forward, recorder, fullgraph, dynamic)

    def __getattr__(self, name):
        return getattr(self._orig_mod, name)

    def __setattr__(self, name, value):
        if name.startswith("_") and name in ("_orig_fn", "_recorder", "_optimized"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._orig_mod, name, value)

    def __repr__(self):
        return f"OptimizedModule({self._orig_mod!r})"


def compile(
    model: Callable | None = None,
    *,
    backend: str | Backend = "inductor",
    mode: str = "default",
    dynamic: bool | None = None,
    fullgraph: bool = False,
    options: dict | None = None,
):
    """Compile ``model`` (a function or ``nn.Module``) like ``torch.compile``.

    Works as ``driver.compile(fn)``, ``@driver.compile`` and ``@driver.compile(backend=...)``.
    ``mode="max-autotune"`` makes inductor time a few launch configs of each Triton kernel
    at its first call and keep the fastest (``inductor/autotune.py``). Other modes are
    accepted and, for now, compile as the default mode. ``dynamic``: None (the default)
    compiles static shapes first and makes a size symbolic once it changes between calls;
    True makes every input size symbolic from the start; False never
    (book/docs/dynamic-shapes.md).
    """
    opts = _check_arguments(backend, mode, dynamic, fullgraph, options)
    if model is None:
        return functools.partial(compile, backend=backend, mode=mode, dynamic=dynamic,
                                 fullgraph=fullgraph, options=options)
    install_meta_decompositions()
    recorder = _Recorder(lookup_backend(backend, {**opts, "mode": mode}))
    if isinstance(model, torch.nn.Module):
        return OptimizedModule(model, recorder, fullgraph, dynamic)
    if not callable(model):
        raise TypeError(f"model must be a callable or an nn.Module, got {type(model).__name__}")
    return CompiledFunction(model, recorder, fullgraph, dynamic)


def install_meta_decompositions() -> None:
    """Let dynamo compute example values with symbolic sizes through primtorch's
    decompositions ([Note: symbolic example values] in dynamo/utils.py). Only the driver
    knows both stages, so it is the one to connect them."""
    import dynamo
    import primtorch

    if not dynamo.config.meta_decompositions:
        dynamo.config.meta_decompositions = primtorch.decomposition_table


def mark_dynamic(tensor: torch.Tensor, dim) -> None:
    """Make ``tensor``'s size in ``dim`` (an int or a list of ints) symbolic from the first
    compile on, as ``torch._dynamo.mark_dynamic`` does."""
    import dynamo

    dynamo.mark_dynamic(tensor, dim)


def reset() -> None:
    """Forget every compiled graph (dynamo's caches)."""
    import dynamo

    dynamo.reset()


def wait_for_templates() -> int:
    """Return when every matrix-multiply template that compiles behind a library call is in
    use (inductor's [Note: a template untimed, compiled behind the library]); how many graphs
    had templates to wait for. A benchmark calls it before timing steady-state steps."""
    from inductor import later

    return later.wait()
