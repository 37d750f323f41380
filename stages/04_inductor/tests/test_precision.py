"""Precision choices of the printers, against float64 and eager: one rounding at the store
in 16-bit kernels ([Note: one rounding, at the store] in codegen/common.py), erfc and gelu
for 16-bit data ([Note: gelu with erfc], [Note: our own sin and erf]), sin/cos checking
their arguments once per kernel, and persistent reductions reading their row twice
([Note: reloading a row])."""

from __future__ import annotations

import inductor
import pytest
import torch
import torch.nn.functional as F
from inductor.codegen import common
from inductor_testing import device_for, prims_graph, to_target

import driver

STEP = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}  # relative step of the type


def kernel_source(compiled) -> str:
    graphs = getattr(compiled, "graphs", None)
    artifacts = graphs[0].artifacts if graphs else compiled.artifacts
    return "".join(v for k, v in artifacts.items() if "kernels/" in k)


def kernel_body(source: str) -> str:
    """The ``@triton.jit`` kernel itself, not the helpers printed above it."""
    return source[source.index("def triton_"):]


def wide_values() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.cat([torch.randn(4000) * 3, torch.linspace(-12, 12, 2001),
                      torch.tensor([0.0, -0.0, 1e-7, -1e-7, float("inf"), -float("inf"),
                                    float("nan")])])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_erfc_against_float64(dtype):
    """float32: libdevice's erfcf (a few ulp). 16-bit: ours, 2**-p(|x|), within one step of
    the type, including the far tail (erfc(9) is 4e-37) that ``1 - erf`` would lose."""
    x = to_target([wide_values().to(dtype)], "triton")[0]
    graph = prims_graph(lambda p, a: p.erfc(a), [x])
    compiled = inductor.compile_fx_inner(graph, [x], target="triton")
    (got,) = compiled(x)
    want = torch.erfc(x.cpu().double())
    assert ("erfc_narrow(" in kernel_body(kernel_source(compiled))) == (dtype in STEP)
    if dtype in STEP:  # one step of the type (2**-7 relative at most, in bfloat16) from
        # float64's value rounded to it, down to the smallest normal number; below that, a
        # subnormal (which the interpreter's float32 -> bfloat16 conversion mangles)
        got, want = got.cpu().double(), want.to(dtype).double()
        normal = (want.abs() >= torch.finfo(dtype).smallest_normal) | want.isnan()
        torch.testing.assert_close(got[normal], want[normal], rtol=2 * STEP[dtype], atol=0,
                                   equal_nan=True)
        assert (got[~normal].abs() < torch.finfo(dtype).smallest_normal).all()
    else:
        torch.testing.assert_close(got.cpu().double(), want, rtol=4e-7, atol=1e-38,
                                   equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("target", ["triton", "cpp"])
def test_gelu_of_16_bit_data_is_erfc(dtype, target):
    """``x * erfc(-x / sqrt 2) / 2``: within one step of float64's gelu everywhere, where
    eager's ``1 + erf`` cancels for negative x; and gelu(-inf) is NaN, as eager's."""
    x = to_target([wide_values().to(dtype)], target)[0]
    compiled = driver.compile(lambda a: F.gelu(a) * 0.5 + a, options={"target": target})
    got = compiled(x).cpu()
    exact = F.gelu(x.cpu().double()) * 0.5 + x.cpu().double()
    torch.testing.assert_close(got.double(), exact, rtol=STEP[dtype], atol=1e-6,
                               equal_nan=True)
    assert got[-2].isnan()  # x = -inf
    if target == "triton":
        assert "erfc_narrow(" in kernel_body(kernel_source(compiled))


def test_one_rounding_at_the_store(monkeypatch):
    """bfloat16 sin(x) + cos(y): one rounding (the store), so the result is float32's sum
    rounded once; with MINIPT2_EMULATE_PRECISION_CASTS the kernel rounds after each op and
    matches eager exactly."""
    torch.manual_seed(1)
    x, y = to_target([torch.randn(5000).bfloat16(), torch.randn(5000).bfloat16()], "triton")
    fn = lambda a, b: torch.sin(a) + torch.cos(b)  # noqa: E731
    compiled = driver.compile(fn, options={"target": "triton"})
    got = compiled(x, y).cpu()
    body = kernel_body(kernel_source(compiled))
    assert body.count("tl.bfloat16") == body.count("tl.store(")  # at the store only
    once = (torch.sin(x.cpu().float()) + torch.cos(y.cpu().float())).bfloat16()
    assert (got != once).float().mean() < 1e-3  # float32 sin a few ulp from torch's
    eager = fn(x, y).cpu()
    assert (eager != once).any()  # eager's three roundings do differ: the test can fail

    driver.reset()
    monkeypatch.setattr(common, "EMULATE_PRECISION_CASTS", True)
    compiled = driver.compile(fn, options={"target": "triton"})
    got = compiled(x, y).cpu()
    body = kernel_body(kernel_source(compiled))
    assert body.count("tl.bfloat16") > 2 * body.count("tl.store(")  # after each op
    assert (got != eager).float().mean() < 1e-3


@pytest.mark.parametrize("target", ["triton", "cpp"])
def test_a_narrow_value_made_an_integer_is_rounded_first(target):
    """In a kernel storing only bfloat16, ``x.bfloat16()`` stays float32 inside, but its
    ``int`` is taken of the bfloat16 value: 2.999 is 3.0 in bfloat16."""
    x = to_target([torch.tensor([2.999, -2.999, 7.97, 0.4])], target)[0]
    fn = lambda a: (a.bfloat16().to(torch.int32) + 1).bfloat16()  # noqa: E731
    compiled = driver.compile(fn, options={"target": target})
    assert torch.equal(compiled(x).cpu(), fn(x.cpu()))


def test_sin_and_cos_check_their_arguments_once_after_the_stores(monkeypatch):
    """One block-wide max for both arguments, after the store; a block holding a huge
    argument is computed again by libdevice's functions (the interpreter's tl.sin). (A
    float32 kernel calls libdevice from the start unless told otherwise, as here.)"""
    import inductor.codegen.triton as triton_codegen

    monkeypatch.setattr(triton_codegen, "LIBDEVICE_SIN_WHERE_WIDE", False)
    driver.reset()
    torch.manual_seed(2)
    a, b = torch.randn(3000) * 3, torch.randn(3000) * 3
    a[1500], b[2999] = 3.0e5, -1.0e7  # two blocks take the far path
    x, y = to_target([a, b], "triton")
    compiled = driver.compile(lambda p, q: torch.sin(p) * torch.cos(q),
                              options={"target": "triton"})
    got = compiled(x, y).cpu()
    body = kernel_body(kernel_source(compiled))
    assert body.count("> 65536.0") == 1 and body.index("tl.store") < body.index("> 65536.0")
    assert "sin_far(" in body and "sin_fast(" in body
    want = torch.sin(a.double()) * torch.cos(b.double())
    torch.testing.assert_close(got.double(), want, rtol=4e-7, atol=2e-7)


def test_persistent_reduction_reads_its_row_again_after_the_last_reduction():
    """rms norm rows: loaded with evict_last for the statistic, again with evict_first for
    the output; the weight with evict_last throughout ([Note: reloading a row])."""
    x = torch.randn(64, 1024, device=device_for("triton"))
    w = torch.randn(1024, device=x.device)
    fn = lambda a: a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + 1e-6) * w  # noqa: E731
    compiled = driver.compile(fn, options={"target": "triton"})
    torch.testing.assert_close(compiled(x), fn(x), rtol=1e-5, atol=1e-5)
    body = kernel_body(kernel_source(compiled))
    assert "triton_per" in body
    first = body.index("evict_last")
    again = body.index("evict_first")
    assert first < body.index("tl.reduce") < again
    assert body.count("tl.load(in_ptr0") == 2


