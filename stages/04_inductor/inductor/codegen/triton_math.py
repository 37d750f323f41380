"""Our own float32 sin, cos, erf and erfc for Triton kernels, and the Philox random-number
generator: the helpers' source text.

Input: the name of a helper a kernel calls (``sin_cos``, ``erf``, ``erfc``), and whether the
kernel runs under Triton's interpreter.
Output: the module-level functions to print above the kernel (``math_helper_sources``;
``PHILOX`` for ``rand``, whose bits the C++ kernels compute the same way; ``TORCH_OP``, the
interpreter's stand-ins for libdevice and device asserts); the far path's loop over a block
(``far_path_in_slices``).
The Triton printer (codegen/triton.py) decides where each is called; this module is what
they compute, and why. Chapter: book/docs/performance.md ("When arithmetic sets the pace").
"""

from __future__ import annotations

import re

# [Note: our own sin and erf]
# ``tl.sin``, ``tl.cos`` and ``tl.erf`` become libdevice's ``sinf``/``cosf``/``erff``: about
# one ulp, but long. A float32 kernel hardly notices (it waits for memory anyway); a
# bfloat16 one moves half the bytes per element, and there they made ``sin(x) + cos(y)``
# and ``gelu`` compute-bound: 69% and 60% of copy bandwidth on an H200. Ours keep float32
# accuracy (checked against float64 on the GPU: sin/cos 1.4 ulp like libdevice's, erf 1.7
# ulp against 0.7) with fewer instructions. Where a kernel stores anything wider than 16
# bits, sin and cos stay libdevice's (``LIBDEVICE_SIN_WHERE_WIDE``): float32 ``sin(x) +
# cos(y)`` on an H100 ran at 100.6-100.8% of copy bandwidth with them and 99.9-100.2% with
# ours, whose block-wide max is a barrier (four interleaved runs, 1024 elements and 8 warps
# a program). Our erf stays in float32 kernels too: gelu_bias 98.0-98.3% against
# torch.compile's libdevice erf at 97.4-97.5% (two suite runs).
# - sin and cos: ``x = k*pi + r`` with ``k`` the nearest integer (for cos, the nearest
#   half-integer) and ``|r| <= pi/2``, where ``r`` is computed with pi split into three
#   float32 parts and fused multiply-adds (Cody and Waite's reduction, exact enough while
#   ``|x| <= 2**16``); then one odd polynomial, ``sin(r) = r + r**3 * q(r**2)``, fitted
#   to float32 by us, and the sign of ``(-1)**k``. Past 2**16 that reduction loses digits,
#   so a block holding any such ``|x|`` (or inf) takes libdevice's path instead: one
#   branch per block, taken by all its threads alike, so it costs a block-wide max. A flat
#   pointwise kernel takes that max once, over all its sin/cos arguments, after its
#   stores, and redoes the block if it must (``far_sin_check``); other kernels check each
#   call (``sin_fp32``). A cos is the sin of the same ``r`` around the half-integer
#   multiple: one polynomial for both. A flat kernel whose outputs are all bfloat16 or
#   float16 takes a degree-7 polynomial instead of degree 9 (``NARROW``): under 2e-6 relative,
#   a two-thousandth of a bfloat16 step, one multiply-add less per call. bfloat16
#   ``sin(x) + cos(y)`` went from 88-90% to 91-92% of copy bandwidth on an H200 (three
#   interleaved runs). Two things that did not pay, measured the same way: rounding ``k``
#   by adding 1.5 * 2**23 and taking the sign from its low bit (no ``rint`` and no
#   float-to-int conversion; 86-88%), and replacing the block-wide max by a per-thread flag
#   that a second, one-program kernel reads (80-83%).
# - erf: for ``|x| >= 0.75``, ``1 - 2**-p(|x|)`` with ``p`` a degree-7 polynomial fitted to
#   ``-log2(erfc)`` (clamped at 4, where erf rounds to 1): one ``exp2`` on the GPU's
#   special-function unit, and the error scales with erfc, so it stays below 2e-7. Near 0
#   that form loses relative accuracy (1 - a number near 1), so there an odd polynomial
#   ``x * s(x**2)`` takes over. The coefficients are least-squares fits weighted to the
#   maximum error; ``benchmarks/fit_math.py`` re-derives them.
# - erfc, in a kernel whose outputs are all bfloat16 or float16 (gelu's ``erfc(-x/sqrt 2)``
#   for 16-bit data, [Note: gelu with erfc]): ``2**-p(|x|)``, or 2 minus it for negative
#   x, with ``p`` of degree 9 fitted to ``-log2(erfc)`` on [0, 10]. Past 10 erfc is below
#   float32's smallest normal number and ``p`` keeps rising (to inf at inf), so no clamp.
#   One polynomial and one ``exp2``, to 8e-5 relative: a fiftieth of a bfloat16 step,
#   where the store rounds. Elsewhere ``erfc_rounded`` decides, by what reads the value:
#   [Note: an erfc rounded before it is read] in triton_rounding.py.
# Under the interpreter (no libdevice, no fused multiply-add) ``rint`` is ``floor(x + 0.5)``,
# ``fma`` computes in float64, the block's max is NumPy's and the far branch is ``tl.sin``;
# the polynomials are the same, so CI runs them.
FMA = '''

@triton.jit
def round_fp32(v):
    return {rint}


@triton.jit
def fma(a, b, c):
    return {fma}
'''
# Interpreter only ([Note: triton interpreter] in triton.py): ``imports`` prints these.
TORCH_OP = '''

def torch_op(name, *xs):
    """Interpreter only: an op with no tl spelling, run by torch on the blocks' numpy data."""
    import torch
    from triton.runtime.interpreter import TensorHandle

    data = getattr(torch, name)(*[torch.from_numpy(x.handle.data) for x in xs]).numpy()
    dtype = xs[0].handle.dtype
    kind = tl.core.block_type(xs[0].dtype, list(data.shape)) if data.shape else xs[0].dtype
    return tl.core.tensor(TensorHandle(data, dtype), kind)


def scalar(x):
    """Interpreter only: a run-time int argument (a 1-element array there) as a Python int,
    for ``range`` (the interpreter's own conversion fails on NumPy 2)."""
    return int(x.handle.data.reshape(-1)[0])


def check_index(ok, mask, value, message):
    """Interpreter only: tl.device_assert is a no-op there, so raise as torch would."""
    import numpy

    bad = ~ok.handle.data if mask is None else ~ok.handle.data & mask.handle.data
    if numpy.any(bad):
        raise IndexError(message.format(numpy.broadcast_to(value.handle.data, bad.shape)[bad][0]))
'''
MAX_ABS_INTERP = '''

def max_abs(x):
    """Interpreter only: the largest |x| of a block. (``tl.max`` is one of Triton's own
    ``@jit`` helpers, which the interpreter may be unable to call; [Note: triton
    interpreter].)"""
    import numpy

    data = numpy.abs(x.handle.data)
    return float(numpy.nanmax(data)) if data.size and not numpy.isnan(data).all() else 0.0
'''
# --8<-- [start:sin-cos]
SIN_COS = '''

@triton.jit
def sin_fast(x, COS: tl.constexpr, NARROW: tl.constexpr):
    """sin(x), or cos(x) with COS; float32 (or, with NARROW, enough for 16-bit stores),
    right while |x| <= 2**16: [Note: our own sin and erf]."""
    if COS:  # x = (k + 1/2) * pi + r: cos(x) = (-1)**(k+1) * sin(r)
        k = round_fp32(x * 0.3183098861837907 - 0.5) + 0.5
    else:  # x = k * pi + r: sin(x) = (-1)**k * sin(r)
        k = round_fp32(x * 0.3183098861837907)
    # pi = 3.1415927410125732 - 8.742277657347586e-08 - 3.4302490200117637e-15 (to 72
    # bits); each product k * part is exact inside the fma
    r = fma(k, -3.1415927410125732, x)
    r = fma(k, 8.742277657347586e-08, r)
    r = fma(k, 3.4302490200117637e-15, r)
    u = r * r
    if NARROW:  # degree 7, 1.7e-6 relative: the kernel's stores round to 16 bits anyway
        q = fma(fma(u, -0.00018542395264375955, 0.008314279839396477), u,
                -0.16665853559970856)
    else:  # degree 9, float32's accuracy
        q = fma(fma(fma(u, 2.605792360554915e-06, -0.00019809608056675643), u,
                    0.00833306647837162), u, -0.16666659712791443)
    s = fma(r * u, q, r)
    if COS:
        y = tl.where(((k + 0.5).to(tl.int32) & 1) != 0, -s, s)
    else:  # and sin(-0.0) is -0.0, which the reduction turned into +0.0
        y = tl.where(x == 0, x, tl.where((k.to(tl.int32) & 1) != 0, -s, s))
    return y


@triton.jit
def sin_far(x, COS: tl.constexpr, NARROW: tl.constexpr):
    if COS:
        y = {far_cos}(x)
    else:
        y = {far_sin}(x)
    return y


@triton.jit
def sin_fp32(x, COS: tl.constexpr):
    """sin(x), or cos(x) with COS; float32, one branch per block."""
    if {max_abs} <= 65536.0:  # (inf goes the far way; NaN gives NaN either way)
        y = sin_fast(x, COS, False)
    else:
        y = sin_far(x, COS, False)
    return y
'''
# --8<-- [end:sin-cos]
ERF = '''

@triton.jit
def erf_fp32(x):
    """erf(x) in float32, [Note: our own sin and erf]."""
    t = tl.minimum(tl.abs(x), 4.0, propagate_nan=tl.PropagateNan.ALL)
    p = t * fma(fma(fma(fma(fma(fma(
        t, -0.00010021798516390845, 0.0004615540092345327), t, 0.002302281791344285), t,
        -0.02945256233215332), t, 0.14896368980407715), t, 0.9183286428451538), t,
        1.6279137134552002)
    far = 1.0 - tl.exp2(-p)
    u = t * t
    near = x * fma(fma(fma(fma(u, 0.0041588060557842255, -0.026360204443335533), u,
                           0.11273732781410217), u, -0.3761192858219147), u,
                   1.1283791065216064)
    return tl.where(t < 0.75, near, tl.where(x < 0, -far, far))  # near keeps -0.0
'''

