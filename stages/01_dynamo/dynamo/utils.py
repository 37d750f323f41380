"""Helpers shared by the interpreter and the cache: example values and sources.

Input: an operation about to enter the graph (kind, target, tracker args),
or a source expression and a frame. Output: the operation's example value
computed on meta tensors (under autocast, on ``DeviceMeta`` wrappers so the casts
happen) plus the device the real result will live on; or
the value a source names at run time.
Chapter: book/docs/dynamo.md ("Tensors and example values").
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map, tree_map_only

from . import config
from .composites import SymbolicComposites
from .exc import ReadsTensorData, UserErrorInTrace, unimplemented
from .guards import GUARD_GLOBALS
from .sym_node import concrete, find_env, specialize_all
from .variables.base import VariableTracker
from .variables.tensor import TensorVariable


def get_example_value(
    kind: str, target: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker],
) -> tuple[Any, torch.device]:
    """Run one operation on meta tensors: its example result and the real result's device.

    See [Note: example values]. A NotImplementedError means "no meta kernel",
    which is our limitation (unimplemented); any other exception is the
    user's own error ([Note: user errors]).
    """
    device = _result_device(kind, target, args, kwargs)
    ex_args = [a.as_example() for a in args]
    ex_kwargs = {k: v.as_example() for k, v in kwargs.items()}
    if "device" in ex_kwargs:
        ex_kwargs["device"] = "meta"
    name = target if isinstance(target, str) else getattr(target, "__name__", str(target))
    autocast = _autocast_devices(args, kwargs)
    if autocast:  # [Note: example values under autocast]
        ex_args, ex_kwargs = tree_map_only(torch.Tensor, autocast.fake, (ex_args, ex_kwargs))
    symbolic = find_env((ex_args, ex_kwargs)) is not None
    try:
        try:
            result = _run(kind, target, ex_args, ex_kwargs, symbolic)
        except Exception:
            if not symbolic:
                raise
            result = _run_specialized(kind, target, ex_args, ex_kwargs)
        if autocast:
            autocast.pass_on_writes()
        return (tree_map_only(DeviceMeta, DeviceMeta.unwrap, result) if autocast else result,
                device)
    except NotImplementedError as e:
        if name in DATA_DEPENDENT_SIZES or "nonzero" in str(e):
            unimplemented(f"{name}() makes a tensor whose size depends on the data, which a "
                          "graph does not have at trace time [Note: data-dependent]")
        unimplemented(f"{name}() has no meta kernel, so its result cannot be predicted ({e})")
    except Exception as e:
        # F.gaussian_nll_loss asks bool(any(var < 0)); pack_padded_sequence wants its lengths
        # "a 1D CPU int64 tensor, but got 1D meta Long tensor": eager never sees a meta tensor
        if "on meta tensors" in str(e) or re.search(r"\bmeta\b", str(e)):
            raise ReadsTensorData(f"{name}() reads the values of a tensor inside, which a graph "
                                  f"does not have at trace time [Note: data-dependent] ({e})"
                                  ) from e
        raise UserErrorInTrace(e) from e


# Ops whose result's size depends on the values in a tensor, not only on its shape.
DATA_DEPENDENT_SIZES = frozenset({"nonzero", "masked_select", "unique", "unique_consecutive",
                                  "argwhere", "repeat_interleave", "bincount"})


def _run(kind: str, target: Any, args: list, kwargs: dict, symbolic: bool) -> Any:
    mode = SymbolicMetaMode(config.meta_decompositions) if symbolic else contextlib.nullcontext()
    # [Note: composite ops and symbolic sizes]
    composites = SymbolicComposites() if symbolic else contextlib.nullcontext()
    with torch.device("meta"), mode, composites:  # factories without device= build meta too
        if kind == "call_method":
            return _run_method(target, args, kwargs)
        return target(*args, **kwargs)


def _run_specialized(kind: str, target: Any, args: list, kwargs: dict) -> Any:
    """[Note: specialization on failure]
    # An op whose meta kernel (or decomposition) cannot take symbolic sizes runs on the
    # hints instead, and the symbols of its inputs are guarded to equal their hints: from
    # here on those sizes are static. That is always correct, only less general; with
    # primtorch's decompositions installed (the driver does) it is rare. If the op also
    # fails on the hints, the failure was not about symbols: it is raised as it is.
    """
    def on_hints(t: Any) -> Any:  # an autocast example stays one, on its device
        return DeviceMeta(concrete(t.meta), t.device) if isinstance(t, DeviceMeta) else \
            concrete(t)

    concrete_args, concrete_kwargs = tree_map(on_hints, (args, kwargs))
    result = _run(kind, target, concrete_args, concrete_kwargs, False)
    _pass_on_writes((args, kwargs), (concrete_args, concrete_kwargs))
    specialize_all((args, kwargs))
    return result


class SymbolicMetaMode(TorchDispatchMode):
    """Runs aten ops on meta tensors with symbolic sizes, through a decomposition table.

    # [Note: symbolic example values]
    # Most of ATen's meta kernels are C++ written for concrete sizes: ``x + y`` or
    # ``x.view(B, -1)`` on a meta tensor with SymInt sizes fails. PyTorch's FakeTensor
    # runs such ops through Python decompositions (its PrimTorch refs) instead. So do we:
    # the driver installs primtorch's table in ``config.meta_decompositions``, and every op
    # with a decomposition runs as that decomposition, whose prims have meta functions
    # written in plain Python arithmetic, which works on SymInts. (Dynamo cannot import
    # primtorch itself: stages import only earlier stages.) Ops without one run their own
    # meta kernel; if that fails, [Note: specialization on failure].
    """

    def __init__(self, decompositions: dict) -> None:
        super().__init__()
        self.decompositions = decompositions

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        decomposition = self.decompositions.get(func)
        if decomposition is not None:
            with self:
                out = decomposition(*args, **kwargs)
            if out is not NotImplemented:
                return _not_an_input(func, args, out)
        return func(*args, **kwargs)


def _not_an_input(func: Any, args: tuple, out: Any) -> Any:
    """A decomposition may return its input unchanged (``x[:]``); eager returns a new
    tensor (a view, for a view op), and autograd insists on it."""
    inputs = [a for a in tree_leaves(args) if isinstance(a, torch.Tensor)]

    def fresh(t: torch.Tensor) -> torch.Tensor:
        if not any(t is i for i in inputs):
            return t
        if func.is_view:
            return torch.ops.aten.alias.default(t)
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)

    return tree_map_only(torch.Tensor, fresh, out)


class DeviceMeta(torch.Tensor):
    """A meta tensor that claims to live on a real device, so that autocast treats it as it
    would the real tensor. Every op on it runs on the meta tensor inside.

    # [Note: example values under autocast]
    # Autocast picks the tensors it casts by device: inside ``torch.autocast("cpu")`` a
    # matmul of CPU float32 tensors runs in bfloat16, but a matmul of *meta* tensors is
    # left alone (meta is not an autocast device). Our example values are meta tensors,
    # so under autocast they would come out float32 where the real result is bfloat16.
    # The fix is PyTorch's FakeTensor idea, very small: a storage-less wrapper subclass
    # that reports the real device (its dispatch keys include that device's autocast
    # key) and, in ``__torch_dispatch__`` (which runs *after* autocast inserted its
    # casts), runs the op, casts included, on the meta tensor it holds. It is used only
    # while autocast is on, so everything else keeps the plain meta path.
    """

    meta: torch.Tensor

    @staticmethod
    def __new__(cls, meta: torch.Tensor, device: torch.device) -> DeviceMeta:
        fake = torch.Tensor._make_wrapper_subclass(
            cls, meta.size(), strides=meta.stride(), storage_offset=meta.storage_offset(),
            dtype=meta.dtype, device=device, requires_grad=meta.requires_grad)
        fake.meta = meta
        return fake

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        device = next(a.device for a in tree_leaves((args, kwargs)) if isinstance(a, cls))
        args, kwargs = tree_map_only(cls, lambda t: t.meta, (args, kwargs or {}))
        out = func(*args, **kwargs)
        return tree_map_only(torch.Tensor, lambda t: cls(t, device), out)

    def unwrap(self) -> torch.Tensor:
        """The meta example; ``requires_grad`` is the wrapper's (autograd ran above us)."""
        if self.requires_grad and not self.meta.requires_grad:
            return self.meta.detach().requires_grad_()
        return self.meta


