"""Decompositions of activation functions and of the ``*_backward`` ops autograd calls for
them.

Input: an activation's arguments (a tensor, hyper-parameters as Python numbers); for a
backward op, the incoming gradient and the forward's input (or output).
Output: the activation (or the gradient with respect to its input), built from prims.

Chapter: book/docs/primtorch.md ("Backward ops").

Each backward formula is the derivative of the forward formula next to it, written out by
hand. The tracer never differentiates a decomposition: autograd runs aten's own derivative
formulas, which call these ``*_backward`` ops, and those are decomposed in turn. Every
function computes in the computation dtype (float32 for bf16/fp16, [Note: type
promotion]) and rounds once at the end.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Number

import torch

from primtorch import prims
from primtorch.prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as KIND
from primtorch.prims_common import elementwise_args, scalar_like, to_dtype
from primtorch.registry import register_decomposition

aten = torch.ops.aten


def pointwise(fn: Callable, *args: torch.Tensor, kind: KIND = KIND.INT_TO_FLOAT):
    """``fn`` applied to ``args`` promoted (``kind``), broadcast and widened to the
    computation dtype; the result is rounded to the op's result dtype once."""
    ready, result_dtype = elementwise_args(*args, kind=kind)
    return to_dtype(fn(*ready), result_dtype)


def c(like: torch.Tensor, value: Number) -> torch.Tensor:
    """The number ``value`` as a tensor shaped like ``like`` (a ``full``)."""
    return scalar_like(like, value)


def _sigmoid(x: torch.Tensor) -> torch.Tensor:
    one = c(x, 1)
    return prims.div(one, prims.add(one, prims.exp(prims.neg(x))))


@register_decomposition(aten.relu.default)
def relu(a: torch.Tensor) -> torch.Tensor:
    # maximum, not where(a > 0, ...): relu(nan) is nan.
    return prims.maximum(a, c(a, 0))


@register_decomposition(aten.threshold.default)
def threshold(a: torch.Tensor, threshold: Number, value: Number) -> torch.Tensor:
    return pointwise(lambda x: prims.where(prims.le(x, c(x, threshold)), c(x, value), x), a,
                     kind=KIND.DEFAULT)


@register_decomposition(aten.threshold_backward.default)
def threshold_backward(grad: torch.Tensor, a: torch.Tensor, threshold: Number):
    """relu's backward: the gradient passes where the input was above ``threshold``."""
    return pointwise(lambda g, x: prims.where(prims.le(x, c(x, threshold)), c(g, 0), g),
                     grad, a, kind=KIND.DEFAULT)


@register_decomposition(aten.sigmoid.default)
def sigmoid(a: torch.Tensor) -> torch.Tensor:
    return pointwise(_sigmoid, a)