ERFC = '''

@triton.jit
def erfc_narrow(x):
    """erfc(x) to 1e-4 relative, for kernels that store only 16-bit floats; [Note: our own
    sin and erf]."""
    t = tl.abs(x)  # p rises past 10 (to inf at inf): no clamp needed
    p = t * fma(fma(fma(fma(fma(fma(fma(fma(
        t, 3.5470367976131456e-08, -1.919826672747149e-06), t, 4.549377626972273e-05), t,
        -0.000624058477114886), t, 0.005541579332202673), t, -0.03397016599774361), t,
        0.15148316323757172), t, 0.9184220433235168), t, 1.6275749206542969)
    e = tl.exp2(-p)  # 0 at inf, so gelu(-inf) is NaN, as eager's
    return tl.where(x < 0, 2.0 - e, e)
'''


# [Note: the far path in slices]
# A flat kernel's far path (``far_sin_check``) inlines libdevice's sinf or cosf, each with
# its Payne-Hanek reduction, once for every element a thread holds. bfloat16 sin(x) +
# cos(y) runs 512 elements on one warp, 16 a thread: 32 copies of libdevice, 5839 lines of
# PTX, and compiling it took 0.53 s of Triton's stages on our CPU against 0.15 s without
# the far path; on the H200 its first call was 0.68 s, torch.compile's 0.62 s. The path is
# taken only by blocks holding an argument beyond 2**16, where speed hardly matters: so it
# walks the block in slices of ``FAR_SLICE`` elements, a loop Triton does not unroll,
# one element a thread on one warp, and libdevice is inlined once per call site. An even
# kernel's block sizes are all multiples of the slice (``even_blocks`` needs 2048 | numel
# and every config has XBLOCK >= 256); others mask the slice to the block and to numel.
# Triton's compiler wants each name a loop assigns to keep its shape, so the slice's values
# get names of their own (``tmp0_far``) and a constant is made in the slice's shape; the
# interpreter forgives the first, so a test prints these kernels for the GPU on the CPU
# and compiles them for sm_90 (test_math_helpers.py).
FAR_SLICE = 32


