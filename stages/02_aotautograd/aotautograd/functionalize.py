"""Functionalization: trace in-place ops as functional ops, and remember which graph inputs
were written so that the runtime can copy their new values back.

Input: a mutating aten op reaching ``TracingMode.__torch_dispatch__`` (``x.add_(y)``,
``x.copy_(y)``, BatchNorm's update of its running statistics), with TracerTensor arguments.
Output: the same op traced without mutation (``add``, ``copy``,
``_native_batch_norm_legit_functional``); the written TracerTensor is re-pointed at the node
holding its new value, and, when it is a graph input, ``Tracer.mutated_inputs`` records it.

Chapter: book/docs/aotautograd.md ("Functionalization").

[Note: functionalization] A graph a compiler can reorder, fuse and partition must be
functional: a node's value never changes. So ``x.add_(y)`` is traced as ``x1 = add(x, y)``
and the TracerTensor ``x`` is re-pointed at ``x1``: every later read of ``x`` sees ``x1``,
which is exactly what eager would have read. When ``x`` is a graph input (a BatchNorm
buffer, or an argument the program writes to), eager's caller would see the new value too:
the graph returns ``x1`` as an extra output and the runtime copies it into the real input
after the graph has run (``runtime.py``, the copy-back epilogue). Ops are rewritten in one
of three ways, tried in order:

1. a rule registered with ``@register_functionalization`` (``native_batch_norm``, which
   writes its running statistics although its schema does not say so);
2. an op ``foo_`` that writes only ``self`` becomes its functional twin ``foo``;
3. an op writing other arguments becomes ``foo_functional`` when aten has one, which
   returns the new values of the written arguments after its usual outputs.

[Note: mutation through views] Writing through a view (``x[0] = 1``, ``x.view(-1).add_(1)``)
writes its base, and every other view of that base sees the write. Each view TracerTensor
remembers how it was made from its base, the chain of aten view ops (``view_steps``), and
the tracer keeps eager's aliasing with two moves, as PyTorch's functionalization does:

* a write ``v.mul_(2)`` traces ``v1 = mul(v, 2)``, then walks the chain back from ``v`` to
  the base, each step undone by its *scatter* (``VIEW_SCATTERS``): a reshape is reshaped
  back, a permute permuted back, a slice becomes ``slice_scatter(parent, v1, ...)``, a
  select ``select_scatter``. The base is re-pointed at the result, its version bumped; when
  the base is a graph input, the runtime copies its new value back, as for any input
  written in place;
* a read of a view taken before its base was last written (a *stale* view) first replays
  the chain on the base's new value (``sync_view``), so it sees what eager would.

Torchvision's EfficientNet needs the first move: its classifier's ``nn.Dropout(inplace=True)``
multiplies the flattened pooled features, a view of an intermediate, by the mask in place.
So does every backward through a write to a view of something requiring grad: autograd's
``CopySlices`` writes the gradient into ``as_strided`` of a fresh buffer. What is still
refused is a write that cannot be a scatter: through a view whose op has no entry in
``VIEW_SCATTERS`` (``unfold``, ``view.dtype``), or through ``expand``, where many elements
of the view are one element of the base.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

import aotautograd.proxy_tensor as proxy_tensor
from aotautograd.exc import AOTUnsupported

aten = torch.ops.aten
OpOverload = torch._ops.OpOverload

# --8<-- [start:functionalization-rules]
FUNCTIONALIZATION_RULES: dict[OpOverload, Callable] = {}


def register_functionalization(*ops: OpOverload) -> Callable[[Callable], Callable]:
    """``rule(mode, *args, **kwargs)`` traces ``op`` without mutating anything; it may return
    ``NotImplemented`` when, for these arguments, the op mutates nothing."""

    def decorate(rule: Callable) -> Callable:
        for op in ops:
            FUNCTIONALIZATION_RULES[op] = rule
        return rule

    return decorate


@register_functionalization(aten.native_batch_norm.default)
def native_batch_norm(mode, x, weight, bias, running_mean, running_var, training: bool,
                      momentum: float, eps: float):
    """In training, native_batch_norm also updates the running statistics in place."""
    if not training or running_mean is None or running_var is None:
        return NotImplemented  # nothing is written: trace (or decompose) it as it is
    with mode:
        out, mean, rstd, new_mean, new_var = aten._native_batch_norm_legit_functional.default(
            x, weight, bias, running_mean, running_var, training, momentum, eps)
    write_back(mode, running_mean, new_mean, "native_batch_norm")
    write_back(mode, running_var, new_var, "native_batch_norm")
    return out, mean, rstd
# --8<-- [end:functionalization-rules]


def is_mutation(func: OpOverload) -> bool:
    return func._schema.is_mutable or func in FUNCTIONALIZATION_RULES


def functionalize(mode, func: OpOverload, args: tuple, kwargs: dict) -> object:
    """Trace the mutating ``func`` functionally (see [Note: functionalization])."""
    rule = FUNCTIONALIZATION_RULES.get(func)
    if rule is not None:
        return rule(mode, *args, **kwargs)
    if func in IN_PLACE_VIEWS:  # [Note: a view op in place]
        return view_in_place(mode, func, args, kwargs)
    written = [i for i, a in enumerate(func._schema.arguments)
               if a.alias_info is not None and a.alias_info.is_write]
    if written == [0] and not func._schema.arguments[0].kwarg_only:
        return functionalize_inplace(mode, func, args, kwargs)
    if written and all(func._schema.arguments[i].kwarg_only for i in written):
        return functionalize_out(mode, func, args, kwargs, written)
    return functionalize_with_twin(mode, func, args, kwargs, written)


# --8<-- [start:view-in-place]
# [Note: a view op in place]
# ``x.unsqueeze_(0)`` and ``x.transpose_(0, 1)`` change no element, only the geometry of ``x``
# itself. ATen's own C++ does it to temporaries it has just made: ``F.affine_grid`` unsqueezes
# a ``linspace`` in place, ``torch.stft`` transposes its result; the tracer refused both
# ("changed the shape of the tensor it writes"), and their frames ran eagerly. The C++ caller
# holds the very tensor object, so its geometry must change where it is: the aten op runs on
# the TracerTensor with the Python dispatch key excluded, which updates the wrapper's sizes and
# strides as it would a real tensor's, and the TracerTensor is re-pointed at the node of the
# functional view (``unsqueeze``), as an in-place op re-points its ``self``. Only for a
# tensor the program computed and took no view of yet: a view taken before would still
# describe the old geometry ([Note: mutation through views] replays it), and an input's
# geometry is the caller's.
def _in_place_views() -> dict[OpOverload, OpOverload]:
    found = {}
    for name in ("unsqueeze_", "squeeze_", "transpose_", "t_", "swapdims_", "swapaxes_"):
        packet = getattr(aten, name, None)
        for overload in packet.overloads() if packet is not None else []:
            twin = functional_variant(getattr(packet, overload))  # transpose_ -> transpose.int
            if twin is not None:
                found[getattr(packet, overload)] = twin
    return found


IN_PLACE_VIEWS: dict[OpOverload, OpOverload] = {}  # (filled at the end of the module)
_PYTHON_KEYS = (torch._C.DispatchKeySet(torch._C.DispatchKey.Python)
                | torch._C.DispatchKeySet(torch._C.DispatchKey.PythonTLSSnapshot))


def view_in_place(mode, func: OpOverload, args: tuple, kwargs: dict) -> object:
    """``x.unsqueeze_(d)``: ``x`` takes the geometry and the value of ``unsqueeze(x, d)``."""
    target = args[0]
    if (not isinstance(target, proxy_tensor.TracerTensor) or target.base is not None
            or target.role != "intermediate" or target.views):
        raise AOTUnsupported(f"{func} on a graph input, a view, or a tensor with views")
    with mode:
        new = IN_PLACE_VIEWS[func](*args, **kwargs)
    with torch._C._ExcludeDispatchKeyGuard(_PYTHON_KEYS):
        func(*args, **kwargs)  # the wrapper's own sizes and strides, as eager's
    target.meta, target.proxy, target.views = new.meta, new.proxy, 0
    return target
# --8<-- [end:view-in-place]


# --8<-- [start:functionalize-out]
# [Note: an op with out=]
# ``torch.div(a, b, out=buf)`` is the ``div.out`` overload, which writes its result into
# ``buf``. Spectral norm's power iteration computes its vectors so, into the module's own
# buffers (``F.normalize(..., out=self._u)``). Traced, it is the overload that takes the same
# arguments without the ``out=`` ones (``div.Tensor``), and each result becomes the new value
# of its ``out`` tensor, cast to that tensor's dtype as the kernel's store would. ATen resizes
# an ``out`` of another shape; that is not traced (the frame runs eagerly, with a warning).
def functionalize_out(mode, func: OpOverload, args: tuple, kwargs: dict,
                      written: list[int]) -> object:
    """``foo.out(*args, out=buf)`` -> ``new = foo(*args)``; ``buf`` now stands for ``new``."""
    schema = func._schema
    names = {schema.arguments[i].name for i in written}
    functional = _overload_without(func, names)
    if functional is None:
        raise AOTUnsupported(f"{func} has no overload without its out= arguments to trace")
    targets = [kwargs[schema.arguments[i].name] for i in written]
    with mode:
        results = functional(*args, **{k: v for k, v in kwargs.items() if k not in names})
        results = list(results) if isinstance(results, (tuple, list)) else [results]
        if len(results) != len(targets) or any(
                list(r.shape) != list(t.shape) for r, t in zip(results, targets)):
            raise AOTUnsupported(f"{func} resizes its out= tensor")
        results = [r if r.dtype == t.dtype else r.to(t.dtype) for r, t in zip(results, targets)]
    for target, new in zip(targets, results):
        write_back(mode, target, new, str(func))
    return targets[0] if len(targets) == 1 else tuple(targets)


def _overload_without(func: OpOverload, names: set[str]) -> OpOverload | None:
    """The overload of ``func``'s op taking the same arguments but ``names``, returning
    tensors (not the written aliases)."""
    wanted = [(a.name, str(a.type)) for a in func._schema.arguments if a.name not in names]
    packet = getattr(aten, func._schema.name.split("::")[-1], None)
    return None if packet is None else _overload_taking(packet, wanted, mutable=False)
# --8<-- [end:functionalize-out]


# --8<-- [start:functionalize-inplace]
def functionalize_inplace(mode, func: OpOverload, args: tuple, kwargs: dict) -> object:
    """``self.foo_(*rest)`` -> ``new = foo(self, *rest)``; ``self`` now stands for ``new``."""
    # BEGIN EXERCISE aotautograd-functionalize-inplace: trace foo_ as foo and re-point self
    functional = functional_variant(func)
    if functional is None:
        raise AOTUnsupported(f"mutating op {func} has no functional variant to trace")
    target = args[0]
    check_writable(mode.tracer, target, str(func))
    with mode:  # the functional op comes back to the mode: decomposed or recorded
        new = functional(*with_defaults(func, args), **kwargs)
    write_back(mode, target, new, str(func))
    return target  # an in-place op returns its (now updated) self
    # END EXERCISE aotautograd-functionalize-inplace
# --8<-- [end:functionalize-inplace]


def functionalize_with_twin(mode, func: OpOverload, args: tuple, kwargs: dict,
                            written: list[int]) -> object:
    """An op that writes arguments other than ``self`` (``_batch_norm_with_update``): call
    aten's ``<name>_functional``, whose trailing outputs are the written arguments' new
    values."""
    schema = func._schema
    name = schema.name.split("::")[-1]
    packet = getattr(aten, f"{name}_functional", None)
    twin = getattr(packet, func._overloadname, None) if packet is not None else None
    if twin is None or len(twin._schema.returns) != len(schema.returns) + len(written):
        raise AOTUnsupported(f"mutating op {func} is not supported (no functional variant)")
    bound = dict(zip([a.name for a in schema.arguments], args)) | kwargs
    targets = [bound[schema.arguments[i].name] for i in written]
    for target in targets:
        check_writable(mode.tracer, target, str(func))
    with mode:
        outs = twin(*args, **kwargs)
    for target, new in zip(targets, outs[len(schema.returns):]):
        write_back(mode, target, new, str(func))
    results = tuple(outs[:len(schema.returns)])
    return results[0] if len(results) == 1 else results


def check_writable(tracer, target: object, what: str) -> None:
    """Only an intermediate, or (in aot_module_simplified) a graph input, or a view of one
    of them, may be written."""
    if not isinstance(target, proxy_tensor.TracerTensor):
        raise AOTUnsupported(f"{what} writes to a tensor the tracer does not own")
    owner = target.owner()
    if owner.role == "constant":
        raise AOTUnsupported(f"{what} writes to a closed-over tensor; pass it as an input")
    if owner.role == "input" and not tracer.allow_input_mutation:
        raise AOTUnsupported(f"{what} mutates an input; trace() returns no copy-back "
                             "(aot_module_simplified does)")


def write_back(mode, target, new: torch.Tensor, what: str) -> None:
    """Re-point ``target`` at ``new`` (its value after the in-place op) and bump its
    owner's version, which makes the other views of the owner stale; a view's owner gets
    its new value by [Note: mutation through views]."""
    tracer = mode.tracer
    check_writable(tracer, target, what)
    if not isinstance(new, proxy_tensor.TracerTensor):
        # the new value is a tensor the program did not compute: ``idx[0, 0] = 9`` copies
        # a scalar tensor PyTorch made for the 9 (on the CPU, whatever the target's device:
        # ``copy_`` moves it), and copy's result is that tensor itself
        new = tracer.lift(new.to(target.device))
    if new.dtype != target.dtype:  # x_float32.add_(y_float64) stays float32
        with mode:
            new = aten._to_copy.default(new, dtype=target.dtype)
    if new.shape != target.shape:
        raise AOTUnsupported(f"{what} changed the shape of the tensor it writes")
    if target.base is not None:
        write_through_view(mode, target, new, what)
        return
    target.meta, target.proxy = new.meta, new.proxy
    target.version += 1
    if target.role == "input":
        tracer.mutated_inputs[target.input_index] = target


# --8<-- [start:write-through-view]
@dataclasses.dataclass(frozen=True)
class ViewStep:
    """One link of a view's chain: ``op(parent, *args, **kwargs)``, and which of its
    outputs (``index``) when the op returns several (``split``, ``unbind``)."""

    op: OpOverload
    args: tuple
    kwargs: dict
    index: int | None = None

    def replay(self, mode, parent):
        with mode:
            out = self.op(parent, *self.args, **self.kwargs)
        return out if self.index is None else out[self.index]


def write_through_view(mode, view, new: torch.Tensor, what: str) -> None:
    """``view`` now holds ``new``: scatter it back along the chain into the base
    ([Note: mutation through views])."""
    base = view.base
    if not isinstance(new, proxy_tensor.TracerTensor):  # (a constant: see write_back)
        new = mode.tracer.lift(new.to(view.device))
    parents = [base]  # the value each step was applied to, from the base's current value
    for step in view.view_steps[:-1]:
        parents.append(step.replay(mode, parents[-1]))
    value = new
    for parent, step in reversed(list(zip(parents, view.view_steps))):
        scatter = VIEW_SCATTERS.get(step.op)
        if scatter is None:
            raise AOTUnsupported(f"{what} writes through a view made by {step.op}, which "
                                 "has no scatter; see [Note: mutation through views]")
        with mode:
            value = scatter(parent, value, step)
    write_back(mode, base, value, what)
    view.meta, view.proxy, view.base_version = new.meta, new.proxy, base.version


def sync_view(mode, view) -> None:
    """A stale view (its base was written after it was taken) takes its current value:
    the chain replayed on the base ([Note: mutation through views])."""
    value = view.base
    for step in view.view_steps:
        value = step.replay(mode, value)
    view.meta, view.proxy, view.base_version = value.meta, value.proxy, view.base.version
# --8<-- [end:write-through-view]


# --8<-- [start:view-scatters]
# scatter(parent, new, step) -> the parent's value once its view by ``step`` holds ``new``
VIEW_SCATTERS: dict[OpOverload, Callable] = {}


def register_view_scatter(*ops: OpOverload) -> Callable[[Callable], Callable]:
    def decorate(scatter: Callable) -> Callable:
        for op in ops:
            VIEW_SCATTERS[op] = scatter
        return scatter

    return decorate


@register_view_scatter(aten.view.default, aten._reshape_alias.default, aten.alias.default,
                       aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims,
                       aten.unsqueeze.default, aten.detach.default, aten.lift_fresh.default)
def reshape_back(parent, new, step: ViewStep):
    """Views that keep the elements' order and only regroup the dims."""
    if tuple(new.shape) == tuple(parent.shape):
        return new
    return aten.reshape.default(new, parent.shape)


