"""Every decomposition against its aten op.

The main test runs OpInfo sample inputs eagerly under ``CrossRef``, a dispatch mode that,
for each aten op with a decomposition, also runs the decomposition on the very same
arguments and compares (the approach of PyTorch's test_decomp). So a decomposition is
checked on what its op really receives: broadcasting, 0-dim tensors, Python scalars,
non-contiguous inputs, every dtype the OpInfo supports.
"""

from collections import Counter

import primtorch
import pytest
import torch
from primtorch import decomposition_table, prims
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
# Tolerances for comparing a decomposition with eager. Decompositions compute low-precision
# floats in float32 and round once, like eager kernels, but composite formulas (gelu, var,
# softmax) may still differ from eager's fused kernels in the last bits.
TOLERANCES = {
    torch.float64: dict(rtol=1e-7, atol=1e-7),
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
}


def assert_same(actual, expected, what="", tol=None):
    """Same type, shape, dtype; values close (exact for integers and bool)."""
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected), what
        for a, e in zip(actual, expected):
            assert_same(a, e, what, tol)
        return
    assert isinstance(actual, torch.Tensor), f"{what}: got {type(actual)}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    if expected.device.type == "meta":
        return
    tol = tol or TOLERANCES.get(expected.dtype, dict(rtol=0, atol=0))
    torch.testing.assert_close(actual, expected, equal_nan=True, msg=lambda m: f"{what}: {m}",
                               **tol)


DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int32, torch.int64, torch.bool]


# Ops whose aten meta kernel gives the auxiliary outputs other dtypes/shapes than the CPU
# kernel (the meta kernels follow CUDA). We follow CPU, and compare only output 0 on meta.
META_DISAGREES_WITH_CPU = {aten.native_layer_norm.default, aten.native_batch_norm.default}


UNDEFINED_VALUES = {aten.empty.memory_format, aten.empty_like.default, aten.new_empty.default}


class CrossRef(TorchDispatchMode):
    """Run each decomposed op both ways and compare; return the eager result."""

    def __init__(self):
        super().__init__()
        self.hits = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        expected = func(*args, **kwargs)
        decomposition = decomposition_table.get(func)
        if decomposition is not None:
            actual = decomposition(*args, **kwargs)  # inner aten ops run eagerly
            if actual is not NotImplemented:
                self.hits[func] += 1
                compared = expected
                if func in UNDEFINED_VALUES:  # only shape and dtype are defined
                    actual, compared = actual.to("meta"), expected.to("meta")
                if func in META_DISAGREES_WITH_CPU and expected[0].device.type == "meta":
                    actual, compared = actual[0], expected[0]
                shapes = [tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args]
                assert_same(actual, compared, f"{func} on {shapes} {kwargs}")
        return expected


