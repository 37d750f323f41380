"""VariableBuilder: turn real Python values into trackers, recording their guards.

Input: a value the frame reads from outside (an argument, a global, a
closure cell, an attribute of ``self``) together with its source
expression; or a value found by attribute lookup on a Python module (no
source, no guard); or the proxy and example value of a new graph node.
Output: the matching VariableTracker; tensors become graph placeholders,
constants are specialised and guarded by value, modules, functions and
classes are guarded by identity, containers by type and length.
Chapter: book/docs/dynamo.md ("Wrapping inputs", "Guards").
"""

from __future__ import annotations

import collections
import functools
import os
import re
import types
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from ..exc import unimplemented
from ..guards import (
    Guard,
    literal,
    make_constant_guards,
    make_dynamic_tensor_guards,
    make_identity_guard,
    make_tensor_guards,
    make_type_guard,
)
from ..shapes import MARK_ATTR, SymTypes
from ..sym_node import symbolic_meta
from .base import VariableTracker
from .builtin import BuiltinVariable, KnownObjectVariable, has_special_case, is_pure
from .constant import ConstantVariable, SymNumberVariable, is_literal
from .ctx_manager import AutocastVariable, GradModeVariable
from .dicts import ConstDictVariable
from .functions import FunctoolsPartialVariable, UserFunctionVariable, UserMethodVariable
from .iter import ListIteratorVariable
from .lists import ListVariable, NamedTupleVariable, TupleVariable, tuple_fields
from .misc import EnvironVariable, PythonModuleVariable, TypeVariable
from .nn_module import NNModuleVariable
from .sym_node import SymNodeVariable
from .tensor import TensorVariable
from .torch import COMPILING_QUESTIONS, TorchFunctionVariable
from .user_defined import UserDefinedClassVariable, UserObjectVariable

if TYPE_CHECKING:
    from ..output_graph import OutputGraph
    from ..symbolic_convert import InstructionTranslatorBase as InstructionTranslator

_IDENTITY_GUARDED = (PythonModuleVariable, BuiltinVariable, TorchFunctionVariable,
                     UserFunctionVariable, TypeVariable, UserDefinedClassVariable)


def wrap(output: OutputGraph, value: Any, source: str, sym_numbers: bool = False
         ) -> VariableTracker:
    """Wrap a value that came from outside the frame, adding the guards it needs.

    The same source wrapped twice gives the same tracker (its latest version,
    if the object was mutated during the trace).
    """
    cached = output.wrap_cache.get(source)
    if cached is not None:
        return output.side_effects.latest(cached)
    if type(value) in (list, dict, set):  # [Note: one container, two names]
        seen = output.input_containers.get(id(value))
        if seen is not None and seen[0] is value:
            first = seen[1]
            output.add_guards([Guard(source, "ALIAS", f"{source} is {first.source}")])
            output.wrap_cache[source] = first
            return output.side_effects.latest(first)
    tracker = _wrap(output, value, source, sym_numbers)
    output.wrap_cache[source] = tracker
    if type(value) in (list, dict, set):
        output.input_containers[id(value)] = (value, tracker)
    return tracker


# [Note: one container, two names]
# A list or dict from outside the frame becomes a tracker per source, and mutations are
# recorded on that tracker. The same list reached by two names (a global and a module's
# attribute, say) would have been two trackers: an ``append`` through one unseen by the other,
# and ``a is b`` false. So the second name gets the first name's tracker, and a guard that the
# two are still one object; ``is`` between two trackers of containers adds the opposite guard
# (``_is`` in builtin.py). A container's tracker builds a new list each time it is asked for
# its Python value, so ``is`` never compares those.


