"""How the flat pointwise kernel addresses memory and masks its blocks, and the reduction
kernel's masks: [Note: the flat kernel's indices and masks]. Values against eager; the
kernel text for what must (and must not) change."""

from __future__ import annotations

import itertools
import re

import pytest
import sympy
import torch
import torch.nn.functional as F
from inductor import split_reduction
from inductor.codegen.triton import XINDEX, block_size, flat_suffix
from inductor_testing import assert_close, device_for

import driver

SYMS = sympy.symbols("x0 x1 x2", integer=True, nonnegative=True)


def positions(sizes):
    """Every (xindex, (x0, x1, ...)) of a loop over ``sizes``, row-major."""
    yield from enumerate(itertools.product(*map(range, sizes)))


@pytest.mark.parametrize("sizes,index", [
    ((4, 6), 6 * SYMS[0] + SYMS[1]),  # the whole flat position: xindex
    ((3, 4, 5), 7 + 2 * (20 * SYMS[0] + 5 * SYMS[1] + SYMS[2])),  # scaled and offset
    ((3, 4, 5), 11 * SYMS[0] + 5 * SYMS[1] + SYMS[2]),  # a suffix: xindex % 20
    ((3, 4, 5), 3 * SYMS[0] + 4 * SYMS[1] + SYMS[2]),  # no run: unchanged
    ((3, 4, 5), SYMS[0] + 5 * SYMS[1]),  # innermost unused: unchanged
    ((3, 4, 5), 20 * SYMS[0] - 5 * SYMS[1] - SYMS[2] + 19),  # a flipped suffix
])
def test_flat_suffix_names_the_same_address(sizes, index):
    symbols = list(SYMS[:len(sizes)])
    rewritten = flat_suffix(index, list(sizes), symbols)
    for flat, point in positions(sizes):
        want = index.subs(dict(zip(symbols, point)))
        got = rewritten.subs({XINDEX: flat, **dict(zip(symbols, point))})
        assert got == want, (rewritten, flat, point)


def test_flat_suffix_folds_what_it_can():
    x0, x1, x2 = SYMS
    assert flat_suffix(6 * x0 + x1, [4, 6], [x0, x1]) == XINDEX
    assert flat_suffix(11 * x0 + 5 * x1 + x2, [3, 4, 5], [x0, x1, x2]) == \
        11 * x0 + sympy.Mod(XINDEX, 20)
    assert flat_suffix(3 * x0 + 4 * x1 + x2, [3, 4, 5], [x0, x1, x2]) == 3 * x0 + 4 * x1 + x2
    s0 = sympy.Symbol("s0", integer=True, positive=True)  # a symbolic size
    assert flat_suffix(64 * s0 * x0 + 64 * x1 + x2, [3, s0, 64], [x0, x1, x2]) == XINDEX


def kernel_text(compiled):
    (source,) = [v for r in compiled.graphs for k, v in r.artifacts.items()
                 if k.startswith("kernels/")]
    return source[source.index("@triton.jit\ndef triton_"):]


def launches(compiled):
    return [line for r in compiled.graphs for line in r.artifacts["wrapper"].splitlines()
            if "num_warps=" in line]  # kernel[grid](args, XBLOCK=..., num_warps=...)


def gelu_bias(x, b):
    return F.gelu(x + b) * 0.5 + x


def test_even_blocks_drop_the_mask_and_read_flat():
    """64 x 2048 elements: every block size divides numel, so no mask; ``x`` is read at
    ``xindex`` and the bias, which every row reads again, is asked to stay in L2."""
    device = device_for("triton")
    x, b = torch.randn(64, 2048, device=device), torch.randn(2048, device=device)
    compiled = driver.compile(gelu_bias, options={"target": "triton"})
    assert_close(compiled(x, b), gelu_bias(x, b).cpu())
    text = kernel_text(compiled)
    assert "xmask" not in text
    assert "tl.load(in_ptr0 + (xindex))" in text
    assert "tl.load(in_ptr1 + (x1), eviction_policy='evict_last')" in text
    assert "tl.store(out_ptr0 + (xindex), " in text
    assert "x0 = " not in text  # defined only if used


def test_a_tail_keeps_the_mask():
    device = device_for("triton")
    x, b = torch.randn(7, 100, device=device), torch.randn(100, device=device)
    driver.reset()
    compiled = driver.compile(gelu_bias, options={"target": "triton"})
    assert_close(compiled(x, b), gelu_bias(x, b).cpu())
    text = kernel_text(compiled)
    assert "xmask = xindex < xnumel" in text
    assert "tl.load(in_ptr0 + (xindex), xmask)" in text