# OpInfo (name, variant) -> the decomposed aten ops its samples must reach.
OPINFO_COVERS = {
    ("add", ""): [aten.add.Tensor], ("sub", ""): [aten.sub.Tensor],
    ("mul", ""): [aten.mul.Tensor], ("rsub", ""): [aten.rsub.Tensor],
    ("div", "no_rounding_mode"): [aten.div.Tensor],
    ("div", "trunc_rounding"): [aten.div.Tensor_mode],
    ("div", "floor_rounding"): [aten.div.Tensor_mode],
    ("neg", ""): [aten.neg.default], ("abs", ""): [aten.abs.default],
    ("sin", ""): [aten.sin.default], ("cos", ""): [aten.cos.default],
    ("tan", ""): [aten.tan.default], ("tanh", ""): [aten.tanh.default],
    ("exp", ""): [aten.exp.default], ("expm1", ""): [aten.expm1.default],
    ("log", ""): [aten.log.default], ("log1p", ""): [aten.log1p.default],
    ("sqrt", ""): [aten.sqrt.default], ("rsqrt", ""): [aten.rsqrt.default],
    ("erf", ""): [aten.erf.default], ("reciprocal", ""): [aten.reciprocal.default],
    ("sigmoid", ""): [aten.sigmoid.default], ("nn.functional.relu", ""): [aten.relu.default],
    ("nn.functional.gelu", ""): [aten.gelu.default],
    ("nn.functional.silu", ""): [aten.silu.default],
    ("pow", ""): [aten.pow.Tensor_Tensor],
    ("maximum", ""): [aten.maximum.default], ("minimum", ""): [aten.minimum.default],
    ("clamp", ""): [aten.clamp.Tensor], ("where", ""): [aten.where.self],
    ("eq", ""): [aten.eq.Tensor], ("ne", ""): [aten.ne.Tensor],
    ("lt", ""): [aten.lt.Tensor], ("le", ""): [aten.le.Tensor],
    ("gt", ""): [aten.gt.Tensor], ("ge", ""): [aten.ge.Tensor],
    ("logical_not", ""): [aten.logical_not.default],
    ("expand", ""): [aten.expand.default], ("view", ""): [aten.view.default],
    ("reshape", ""): [aten.view.default],
    ("permute", ""): [aten.permute.default], ("t", ""): [aten.t.default],
    ("transpose", ""): [aten.transpose.int], ("unsqueeze", ""): [aten.unsqueeze.default],
    ("squeeze", ""): [aten.squeeze.default, aten.squeeze.dim],
    ("squeeze", "multiple"): [aten.squeeze.dims], ("clone", ""): [aten.clone.default],
    ("sum", ""): [aten.sum.dim_IntList, aten.sum.default],
    ("mean", ""): [aten.mean.dim, aten.mean.default],
    ("amax", ""): [aten.amax.default], ("amin", ""): [aten.amin.default],
    ("softmax", ""): [aten._softmax.default], ("log_softmax", ""): [aten._log_softmax.default],
    ("var", ""): [aten.var.correction], ("to", ""): [aten._to_copy.default],
    ("native_layer_norm", ""): [aten.native_layer_norm.default],
    ("nn.functional.layer_norm", ""): [aten.native_layer_norm.default],
    ("native_batch_norm", ""): [aten.native_batch_norm.default],
    ("nn.functional.batch_norm", ""): [aten.native_batch_norm.default],
    ("zeros", ""): [aten.zeros.default], ("ones", ""): [aten.ones.default],
    ("full", ""): [aten.full.default], ("empty", ""): [aten.empty.memory_format],
    ("zeros_like", ""): [aten.zeros_like.default], ("ones_like", ""): [aten.ones_like.default],
    ("full_like", ""): [aten.full_like.default], ("empty_like", ""): [aten.empty_like.default],
    ("scalar_tensor", ""): [aten.scalar_tensor.default],
    ("new_zeros", ""): [aten.new_zeros.default], ("new_ones", ""): [aten.new_ones.default],
    ("new_full", ""): [aten.new_full.default], ("new_empty", ""): [aten.new_empty.default],
    ("double", ""): [aten._to_copy.default],
}
# Reached by hand-written tests below rather than by an OpInfo above.
COVERED_BY_HAND = {aten.clamp.default, aten.pow.Scalar, aten.pow.Tensor_Scalar,
                   aten.rsub.Scalar, aten._unsafe_view.default,
                   aten.detach.default, aten.alias.default, aten.lift_fresh.default,
                   aten.eq.Scalar, aten.ne.Scalar, aten.lt.Scalar, aten.le.Scalar,
                   aten.gt.Scalar, aten.ge.Scalar,
                   aten._native_batch_norm_legit_no_training.default}

OPINFOS = {(op.name, op.variant_test_name): op for op in op_db}


def _samples(opinfo, dtype, device):
    for sample in opinfo.sample_inputs("cpu", dtype, requires_grad=False):
        if device == "meta":
            sample = sample.transform(lambda t: t.to("meta") if isinstance(t, torch.Tensor)
                                      else t)
        yield sample


@pytest.mark.filterwarnings("ignore:var\\(\\). degrees of freedom")
@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("key", list(OPINFO_COVERS), ids=lambda k: ".".join(filter(None, k)))
def test_decomposition_matches_eager(key, device):
    opinfo = OPINFOS[key]
    mode = CrossRef()
    for dtype in DTYPES:
        if dtype not in opinfo.supported_dtypes("cpu"):
            continue
        for sample in _samples(opinfo, dtype, device):
            try:  # inputs eager rejects (int ** negative int, ...) are not our business
                opinfo.op(sample.input, *sample.args, **sample.kwargs)
            except Exception:
                continue
            with mode:
                opinfo.op(sample.input, *sample.args, **sample.kwargs)
    for op in OPINFO_COVERS[key]:
        assert mode.hits[op] > 0, f"{op} was never reached by {key} samples"


def test_every_decomposition_is_tested():
    tested = set(COVERED_BY_HAND)
    for ops in OPINFO_COVERS.values():
        tested.update(ops)
    assert set(decomposition_table) <= tested, set(decomposition_table) - tested


def run_decomposed(fn, *args):
    with CrossRef() as mode:
        out = fn(*args)
    return out, mode.hits


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_promotion_and_broadcasting_by_hand(dtype):
    a = torch.arange(12).reshape(3, 4).t().to(dtype)  # (4, 3), non-contiguous
    b = torch.tensor([2, 3, 4], dtype=torch.int32)  # (3,), broadcast over rows
    zero_dim = torch.tensor(1.5, dtype=torch.float64)
    fns = [lambda: a + b, lambda: a * 2.5, lambda: a - zero_dim, lambda: a / b,
           lambda: torch.add(a, b, alpha=3), lambda: torch.pow(2, a),
           lambda: a.clamp(min=1, max=7), lambda: torch.where(a > 2, a, b), lambda: a.sin(),
           lambda: a[:, :1] + b, lambda: (a > 3) & (b < 4), lambda: a.reshape(3, 4)]
    for fn in fns:
        out, hits = run_decomposed(fn)
        assert sum(hits.values()) > 0


