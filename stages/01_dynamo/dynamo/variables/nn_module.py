"""NNModuleVariable: an ``nn.Module`` reached from the frame (``self``, ``self.fc``).

Input: a module with a source. Output: attribute reads resolved like
``nn.Module.__getattr__`` (instance attributes, then ``_parameters``,
``_buffers``, ``_modules``, then the class); calling a module inlines its
``forward`` so common layers (Linear, Conv2d, BatchNorm2d, LayerNorm,
Embedding, Dropout...) record the ``torch.nn.functional`` calls they make;
containers (Sequential, ModuleList, ModuleDict) iterate and index at trace time.
Chapter: book/docs/dynamo.md ("Modules").

# [Note: module guards]
# A module is guarded by its class, not by its identity (``type(self) is
# ...Block``, not ``id(self) == ...``), like PyTorch's Dynamo with
# ``inline_inbuilt_nn_modules``: twelve transformer layers, or MaxViT's
# blocks, are twelve instances running one ``forward``, and a frame compiled
# for one of them (a forward that breaks the graph is a frame of its own)
# must serve the others, or each instance fails the guard, recompiles, and
# the eighth hits the recompile limit. What the trace learned from *this*
# instance is guarded where it was read, through the source: parameters and
# buffers are graph inputs fetched from the instance passed at every call
# (``self.fc.weight``), with the usual tensor guards (shape, dtype,
# requires_grad); submodules by their class, recursively; plain attributes
# that steered the trace (``self.training``, ``self.eps``) by value; a name
# the trace found on the class (a method, ``self.forward``) by its absence
# from the instance's ``__dict__``; a called module by having no hooks; a
# container that was iterated or measured by its length (a ModuleDict by its
# keys), a ``parameters()`` listing by its length; one module reached twice
# by an ALIAS guard; ``a is b`` of two modules by its answer. So
# ``model.eval()``, another ``eps``, another submodule type or a weight of
# another shape recompiles; another instance that agrees on all of it, or a
# weight updated in place, does not.
"""

from __future__ import annotations

import dataclasses
import inspect
import operator
import types
from typing import TYPE_CHECKING, Any

import torch

from ..exc import UserErrorInTrace, unimplemented
from ..guards import Guard
from .base import VariableTracker
from .constant import ConstantVariable
from .user_defined import _is_none, class_attribute

if TYPE_CHECKING:
    from ..codegen import Residual
    from ..symbolic_convert import InstructionTranslatorBase as InstructionTranslator

_CONTAINERS = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict,
               torch.nn.ParameterList, torch.nn.ParameterDict)


def forward_hooks_only(module: torch.nn.Module) -> bool:
    """Whether the module's hooks are plain forward and forward-pre hooks of its own, which
    the trace calls itself ([Note: forward hooks]): no backward or global hooks, none taking
    keyword arguments or asked to run on an exception."""
    hooks = torch.nn.modules.module
    return not (module._backward_hooks or getattr(module, "_backward_pre_hooks", {})
                or hooks._global_forward_hooks or hooks._global_forward_pre_hooks
                or hooks._global_backward_hooks or getattr(hooks, "_global_backward_pre_hooks", {})
                or getattr(module, "_forward_hooks_with_kwargs", {})
                or getattr(module, "_forward_pre_hooks_with_kwargs", {})
                or getattr(module, "_forward_hooks_always_called", {}))


def has_hooks(module: torch.nn.Module) -> bool:
    hooks = torch.nn.modules.module
    local = (module._forward_hooks, module._forward_pre_hooks, module._backward_hooks,
             getattr(module, "_backward_pre_hooks", {}))
    shared = (hooks._global_forward_hooks, hooks._global_forward_pre_hooks,
              hooks._global_backward_hooks, getattr(hooks, "_global_backward_pre_hooks", {}))
    return any(local) or any(shared)


