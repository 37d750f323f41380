"""Composite ATen ops in Python, for tensors with symbolic sizes.

Input: a call of ``torch.matmul`` (or ``@``) or ``F.scaled_dot_product_attention`` on
tensors whose sizes are SymInts, made while ``SymbolicComposites`` is active. Output: the
same result, computed from ops that reach ``__torch_dispatch__`` one by one (``mm``, ``bmm``,
``reshape``, ``softmax``, ...). Chapter: book/docs/dynamic-shapes.md ("Meta tensors with
symbolic sizes").

# [Note: composite ops and symbolic sizes]
# Some ATen ops have no kernel of their own: they are *CompositeImplicitAutograd*, C++ that
# calls other ops (``matmul`` picks ``mm``, ``bmm`` or a fold into ``mm`` by looking at the
# ranks; attention picks one of its fused kernels). That C++ runs above every dispatch
# mode, so neither our meta mode (dynamo) nor the tracer (aotautograd) gets a say, and
# whether it copes with symbolic sizes depends on the release: PyTorch 2.11's ``matmul``
# asks for a plain ``numel()`` ("Cannot call numel() on tensor with symbolic
# sizes/strides") and its attention trips an internal assert; 2.13 handles both. PyTorch's
# own tracer meets the same C++ and answers with Python versions of these ops, installed
# through its "Python dispatcher". We do the smaller thing: a ``TorchFunctionMode`` that,
# only while sizes are symbolic, sends these functions to the Python versions below. The
# matmul is written with the ops the C++ would have called; attention becomes its math
# path (matmuls and a softmax, which inductor fuses), not a fused library kernel. A static
# trace never enters this module.
#
# [Note: library attention with symbolic sizes]
# The math path costs a decoding GPT on a GPU twice over: it writes the scores (B, H, L, L)
# to memory and reads them back, and each layer launches six more kernels and library calls
# (copies of q, k and v into the layouts ``bmm`` takes, the softmax, two ``bmm``s, the merge of
# the heads) where one fused kernel would do. So on CUDA, when no gradient is wanted, we call
# the memory-efficient attention kernel ourselves, as ATen's composite would have picked it:
# ``_scaled_dot_product_efficient_attention``, whose meta function (Python, in torch) copes
# with symbolic sizes because it only builds empty tensors. It reads q, k and v through their
# strides (the head split of ``qkv`` stays a view) and writes its output already in the
# (B, L, H, D) order the model transposes back to. We ask for it only in the cases tested on
# the H200 with PyTorch 2.11: the three float dtypes, head sizes that are a multiple of 8 up
# to 128, no mask beyond ``is_causal``. Training keeps the math path: the kernel's backward
# needs the log-sum-exp, whose meta size rounds the length up to 32 rows, and we have not
# tried that arithmetic on our SymInts. CPU tensors get ATen's CPU flash kernel
# ([Note: CPU attention with symbolic sizes]).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.overrides import TorchFunctionMode


def _prod(sizes: Any) -> Any:
    """The product of sizes (SymInts multiply into one expression)."""
    return math.prod(sizes, start=1)


# --8<-- [start:matmul]
def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.matmul`` by cases on the ranks, as ATen's composite does it."""
    if a.dim() == 0 or b.dim() == 0:
        raise RuntimeError("both arguments to matmul need to be at least 1D, but they are "
                           f"{a.dim()}D and {b.dim()}D")
    if a.dim() == 1 and b.dim() == 1:
        return torch.dot(a, b)
    if a.dim() <= 2 and b.dim() <= 2:  # vector-matrix cases go through mm and back
        out = torch.mm(a.unsqueeze(0) if a.dim() == 1 else a,
                       b.unsqueeze(1) if b.dim() == 1 else b)
        if a.dim() == 1:
            out = out.squeeze(0)
        return out.squeeze(-1) if b.dim() == 1 else out
    if a.dim() >= 3 and b.dim() <= 2:
        # fold the batch dims of `a` into its rows: one mm instead of a bmm
        rows = a.reshape(_prod(a.shape[:-1]), a.shape[-1])
        out = torch.mm(rows, b.unsqueeze(1) if b.dim() == 1 else b)
        return out.reshape(*a.shape[:-1], *([] if b.dim() == 1 else [b.shape[-1]]))
    # the general case: broadcast the batch dims, then one bmm
    a2 = a.unsqueeze(0) if a.dim() == 1 else a
    b2 = b.unsqueeze(-1) if b.dim() == 1 else b
    batch = torch.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    m, k, n = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    a3 = a2.expand(*batch, m, k).reshape(_prod(batch), m, k)
    b3 = b2.expand(*batch, k, n).reshape(_prod(batch), k, n)
    out = torch.bmm(a3, b3).reshape(*batch, m, n)
    if a.dim() == 1:
        out = out.squeeze(-2)
    return out.squeeze(-1) if b.dim() == 1 else out