def test_layer_norm_keeps_its_float32_row():
    """Layer norm is the exception: its float32 row is read once, with evict_last, and kept
    in registers through both statistics to the output ([Note: reloading a row]); the
    statistics sum around the row's first element, one more (scalar) load per row
    ([Note: welford])."""
    x = torch.randn(64, 1024, device=device_for("triton"))
    w, b = torch.randn(1024, device=x.device), torch.randn(1024, device=x.device)
    fn = lambda a: F.layer_norm(a, (1024,), w, b)  # noqa: E731
    compiled = driver.compile(fn, options={"target": "triton"})
    torch.testing.assert_close(compiled(x), fn(x), rtol=1e-5, atol=1e-5)
    body = kernel_body(kernel_source(compiled))
    assert "triton_per" in body and "evict_first" not in body
    assert body.count("tl.load(in_ptr0") == 2 and "tl.load(in_ptr0 + ((1024*x0)), xmask)" in body


@pytest.mark.parametrize("fn", ["layer_norm", "rms_norm"])
def test_bfloat16_row_is_loaded_once_and_widened_again(fn):
    """bfloat16 rows are the exception to the reload: one load, and after the last reduction
    the loaded bits widened by a shift, a text the compiler cannot merge with the first
    conversion. Values equal eager's (the widening is exact), inf/NaN/-0.0 included."""
    torch.manual_seed(4)
    x = torch.randn(64, 1024)
    x[3, 5], x[7, 0], x[9, 9], x[11, 1] = float("inf"), float("nan"), -0.0, -1e30
    x = to_target([x.bfloat16()], "triton")[0]
    w, b = to_target([torch.randn(1024).bfloat16(), torch.randn(1024).bfloat16()], "triton")
    op = (lambda a: F.layer_norm(a, (1024,), w, b)) if fn == "layer_norm" else \
        (lambda a: (a.float() * torch.rsqrt(a.float().pow(2).mean(-1, keepdim=True) + 1e-6))
         .bfloat16() * w)
    compiled = driver.compile(op, options={"target": "triton"})
    torch.testing.assert_close(compiled(x).float(), op(x).float(), rtol=2e-2, atol=2e-2,
                               equal_nan=True)
    body = kernel_body(kernel_source(compiled))
    assert "triton_per" in body and "evict_first" not in body
    assert body.count("tl.load(in_ptr0 + ((r0 + (1024*x0)))") == 1
    assert "<< 16).to(tl.float32, bitcast=True)" in body.split("tl.reduce")[-1]