def _wrap(output: OutputGraph, value: Any, source: str, sym_numbers: bool) -> VariableTracker:
    if isinstance(value, torch.Tensor):
        return wrap_tensor(output, value, source)
    if sym_numbers and type(value) in (int, float):  # [Note: numbers across a graph break]
        output.add_guards([Guard(source, "TYPE", f"type({source}) is {type(value).__name__}")])
        return SymNumberVariable(value, source, output)
    if is_literal(value) and type(value) not in (tuple, frozenset):
        try:
            output.add_guards(make_constant_guards(source, value))
        except TypeError:
            unimplemented(f"cannot guard on the value of {source} ({type(value).__name__})")
        return ConstantVariable(value, source=source)
    if isinstance(value, (tuple, list)):
        return _wrap_sequence(output, value, source, sym_numbers)
    if type(value) in (dict, collections.OrderedDict):  # (a module's hooks are OrderedDicts)
        return _wrap_dict(output, value, source, sym_numbers)
    from ..codegen import LoopIterator  # (codegen imports the trackers: not at the top)

    if type(value) is LoopIterator:
        # the iterator a graph break hands on (a comprehension called at the break gets
        # one as its ``.0``): its items, not yet consumed, read like a list's
        items = _wrap_sequence(output, value.items, f"{source}.items", sym_numbers)
        return ListIteratorVariable(items.items)
    if isinstance(value, torch.nn.Module):
        return wrap_module(output, value, source)
    if isinstance(value, types.MethodType) and isinstance(value.__func__, types.FunctionType):
        output.add_guards([make_type_guard(source, value)])
        obj = wrap(output, value.__self__, f"{source}.__self__")
        return UserMethodVariable(value.__func__, obj, source=source)
    if isinstance(value, torch.amp.autocast):  # e.g. the one @torch.autocast(...) holds
        output.add_guards([make_identity_guard(source, value)])
        return AutocastVariable.from_object(value, source=source)
    if type(value) in (torch.no_grad, torch.enable_grad):  # the one @torch.no_grad() holds
        output.add_guards([make_identity_guard(source, value)])
        return GradModeVariable(type(value) is torch.enable_grad, source=source)
    if isinstance(value, functools.partial):
        output.add_guards([make_type_guard(source, value)])
        fn = wrap(output, value.func, f"{source}.func")
        args = tuple(wrap(output, a, f"{source}.args[{i}]") for i, a in enumerate(value.args))
        kw = {k: wrap(output, v, f"{source}.keywords[{k!r}]") for k, v in value.keywords.items()}
        return FunctoolsPartialVariable(fn, args, kw, source=source)
    static = wrap_static(value, strict=False)
    if static is not None:
        receiver = getattr(value, "__self__", None)
        if isinstance(value, types.BuiltinMethodType) and receiver is not None and \
                not isinstance(receiver, types.ModuleType):
            # ``G['cv'].set``: a C method bound to an object is a new object at every
            # lookup, so its id proves nothing; the object it is bound to is what stays
            output.add_guards([make_identity_guard(f"{source}.__self__", receiver)])
        else:
            output.add_guards([make_identity_guard(source, value)])
        return static.clone(source=source)
    output.add_guards([make_type_guard(source, value)])
    return UserObjectVariable(value, source=source)


def _wrap_sequence(output: OutputGraph, value: Any, source: str, sym: bool) -> VariableTracker:
    output.add_guards([make_type_guard(source, value),
                       Guard(source, "LEN", f"len({source}) == {len(value)}")])
    items = tuple(wrap(output, v, f"{source}[{i}]", sym) for i, v in enumerate(value))
    if isinstance(value, tuple) and tuple_fields(type(value)) is not None:
        return NamedTupleVariable(items, cls=type(value), source=source)
    cls = TupleVariable if isinstance(value, tuple) else ListVariable
    return cls(items, source=source)


def _wrap_dict(output: OutputGraph, value: dict, source: str, sym: bool) -> VariableTracker:
    if not all(is_literal(k) for k in value):
        unimplemented(f"dict {source} has keys that are not constants")
    keys = literal(list(value))
    output.add_guards([make_type_guard(source, value),
                       Guard(source, "KEYS", f"list({source}.keys()) == {keys}")])
    items = {k: wrap(output, v, f"{source}[{literal(k)}]", sym) for k, v in value.items()}
    return ConstDictVariable(items, source=source, cls=type(value))