class _AutocastFaker:
    """Turns each meta example into a DeviceMeta on its tensor's real device."""

    def __init__(self, devices: dict[int, torch.device]) -> None:
        self.devices = devices
        self.made: list[DeviceMeta] = []

    def fake(self, meta: torch.Tensor) -> torch.Tensor:
        device = self.devices.get(id(meta))
        if device is None:
            return meta
        self.made.append(DeviceMeta(meta, device))
        return self.made[-1]

    def pass_on_writes(self) -> None:
        """An in-place op bumped the wrapper's version counter, not the meta tensor's inside
        (the dispatcher counts versions above ``__torch_dispatch__``): pass it on."""
        _pass_on_writes([w.meta for w in self.made], self.made)


def _pass_on_writes(examples: Any, stand_ins: Any) -> None:
    """Bump the version counter of each example whose stand-in (the same leaf of a copy of
    the structure) an in-place op wrote: [Note: value bounds] sees writes by it."""
    for example, stand_in in zip(tree_leaves(examples), tree_leaves(stand_ins)):
        if isinstance(example, torch.Tensor) and stand_in is not example:
            try:
                if stand_in._version:
                    torch.autograd.graph.increment_version(example)
            except RuntimeError:
                pass  # inference tensors count no versions (and carry no bounds)


