"""Every prim: eager result vs an independent oracle, meta (shape/dtype) vs eager, and the
strictness rules (no broadcasting, no promotion)."""

import math

import pytest
import torch
from primtorch import prims

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int32, torch.int64, torch.bool]
FLOAT_ONLY = {"sin", "cos", "tan", "tanh", "exp", "expm1", "log", "log1p", "sqrt", "rsqrt",
              "erf", "erfc", "reciprocal", "div", "pow", "asin", "acos", "atan", "sinh", "cosh",
              "asinh", "acosh", "atanh", "log2", "exp2", "lgamma", "erfinv", "atan2"}
NO_BOOL = {"neg", "sub", "sign", "abs", "floor", "ceil", "trunc", "fmod", "maximum", "minimum",
           "round", "shift_left", "shift_right"}
SHAPES = [(), (1,), (5,), (3, 1, 4)]


def make(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g, dtype=torch.float64) * 4 + 0.25).to(dtype)
    return torch.randint(1, 9, shape, generator=g, dtype=dtype)


INT_ONLY = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "shift_left",
            "shift_right"}


def applicable(name, dtype):
    if name in INT_ONLY and dtype.is_floating_point:
        return False
    if name in FLOAT_ONLY and not dtype.is_floating_point:
        return False
    return not (name in NO_BOOL and dtype == torch.bool)


def prim_inputs(prim, shape, dtype):
    if prim.kind == "unary":
        return (make(shape, dtype),)
    if prim.kind == "binary":
        return make(shape, dtype, 1), make(shape, dtype, 2)
    if prim.kind == "ternary":
        return make(shape, torch.bool, 3), make(shape, dtype, 1), make(shape, dtype, 2)
    if prim.kind == "reduction":
        return make(shape, dtype), list(range(len(shape)))[:2]
    return None


ELEMENTWISE = [p for p in prims.all_prims() if p.kind in ("unary", "binary", "ternary",
                                                           "reduction")]


@pytest.mark.parametrize("prim", ELEMENTWISE, ids=lambda p: p.name)
def test_meta_matches_eager(prim):
    """A meta impl must predict the eager result's shape and dtype exactly."""
    checked = 0
    for dtype in DTYPES:
        if not applicable(prim.name, dtype):
            continue
        for shape in SHAPES:
            args = prim_inputs(prim, shape, dtype)
            eager = prim.op(*args)
            meta_args = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]
            meta = prim.op(*meta_args)
            assert meta.device.type == "meta"
            assert (meta.shape, meta.dtype) == (eager.shape, eager.dtype), (dtype, shape)
            checked += 1
    assert checked > 0


UNARY_ORACLE = {
    "sin": math.sin, "cos": math.cos, "tan": math.tan, "tanh": math.tanh, "exp": math.exp,
    "expm1": math.expm1, "log": math.log, "log1p": math.log1p, "sqrt": math.sqrt,
    "rsqrt": lambda x: 1 / math.sqrt(x), "erf": math.erf, "erfc": math.erfc,
    "floor": math.floor,
    "ceil": math.ceil, "trunc": math.trunc, "reciprocal": lambda x: 1 / x, "abs": abs,
    "neg": lambda x: -x, "sign": lambda x: float((x > 0) - (x < 0)),
    "isnan": lambda x: x != x, "logical_not": lambda x: x == 0,
}
BINARY_ORACLE = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "maximum": max, "minimum": min, "pow": lambda a, b: a ** b,
    "fmod": math.fmod, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
}


@pytest.mark.parametrize("name", sorted(UNARY_ORACLE) + sorted(BINARY_ORACLE))
def test_elementwise_against_python_math(name):
    """Eager prims agree with Python's math module, element by element (float64)."""
    a = torch.tensor([-1.75, -0.5, 0.25, 0.5, 1.5, 2.0], dtype=torch.float64)
    b = torch.tensor([0.5, 1.25, -2.0, 3.0, 0.75, 2.0], dtype=torch.float64)
    op = getattr(prims, name)
    if name in UNARY_ORACLE:
        x = a.abs() if name in ("log", "log1p", "sqrt", "rsqrt") else a
        out, expected = op(x), [UNARY_ORACLE[name](v) for v in x.tolist()]
    else:
        x = a.abs() if name == "pow" else a
        pairs = zip(x.tolist(), b.tolist())
        out, expected = op(x, b), [BINARY_ORACLE[name](u, v) for u, v in pairs]
    assert out.tolist() == pytest.approx(expected, rel=1e-12)


def test_where_and_reductions_against_python():
    a = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    pred = torch.tensor([[True, False, True], [False, False, True]])
    assert prims.where(pred, a, -a).tolist() == [[0, -1, 2], [-3, -4, 5]]
    assert prims.sum(a, [1]).tolist() == [3, 12]
    assert prims.prod(a + 1, [0]).tolist() == [4, 10, 18]
    assert prims.amax(a, [0, 1]).item() == 5 and prims.amin(a, [1]).tolist() == [0, 3]
    # integer reductions keep their dtype (torch.sum would widen to int64)
    assert prims.sum(torch.ones(3, dtype=torch.int32), [0]).dtype == torch.int32