@register_view_scatter(aten.permute.default)
def permute_back(parent, new, step: ViewStep):
    dims = [d % parent.dim() for d in step.args[0]]
    return aten.permute.default(new, [dims.index(d) for d in range(parent.dim())])


@register_view_scatter(aten.transpose.int)
def transpose_back(parent, new, step: ViewStep):
    return aten.transpose.int(new, *step.args)


@register_view_scatter(aten.t.default)
def t_back(parent, new, step: ViewStep):
    return aten.t.default(new)


@register_view_scatter(aten.slice.Tensor)
def slice_back(parent, new, step: ViewStep):
    return aten.slice_scatter.default(parent, new, *step.args, **step.kwargs)


@register_view_scatter(aten.select.int)
def select_back(parent, new, step: ViewStep):
    return aten.select_scatter.default(parent, new, *step.args)


@register_view_scatter(aten.diagonal.default)
def diagonal_back(parent, new, step: ViewStep):
    return aten.diagonal_scatter.default(parent, new, *step.args, **step.kwargs)


@register_view_scatter(aten.unbind.int)
def unbind_back(parent, new, step: ViewStep):
    return aten.select_scatter.default(parent, new, *step.args[:1] or (0,), step.index)


@register_view_scatter(aten.split.Tensor, aten.split_with_sizes.default)
def split_back(parent, new, step: ViewStep):
    sizes, dim = step.args[0], (step.args[1:] or (0,))[0]
    if isinstance(sizes, int):  # split: pieces of one size
        sizes = [sizes] * (step.index + 1)
    start = sum(sizes[:step.index])
    return aten.slice_scatter.default(parent, new, dim, start, start + new.shape[dim])