def _autocast_devices(args: list[VariableTracker], kwargs: dict[str, VariableTracker]
                      ) -> _AutocastFaker | None:
    """None unless autocast is on for the device of some tensor argument."""
    tensors = [a for a in _flatten([*args, *kwargs.values()]) if isinstance(a, TensorVariable)]
    if not any(torch.is_autocast_enabled(t.device.type) for t in tensors):
        return None
    return _AutocastFaker({id(t.example): t.device for t in tensors})


def _run_method(name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    self, rest = args[0], args[1:]
    if name in ("cuda", "cpu"):
        return self  # device moves change no metadata; ``device`` tracks them
    if name == "to":
        rest = ["meta" if _as_device(a) is not None else a for a in rest]
    return getattr(self, name)(*rest, **kwargs)


def _as_device(value: Any) -> torch.device | None:
    if isinstance(value, torch.device):
        return value
    if isinstance(value, str):
        try:
            return torch.device(value)
        except RuntimeError:
            return None
    return None


def _result_device(
    kind: str, target: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker],
) -> torch.device:
    """Meta examples have no real device, so devices are tracked beside them.

    An explicit device (``device=``, ``.to(dev)``, ``.cuda()``) wins; else the
    result lives where the first tensor argument lives; else on the default
    device (a factory like ``torch.ones(3)``).
    """
    if "device" in kwargs and kwargs["device"].is_python_constant():
        value = kwargs["device"].as_python_constant()
        if value is not None:
            return _with_index(torch.device(value))
    if kind == "call_method" and target in ("cuda", "cpu"):
        return _with_index(torch.device(target))
    if kind == "call_method" and target == "to":
        for a in args[1:]:
            if isinstance(a, TensorVariable):
                return a.device
            found = _as_device(a.as_python_constant()) if a.is_python_constant() else None
            if found is not None:
                return _with_index(found)
    for a in _flatten(args):
        if isinstance(a, TensorVariable):
            return a.device
    return torch.get_default_device()


def _with_index(device: torch.device) -> torch.device:
    """"cuda" means the current CUDA device; a real tensor reports it as "cuda:0"."""
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _flatten(items: list[VariableTracker]) -> list[VariableTracker]:
    out: list[VariableTracker] = []
    for item in items:
        nested = getattr(item, "items", None)
        out.extend(_flatten(list(nested)) if isinstance(nested, tuple) else [item])
    return out


# Sources only read, so one globals dict serves every evaluation (``eval`` adds
# ``__builtins__`` to it once); copying GUARD_GLOBALS at each call cost a residual about a
# microsecond per value it rebuilt.
_EVAL_GLOBALS: dict[str, Any] = dict(GUARD_GLOBALS)


@functools.lru_cache(maxsize=1024)
def _source_reader(source: str) -> Callable[[dict[str, Any]], Any]:
    """``frame -> value`` for one source: a name the frame has is one dict lookup (most live
    locals are parameters of the resume function: ``x``, ``self``), the rest ``eval``."""
    code = compile(source, "<dynamo source>", "eval")
    if source.isidentifier():
        def read(frame: dict[str, Any]) -> Any:
            return frame[source] if source in frame else eval(code, _EVAL_GLOBALS, frame)
    else:
        def read(frame: dict[str, Any]) -> Any:
            return eval(code, _EVAL_GLOBALS, frame)
    return read


def eval_source(source: str, frame: dict[str, Any]) -> Any:
    """The run-time value of a source expression (``self``, ``xs[1]``, ``G['W']``)."""
    return _source_reader(source)(frame)
