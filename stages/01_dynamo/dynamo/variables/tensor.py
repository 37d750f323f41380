"""TensorVariable: a tensor inside the graph being built.

Input: an fx Proxy (the node that computes the tensor at run time), its
example value (a meta tensor with the right sizes, strides, dtype and
requires_grad) and its device. Output: graph nodes for method calls and
view-like attributes (``x.sum(dim=1)``, ``x.T``), trace-time constants for
metadata (``x.shape``, ``x.dtype``), and ``unimplemented`` for anything that
needs the tensor's data (``x.item()``).
Chapter: book/docs/dynamo.md ("Tensors and example values").
"""

from __future__ import annotations

import dataclasses
import operator
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from ..exc import UserErrorInTrace, unimplemented
from ..shapes import SymTypes
from ..sym_node import has_symbolic_sizes
from .base import VariableTracker
from .constant import ConstantVariable
from .misc import MethodVariable

if TYPE_CHECKING:
    from ..symbolic_convert import InstructionTranslator

# Metadata the meta example knows exactly: folded into constants.
_CONSTANT_ATTRS = frozenset({
    "shape", "dtype", "ndim", "requires_grad", "is_leaf", "layout", "is_sparse",
    "is_quantized", "itemsize", "nbytes", "is_nested", "is_sparse_csr", "is_mkldnn",
})
# Attributes that are new tensors (views): recorded as getattr nodes.
_TENSOR_ATTRS = frozenset({"T", "mT", "H", "mH", "real", "imag"})
# The example lives on "meta", so device questions are answered from ``device``.
_DEVICE_ATTRS = {
    "device": lambda d: d,
    "is_cuda": lambda d: d.type == "cuda",
    "is_cpu": lambda d: d.type == "cpu",
    "is_meta": lambda d: d.type == "meta",
    "is_mps": lambda d: d.type == "mps",
}
# Methods whose answer depends on the tensor's values or on autograd state
# outside the graph. [Note: data-dependent] They break the graph: the part
# before runs compiled, the call itself runs in Python, and a resume function
# continues (resume_execution.py).
_DATA_DEPENDENT_METHODS = frozenset({
    "item", "tolist", "numpy", "data_ptr", "untyped_storage", "storage", "backward",
    "register_hook", "__bool__", "__int__", "__float__", "__index__",
})
# Of those, the ones a 0-d tensor of known value answers at trace time: [Note: constant tensors]
_KNOWN_NUMBER_METHODS = frozenset({"item", "tolist", "__int__", "__index__"})