def far_path_in_slices(lines: list[str], even: bool, block_shape: str) -> list[str]:
    """The far path's loop over the block ([Note: the far path in slices]): ``lines`` are
    the kernel's index lines and body, written for the whole block; ``even``: no block has
    a tail to mask; ``block_shape``: how the body spells the block's shape."""
    mask = [] if even else ["xmask = (xslice < XBLOCK) & (xindex < xnumel)"]
    loop = [f"xslice = xstart + tl.arange(0, {FAR_SLICE})", "xindex = xoffset + xslice",
            *mask, *lines]
    # a value a loop assigns must keep its shape across it: the slice's own names
    names = {m[1] for line in loop if (m := re.match(r"\s*(\w+) = ", line))} - {"xslice"}
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(names))) + r")\b")
    # and a value the same for every element (``tl.full([XBLOCK], 3.0, ...)``) the slice's
    loop = [pattern.sub(r"\1_far", line).replace(block_shape, f"[{FAR_SLICE}]")
            for line in loop]
    return [f"    for xstart in range(0, XBLOCK, {FAR_SLICE}):", *("        " + ln for ln in loop)]


def math_helper_sources(helper: str, interpreter: bool) -> dict[str, str]:
    """The module-level helpers that ``helper`` needs, by name: ``fma`` and ``round_fp32``,
    then the function itself; for the GPU or for the interpreter, whose NumPy has neither:
    there ``fma`` computes in float64, where a product of two floats is exact (``a`` is
    always a block, the others may be constants), and ``rint`` is ``floor(v + 0.5)``."""
    if interpreter:
        common = FMA.format(rint="tl.floor(v + 0.5)",
                            fma="(a.to(tl.float64) * b + c).to(tl.float32)") + MAX_ABS_INTERP
        far = {"far_sin": "tl.sin", "far_cos": "tl.cos", "max_abs": "max_abs(x)"}
    else:
        common = FMA.format(rint="libdevice.rint(v)", fma="tl.fma(a, b, c)")
        far = {"far_sin": "libdevice.sin", "far_cos": "libdevice.cos",
               "max_abs": "tl.max(tl.abs(x))"}
    own = {"erf": ERF, "erfc": ERFC}.get(helper) or SIN_COS.format(**far)
    return {"fma": common, helper: own}


