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
must update the view's base and every other view of it; PyTorch replays the view chain with
``*_scatter`` ops. We do not: writing to a view raises ``AOTUnsupported`` (the frame runs
eagerly), and so does *reading* a view taken before its base was written (it would still see
the old value). Writing a base whose views are never read again is fine.
"""

from __future__ import annotations

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
    written = [i for i, a in enumerate(func._schema.arguments)
               if a.alias_info is not None and a.alias_info.is_write]
    if written == [0] and not func._schema.arguments[0].kwarg_only:
        return functionalize_inplace(mode, func, args, kwargs)
    return functionalize_with_twin(mode, func, args, kwargs, written)


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


def whole_view(t: object) -> bool:
    """A view that is all of its base, in the base's layout (``aten.alias(x)``, ``x[:]``):
    writing it is writing the base. ``F.instance_norm`` updates its running statistics by
    ``alias(running_mean).copy_(...)``, so a model with ``nn.InstanceNorm2d(...,
    track_running_stats=True)`` needs this exception to [Note: mutation through views]."""
    base = getattr(t, "base", None)
    return (base is not None and t.dtype == base.dtype and tuple(t.shape) == tuple(base.shape)
            and t.stride() == base.stride() and t.storage_offset() == base.storage_offset())


def check_writable(tracer, target: object, what: str) -> None:
    """Only an intermediate, or (in aot_module_simplified) a graph input, may be written."""
    if not isinstance(target, proxy_tensor.TracerTensor):
        raise AOTUnsupported(f"{what} writes to a tensor the tracer does not own")
    if whole_view(target):
        target = target.base
    if target.base is not None:
        raise AOTUnsupported(f"{what} writes through a view (x[i] = ..., x.view(...).add_()); "
                             "see [Note: mutation through views]")
    if target.role == "constant":
        raise AOTUnsupported(f"{what} writes to a closed-over tensor; pass it as an input")
    if target.role == "input" and not tracer.allow_input_mutation:
        raise AOTUnsupported(f"{what} mutates an input; trace() returns no copy-back "
                             "(aot_module_simplified does)")


def write_back(mode, target, new: torch.Tensor, what: str) -> None:
    """Re-point ``target`` at ``new`` (its value after the in-place op) and bump its version,
    which makes the views taken before the write stale."""
    tracer = mode.tracer
    check_writable(tracer, target, what)
    if whole_view(target):  # write the base; the view, the same memory, sees the new value
        base = target.base
        write_back(mode, base, new, what)
        target.meta, target.proxy, target.base_version = base.meta, base.proxy, base.version
        return
    if new.dtype != target.dtype:  # x_float32.add_(y_float64) stays float32
        with mode:
            new = aten._to_copy.default(new, dtype=target.dtype)
    if new.shape != target.shape:
        raise AOTUnsupported(f"{what} changed the shape of the tensor it writes")
    target.meta, target.proxy = new.meta, new.proxy
    target.version += 1
    if target.role == "input":
        tracer.mutated_inputs[target.input_index] = target


def with_defaults(func: OpOverload, args: tuple) -> tuple:
    """Positional arguments with the schema's defaults filled in (``bernoulli_(x)`` means
    ``bernoulli_(x, 0.5)``, and its twin ``bernoulli.p`` has no default for ``p``)."""
    positional = [a for a in func._schema.arguments if not a.kwarg_only]
    missing = positional[len(args):]
    return tuple(args) + tuple(a.default_value for a in missing if a.has_default_value())


def functional_variant(func: OpOverload) -> OpOverload | None:
    """``aten.add_.Tensor`` -> ``aten.add.Tensor``; when the overload names differ
    (``bernoulli_.float`` -> ``bernoulli.p``), the overload taking the same arguments."""
    name = func._schema.name.split("::")[-1]
    if not name.endswith("_") or name.startswith("_"):
        return None
    packet = getattr(aten, name[:-1], None)
    if packet is None:
        return None
    if func._overloadname in packet.overloads():
        return getattr(packet, func._overloadname)
    wanted = [(a.name, str(a.type)) for a in func._schema.arguments]
    for overload in packet.overloads():
        candidate = getattr(packet, overload)
        if [(a.name, str(a.type)) for a in candidate._schema.arguments] == wanted:
            return candidate
    return None