def test_a_suffix_run_reads_modulo_its_extent():
    """A loop over [3, 4, 512] that ``z`` (broadcast along dim 1) keeps from collapsing:
    ``y``, broadcast along dim 0, is read at the flat position modulo one 2048-element
    slice; ``z`` per dim."""
    device = device_for("triton")
    x, y = torch.randn(3, 4, 512, device=device), torch.randn(4, 512, device=device)
    z = torch.randn(3, 1, 512, device=device)
    compiled = driver.compile(lambda a, c, d: a * c + d, options={"target": "triton"})
    assert_close(compiled(x, y, z), (x * y + z).cpu())
    text = kernel_text(compiled)
    assert "tl.load(in_ptr0 + (xindex))" in text
    assert "tl.load(in_ptr1 + ((xindex % 2048)), eviction_policy='evict_last')" in text
    assert "tl.load(in_ptr2 + (((512*x0) + x2)), eviction_policy='evict_last')" in text


def test_a_strided_read_stays_per_dim():
    device = device_for("triton")
    base = torch.randn(64, 96, device=device)
    x = base[:, 1:33]  # rows 96 apart: the read is per dim, the write flat
    compiled = driver.compile(lambda a: a.exp() * 2, options={"target": "triton"})
    assert_close(compiled(x), (x.exp() * 2).cpu())
    text = kernel_text(compiled)
    assert "tl.load(in_ptr0 + (((96*x0) + x1)))" in text
    assert "tl.store(out_ptr0 + (xindex), " in text


@pytest.mark.parametrize("dtype,warps", [(torch.float32, 8), (torch.bfloat16, 4),
                                         (torch.float64, 8), (torch.uint8, 4)])
def test_sixteen_bytes_a_thread(dtype, warps):
    assert block_size(1 << 20, dtype.itemsize) == (1024, warps)
    assert block_size(256, dtype.itemsize)[0] == 256  # small loops: the next power of two


def test_float32_kernels_launch_eight_warps():
    device = device_for("triton")
    x = torch.randn(4096, device=device)
    compiled = driver.compile(lambda a: a * 3 + 1, options={"target": "triton"})
    assert_close(compiled(x), (x * 3 + 1).cpu())
    assert launches(compiled)[0].endswith("XBLOCK=1024, num_warps=8)")
    compiled = driver.compile(lambda a: a * 3 + 1, options={"target": "triton"})
    compiled(x.bfloat16())
    assert launches(compiled)[-1].endswith("XBLOCK=1024, num_warps=4)")


@pytest.mark.parametrize("rows,width,full_x,full_r", [(64, 2048, True, True),
                                                       (7, 2048, False, True),
                                                       (64, 2000, True, False)])
def test_reduction_masks_are_constants_where_no_tile_has_a_tail(rows, width, full_x, full_r,
                                                                monkeypatch):
    monkeypatch.setattr(split_reduction, "SPLIT_DEVICES", set())  # one kernel on CUDA too
    device = device_for("triton")
    x = torch.randn(rows, width, device=device)
    w, b = torch.randn(width, device=device), torch.randn(width, device=device)

    def fn(a):
        return F.layer_norm(a, (width,), w, b)

    driver.reset()
    compiled = driver.compile(fn, options={"target": "triton"})
    assert_close(compiled(x), fn(x).cpu(), rtol=1e-4, atol=1e-4)
    text = kernel_text(compiled)
    assert ("xmask = tl.full([XBLOCK, 1], True, tl.int1)" in text) == full_x
    assert ("rmask = tl.full([1, RBLOCK], True, tl.int1)" in text) == full_r
    assert bool(re.search(r"xmask = xindex < xnumel", text)) == (not full_x)


@pytest.mark.parametrize("dtype,hoisted", [(torch.float32, True), (torch.bfloat16, False)])
def test_float32_vectors_every_row_reads_load_before_the_statistics(dtype, hoisted,
                                                                    monkeypatch):
    """A layer norm's weight and bias are loaded before its first reduction in float32
    (``hoist_shared_loads``), after it in bfloat16."""
    monkeypatch.setattr(split_reduction, "SPLIT_DEVICES", set())
    device = device_for("triton")
    x = torch.randn(16, 1024, device=device, dtype=dtype)
    w, b = (torch.randn(1024, device=device, dtype=dtype) for _ in range(2))

    def fn(a):
        return F.layer_norm(a, (1024,), w, b)

    driver.reset()
    compiled = driver.compile(fn, options={"target": "triton"})
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {}
    assert_close(compiled(x), fn(x).cpu(), **tol)
    text = kernel_text(compiled)
    first_reduce = text.index("tl.reduce(")
    for ptr in ("in_ptr1", "in_ptr2"):
        assert (text.index(f"tl.load({ptr} + (r0)") < first_reduce) == hoisted