# --8<-- [start:philox]
PHILOX = '''

@triton.jit
def philox(seed, offset, stream):
    """32 random bits for element ``offset`` of stream ``stream``: Philox-4x32-10, key
    ``seed``, counter (offset, stream). The C++ kernels compute the same bits."""
    c0 = (offset & 0xFFFFFFFF).to(tl.uint32)
    c1 = ((offset >> 32) & 0xFFFFFFFF).to(tl.uint32)
    c2 = c0 * 0 + stream
    c3 = c0 * 0
    k0 = (seed & 0xFFFFFFFF).to(tl.uint32)
    k1 = ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)
    for _ in tl.static_range(10):
        n0 = tl.umulhi(c2, 0xCD9E8D57) ^ c1 ^ k0
        n2 = tl.umulhi(c0, 0xD2511F53) ^ c3 ^ k1
        c1 = tl.mul(c2, 0xCD9E8D57, sanitize_overflow=False)  # wraps, on purpose
        c3 = tl.mul(c0, 0xD2511F53, sanitize_overflow=False)
        c0 = n0
        c2 = n2
        k0 = tl.add(k0, 0x9E3779B9, sanitize_overflow=False)
        k1 = tl.add(k1, 0xBB67AE85, sanitize_overflow=False)
    return c0
'''
# --8<-- [end:philox]