# --8<-- [start:wrap-module]
def wrap_module(output: OutputGraph, value: torch.nn.Module, source: str) -> VariableTracker:
    """A module from outside the frame: guarded by its class, not its identity, so one
    entry serves every instance of the class that agrees on what the trace read from it.
    See [Note: module guards] in nn_module.py."""
    same = output.input_modules.get(id(value))
    if same is not None:  # one module reached twice (a shared block): keep it one
        output.add_guards([Guard(source, "ALIAS", f"{source} is {same.source}")])
        return same
    output.add_guards([make_type_guard(source, value)])
    module_vt = NNModuleVariable(value, source=source)
    output.input_modules[id(value)] = module_vt
    return module_vt
# --8<-- [end:wrap-module]


# --8<-- [start:wrap-tensor]
def wrap_tensor(output: OutputGraph, value: torch.Tensor, source: str) -> VariableTracker:
    """A tensor input: guard its metadata and make it a placeholder of the graph."""
    if type(value) not in (torch.Tensor, torch.nn.Parameter):
        unimplemented(f"tensor subclass {type(value).__qualname__} for {source}")
    if value.layout != torch.strided:
        unimplemented(f"{value.layout} tensor {source} (only strided tensors)")
    same = output.input_tensors.get(id(value))
    if same is not None:  # one tensor reached twice (tied weights, x passed twice)
        output.add_guards([Guard(source, "ALIAS", f"{source} is {same.source}")])
        return same
    dims = dynamic_dims(output, value, source)
    if dims:  # book/docs/dynamic-shapes.md
        example = symbolic_meta(output.shape_env, value, source, dims)
        output.add_guards(make_dynamic_tensor_guards(source, value, example))
    else:
        output.add_guards(make_tensor_guards(source, value))
        example = meta_copy(value)
    proxy = output.add_graph_input(source, value)
    proxy.node.meta["example_value"] = example
    tensor_vt = TensorVariable(proxy, example, value.device, type(value), source=source)
    output.input_tensors[id(value)] = tensor_vt
    return tensor_vt
# --8<-- [end:wrap-tensor]


# --8<-- [start:dynamic-dims]
def dynamic_dims(output: OutputGraph, value: torch.Tensor, source: str) -> set[int]:
    """Which dims of this input get a symbolic size ([Note: automatic dynamic]).

    ``dynamic=False``: none. Dims marked with ``mark_dynamic``: those. ``dynamic=True``: every
    dim of a tensor the caller passed in (not parameters or other module state: those rarely
    change size). ``dynamic=None`` (the default): the dims whose size differs from the one
    an earlier compile of this code saw, which ``output.frame_state`` remembers.
    """
    if output.dynamic is False:
        return set()
    dims = set(getattr(value, MARK_ATTR, ()))
    if output.dynamic is True and _is_argument(source) and type(value) is torch.Tensor:
        dims |= set(range(value.ndim))
    seen = output.frame_state.get(source)
    if seen is not None and len(seen) == value.ndim:
        dims |= {d for d, n in enumerate(seen) if n is None or n != value.shape[d]}
        output.frame_state[source] = tuple(None if d in dims else n
                                           for d, n in enumerate(value.shape))
    else:
        output.frame_state[source] = tuple(value.shape)
    return {d for d in dims if d < value.ndim}
# --8<-- [end:dynamic-dims]


def _is_argument(source: str) -> bool:
    """``x``, ``xs[0]``, ``d['k']``: reached from an argument without an attribute."""
    return re.fullmatch(r"[A-Za-z_]\w*(\[(\d+|'[^']*'|\"[^\"]*\")\])*", source) is not None \
        and not source.startswith(("G[", "C["))


def meta_copy(value: torch.Tensor) -> torch.Tensor:
    """A tensor on the meta device with ``value``'s sizes, strides, dtype and requires_grad.

    # [Note: example values]
    # Meta tensors carry metadata but no storage: running an op on them runs
    # only its shape/dtype/stride rule. That tells the trace what each node
    # will produce (so ``x.shape[0]`` is a constant and a bad broadcast is
    # found) at no compute cost, and without touching the user's data.
    """
    meta = torch.empty_strided(value.size(), value.stride(), dtype=value.dtype, device="meta")
    return grad_like(meta, value)