@register_view_scatter(aten.as_strided.default)
def as_strided_back(parent, new, step: ViewStep):
    """``CopySlices``, autograd's backward of a write to a view, writes the gradient into
    ``as_strided`` of a fresh buffer; when the view is all of a row-major buffer, in order,
    that is a reshape."""
    size, stride = list(step.args[0]), list(step.args[1])
    offset = step.args[2] if len(step.args) > 2 else 0
    whole = (offset == 0 and new.numel() == parent.numel() and parent.is_contiguous()
             and stride == row_major_strides(size))
    if whole:
        return aten.reshape.default(new, parent.shape)
    return aten.as_strided_scatter.default(parent, new, size, stride, offset)


def row_major_strides(size: list) -> list:
    strides, step = [], 1
    for n in reversed(size):
        strides.insert(0, step)
        step = step * max(n, 1)
    return strides


@register_view_scatter(aten.expand.default)
def expand_back(parent, new, step: ViewStep):
    if new.numel() != parent.numel():
        raise AOTUnsupported("a write through expand() would write one element many times; "
                             "see [Note: mutation through views]")
    return aten.reshape.default(new, parent.shape)
# --8<-- [end:view-scatters]


def with_defaults(func: OpOverload, args: tuple) -> tuple:
    """Positional arguments with the schema's defaults filled in (``bernoulli_(x)`` means
    ``bernoulli_(x, 0.5)``, and its twin ``bernoulli.p`` has no default for ``p``)."""
    positional = [a for a in func._schema.arguments if not a.kwarg_only]
    missing = positional[len(args):]
    return tuple(args) + tuple(a.default_value for a in missing if a.has_default_value())