# --8<-- [end:matmul]


def _rmatmul(b: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    return matmul(a, b)


# --8<-- [start:library-attention]
def library_attention_applies(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                              attn_mask: torch.Tensor | None) -> bool:
    """Whether attention with symbolic sizes can be one library kernel rather than its math
    path: [Note: library attention with symbolic sizes]."""
    tensors = (q, k, v)
    return (all(t.device.type == "cuda" and t.dim() == 4 and t.dtype == q.dtype
                for t in tensors)
            and q.dtype in (torch.float32, torch.float16, torch.bfloat16)
            and attn_mask is None
            and all(isinstance(t.shape[-1], int) and t.shape[-1] % 8 == 0
                    and t.shape[-1] <= 128 for t in tensors)
            and not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors)))
# --8<-- [end:library-attention]


# --8<-- [start:cpu-attention]
def cpu_flash_attention_applies(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                attn_mask: torch.Tensor | None) -> bool:
    """Whether attention with symbolic sizes on the CPU can be ATen's CPU flash kernel:
    [Note: CPU attention with symbolic sizes]. Only the sequence lengths may be symbolic."""
    tensors = (q, k, v)
    return (all(t.device.type == "cpu" and t.dim() == 4 and t.dtype == q.dtype
                and all(isinstance(n, int) for n in (*t.shape[:2], t.shape[-1]))
                and t.stride(-1) == 1 for t in tensors)
            and q.dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16)
            and attn_mask is None
            and q.shape[:2] == k.shape[:2] == v.shape[:2]
            and q.shape[-1] == k.shape[-1] == v.shape[-1])


# [Note: CPU attention with symbolic sizes]
# On the CPU, ATen's attention picks ``_scaled_dot_product_flash_attention_for_cpu``, a
# blocked kernel that skips the masked half of causal scores, and inductor keeps that op
# whole ([Note: attention on the CPU] in inductor). With symbolic sizes our composite took
# the math path instead, so the decoding GPT, whose graph is symbolic in the length from its
# second length on, ran our fused softmax between two ``bmm``s: at 64 tokens the softmax
# alone took 0.21 ms a layer on the CPU machine and the step lost to eager (0.89x at that
# length). The kernel's meta function only builds empty tensors, so it takes symbolic
# lengths; we call it where ATen's composite would choose it: no dropout, no mask but
# ``is_causal``, four dimensions of one dtype, equal batch, heads and head size, a
# contiguous last dimension. Its backward op is kept whole too, so training graphs get it.
# --8<-- [end:cpu-attention]


def efficient_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool,
                        scale: float | None) -> torch.Tensor:
    """ATen's memory-efficient attention kernel, its output only (no log-sum-exp, no
    dropout)."""
    return torch.ops.aten._scaled_dot_product_efficient_attention(
        q, k, v, None, False, 0.0, is_causal, scale=scale)[0]