# --8<-- [start:non-leaf-input]
# [Note: an example that is not a leaf]
# An example value starts as a fresh meta tensor, which autograd sees as a *leaf*. Most inputs
# of a frame that require grad are not leaves, though: a resumed frame after a graph break,
# or a helper compiled on its own, receives activations, each with the ``grad_fn`` of the op
# that made it. Autograd refuses an in-place write into a leaf that requires grad, and allows
# it into a non-leaf; so wav2vec2's ``hidden_states[mask] = self.masked_spec_embed``, fine in
# eager, raised in the trace, and the frame ran eagerly with a warning. The example of such an
# input is made a non-leaf too: the output of a one-op autograd.Function that returns a tensor
# with the same sizes and strides (not a view, which in-place writes treat differently).
# Under ``no_grad`` autograd checks nothing, and a leaf does.
class _NotALeaf(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=x.device)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


def grad_like(example: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """``example`` requiring grad as ``value`` does, and, with grad mode on, a non-leaf when
    ``value`` is one ([Note: an example that is not a leaf])."""
    example.requires_grad_(value.requires_grad)
    if value.requires_grad and not value.is_leaf and torch.is_grad_enabled():
        return _NotALeaf.apply(example)
    return example
# --8<-- [end:non-leaf-input]


def wrap_attribute(tx: InstructionTranslator, owner: VariableTracker, obj: Any, key: Any,
                   path: str | None = None) -> VariableTracker:
    """``obj.key`` (or ``obj[key]`` when ``path`` is given), reached from ``owner``.

    With a source on the owner the value is wrapped (and guarded) through
    ``owner.source + path``; without one it can only be used as a static value.
    """
    try:
        value = getattr(obj, key) if path is None else obj[key]
    except (AttributeError, KeyError, IndexError) as e:
        from ..exc import UserErrorInTrace

        raise UserErrorInTrace(e) from e
    if path is None:
        path = f".{key}" if str(key).isidentifier() else f".__dict__[{key!r}]"
    if owner.source is not None:
        return wrap(tx.output, value, owner.source + path)
    if isinstance(value, torch.Tensor):
        unimplemented(f"a tensor ({path}) reached from a value without a source")
    static = wrap_static(value, strict=False)
    if static is not None:
        return static
    if isinstance(value, torch.nn.Module):
        return NNModuleVariable(value)
    return UserObjectVariable(value)


def wrap_static(value: Any, strict: bool = True) -> VariableTracker | None:
    """Wrap a value found by attribute lookup (``torch.sin``, ``torch.float32``, ``math.pi``)."""
    if isinstance(value, types.ModuleType):
        return PythonModuleVariable(value)
    if is_literal(value):
        return ConstantVariable(value)
    if isinstance(value, (torch.finfo, torch.iinfo)):  # ``torch.finfo(x.dtype).min``
        return KnownObjectVariable(value)
    if value is os.environ:  # [Note: environment variables]
        return EnvironVariable(value)
    if isinstance(value, torch.jit.ScriptFunction):
        # ``@torch.jit.script`` keeps the Python function it compiled (for tracers like this
        # one); a graph node cannot call the TorchScript function itself (DeBERTa's helpers)
        original = getattr(value, "_torchdynamo_inline", None)
        if isinstance(original, types.FunctionType):
            return UserFunctionVariable(original)
        unimplemented(f"the TorchScript function {value.name}")
    if any(value is f for f in (torch.no_grad, torch.enable_grad, torch.set_grad_enabled)) \
            or (isinstance(value, type) and issubclass(value, torch.amp.autocast)) \
            or any(value is f for f in COMPILING_QUESTIONS):  # [Note: is_compiling]
        return TorchFunctionVariable(value)
    if value is functools.partial or has_special_case(value) or is_pure(value) or (
            isinstance(value, types.BuiltinFunctionType) and _is_builtin(value)):
        return BuiltinVariable(value)
    if isinstance(value, type):
        if _is_torch(value) or value.__module__ == "builtins":
            return TypeVariable(value)
        return UserDefinedClassVariable(value)
    if is_type_hint(value):  # [Note: type hints are constants]
        return KnownObjectVariable(value)
    if isinstance(getattr(value, "_opoverload", None), torch._ops.OpOverload):
        # a ``torch.library.custom_op`` called by its Python name: the op it registered
        return TorchFunctionVariable(value._opoverload)
    if callable(value) and _is_torch(value) and not isinstance(value, torch.nn.Module):
        if not isinstance(value, types.FunctionType) or _is_torch_function(value):
            return TorchFunctionVariable(value)
    if isinstance(value, types.FunctionType):
        return UserFunctionVariable(value)
    if isinstance(value, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        return BuiltinVariable(value)  # an unknown C function: calling it breaks the graph
    if strict:
        unimplemented(f"a {type(value).__qualname__} value")
    return None


# --8<-- [start:type-hints]
# [Note: type hints are constants]
# ``def step(cache: list[Any]) -> dict[str, int]:`` nested in a forward builds its annotations
# every time the ``def`` runs (unless the module has ``from __future__ import annotations``):
# ``list[Any]`` is a ``types.GenericAlias``, ``Optional[int]`` and ``List[int]`` are objects of
# the ``typing`` module, ``int | None`` a ``types.UnionType``. None of them was a value the
# trace knew, so the ``def`` broke the graph. They are immutable descriptions of types, made
# from other constants: they fold like constants (``KnownObjectVariable``), a global one is
# guarded by identity like a class, and no graph node ever sees them. A class made with the
# ``typing`` module's help (``typing.Any``, a ``NamedTuple``) is still a class, wrapped above.
def is_type_hint(value: Any) -> bool:
    """A subscripted generic, a union, a ``TypeVar``, a special form like ``Optional``."""
    return isinstance(value, (types.GenericAlias, types.UnionType)) or \
        type(value).__module__ == "typing"
# --8<-- [end:type-hints]


def _is_builtin(fn: Any) -> bool:
    return getattr(fn, "__module__", None) in ("builtins", "_operator", "math")


def _is_torch(fn: Any) -> bool:
    module = getattr(fn, "__module__", None) or ""
    return module == "torch" or module.startswith("torch.")


def _is_torch_function(fn: types.FunctionType) -> bool:
    """A Python function of torch that is an *op* (F.relu), not a container or helper."""
    return fn.__module__ in ("torch.functional", "torch.nn.functional") or \
        fn.__module__.startswith(("torch._tensor", "torch.random", "torch.overrides")) or \
        fn.__module__ == "torch"


def wrap_fx_proxy(
    output: OutputGraph, proxy: torch.fx.Proxy, example: Any, device: torch.device,
) -> VariableTracker:
    """Wrap the result of a new graph node according to its example value."""
    if isinstance(example, torch.Tensor):
        proxy.node.meta["example_value"] = example
        return TensorVariable(proxy, example, device)
    if isinstance(example, (tuple, list)) and any(isinstance(e, torch.Tensor) for e in example):
        items = tuple(wrap_fx_proxy(output, proxy[i], e, device) for i, e in enumerate(example))
        if isinstance(example, list):
            return ListVariable(items)
        if tuple_fields(type(example)) is not None:  # torch.sort's values/indices
            return NamedTupleVariable(items, cls=type(example))
        return TupleVariable(items)
    if isinstance(example, SymTypes):  # a size, symbolic: book/docs/dynamic-shapes.md
        proxy.node.meta["example_value"] = example
        if example.node.is_constant():
            output.graph.erase_node(proxy.node)
            return ConstantVariable(example.node.pytype(example.node.expr))
        return SymNodeVariable(proxy, example)
    if isinstance(example, (tuple, list)) and any(isinstance(e, SymTypes) for e in example):
        proxy.node.meta["example_value"] = example  # x.size() with symbolic dims
        return TupleVariable(tuple(wrap_fx_proxy(output, proxy[i], e, device)
                                   for i, e in enumerate(example)))
    if example is None:
        return ConstantVariable(None)  # keep the node: an op returning None acts by side effect
    if is_literal(example):
        # Metadata queries (x.size(), x.dim(), len(x)) are answered exactly by
        # the meta example; the node would compute the same constant again.
        output.graph.erase_node(proxy.node)
        return ConstantVariable(example)
    output.graph.erase_node(proxy.node)
    unimplemented(f"{proxy.node.target} returned a {type(example).__qualname__}")