def functional_variant(func: OpOverload) -> OpOverload | None:
    """``aten.add_.Tensor`` -> ``aten.add.Tensor``; when the overload names differ
    (``bernoulli_.float`` -> ``bernoulli.p``), the overload taking the same arguments; when
    no ``foo`` takes them, aten's ``foo_functional`` (``normal_`` -> ``normal_functional``:
    ``normal``'s overloads take a mean and a std, not a tensor to fill)."""
    name = func._schema.name.split("::")[-1]
    if not name.endswith("_") or name.startswith("_"):
        return None
    types = [str(a.type) for a in func._schema.arguments]
    wanted = [(a.name, t) for a, t in zip(func._schema.arguments, types)]
    for packet in (getattr(aten, name[:-1], None), getattr(aten, f"{name[:-1]}_functional", None)):
        if packet is None:
            continue
        # the same overload name, if it takes the same types: ``pow_.Scalar`` raises a tensor
        # to a number, ``pow.Scalar`` a number to a tensor (``pow.Tensor_Scalar`` is the twin)
        same = getattr(packet, func._overloadname, None) \
            if func._overloadname in packet.overloads() else None
        if same is not None and [str(a.type) for a in same._schema.arguments] == types:
            return same
        found = _overload_taking(packet, wanted)
        if found is not None:
            return found
    return None


def _overload_taking(packet, wanted: list[tuple[str, str]],
                     mutable: bool = True) -> OpOverload | None:
    """The overload of ``packet`` whose arguments are ``wanted`` (names and types); with
    ``mutable=False``, only one that writes none of them."""
    for overload in packet.overloads():
        candidate = getattr(packet, overload)
        if not mutable and candidate._schema.is_mutable:
            continue
        if [(a.name, str(a.type)) for a in candidate._schema.arguments] == wanted:
            return candidate
    return None


IN_PLACE_VIEWS.update(_in_place_views())