@dataclasses.dataclass(frozen=True, eq=False)
class TensorVariable(VariableTracker):
    proxy: torch.fx.Proxy
    example: torch.Tensor  # on the meta device; see [Note: example values]
    device: torch.device  # the device the real tensor lives on
    cls: type = torch.Tensor  # torch.nn.Parameter for parameters
    # every element lies in [low, high], when an op promises it: [Note: value bounds]
    bounds: tuple[float, float] | None = None
    # the example's version counter when ``bounds`` were set: a write since makes them stale
    bounds_version: int = 0

    def python_type(self) -> type:
        return self.cls

    def truth(self, tx: InstructionTranslator) -> bool:
        """``if t:`` on a one-element tensor whose value is known (a comparison decided by
        its operand's bounds); any other tensor's truth needs its data (a break)."""
        bounds = self.known_bounds()
        if bounds is not None and bounds[0] == bounds[1] \
                and isinstance(self.example.numel(), int) and self.example.numel() == 1:
            return bool(bounds[0])
        return super().truth(tx)

    def known_bounds(self) -> tuple[float, float] | None:
        """``bounds``, unless the tensor was written in place since they were set (through
        itself or any view: they share the example's version counter) [Note: value bounds]."""
        if self.bounds is None or _version(self.example) != self.bounds_version:
            return None
        return self.bounds

    def known_number(self) -> int | float | None:
        """The value of a 0-d tensor whose value is known: [Note: constant tensors]."""
        bounds = self.known_bounds()
        if bounds is None or bounds[0] != bounds[1] or self.example.ndim != 0:
            return None
        return bounds[0]

    def known_index(self) -> int | None:
        """The value of a 0-d integer tensor whose value is known, which is what
        ``operator.index`` of it gives in eager: [Note: constant tensors]."""
        if not _is_integer(self.example.dtype):
            return None
        return self.known_number()

    def as_proxy(self) -> Any:
        return self.proxy

    def as_example(self) -> Any:
        return self.example

    def var_getattr(self, tx: InstructionTranslator, name: str) -> VariableTracker:
        if name == "shape" and has_symbolic_sizes(self.example):
            return self.call_method(tx, "size", [], {})  # a tuple of symbolic sizes
        if name in _CONSTANT_ATTRS:
            return ConstantVariable(_specialized(getattr(self.example, name)))
        if name in _DEVICE_ATTRS:
            return ConstantVariable(_DEVICE_ATTRS[name](self.device))
        if name in _TENSOR_ATTRS:
            name_arg = ConstantVariable(name)
            return tx.output.create_op("call_function", getattr, [self, name_arg], {})
        if callable(getattr(torch.Tensor, name, None)):
            return MethodVariable(self, name)
        if not hasattr(torch.Tensor, name):
            try:  # the user's AttributeError, raised by eager too
                getattr(self.example, name)
            except AttributeError as e:
                raise UserErrorInTrace(e) from e
        unimplemented(f"reading tensor attribute .{name} is not supported yet")

    def call_method(
        self, tx: InstructionTranslator, name: str, args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        if name in _KNOWN_NUMBER_METHODS and not args and not kwargs:
            value = (self.known_number() if name in ("item", "tolist")
                     else self.known_index())  # [Note: constant tensors]
            if value is not None:
                return ConstantVariable(value)
        if name in _DATA_DEPENDENT_METHODS:
            unimplemented(
                f"Tensor.{name}() needs the tensor's data, which a graph does not have "
                "at trace time [Note: data-dependent]"
            )
        if name == "__setitem__" and len(args) == 2 and not kwargs:
            from .builtin import _masked_write  # (builtin imports this module)

            written = _masked_write(tx, self, *args)  # [Note: a masked write with a gradient]
            if written is not None:
                return written
        if name in _SHAPE_IN_PLACE and self.source is None:
            return _reshaped_in_place(tx, self, _SHAPE_IN_PLACE[name], args, kwargs)
        if name == "get_device" and not args and not kwargs:
            return ConstantVariable(-1 if self.device.type == "cpu" else self.device.index)
        if name in _SIZE_METHODS and any(_holds_tensor(a) for a in [*args, *kwargs.values()]):
            # ``x.view(b, torch.div(n, w, rounding_mode="trunc") + 1, w)`` (Longformer): a
            # size read from a tensor's data, which the graph cannot know: a break here,
            # where the traced graph would have failed in aotautograd and the whole frame
            # run eagerly [Note: data-dependent]
            unimplemented(f"Tensor.{name}() with a size that is a tensor's value")
        return tx.output.create_op("call_method", name, [self, *args], kwargs)

    def store_attr(self, tx: InstructionTranslator, name: str, value: VariableTracker) -> None:
        if name != "requires_grad" or type(constant_or_none(value)) is not bool:
            unimplemented(f"setting attribute .{name} on a tensor (only .requires_grad = "
                          "True or False is supported)")
        _set_requires_grad(tx, self, value.as_python_constant())

    def has_symbolic_dim(self, dim: int) -> bool:
        return self.example.ndim > dim and isinstance(self.example.shape[dim], torch.SymInt)

    def unpack(self, tx: InstructionTranslator) -> list[VariableTracker]:
        if self.example.ndim == 0:
            raise UserErrorInTrace(TypeError("iteration over a 0-d tensor"))
        getitem = [ConstantVariable(i) for i in range(self.example.shape[0])]
        return [tx.output.create_op("call_function", operator.getitem, [self, i], {})
                for i in getitem]

    def reconstruct(self, rt: Any) -> Any:
        if self.source is not None:
            return rt.eval(self.source)  # an input: the caller's own tensor object
        return rt.tensor(self.proxy.node)

    def __repr__(self) -> str:
        shape = tuple(self.example.shape)
        return f"TensorVariable({self.proxy.node.name}, {self.example.dtype}, {shape})"


# --8<-- [start:shape-in-place]
# [Note: a shape changed in place]
# ``context.unsqueeze_(2)`` (BigBird's attention, five times a layer) changes a tensor's shape,
# not its values: afterwards the same Python object is a view of its old self, and every
# name bound to it sees the new shape. In a graph that is an in-place op whose result has
# another shape than the tensor it writes, which a functional graph cannot express
# (aotautograd's functionalization refused it, and the whole frame ran eagerly). For a tensor
# the frame computed, dynamo knows every reference to it: the stack, the locals of each frame
# being traced, the containers and attributes that hold its tracker. So the op is recorded as
# its out-of-place view (``unsqueeze``), and that view's tracker takes the old one's place
# everywhere (``replace_all``), which is what the object itself does in eager. Views made
# before keep their own shapes and still share the storage, as in eager. A graph input's
# shape belongs to the caller, who would have to see it change after the call: that stays
# an in-place op in the graph, and aotautograd still refuses it.
_SHAPE_IN_PLACE = {"unsqueeze_": "unsqueeze", "squeeze_": "squeeze", "transpose_": "transpose",
                   "t_": "t", "swapdims_": "swapdims", "swapaxes_": "swapaxes"}


def _reshaped_in_place(tx: InstructionTranslator, tensor: TensorVariable, view: str,
                       args: list[VariableTracker], kwargs: dict[str, VariableTracker],
                       ) -> VariableTracker:
    new = tx.output.create_op("call_method", view, [tensor, *args], kwargs)
    tx.replace_all(tensor, new)
    return new
# --8<-- [end:shape-in-place]


# --8<-- [start:new-leaf]
# [Note: a tensor made a leaf]
# ``hidden_states = input_values[:, None]`` then ``hidden_states.requires_grad = True``: SEW's
# and Wav2Vec2-Conformer's feature encoders do this in training (for gradient checkpointing),
# and the attribute write broke the graph. Eager allows it only on a leaf (a tensor without a
# ``grad_fn``, like SEW's, which does not require grad yet): the tensor becomes a leaf that
# requires grad, whose ``.grad`` the backward fills, and autograd records what is computed
# from it from then on. In the graph that is one
# op, ``new_leaf``: the tensor detached (no gradient flows back past it, as in eager, where
# none was recorded) and made to require grad, so aotautograd's trace records the ops after
# it and their gradients reach the parameters they use. Only the gradient of the leaf itself
# is lost: aotautograd takes gradients for the graph's inputs, not for a leaf born inside.
# That is invisible as long as the tensor stays inside the frame. If it escapes (returned,
# stored in an attribute or a global, or alive at a graph break), the caller would see a
# tensor with a ``grad_fn`` and no ``.grad``; so then the frame is traced again with a graph
# break at the write (at the call that leads to it, when it happens in a callee), as for
# [Note: a break inside a callee is traced again]. Left as they were: a graph input (the
# caller's tensor, whose flag the caller would have to see change), ``requires_grad =
# False`` (a value the graph would have to stop recording), and a tensor autograd recorded
# (eager raises). One more case breaks the same way: a graph none of whose inputs and
# parameters requires grad is compiled by aotautograd for inference, so its outputs would not
# require grad, where eager's do through the new leaf (SEW sets the flag only while its
# encoder's weights train, so it keeps one graph).
def new_leaf(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor.requires_grad = True`` as a graph op: a new leaf, cut from the tensor's past."""
    return tensor.detach().requires_grad_(True)


def _set_requires_grad(tx: InstructionTranslator, tensor: TensorVariable, flag: bool) -> None:
    if flag == tensor.example.requires_grad and tensor.example.is_leaf:
        return  # nothing changes (an input's flag was guarded)
    if tensor.source is not None:
        unimplemented("setting .requires_grad on a graph input (the caller's tensor)")
    if not flag or not tensor.example.is_leaf:
        unimplemented(f"setting .requires_grad = {flag} on a tensor that autograd recorded "
                      "or that requires grad")
    leaf = tx.output.create_op("call_function", new_leaf, [tensor], {})
    tx.output.new_leaves[leaf.proxy.node] = tx.break_at_root_step(
        "setting .requires_grad = True on a tensor that leaves the frame")
    tx.replace_all(tensor, leaf)
# --8<-- [end:new-leaf]


def constant_or_none(value: Any) -> Any:
    """A tracker's constant value, None if it has none; a plain value (a default argument
    that no tracker wraps) is its own."""
    if not isinstance(value, VariableTracker):
        return value
    return value.as_python_constant() if value.is_python_constant() else None


# --8<-- [start:value-bounds]
# [Note: value bounds]
# ``if torch.rand([]) < self.layerdrop:`` decides, in training, whether BART skips a layer
# (transformers 5.17). A branch on a tensor's value is a graph break, and this one sits in
# the loop over the layers, so the resume function took the remaining layers and was
# compiled again at every layer, until the recompile limit. But the config's layerdrop is
# 0.0, and torch.rand promises values in [0, 1): ``rand < 0.0`` is False whatever it draws.
# So a tracker may carry bounds that every element of its tensor keeps, from the op that made
# it (only torch.rand and rand_like promise any); comparing a bounded tensor with a number
# that lies outside the bounds gives a tensor that is all True or all False, bounds (1, 1)
# or (0, 0), and ``if`` on a one-element one is decided at trace time. The draw stays in the
# graph, as in eager; the number was guarded where it was read (``self.layerdrop == 0.0``).
# Inside the bounds (``rand < 0.5``) nothing is known, and the branch still breaks.
# Bounds hold until the tensor is written in place (``r.mul_(5)``, through any view): the
# tracker records its example's version counter, and a later version makes them stale.
_COMPARISONS = {
    # op: (every value in [low, high] satisfies ``value op c``, none does)
    operator.lt: (lambda lo, hi, c: hi < c, lambda lo, hi, c: lo >= c),
    operator.le: (lambda lo, hi, c: hi <= c, lambda lo, hi, c: lo > c),
    operator.gt: (lambda lo, hi, c: lo > c, lambda lo, hi, c: hi <= c),
    operator.ge: (lambda lo, hi, c: lo >= c, lambda lo, hi, c: hi < c),
}
_FLIPPED = {operator.lt: operator.gt, operator.le: operator.ge,
            operator.gt: operator.lt, operator.ge: operator.le}


def value_bounds(target: Any, args: list[VariableTracker], example: Any
                 ) -> tuple[float, float] | None:
    """The bounds of the result of ``target(*args)``, when the op promises any."""
    if not isinstance(example, torch.Tensor):
        return None
    if target in (torch.rand, torch.rand_like) and example.dtype.is_floating_point:
        return (0.0, 1.0)  # [0, 1), closed here: the bounds only need to hold
    if target is torch.tensor or target in _EXACT_ARITHMETIC:
        return _exact_bounds(target, args, example)  # [Note: constant tensors]
    if target in _COMPARISONS and len(args) == 2:
        (a, b), op = args, target
        if not isinstance(a, TensorVariable):
            (a, b), op = (b, a), _FLIPPED[target]  # ``c > t`` is ``t < c``
        bounds = a.known_bounds() if isinstance(a, TensorVariable) else None
        if bounds is None or not (isinstance(b, ConstantVariable)
                                  and type(b.value) in (int, float)):
            return None
        always, never = _COMPARISONS[op]
        if always(*bounds, b.value):
            return (1, 1)
        if never(*bounds, b.value):
            return (0, 0)
    return None
# --8<-- [end:value-bounds]


def with_bounds(result: VariableTracker, bounds: tuple[float, float] | None
                ) -> VariableTracker:
    """``result`` carrying ``bounds``, valid until its tensor is next written in place."""
    if bounds is None or not isinstance(result, TensorVariable) \
            or _version(result.example) is None:
        return result
    return result.clone(bounds=bounds, bounds_version=_version(result.example))


def _version(example: torch.Tensor) -> int | None:
    """The version counter every in-place write bumps (views share their base's). An
    inference tensor (traced under ``torch.inference_mode()``) has none, so it gets no
    bounds: a write to it could not be seen."""
    try:
        return example._version
    except RuntimeError:
        return None


# --8<-- [start:constant-tensors]
# [Note: constant tensors]
# DeBERTa computes its attention span as ``span = torch.tensor(min(q_len, max_positions))``,
# a 0-d tensor made from a Python int, and then uses it where Python wants a number: as
# slice bounds (``rel[m - span : m + span]``) and as clamp's bounds (``torch.clamp(pos +
# span, 0, span * 2 - 1)``, whose overload takes Scalars, so eager calls ``.item()``). A
# graph has no tensor's value at trace time, so each of those was a graph break. But this
# tensor's value is no secret: it is the constant it was made from, which was guarded where
# it was read, like any constant. So ``torch.tensor(c)`` of an int or float ``c`` gets the
# exact bounds (v, v), v being the value the tensor holds (``c`` in its dtype); +, -, *, //
# and unary - keep them exact when every operand is such a tensor or a Python int and the
# result is an integer tensor, the new value computed by the same op on real CPU tensors
# (so overflow and rounding are eager's). Where such an integer tensor is used as a number
# (slice bounds, ``int()``, ``operator.index``, ``range()``, ``.item()``, a Scalar argument)
# the trace uses the number, as ``if`` already does with a known truth value. The tensor
# itself stays in the graph. In-place writes (``t += 1``, ``t.fill_(2)``, a write through a
# view) bump the version counter of the example, which the bounds recorded: from then on
# they are stale and ignored, and the use breaks the graph as before.
_EXACT_ARITHMETIC = frozenset({operator.add, operator.sub, operator.mul, operator.floordiv,
                               operator.neg, operator.pos})


def _exact_bounds(target: Any, args: list[VariableTracker], example: torch.Tensor
                  ) -> tuple[float, float] | None:
    if example.ndim != 0:
        return None
    if target is torch.tensor:  # (dtype= and device= came as kwargs: the example has them)
        if len(args) != 1 or not (isinstance(args[0], ConstantVariable)
                                  and type(args[0].value) in (int, float)):
            return None
        if not (_is_integer(example.dtype) or example.dtype.is_floating_point):
            return None
        operands = [torch.tensor(args[0].value, dtype=example.dtype, device="cpu")]
        target = operator.pos
    elif _is_integer(example.dtype):
        operands = [_exact_operand(a) for a in args]
    else:
        return None  # a float result: rounding could differ from the device's
    if any(o is None for o in operands):
        return None
    try:
        value = target(*operands)
    except Exception:  # an integer division by zero: eager's business, at run time
        return None
    if value.dtype != example.dtype:
        return None
    return (value.item(), value.item())


def _exact_operand(value: VariableTracker) -> torch.Tensor | int | None:
    if isinstance(value, ConstantVariable) and type(value.value) is int:
        return value.value
    if isinstance(value, TensorVariable) and value.known_index() is not None:
        return torch.tensor(value.known_index(), dtype=value.example.dtype, device="cpu")
    return None


def known_index_or_self(value: VariableTracker) -> VariableTracker:
    """A 0-d integer tensor of known value as that number, where Python asks for one."""
    if isinstance(value, TensorVariable) and value.known_index() is not None:
        return ConstantVariable(value.known_index())
    return value


def known_scalars(args: list[VariableTracker], kwargs: dict[str, VariableTracker]
                  ) -> tuple[list, dict] | None:
    """The arguments with each 0-d tensor of known value as its number (what a Scalar
    overload reads with ``.item()``); None if there is none."""
    def number(v: VariableTracker) -> VariableTracker:
        known = v.known_number() if isinstance(v, TensorVariable) else None
        return v if known is None else ConstantVariable(known)

    new_args, new_kwargs = [number(a) for a in args], {k: number(v) for k, v in kwargs.items()}
    if all(a is b for a, b in zip(new_args, args)) and \
            all(new_kwargs[k] is kwargs[k] for k in kwargs):
        return None
    return new_args, new_kwargs


def _is_integer(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype is not torch.bool
# --8<-- [end:constant-tensors]


def _specialized(value: Any) -> Any:
    """A metadata attribute that depends on a symbolic size (``x.nbytes``) as a constant:
    the size is guarded to its hint, so the constant is right whenever the graph is reused."""
    if not isinstance(value, SymTypes):
        return value
    return value.node.guard_bool() if value.node.pytype is bool else value.node.guard_int()


_SIZE_METHODS = frozenset({"view", "reshape", "expand", "repeat", "new_zeros", "new_ones",
                           "new_empty", "new_full", "tile", "unflatten", "resize_"})


def _holds_tensor(value: VariableTracker) -> bool:
    """A tensor, or a list or tuple with one among its items (a size given as a tensor)."""
    from .lists import BaseListVariable

    if isinstance(value, TensorVariable):
        return True
    return isinstance(value, BaseListVariable) and any(isinstance(v, TensorVariable)
                                                       for v in value.items)