def scaled_dot_product_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                 attn_mask: torch.Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None, enable_gqa: bool = False) -> Any:
    """Attention's math path: ``softmax(q @ k^T * scale + mask) @ v``. (PyTorch 2.11 trips
    an internal assert when its own SDPA meets symbolic meta tensors.) Dropout and grouped
    heads are left to ATen (NotImplemented), as is a symbolic head size, whose square root
    would be a symbolic float."""
    head = q.shape[-1]
    if dropout_p != 0.0 or enable_gqa or (scale is None and not isinstance(head, int)):
        return NotImplemented
    if library_attention_applies(q, k, v, attn_mask):
        return efficient_attention(q, k, v, is_causal, scale)
    if cpu_flash_attention_applies(q, k, v, attn_mask):
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, is_causal, scale=scale)[0]
    scale = 1.0 / math.sqrt(head) if scale is None else scale
    scores = matmul(q, k.transpose(-2, -1)) * scale
    if is_causal:  # position i sees keys 0..i, as torch's lower-triangular mask
        rows = torch.arange(q.shape[-2], device=q.device)
        keep = rows[:, None] >= torch.arange(k.shape[-2], device=q.device)[None, :]
        scores = torch.where(keep, scores, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = torch.where(attn_mask, scores, float("-inf"))
        else:
            scores = scores + attn_mask
    return matmul(torch.softmax(scores, dim=-1), v)


# What each public spelling of the op becomes, by name: ``torch.matmul`` and
# ``Tensor.matmul`` arrive as themselves, but ``a @ b`` arrives as the plain function inside
# ``Tensor.__matmul__``'s decorator, so the function object is not a reliable key. Only
# torch's own API reaches ``__torch_function__``, so the name is.
OVERRIDES = {
    "matmul": matmul,
    "__matmul__": matmul,
    "__rmatmul__": _rmatmul,
    "scaled_dot_product_attention": scaled_dot_product_attention,
}


SHORT_SEQUENCE = 256


def short_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                    is_causal: bool = False, scale: float | None = None,
                    enable_gqa: bool = False) -> Any:
    """Static sizes: the library attention of [Note: library attention with symbolic
    sizes] for sequences of at most ``SHORT_SEQUENCE``, else ATen's own choice
    (NotImplemented). [Note: short attention]"""
    short = all(isinstance(n, int) and n <= SHORT_SEQUENCE for n in (q.shape[-2], k.shape[-2]))
    if not short or dropout_p != 0.0 or enable_gqa or not library_attention_applies(
            q, k, v, attn_mask):
        return NotImplemented
    return efficient_attention(q, k, v, is_causal, scale)


# [Note: short attention]
# With static sizes ATen picks the attention kernel itself, and for bfloat16 on an H200 it
# picks cuDNN's. For a decoding step at length 4 that choice made our static graph (the first
# length compiles static) 0.88x eager while the symbolic graph, which calls memory-efficient
# attention, ran 1.07-1.14x at every other length. A step that short is bound by the host, so
# we take it that cuDNN's call costs the host more (we did not time the two calls alone). A
# static trace that wants no gradient now also takes the memory-efficient kernel for
# sequences of at most 256, and the length-4 step ran 1.13x eager; longer sequences
# (gpt_infer's 1024, where the GPU time of the kernel matters) keep ATen's choice.
STATIC_OVERRIDES = {"scaled_dot_product_attention": short_attention}


class SymbolicComposites(TorchFunctionMode):
    """Routes the composite ops of ``OVERRIDES`` to their Python versions. Enter it only
    while tracing with symbolic sizes ([Note: composite ops and symbolic sizes])."""

    def __init__(self, overrides: dict | None = None) -> None:
        super().__init__()
        self.overrides = OVERRIDES if overrides is None else overrides

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        override = self.overrides.get(getattr(func, "__name__", None))
        if override is not None and "out" not in kwargs:  # ``out=``: leave it to ATen
            try:
                out = override(*args, **kwargs)
            except TypeError:  # a spelling our version does not take
                out = NotImplemented
            if out is not NotImplemented:
                return out
        return func(*args, **kwargs)