@pytest.mark.parametrize("outlier", [0.0, 6.0e4])
def test_16_bit_layer_norm_makes_one_pass_and_a_second_for_an_outlier_first(outlier):
    """16-bit outputs: one reduction of pairs around the row's first value. An outlier
    first value (60000 in a row of 8192 values of spread 1) cancels 13 bits of m2 away;
    the row's second pass restores them: within a float16 step of float64's layer norm."""
    torch.manual_seed(3)
    x = torch.randn(8, 8192)
    x[::3, 0] += outlier
    x, w, b = to_target([x.half(), torch.rand(8192).half() + 0.5,
                         torch.randn(8192).half()], "triton")
    fn = lambda a: F.layer_norm(a, (8192,), w, b)  # noqa: E731
    compiled = driver.compile(fn, options={"target": "triton"})
    got = compiled(x).cpu().double()
    exact = F.layer_norm(x.cpu().double(), (8192,), w.cpu().double(), b.cpu().double())
    torch.testing.assert_close(got, exact, rtol=2**-10, atol=2**-14)
    if x.device.type == "cpu":  # (a GPU splits these few long rows: [Note: split
        body = kernel_body(kernel_source(compiled))  # reductions])
        assert "add_pairs" in body and body.count("tl.reduce(") == 2  # one, and the rescue


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("row_start", ["first value", "plain mean"])
def test_layer_norm_statistics_of_rows_holding_inf_and_nan(dtype, row_start, monkeypatch):
    """A row holding inf has an inf mean, as ``mean`` says (NaN with both signs, or a NaN;
    torch.var_mean says NaN for any inf, [Note: welford]) and a NaN variance, whichever
    shift the statistics use: the row's first value, or the plain mean where
    ``row_start`` gives up (a body reading a value the kernel computes)."""
    if row_start == "plain mean":
        monkeypatch.setattr(common.Kernel, "row_start", lambda self, first: None)
    x = torch.randn(6, 256)
    x[1, 0], x[2, 7] = float("inf"), float("inf")
    x[3, 5], x[3, 9] = float("inf"), -float("inf")
    x[4, 0] = float("nan")
    (x,) = to_target([x.to(dtype)], "triton")
    fn = lambda a: torch.var_mean(a.float(), dim=1, correction=0)  # noqa: E731
    compiled = driver.compile(fn, options={"target": "triton"})
    var, mean = compiled(x)
    want_var, want_mean = fn(x)[0], x.float().mean(1)
    torch.testing.assert_close(var.cpu(), want_var.cpu(), equal_nan=True, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mean.cpu(), want_mean.cpu(), equal_nan=True, rtol=1e-5,
                               atol=1e-5)


