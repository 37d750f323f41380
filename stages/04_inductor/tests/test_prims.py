"""Every elementwise prim in PRIMS, on both targets, against its own eager implementation.

Parametrised over ``prims.PRIMS``, so a prim added later is tested here automatically; a prim
with no lowering (or a dtype its lowering declines) must still be right, via a library call.
"""

from __future__ import annotations

import inductor
import pytest
import torch
from inductor.lowering import lowerings, supports_dtype
from inductor_testing import assert_close, prims_graph, to_target
from primtorch import prims

ELEMENTWISE = sorted(p.name for p in prims.PRIMS.values()
                     if p.kind in ("unary", "binary", "ternary"))
POSITIVE_FIRST = {"log", "sqrt", "rsqrt", "log1p", "pow"}
NONZERO_SECOND = {"div", "fmod"}
WITH_NAN = {"isnan", "maximum", "minimum"}


def make_inputs(name: str, arity: int, dtype: torch.dtype, shape=(5, 7)) -> list:
    gen = torch.Generator().manual_seed(hash(name) % 1000)
    if dtype == torch.bool:
        xs = [torch.randint(0, 2, shape, generator=gen).bool() for _ in range(arity)]
    elif dtype.is_floating_point:
        xs = [torch.randn(shape, generator=gen).to(dtype) * 2 for _ in range(arity)]
        if name in POSITIVE_FIRST:
            xs[0] = xs[0].abs() + 0.5
        if name == "reciprocal" or (name in NONZERO_SECOND and arity > 1):
            xs[-1] = torch.where(xs[-1] < 0, xs[-1] - 0.5, xs[-1] + 0.5)
        if name in WITH_NAN:
            xs[0][0, 0] = float("nan")
    else:
        xs = [torch.randint(-20, 20, shape, generator=gen).to(dtype) for _ in range(arity)]
        if name == "pow":
            xs[1] = torch.randint(0, 4, shape, generator=gen).to(dtype)
        if name in NONZERO_SECOND:
            xs[1] = torch.randint(1, 7, shape, generator=gen).to(dtype)
    return xs


def case(name: str, dtype: torch.dtype):
    prim = prims.PRIMS[name]
    arity = {"unary": 1, "binary": 2, "ternary": 3}[prim.kind]
    if name == "where":
        pred = torch.randn(5, 7, generator=torch.Generator().manual_seed(0)) > 0
        return prim, [pred, *make_inputs(name, 2, dtype)]
    return prim, make_inputs(name, arity, dtype)


def valid(name: str, dtype: torch.dtype) -> bool:
    """Eager takes these inputs without promoting them (what a prims graph could hold)."""
    prim, inputs = case(name, dtype)
    try:
        return prim.op(*inputs).dtype == prim.op(*[t.to("meta") for t in inputs]).dtype
    except (RuntimeError, ValueError):
        return False


CASES = [(name, dtype) for name in ELEMENTWISE
         for dtype in (torch.float32, torch.int32, torch.bool, torch.float64)
         if valid(name, dtype)]


@pytest.mark.parametrize("target", ["cpp", "triton"])
@pytest.mark.parametrize("name,dtype", CASES, ids=[f"{n}-{str(d)[6:]}" for n, d in CASES])
def test_elementwise_prim(name, dtype, target):
    prim, inputs = case(name, dtype)
    expected = prim.op(*inputs)
    inputs = to_target(inputs, target)
    gm = prims_graph(lambda p, *xs: p.call(prim.op, *xs), inputs)
    compiled = inductor.compile_fx_inner(gm, inputs, target=target)
    (out,) = compiled(*inputs)
    lowered = prim.op in lowerings and supports_dtype(name, inputs[-1].dtype)
    assert compiled.kernel_count == (1 if lowered else 0)
    if dtype == torch.float32 and name != "where" and prim.kind in ("unary", "binary"):
        assert lowered, f"{name} has no float32 lowering"
    tol = {"atol": 1e-5, "rtol": 1e-4} if dtype == torch.float32 else {}
    assert_close(out, expected, equal_nan=True, **tol)
