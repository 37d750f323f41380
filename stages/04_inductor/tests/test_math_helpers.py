"""Our own sin, cos and erf in Triton kernels ([Note: our own sin and erf] in
codegen/triton_math.py) against float64 eager: float32 accuracy over wide ranges, the far
(libdevice) branch for blocks holding a huge argument, infinities, NaN, signed zeros and
tiny values; bfloat16 rounds to the same values as eager."""

from __future__ import annotations

import inductor
import inductor.codegen.triton as triton_codegen
import pytest
import torch
from inductor_testing import prims_graph, to_target


def special_values() -> torch.Tensor:
    return torch.tensor([0.0, -0.0, 1e-30, -1e-30, 1e-7, float("inf"), -float("inf"),
                         float("nan"), 1e30, -3e38, 65536.0, 65537.5, 1e6, 3.0e5])


def inputs() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {
        "normal": torch.randn(4096) * 3,
        "wide": torch.linspace(-65536, 65536, 8192),  # every block takes our reduction
        "tiny": torch.randn(2048) * 1e-6,
        "specials": torch.cat([torch.randn(2000), special_values()]),  # the far branch
        "near_multiples": (torch.arange(-3000, 3000) * (torch.pi / 2)).float()
                          + torch.randn(6000) * 1e-4,  # sin/cos near their zeros
    }


def compile_unary(name: str, x: torch.Tensor):
    graph = prims_graph(lambda p, a: getattr(p, name)(a), [x])
    source = lambda: "".join(v for k, v in compiled.artifacts.items() if "kernels/" in k)  # noqa: E731
    compiled = inductor.compile_fx_inner(graph, [x], target="triton")
    return compiled, source()


@pytest.mark.parametrize("case", list(inputs()))
@pytest.mark.parametrize("name", ["sin", "cos", "erf"])
def test_float32_accuracy(name, case, monkeypatch):
    """Our float32 sin and cos: kernels that store float32 call libdevice's by default
    (``LIBDEVICE_SIN_WHERE_WIDE``), so the switch is turned off here to test ours."""
    monkeypatch.setattr(triton_codegen, "LIBDEVICE_SIN_WHERE_WIDE", False)
    x = to_target([inputs()[case]], "triton")[0]
    compiled, source = compile_unary(name, x)
    assert f"{name if name == 'erf' else 'sin'}_fp32(" in source  # ours, not tl.<name>
    (got,) = compiled(x)
    want = getattr(torch, name)(x.cpu().double())
    # a few ulp, like libdevice: relative near 1, absolute near the zeros of sin and cos
    torch.testing.assert_close(got.cpu().double(), want, rtol=4e-7, atol=2e-7, equal_nan=True)
    same_zero_sign = torch.signbit(got.cpu()) == torch.signbit(want.float())
    assert same_zero_sign[want == 0].all()  # sin(-0.0) is -0.0, erf(-0.0) is -0.0


@pytest.mark.parametrize("name", ["sin", "cos", "erf"])
def test_bfloat16_rounds_like_eager(name):
    x = to_target([torch.cat([torch.randn(8192) * 4, special_values()]).bfloat16()],
                  "triton")[0]
    compiled, _ = compile_unary(name, x)
    (got,) = compiled(x)
    want = getattr(torch, name)(x.cpu())
    differ = (got.cpu().float() != want.float()) & ~(got.cpu().isnan() & want.isnan())
    # float32 results a few ulp apart can round to neighbouring bfloat16 values, rarely
    assert differ.float().mean() < 1e-3
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)