def erfc_choice(source: str) -> str:
    """Which erfc a kernel's ``erfc_rounded`` runs: "ours" or "exact"."""
    helper = source[source.index("def erfc_rounded("):].split("\n\n")[0]
    return "ours" if "return erfc_narrow(x)" in helper else "exact"


@pytest.mark.parametrize("rounded", [True, False])
def test_an_erfc_rounded_before_it_is_read_is_ours(rounded):
    """A float32 sum of erfc rounded to bfloat16 first may take our erfc: the rounding hides
    its 8e-5; the sum of the unrounded erfc may not, and takes the exact one.
    [Note: an erfc rounded before it is read]."""
    x = to_target([wide_values()[:4000]], "triton")[0]
    bf16, f32 = torch.bfloat16, torch.float32

    def fn(p, a):
        e = p.erfc(a)
        if rounded:
            e = p.convert_element_type(p.convert_element_type(e, bf16), f32)
        return p.sum(e, [0]), e  # a float32 reduction and a float32 store read it

    graph = prims_graph(fn, [x])
    compiled = inductor.compile_fx_inner(graph, [x], target="triton")
    total, values = compiled(x)
    source = kernel_source(compiled)
    assert erfc_choice(source) == ("ours" if rounded else "exact")
    want = torch.erfc(x.cpu().double())
    if rounded:  # within one bfloat16 step of the exact value rounded (to normal numbers:
        want = want.to(bf16).double()  # the interpreter mangles subnormal bfloat16)
        torch.testing.assert_close(values.cpu().double(), want, rtol=2 * STEP[bf16],
                                   atol=torch.finfo(bf16).smallest_normal)
        # the sum of the rounded values: the same elements, a float32 sum's error
        torch.testing.assert_close(total.cpu().double(), values.cpu().double().sum(),
                                   rtol=1e-6, atol=0)
    else:
        torch.testing.assert_close(values.cpu().double(), want, rtol=4e-7, atol=1e-38)
        torch.testing.assert_close(total.cpu().double(), want.sum(), rtol=1e-6, atol=0)


def test_a_gelu_gradient_and_its_column_sum_take_our_erfc(monkeypatch):
    """bfloat16 gelu_backward with its bias-gradient sum, split into float32 partials (a
    kernel that stores a float32): the gradient is rounded before the sum reads it, so the
    kernel runs our erfc, and both results are within eager's bfloat16 tolerance."""
    from inductor import split_reduction as sr

    monkeypatch.setattr(sr, "SPLIT_DEVICES", {"cuda", "cpu"})
    monkeypatch.setattr(sr, "OUTER_MIN_CHUNK", 16)
    torch.manual_seed(0)
    g, pre = to_target([torch.randn(512, 64).bfloat16(), (torch.randn(512, 64) * 3).bfloat16()],
                       "triton")

    def fn(grad, a):
        d = torch.ops.aten.gelu_backward(grad, a)
        return d, d.sum(0)

    compiled = driver.compile(fn, options={"target": "triton"})
    d, total = compiled(g, pre)
    source = kernel_source(compiled)
    assert "_then_" in source  # the split column sum, one launch with its producer
    assert erfc_choice(source) == "ours"
    want_d, want_total = fn(g.cpu(), pre.cpu())
    ones = torch.ones(pre.shape, dtype=torch.float64)
    exact = (g.cpu().double() * torch.ops.aten.gelu_backward(ones, pre.cpu().double()))
    # float64's gradient rounded once: ours is one bfloat16 step off it here and there
    # (eager's, whose 1 + erf cancels, is off it seven times as often)
    assert (d.cpu() != exact.bfloat16()).float().mean() < 0.02
    torch.testing.assert_close(d.cpu().double(), exact, rtol=2 * STEP[torch.bfloat16],
                               atol=1e-6)
    torch.testing.assert_close(d.cpu(), want_d)  # and eager's, at bfloat16's tolerance
    summed = d.cpu().double().sum(0)  # the sum of our rounded gradient, rounded once
    torch.testing.assert_close(total.cpu().double(), summed.bfloat16().double(),
                               rtol=STEP[torch.bfloat16], atol=0)
    torch.testing.assert_close(total.cpu().float(), want_total.float(), rtol=2e-2, atol=2e-2)