def test_shape_prims():
    a = torch.arange(6.0).reshape(2, 3)
    out = prims.broadcast_in_dim(torch.arange(3.0), [2, 4, 3], [2])
    assert out.shape == (2, 4, 3) and torch.equal(out[1, 2], torch.arange(3.0))
    assert torch.equal(prims.broadcast_in_dim(a[:, :1], [2, 3], [0, 1]), a[:, :1].expand(2, 3))
    assert torch.equal(prims.permute(a, [1, 0]), a.t())
    assert prims.permute(a, [1, 0]).is_contiguous()
    assert torch.equal(prims.reshape(a.t(), [6]), a.t().reshape(6))
    assert torch.equal(prims.convert_element_type(a, torch.int32), a.int())
    full = prims.full([2, 2], 1.5, dtype=torch.bfloat16, device=torch.device("cpu"))
    assert full.dtype == torch.bfloat16 and full.tolist() == [[1.5, 1.5], [1.5, 1.5]]
    meta = prims.broadcast_in_dim(a.to("meta"), [4, 2, 3], [1, 2])
    assert meta.shape == (4, 2, 3) and meta.device.type == "meta"
    assert prims.permute(a.to("meta"), [1, 0]).shape == (3, 2)
    assert prims.reshape(a.to("meta"), [3, 2]).shape == (3, 2)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_prims_are_strict(device):
    a = torch.ones(2, 3, device=device)
    with pytest.raises(ValueError, match="equal shapes and dtypes"):
        prims.add(a, torch.ones(3, device=device))
    with pytest.raises(ValueError, match="equal shapes and dtypes"):
        prims.mul(a, torch.ones(2, 3, dtype=torch.float64, device=device))
    with pytest.raises(ValueError, match="cannot become"):
        prims.broadcast_in_dim(a, [2, 4], [0, 1])
    with pytest.raises(ValueError, match="must increase"):
        prims.broadcast_in_dim(a, [3, 2], [1, 0])


def test_registry_records():
    assert len(prims.PRIMS) <= 80
    for name, prim in prims.PRIMS.items():
        assert prim.op is getattr(prims, name) and prim.op.namespace == "minipt2"
        assert prims.is_prim(prim.op) and prim.doc
    assert not prims.is_prim(torch.ops.aten.add.Tensor)


CPU = torch.device("cpu")


def _structured_cases():
    a = torch.arange(24.0).reshape(2, 3, 4)
    index = torch.tensor([[[0, 2, 1, 0]], [[1, 1, 2, 0]]])  # (2, 1, 4)
    seed = torch.tensor(1234)
    return {
        "slice": (a, [0, 1, 0], [2, 3, 4], [1, 1, 3]),
        "cat": ([a, a[:, :1]], 1),
        "argmax": (a, 2), "argmin": (a, 0),
        "gather": (a, 1, index),
        "scatter": (torch.zeros(2, 3, 4), 1, index, torch.ones(2, 1, 4)),
        "scatter_add": (torch.zeros(2, 3, 4), 1, index, torch.ones(2, 1, 4)),
        "rand": ([3, 5], seed, 2),
        "mean_m2": (a, [0, 2]),
    }


@pytest.mark.parametrize("name", list(_structured_cases()))
def test_structured_meta_matches_eager(name):
    args = _structured_cases()[name]
    kwargs = {"dtype": torch.float32, "device": CPU} if name == "rand" else {}
    eager = getattr(prims, name)(*args, **kwargs)
    meta_args = [[t.to("meta") for t in a] if isinstance(a, list) and a and
                 isinstance(a[0], torch.Tensor) else a.to("meta")
                 if isinstance(a, torch.Tensor) else a for a in args]
    meta = getattr(prims, name)(*meta_args, **kwargs)
    if name == "mean_m2":  # two results
        assert [(m.shape, m.dtype) for m in meta] == [(e.shape, e.dtype) for e in eager]
        return
    assert (meta.shape, meta.dtype) == (eager.shape, eager.dtype)


def test_structured_values():
    a = torch.arange(24.0).reshape(2, 3, 4)
    assert torch.equal(prims.slice(a, [0, 1, 0], [2, 3, 4], [1, 1, 3]), a[:, 1:3, 0:4:3])
    assert torch.equal(prims.cat([a, a], 2), torch.cat([a, a], 2))
    iota = prims.iota(4, start=5, step=-2, dtype=torch.float32, device=CPU)
    assert iota.tolist() == [5, 3, 1, -1]
    assert prims.argmax(torch.tensor([[1.0, float("nan"), 3.0]]), 1).item() == 1
    with pytest.raises(ValueError, match="same dtype|share dtype"):
        prims.cat([a, a.double()], 0)
    with pytest.raises(ValueError, match="bad slice"):
        prims.slice(a, [0, 0, 0], [2, 4, 4], [1, 1, 1])
    mean, m2 = prims.mean_m2(a, [0, 2])
    wide = a.double()
    assert torch.allclose(mean.double(), wide.mean((0, 2)))
    assert torch.allclose(m2.double(), wide.var((0, 2), correction=0) * 8)
    with pytest.raises(ValueError, match="floating point"):
        prims.mean_m2(a.long(), [0])


def test_rand_is_a_pure_function_of_seed_and_offset():
    seed = prims.seed(CPU)
    one = prims.rand([1000], seed, 0, dtype=torch.float32, device=CPU)
    again = prims.rand([1000], seed, 0, dtype=torch.float32, device=CPU)
    other = prims.rand([1000], seed, 1, dtype=torch.float32, device=CPU)
    assert torch.equal(one, again) and not torch.equal(one, other)
    assert 0 <= one.min() and one.max() < 1 and abs(one.mean().item() - 0.5) < 0.05
    torch.manual_seed(3)
    first = prims.seed(CPU)
    torch.manual_seed(3)
    assert prims.seed(CPU).item() == first.item()  # torch.manual_seed controls the seeds