@register_decomposition(aten.sigmoid_backward.default)
def sigmoid_backward(grad: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """d sigmoid = y (1 - y), in terms of the forward's output y."""
    return pointwise(lambda g, y: prims.mul(g, prims.mul(prims.sub(c(y, 1), y), y)), grad, out)


@register_decomposition(aten.tanh_backward.default)
def tanh_backward(grad: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """d tanh = 1 - y**2, in terms of the forward's output y."""
    return pointwise(lambda g, y: prims.mul(g, prims.sub(c(y, 1), prims.mul(y, y))), grad, out)


@register_decomposition(aten.silu.default)
def silu(a: torch.Tensor) -> torch.Tensor:
    return pointwise(lambda x: prims.div(x, prims.add(c(x, 1), prims.exp(prims.neg(x)))), a)


@register_decomposition(aten.silu_backward.default)
def silu_backward(grad: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """d (x sigmoid(x)) = s (1 + x (1 - s)), s = sigmoid(x)."""
    def fn(g, x):
        s = _sigmoid(x)
        return prims.mul(g, prims.mul(s, prims.add(c(x, 1), prims.mul(x, prims.sub(c(x, 1), s)))))
    return pointwise(fn, grad, a)


# --8<-- [start:gelu]
_GELU_K = math.sqrt(2 / math.pi)  # tanh form: Phi(x) ~ (1 + tanh(k (x + 0.044715 x^3))) / 2


@register_decomposition(aten.gelu.default)
def gelu(a: torch.Tensor, *, approximate: str = "none") -> torch.Tensor:
    """x * Phi(x): exact, or the tanh approximation of GPT-2. See [Note: gelu with erfc]."""
    def fn(x):
        if approximate == "tanh":
            inner = prims.add(x, prims.mul(c(x, 0.044715), prims.mul(prims.mul(x, x), x)))
            phi = prims.add(c(x, 1), prims.tanh(prims.mul(c(x, _GELU_K), inner)))
        else:
            phi = _twice_phi(x, a.dtype)
        return prims.mul(prims.mul(c(x, 0.5), x), phi)
    return pointwise(fn, a)


def _twice_phi(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``1 + erf(x / sqrt 2)``; for 16-bit data, ``erfc(-x / sqrt 2)``.

    [Note: gelu with erfc]
    The normal distribution's Phi(x) is ``(1 + erf(x / sqrt 2)) / 2``, as eager computes
    it, or equally ``erfc(-x / sqrt 2) / 2``. For negative x erf is near -1 and ``1 + erf``
    keeps only the digits that survive the cancellation, where erfc computes the small
    number directly; and it is one function where the other form needs two (an erf
    accurate near 0 and near 1 is two approximations, and a Triton block computes both
    for every element). For bfloat16 and float16 data, whose kernels are compute-bound
    on an H200, we use erfc: gelu went from 74% to 94% of copy bandwidth ([Note: our own
    sin and erf]). float32 keeps eager's form: there libdevice's erfcf costs more than
    our erf, and the kernel is bound by memory either way.
    """
    if dtype in (torch.bfloat16, torch.float16):
        return prims.erfc(prims.mul(x, c(x, -math.sqrt(0.5))))
    return prims.add(c(x, 1), prims.erf(prims.mul(x, c(x, math.sqrt(0.5)))))


@register_decomposition(aten.gelu_backward.default)
def gelu_backward(grad: torch.Tensor, a: torch.Tensor, *, approximate: str = "none"):
    """d (x Phi(x)) = Phi(x) + x Phi'(x); Phi' is the normal density (erf form) or the
    derivative of the tanh approximation."""
    def fn(g, x):
        if approximate == "tanh":
            x2 = prims.mul(x, x)
            inner = prims.mul(c(x, _GELU_K), prims.add(x, prims.mul(c(x, 0.044715),
                                                                    prims.mul(x2, x))))
            t = prims.tanh(inner)
            d_inner = prims.mul(c(x, _GELU_K), prims.add(c(x, 1), prims.mul(c(x, 0.134145), x2)))
            d_tanh = prims.mul(prims.sub(c(x, 1), prims.mul(t, t)), d_inner)
            dx = prims.add(prims.mul(c(x, 0.5), prims.add(c(x, 1), t)),
                           prims.mul(prims.mul(c(x, 0.5), x), d_tanh))
        else:
            cdf = prims.mul(c(x, 0.5), _twice_phi(x, a.dtype))
            pdf = prims.mul(c(x, 1 / math.sqrt(2 * math.pi)),
                            prims.exp(prims.mul(c(x, -0.5), prims.mul(x, x))))
            dx = prims.add(cdf, prims.mul(x, pdf))
        return prims.mul(g, dx)
    return pointwise(fn, grad, a)
# --8<-- [end:gelu]


@register_decomposition(aten.softplus.default)
def softplus(a: torch.Tensor, beta: Number = 1, threshold: Number = 20) -> torch.Tensor:
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (no overflow)."""
    def fn(x):
        bx = prims.mul(x, c(x, beta))
        soft = prims.div(prims.log1p(prims.exp(bx)), c(x, beta))
        return prims.where(prims.gt(bx, c(x, threshold)), x, soft)
    return pointwise(fn, a)


@register_decomposition(aten.softplus_backward.default)
def softplus_backward(grad: torch.Tensor, a: torch.Tensor, beta: Number, threshold: Number):
    def fn(g, x):
        bx = prims.mul(x, c(x, beta))
        z = prims.exp(bx)
        return prims.where(prims.gt(bx, c(x, threshold)), g,
                           prims.mul(g, prims.div(z, prims.add(z, c(z, 1)))))
    return pointwise(fn, grad, a)


# [Note: log sigmoid's buffer]
# ``aten.log_sigmoid_forward`` returns the result and a buffer its backward may read: on the
# CPU a tensor the size of the input, on CUDA an empty one. As a library call that buffer
# was the size the meta kernel says, the CPU's, and a model with ``nn.LogSigmoid`` (or
# ``F.multilabel_soft_margin_loss``) crashed on the GPU when the wrapper checked it. The
# decomposition computes ``min(x, 0) - log1p(exp(-|x|))``, which neither overflows nor
# loses the small values, and a buffer like the device's kernel's (on CUDA empty; on the
# CPU, and on "meta" as its kernel says, ``exp(-|x|)``), which the backward never reads,
# so a graph that only hands it on drops it: d log sigmoid(x) = sigmoid(-x) = 1 / (1 +
# exp(x)).
@register_decomposition(aten.log_sigmoid_forward.default)
def log_sigmoid_forward(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    def fn(x):
        return prims.sub(prims.minimum(x, c(x, 0)),
                         prims.log1p(prims.exp(prims.neg(prims.abs(x)))))
    if a.device.type == "cuda":
        buffer = a.new_empty((0,))
    else:
        buffer = pointwise(lambda x: prims.exp(prims.neg(prims.abs(x))), a)
    return pointwise(fn, a), buffer


@register_decomposition(aten.log_sigmoid_backward.default)
def log_sigmoid_backward(grad: torch.Tensor, a: torch.Tensor,
                         buffer: torch.Tensor) -> torch.Tensor:
    return pointwise(lambda g, x: prims.div(g, prims.add(c(x, 1), prims.exp(x))), grad, a)


@register_decomposition(aten.leaky_relu.default)
def leaky_relu(a: torch.Tensor, negative_slope: Number = 0.01) -> torch.Tensor:
    return pointwise(lambda x: prims.where(prims.gt(x, c(x, 0)), x,
                                           prims.mul(x, c(x, negative_slope))),
                     a, kind=KIND.DEFAULT)


@register_decomposition(aten.leaky_relu_backward.default)
def leaky_relu_backward(grad: torch.Tensor, a: torch.Tensor, negative_slope: Number,
                        self_is_result: bool) -> torch.Tensor:
    return pointwise(lambda g, x: prims.where(prims.gt(x, c(x, 0)), g,
                                              prims.mul(g, c(g, negative_slope))),
                     grad, a, kind=KIND.DEFAULT)


def _relu6(x: torch.Tensor) -> torch.Tensor:
    return prims.minimum(prims.maximum(x, c(x, 0)), c(x, 6))


@register_decomposition(aten.hardsigmoid.default)
def hardsigmoid(a: torch.Tensor) -> torch.Tensor:
    """relu6(x + 3) / 6: a piecewise-linear sigmoid."""
    # BEGIN EXERCISE primtorch-hardsigmoid: relu6(x + 3) / 6 in prims, promoted like sigmoid
    return pointwise(lambda x: prims.div(_relu6(prims.add(x, c(x, 3))), c(x, 6)), a)
    # END EXERCISE primtorch-hardsigmoid


@register_decomposition(aten.hardsigmoid_backward.default)
def hardsigmoid_backward(grad: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    def fn(g, x):
        inside = prims.bitwise_and(prims.gt(x, c(x, -3)), prims.lt(x, c(x, 3)))
        return prims.where(inside, prims.div(g, c(g, 6)), c(g, 0))
    return pointwise(fn, grad, a)


@register_decomposition(aten.hardswish.default)
def hardswish(a: torch.Tensor) -> torch.Tensor:
    return pointwise(lambda x: prims.div(prims.mul(x, _relu6(prims.add(x, c(x, 3)))), c(x, 6)),
                     a)


@register_decomposition(aten.hardswish_backward.default)
def hardswish_backward(grad: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """0 below -3, g (x / 3 + 1/2) inside [-3, 3], g above."""
    def fn(g, x):
        inside = prims.mul(g, prims.add(prims.div(x, c(x, 3)), c(x, 0.5)))
        upper = prims.where(prims.le(x, c(x, 3)), inside, g)
        return prims.where(prims.lt(x, c(x, -3)), c(g, 0), upper)
    return pointwise(fn, grad, a)


@register_decomposition(aten.hardtanh.default)
def hardtanh(a: torch.Tensor, min_val: Number = -1, max_val: Number = 1) -> torch.Tensor:
    return pointwise(lambda x: prims.minimum(prims.maximum(x, c(x, min_val)), c(x, max_val)),
                     a, kind=KIND.DEFAULT)


@register_decomposition(aten.hardtanh_backward.default)
def hardtanh_backward(grad: torch.Tensor, a: torch.Tensor, min_val: Number, max_val: Number):
    def fn(g, x):
        outside = prims.bitwise_or(prims.le(x, c(x, min_val)), prims.ge(x, c(x, max_val)))
        return prims.where(outside, c(g, 0), g)
    return pointwise(fn, grad, a, kind=KIND.DEFAULT)


@register_decomposition(aten.elu.default)
def elu(a: torch.Tensor, alpha: Number = 1, scale: Number = 1, input_scale: Number = 1):
    """scale * x for x > 0, else alpha * scale * (exp(input_scale * x) - 1); selu and celu
    are elus with particular constants."""
    def fn(x):
        negative = prims.mul(prims.expm1(prims.mul(x, c(x, input_scale))), c(x, alpha * scale))
        return prims.where(prims.gt(x, c(x, 0)), prims.mul(x, c(x, scale)), negative)
    return pointwise(fn, a)


@register_decomposition(aten.elu_backward.default)
def elu_backward(grad: torch.Tensor, alpha: Number, scale: Number, input_scale: Number,
                 is_result: bool, self_or_result: torch.Tensor) -> torch.Tensor:
    def fn(g, v):
        if is_result:  # v is the output y: for y <= 0, dy/dx = input_scale (y + alpha scale)
            slope = prims.mul(prims.add(v, c(v, alpha * scale)), c(v, input_scale))
        else:
            slope = prims.mul(prims.exp(prims.mul(v, c(v, input_scale))),
                              c(v, input_scale * alpha * scale))
        return prims.where(prims.le(v, c(v, 0)), prims.mul(g, slope), prims.mul(g, c(g, scale)))
    return pointwise(fn, grad, self_or_result)


def _softplus1(x: torch.Tensor) -> torch.Tensor:
    return prims.where(prims.gt(x, c(x, 20)), x, prims.log1p(prims.exp(x)))


@register_decomposition(aten.mish.default)
def mish(a: torch.Tensor) -> torch.Tensor:
    return pointwise(lambda x: prims.mul(x, prims.tanh(_softplus1(x))), a)


@register_decomposition(aten.mish_backward.default)
def mish_backward(grad: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """d (x tanh(softplus(x))) = t + x sigmoid(x) (1 - t**2), t = tanh(softplus(x))."""
    def fn(g, x):
        t = prims.tanh(_softplus1(x))
        dt = prims.mul(prims.mul(x, _sigmoid(x)), prims.sub(c(x, 1), prims.mul(t, t)))
        return prims.mul(g, prims.add(t, dt))
    return pointwise(fn, grad, a)