HAND_CASES = {
    aten.pow.Scalar: lambda x: 2 ** x, aten.pow.Tensor_Scalar: lambda x: x ** 3,
    aten.rsub.Scalar: lambda x: 2 - x, aten.clamp.default: lambda x: x.clamp(-0.5, 0.5),
    aten.detach.default: lambda x: x.detach(), aten.alias.default: aten.alias,
    aten._unsafe_view.default: lambda x: x.t().reshape(6),
    aten.lift_fresh.default: aten.lift_fresh,
    aten.eq.Scalar: lambda x: x == 0.5, aten.ne.Scalar: lambda x: x != 1,
    aten.lt.Scalar: lambda x: x < 0, aten.le.Scalar: lambda x: x <= 0.25,
    aten.gt.Scalar: lambda x: x > True, aten.ge.Scalar: lambda x: x >= -1,
    aten._native_batch_norm_legit_no_training.default: lambda x: (
        aten._native_batch_norm_legit_no_training(
            x.float(), torch.randn(3), None, torch.randn(3), torch.rand(3) + 0.5, 0.1, 1e-5)),
}


@pytest.mark.parametrize("op", list(HAND_CASES), ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_hand_cases(op, dtype):
    x = (torch.randn(2, 3) * 3).to(dtype)
    with CrossRef() as mode:
        HAND_CASES[op](x)
    assert mode.hits[op] == 1


def test_hand_cases_cover_the_rest():
    assert set(HAND_CASES) == COVERED_BY_HAND


def test_not_implemented_cases_stay_whole():
    ints = torch.arange(6).reshape(2, 3)
    assert decomposition_table[aten.div.Tensor_mode](ints, 4, rounding_mode="floor") \
        is NotImplemented
    assert decomposition_table[aten._to_copy.default](ints, device="meta") is NotImplemented
    assert decomposition_table[aten.mean.dim](ints, [0]) is NotImplemented


def test_floor_division_edge_cases():
    a = torch.tensor([5.0, -5.0, 5.0, -5.0, 1.0, -1.0, 0.0, 7.5])
    b = torch.tensor([0.1, 0.1, -3.0, 3.0, 0.0, 0.0, 0.0, 2.5])
    out = decomposition_table[aten.div.Tensor_mode](a, b, rounding_mode="floor")
    assert_same(out, torch.div(a, b, rounding_mode="floor"))


def test_traced_graph_holds_only_prims():
    """make_fx (PyTorch's tracer, as a peer) with our table leaves nothing but prims."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def fn(x, y):
        z = torch.nn.functional.gelu(x * 2 + y.t()) - torch.softmax(x, -1)
        return (z.sum(1, keepdim=True) / x.var(0)).relu().to(torch.float64), x.unsqueeze(0)

    x, y = torch.randn(4, 4), torch.randn(4, 4)
    gm = make_fx(fn, decomposition_table=decomposition_table)(x, y)
    report = primtorch.coverage(gm)
    assert not report["fallback"] and not report["extern"], report
    assert report["prim"]["minipt2.erf.default"] == 1
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert all(prims.is_prim(t) for t in calls)
    assert_same(gm(x, y), fn(x, y), tol=TOLERANCES[torch.float32])  # float32 math


def test_coverage_names_extern_and_fallback():
    from torch.fx.experimental.proxy_tensor import make_fx

    def fn(x, w):
        return torch.mm(x, w).cumsum(0), torch.special.bessel_j0(x)

    gm = make_fx(fn, decomposition_table=decomposition_table)(torch.randn(3, 3),
                                                              torch.randn(3, 3))
    report = primtorch.coverage(gm)
    assert set(report["extern"]) == {"aten.mm.default", "aten.cumsum.default"}
    assert set(report["fallback"]) == {"aten.special_bessel_j0.default"}
    assert aten.mm.default in primtorch.extern_ops
    assert aten.topk.default in primtorch.extern_ops


def test_register_decomposition_rejects_duplicates_and_non_ops():
    with pytest.raises(ValueError, match="already"):
        primtorch.register_decomposition(aten.add.Tensor)(lambda a, b: a)
    with pytest.raises(TypeError):
        primtorch.register_decomposition(torch.add)(lambda a, b: a)
