"""Which erfc a Triton kernel runs where its outputs are not all 16 bits: ours, if every value
made from it is rounded to bfloat16 or float16 before anything reads it; libdevice's if not.

Input: the printer's temporaries as it makes them (``new_var``), its casts, stores and
reductions. Output: the text of the kernel's ``erfc_rounded`` helper, once the body is
printed. A mixin of ``TritonKernel`` (codegen/triton.py), which calls ``erfc_rounded``.
Chapter: book/docs/inductor.md ("Code generation: Triton"), book/docs/performance.md.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from inductor.codegen.common import NARROW_FLOATS, CSEVariable
from inductor.codegen.triton_math import math_helper_sources

ERFC_ROUNDED = '''

@triton.jit
def erfc_rounded(x):
    """erfc of a value the kernel rounds to 16 bits before it is read: [Note: an erfc
    rounded before it is read]."""
    return {call}
'''
_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")  # the names an expression mentions


class RoundedErfc:
    """Follows the values made from ``erfc_rounded`` through a kernel being printed."""

    # --8<-- [start:erfc-rounded]
    # [Note: an erfc rounded before it is read]
    # Our erfc is accurate to 8e-5 relative, a fiftieth of a bfloat16 step: enough for a
    # value that is rounded to 16 bits before anything reads it, and such kernels run it
    # because libdevice's erfcf is about 40 instructions an element, which a 16-bit kernel
    # cannot hide behind its memory traffic. "Every output is 16 bits" was the first test
    # for that. A split column sum breaks it: the gradient of a bfloat16 GELU is rounded to
    # bfloat16 and stored, but the kernel also stores the chunk's float32 partial sums, of
    # the rounded values. So the printer follows the value instead: every temporary made
    # from an ``erfc_rounded`` is unrounded until a cast to bfloat16 or float16 rounds it;
    # if an unrounded value is stored to a wider buffer, reduced, or turned into an integer
    # or a bool (a comparison), the kernel needs the exact erfc, and ``erfc_rounded`` is
    # libdevice's; otherwise it is ours. In mlp_train's bfloat16 step on an H200 the four
    # kernels this reaches (the GELU gradients with their bias sums, the layer norm's
    # statistics and the loss, which recompute a GELU) went from 250 to 150 us.
    @property
    def unrounded(self) -> set[str]:
        """Temporaries holding an ``erfc_rounded`` value not yet rounded to 16 bits."""
        return self.__dict__.setdefault("_unrounded", set())

    def reads_unrounded(self, value: CSEVariable) -> None:
        """``value`` reaches something that is not a rounding (a wide store, a reduction):
        if it holds an unrounded erfc, the kernel's erfc must be the exact one."""
        if value.name in self.unrounded:
            self.erfc_exact = True

    def new_var(self, expr: str, dtype: torch.dtype) -> CSEVariable:
        var = super().new_var(expr, dtype)
        if self.unrounded and not self.unrounded.isdisjoint(_NAME.findall(expr)):
            if dtype.is_floating_point:
                self.unrounded.add(var.name)
            else:
                self.erfc_exact = True
        return var

    def to_dtype(self, x: CSEVariable, dtype: torch.dtype) -> CSEVariable:
        var = super().to_dtype(x, dtype)
        if dtype in NARROW_FLOATS and var.name != x.name:  # rounded: what reads it is safe
            self.unrounded.discard(var.name)
        return var

    def store(self, name: str, index: Any, value: CSEVariable, mode: str | None = None) -> None:
        if self.buffers[name].get_dtype() not in NARROW_FLOATS:
            self.reads_unrounded(value)
        super().store(name, index, value, mode)

    def reduction(self, dtype: torch.dtype, reduction_type: str, value: CSEVariable,
                  first: Any = None) -> CSEVariable:
        self.reads_unrounded(value)
        return super().reduction(dtype, reduction_type, value, first)

    def erfc_rounded_source(self) -> str:
        from inductor.codegen.triton import interpreting

        if getattr(self, "erfc_exact", False):
            call = "torch_op('erfc', x)" if interpreting() else "libdevice.erfc(x)"
        else:
            self.helpers.update(math_helper_sources("erfc", interpreting()))
            call = "erfc_narrow(x)"
        return ERFC_ROUNDED.format(call=call)
    # --8<-- [end:erfc-rounded]