@pytest.mark.parametrize("name", ["sin", "cos", "erf"])
def test_float64_keeps_double_precision(name):
    x = to_target([torch.randn(1000, dtype=torch.float64) * 10], "triton")[0]
    compiled, source = compile_unary(name, x)
    assert "_fp32(" not in source
    (got,) = compiled(x)
    torch.testing.assert_close(got.cpu(), getattr(torch, name)(x.cpu()), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("case", ["normal", "wide", "near_multiples", "specials"])
@pytest.mark.parametrize("name", ["sin", "cos"])
def test_narrow_polynomial_where_the_kernel_stores_bfloat16(name, case):
    """A kernel whose stores are all bfloat16 takes the degree-7 sin (``NARROW``), one that
    stores float32 keeps degree 9; the bfloat16 results round to float64's own rounding
    except for the rare element within 2e-6 of a rounding boundary, and never by more than
    one step."""
    x32 = inputs()[case]
    x = to_target([x32.bfloat16()], "triton")[0]
    compiled, source = compile_unary(name, x)
    assert f"sin_fast(tmp0, {name == 'cos'}, True)" in source
    (got,) = compiled(x)
    want = getattr(torch, name)(x.cpu().double()).bfloat16()
    got = got.cpu()
    nan = got.isnan() & want.isnan()
    differ = (got != want) & ~nan
    assert differ.float().mean() < 2e-3
    step = (want.double().abs() * 2.0 ** -7).clamp(min=1e-30)  # a bfloat16 step or less
    assert ((got.double() - want.double()).abs()[~nan] <= step[~nan]).all()
    _, wide_source = compile_unary(name, to_target([x32], "triton")[0])
    assert f"tl.{name}(tmp0)" in wide_source and "sin_fast(" not in wide_source


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_kernels_that_store_float32_call_libdevice(name, monkeypatch):
    """By default; without the switch, a float32 flat kernel takes our degree-9 sin_fast."""
    x = to_target([inputs()["specials"]], "triton")[0]
    compiled, source = compile_unary(name, x)
    assert f"tl.{name}(tmp0)" in source and "sin_f" not in source
    (got,) = compiled(x)
    torch.testing.assert_close(got.cpu(), getattr(torch, name)(x.cpu()), equal_nan=True)
    monkeypatch.setattr(triton_codegen, "LIBDEVICE_SIN_WHERE_WIDE", False)
    _, source = compile_unary(name, x)
    assert f"sin_fast(tmp0, {name == 'cos'}, False)" in source


@pytest.mark.parametrize("numel", [5, 3000, 8192])
def test_far_path_walks_the_block_in_slices(numel):
    """[Note: the far path in slices]: a bfloat16 flat kernel redoes a block holding a huge
    argument in 32-element slices under their own names, masked to the block and to numel
    unless every block is whole (8192); the huge elements sit in the first block, a middle
    one and the last, partial or not; every element rounds as float64's sin + cos does."""
    torch.manual_seed(3)
    a, b = torch.randn(numel) * 3, torch.randn(numel) * 3
    for i in {0, numel // 2, numel - 1}:
        a[i], b[max(0, i - 1)] = 1.0e30 * (1 + i), -2.5e38  # the fast way is wrong here
    x, y = to_target([a.bfloat16(), b.bfloat16()], "triton")
    graph = prims_graph(lambda p, u, v: p.add(p.sin(u), p.cos(v)), [x, y])
    compiled = inductor.compile_fx_inner(graph, [x, y], target="triton")
    source = "".join(v for k, v in compiled.artifacts.items() if "kernels/" in k)
    assert "for xstart in range(0, XBLOCK, 32):" in source
    assert "sin_far(tmp0_far, False, True)" in source
    assert ("xmask_far = (xslice < XBLOCK)" in source) == (numel % 2048 != 0)
    (got,) = compiled(x, y)
    want = (torch.sin(x.cpu().double()) + torch.cos(y.cpu().double())).bfloat16()
    step = (want.double().abs() * 2.0 ** -7).clamp(min=2.0 ** -126)
    assert ((got.cpu().double() - want.double()).abs() <= step).all()
    assert (got.cpu() != want).float().mean() < 2e-3


def _ptxas_available() -> bool:
    try:
        from triton.backends.nvidia.compiler import get_ptxas
        return bool(get_ptxas(90).path)
    except Exception:  # noqa: BLE001 - no NVIDIA backend in this Triton: nothing to compile with
        return False


@pytest.mark.skipif(not _ptxas_available(), reason="Triton's NVIDIA backend (ptxas) is absent")
def test_far_path_kernels_compile_for_an_h100_without_one(monkeypatch, tmp_path):
    """The interpreter forgives what Triton's compiler does not (a value reassigned in a loop
    with another shape). So the GPU's own source of bfloat16 sin/cos kernels (a constant
    broadcast to the block, a slice's index arithmetic, two outputs, RoPE's mix) is printed
    here with the interpreter off (the launch then fails: no GPU) and compiled for sm_90 by
    ``triton.compile``, LLVM and ptxas included (the interpreter stays off until the end:
    ``triton.jit`` asks whether it is on when a kernel's module is loaded)."""
    import glob
    import importlib.util
    import re
    import warnings

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    import driver

    monkeypatch.setenv("MINIPT2_CACHE_DIR", str(tmp_path))
    bf = torch.bfloat16
    cases = [(lambda a: torch.sin(a[:, 1:] * 3), torch.randn(17, 33, dtype=bf)),
             (lambda a: (a.sin(), (a * 2).cos()), torch.randn(3, 1000, dtype=bf)),
             (lambda q, e: q * e.cos().to(bf) + q.flip(-1) * e.sin().to(bf),
              torch.randn(2, 37, 64, dtype=bf), torch.randn(37, 64))]
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    for fn, *args in cases:
        driver.reset()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                driver.compile(fn, options={"target": "triton"})(*args)
            except Exception:  # noqa: BLE001 - no GPU to launch on; the sources are written
                pass
    paths = sorted(glob.glob(str(tmp_path / "triton" / "*" / "*.py")))
    far = [p for p in paths if "for xstart in range(0, XBLOCK, 32):" in open(p).read()]
    assert len(far) >= 3
    for path in far:
        text = open(path).read()
        name = path.rsplit("/", 1)[1][:-3]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        signature = {}
        for param in re.search(rf"def {name}\((.*)\):", text)[1].split(", "):
            if ":" in param:
                signature[param.split(":")[0]] = "constexpr"
            elif "ptr" in param:
                low = re.search(rf"tl\.load\({param} \+[^\n]*\)\.to\(tl\.float32\)|"
                                rf"tl\.store\({param} \+[^\n]*\.to\(tl\.bfloat16\)", text)
                signature[param] = "*bf16" if low else "*fp32"
            else:
                signature[param] = "i32"
        source = ASTSource(getattr(module, name), signature, constexprs={"XBLOCK": 512})
        compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                                  options={"num_warps": 1})
        assert ".entry" in compiled.asm["ptx"]