@dataclasses.dataclass(frozen=True, eq=False)
class NNModuleVariable(VariableTracker):
    value: torch.nn.Module

    def python_type(self) -> type:
        return type(self.value)

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        from .builder import wrap_attribute

        module = self.value
        pending = tx.output.side_effects.pending_attr(module, name)
        if pending is not None:
            return pending
        if name in module.__dict__ or name in ("_parameters", "_buffers", "_modules"):
            return wrap_attribute(tx, self, module, name)
        for table in ("_parameters", "_buffers", "_modules"):
            if name in module.__dict__[table]:
                return wrap_attribute(tx, self, module, name)
        if name in ("parameters", "buffers", "children", "modules"):
            from .misc import MethodVariable

            return MethodVariable(self, name)  # listed at trace time by call_method
        found = class_attribute(tx, self, type(module), name)
        if found is not None:
            _guard_not_in_instance(tx, self, name)
            return found
        msg = f"{type(module).__name__!r} object has no attribute {name!r}"
        raise UserErrorInTrace(AttributeError(msg))

    def truth(self, tx: InstructionTranslator) -> bool:
        """``if self.norm:`` (ProphetNet). Python asks ``__bool__``, then ``__len__``, else a
        module is true; the module's class is guarded, so which of them exists is fixed, and
        a container's length is guarded too."""
        cls = type(self.value)
        if not hasattr(cls, "__bool__") and not hasattr(cls, "__len__"):
            return True
        if not hasattr(cls, "__bool__") and self.source is not None and cls.__len__ in (
                torch.nn.Sequential.__len__, torch.nn.ModuleList.__len__,
                torch.nn.ModuleDict.__len__):
            n = len(self.value)
            tx.output.add_guards([Guard(self.source, "LEN", f"len({self.source}) == {n}")])
            return n != 0
        return super().truth(tx)

    def store_attr(self, tx: InstructionTranslator, name: str, value: VariableTracker) -> None:
        module = self.value
        if any(name in module.__dict__[t] for t in ("_parameters", "_buffers", "_modules")):
            if _stores_itself(value, self.var_getattr(tx, name)):
                return  # ``self.steps += 1``: the in-place add changed the buffer already
            unimplemented(f"assigning to the parameter, buffer or submodule .{name}")
        tx.output.side_effects.store_attr(self, name, value)

    def call_function(
        self, tx: InstructionTranslator, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        module = self.value
        hooked = has_hooks(module)
        if hooked and (self.source is None or not forward_hooks_only(module)):
            unimplemented(f"calling {type(module).__qualname__} which has hooks registered")
        if hooked:
            self.guard_hooks(tx)  # [Note: forward hooks]: called by ``call_forward``
        elif self.source is not None:  # another instance of the class may have some
            src = self.source
            tx.output.add_guards([Guard(src, "HOOKS", f"not ({src}._forward_hooks or "
                                        f"{src}._forward_pre_hooks or {src}._backward_hooks "
                                        f"or {src}._backward_pre_hooks)")])
        cls = type(module)
        if cls.__call__ is not torch.nn.Module.__call__:
            # [Note: a module that overrides __call__]: HuggingFace's layers do, to
            # checkpoint activations when asked; the override is traced like any method,
            # and its ``super().__call__(...)`` comes back to ``call_forward``. As a break,
            # it cost more than a break: inside ``for layer in self.layers`` the resume
            # function takes the remaining layers, a different guard at every layer, and a
            # 12-layer model hit the recompile limit.
            if isinstance(inspect.getattr_static(cls, "__call__"), types.FunctionType):
                return class_attribute(tx, self, cls, "__call__").call_function(tx, args, kwargs)
            unimplemented(f"{cls.__qualname__} overrides __call__")
        return self.call_forward(tx, args, kwargs)

    # --8<-- [start:forward-hooks]
    # [Note: forward hooks]
    # ``nn.Module.__call__`` runs the module's forward-pre hooks on its arguments, the forward,
    # then its forward hooks on the arguments and the output; a hook that returns something
    # replaces the arguments (pre) or the output. Libraries install such hooks on layers that
    # most calls never look at: transformers 5 records hidden states with a forward hook on
    # each SegFormer stage that returns at once unless a collector is active. A call of a
    # hooked module was a graph break, and the stage ran eagerly. Now the trace calls the
    # hooks as ``__call__`` would, each traced like any function: the hooks are guarded by
    # identity and order (``list(m._forward_hooks.items())``), backward hooks by absence. A
    # module with backward hooks, global hooks or hooks that take keyword arguments is still a
    # break.
    def guard_hooks(self, tx: InstructionTranslator) -> None:
        """The module's forward hooks are these, in this order; it has no backward hooks."""
        src, module = self.source, self.value
        pre = [(k, id(h)) for k, h in module._forward_pre_hooks.items()]
        post = [(k, id(h)) for k, h in module._forward_hooks.items()]
        tx.output.add_guards([Guard(src, "HOOKS", (
            f"[(k, id(h)) for k, h in {src}._forward_pre_hooks.items()] == {pre} and "
            f"[(k, id(h)) for k, h in {src}._forward_hooks.items()] == {post} and not "
            f"({src}._backward_hooks or {src}._backward_pre_hooks)"))])

    def call_with_hooks(self, tx: InstructionTranslator, args: list[VariableTracker],
                        kwargs: dict[str, VariableTracker]) -> VariableTracker:
        """``_call_impl``'s forward path: pre hooks, ``forward``, hooks (guarded by
        ``guard_hooks``)."""
        from .builder import wrap
        from .lists import TupleVariable

        module, src = self.value, self.source
        arguments = TupleVariable(tuple(args))
        for key, hook in list(module._forward_pre_hooks.items()):
            result = wrap(tx.output, hook, f"{src}._forward_pre_hooks[{key}]").call_function(
                tx, [self, arguments], {})
            if not _is_none(result):
                arguments = result if isinstance(result, TupleVariable) else \
                    TupleVariable((result,))
        output = self.call_forward(tx, list(arguments.items), kwargs, hooked=False)
        for key, hook in list(module._forward_hooks.items()):
            result = wrap(tx.output, hook, f"{src}._forward_hooks[{key}]").call_function(
                tx, [self, arguments, output], {})
            if not _is_none(result):
                output = result
        return output
    # --8<-- [end:forward-hooks]

    def call_forward(self, tx: InstructionTranslator, args: list[VariableTracker],
                     kwargs: dict[str, VariableTracker], hooked: bool = True) -> VariableTracker:
        """``nn.Module.__call__`` itself: its forward hooks around the forward ([Note: forward
        hooks]; the caller checked that they are all it has), then the forward."""
        if hooked and (self.value._forward_hooks or self.value._forward_pre_hooks):
            return self.call_with_hooks(tx, args, kwargs)
        if "forward" in self.value.__dict__:  # patched on the instance, as eager finds it
            return self.var_getattr(tx, "forward").call_function(tx, args, kwargs)
        cls = type(self.value)
        forward = class_attribute(tx, self, cls, "forward")
        if forward is None:
            unimplemented(f"{cls.__qualname__} has no forward()")
        _guard_not_in_instance(tx, self, "forward")
        return forward.call_function(tx, args, kwargs)

    def call_method(self, tx, name, args, kwargs):
        if name in ("__len__", "__getitem__", "__contains__") and isinstance(
                self.value, _CONTAINERS):
            return _container_method(tx, self, name, args)
        if name in ("keys", "values", "items") and isinstance(self.value, torch.nn.ModuleDict):
            return _module_dict_view(tx, self, name)
        if name in ("parameters", "buffers", "children", "modules") and not kwargs:
            return _listing(tx, self, name)
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    def unpack(self, tx: InstructionTranslator) -> list[VariableTracker]:
        module = self.value
        if isinstance(module, (torch.nn.ModuleDict, torch.nn.ParameterDict)):
            _guard_len(tx, self)  # (its keys)
            return [ConstantVariable(k) for k in module.keys()]
        if isinstance(module, _CONTAINERS):
            _guard_len(tx, self)  # the loop was unrolled for this many items
            return [_child(tx, self, i) for i in range(len(module))]
        unimplemented(f"iterating over a {type(module).__qualname__}")

    def reconstruct(self, rt: Residual) -> Any:
        if self.source is not None:
            return rt.eval(self.source)
        return self.value

    def __repr__(self) -> str:
        return f"NNModuleVariable({type(self.value).__qualname__}, {self.source})"


def _child(tx: InstructionTranslator, parent: NNModuleVariable, key: Any) -> VariableTracker:
    from .builder import wrap_attribute

    try:
        parent.value[key]
    except (IndexError, KeyError, TypeError) as e:
        raise UserErrorInTrace(e) from e
    if isinstance(key, slice):  # ``self.layers[:n]``: the children, as a tuple
        from .lists import TupleVariable

        if not isinstance(parent.value, torch.nn.ModuleList):
            unimplemented("slicing a module container other than a ModuleList")
        _guard_len(tx, parent)
        return TupleVariable(tuple(_child(tx, parent, i)
                                   for i in range(len(parent.value))[key]))
    return wrap_attribute(tx, parent, parent.value, key, path=f"[{key!r}]")


def _container_method(tx, module_vt: NNModuleVariable, name: str, args):
    module = module_vt.value
    if name == "__len__":
        _guard_len(tx, module_vt)
        return ConstantVariable(len(module))
    if not args[0].is_python_constant():
        unimplemented(f"{type(module).__qualname__}.{name} with a traced key")
    key = args[0].as_python_constant()
    if name == "__contains__":
        _guard_len(tx, module_vt)
        return ConstantVariable(key in module)
    return _child(tx, module_vt, key)


def _guard_len(tx: InstructionTranslator, container: NNModuleVariable) -> None:
    """A container's type guard does not see ``append`` or ``del``: guard its length (a
    dict's keys: the trace unrolled over them)."""
    if container.source is not None:
        source, value = container.source, container.value
        if isinstance(value, (torch.nn.ModuleDict, torch.nn.ParameterDict)):
            keys = repr(list(value.keys()))
            tx.output.add_guards([Guard(source, "KEYS", f"list({source}.keys()) == {keys}")])
        else:
            tx.output.add_guards([Guard(source, "LEN", f"len({source}) == {len(value)}")])


def _guard_not_in_instance(tx: InstructionTranslator, module_vt: NNModuleVariable,
                           name: str) -> None:
    """The trace took ``name`` from the class: another instance must not shadow it."""
    if module_vt.source is not None:
        source = module_vt.source
        tx.output.add_guards([Guard(source, "HASATTR", f"{name!r} not in {source}.__dict__")])


def _module_dict_view(tx, module_vt: NNModuleVariable, name: str):
    from .lists import TupleVariable

    keys = list(module_vt.value.keys())
    _guard_len(tx, module_vt)
    if name == "keys":
        return TupleVariable(tuple(ConstantVariable(k) for k in keys))
    values = [_child(tx, module_vt, k) for k in keys]
    if name == "values":
        return TupleVariable(tuple(values))
    return TupleVariable(tuple(TupleVariable((ConstantVariable(k), v))
                               for k, v in zip(keys, values)))


def _listing(tx, module_vt: NNModuleVariable, name: str):
    """``self.parameters()`` and friends: every item fetched by its dotted path."""
    from .builder import wrap
    from .iter import ListIteratorVariable

    module = module_vt.value
    if name in ("parameters", "buffers"):
        named = getattr(module, f"named_{name}")()
    elif name == "children":
        named = module.named_children()
    else:
        named = module.named_modules()
    if module_vt.source is None:
        unimplemented(f"{name}() of a module without a source")
    source, items = module_vt.source, []
    for path, value in named:
        parts = "".join(f"[{int(p)}]" if p.isdigit() else f".{p}" for p in path.split(".") if p)
        items.append(wrap(tx.output, value, f"{source}{parts}"))
    lister = name if name in ("children", "modules") else f"named_{name}"
    tx.output.add_guards([Guard(source, "LEN",  # each item is guarded by its own source
                                f"len(list({source}.{lister}())) == {len(items)}")])
    return ListIteratorVariable(tuple(items))


_IN_PLACE_OPERATORS = {operator.iadd, operator.isub, operator.imul, operator.itruediv,
                       operator.ifloordiv, operator.imod, operator.ipow, operator.iand,
                       operator.ior, operator.ixor, operator.ilshift, operator.irshift}


def _stores_itself(value: VariableTracker, current: VariableTracker) -> bool:
    """Whether ``module.buf = value`` stores back the tensor ``module.buf`` already is: the
    result of an in-place operator on it (``self.steps += 1`` compiles to an in-place add,
    then an attribute store of its result, which is the same tensor), or of an op that wrote
    its result into it (spectral norm's power iteration: ``self._u = F.normalize(...,
    out=self._u)``)."""
    from .tensor import TensorVariable

    if not (isinstance(value, TensorVariable) and isinstance(current, TensorVariable)):
        return False
    node, target = value.proxy.node, current.proxy.node
    if node is target or node.kwargs.get("out") is target:
        return True
    in_place = node.target in _IN_PLACE_OPERATORS or (
        node.op == "call_method" and str(node.target).endswith("_"))
    return in_place and bool(node.args) and node.args[0] is target
