"""Every decomposition against its aten op.

The main test runs OpInfo sample inputs eagerly under ``CrossRef``, a dispatch mode that,
for each aten op with a decomposition, also runs the decomposition on the very same
arguments and compares (the approach of PyTorch's test_decomp). So a decomposition is
checked on what its op really receives: broadcasting, 0-dim tensors, Python scalars,
non-contiguous inputs, every dtype the OpInfo supports.
"""

import operator
import sys
from collections import Counter
from pathlib import Path

import primtorch
import pytest
import torch
from primtorch import decomposition_table, prims
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).parent))
from primtorch_opinfo_coverage import (  # noqa: E402
    BACKWARD,
    BACKWARD_OPINFOS,
    FORWARD,
    FORWARD_OPINFOS,
)

aten = torch.ops.aten
# Tolerances for comparing a decomposition with eager. Decompositions compute low-precision
# floats in float32 and round once, like eager kernels, but composite formulas (gelu, var,
# softmax) may still differ from eager's fused kernels in the last bits.
TOLERANCES = {
    torch.float64: dict(rtol=1e-7, atol=1e-7),
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.bfloat16: dict(rtol=3e-2, atol=3e-2),  # two bf16 ulps at magnitude 2..4
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
    tol = LOOSER.get((what.split(" ")[0], expected.dtype), tol)
    torch.testing.assert_close(actual, expected, equal_nan=True, msg=lambda m: f"{what}: {m}",
                               **tol)


# Where a formula amplifies rounding: normalizing a single element makes rstd 1/sqrt(eps),
# so the float32 rounding of the saved mean (~1e-7) becomes ~3e-5 in the gradients.
LOOSER = {("aten.native_layer_norm_backward.default", torch.float32): dict(rtol=1e-4,
                                                                           atol=1e-4)}

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int32, torch.int64, torch.bool]
META_DTYPES = {torch.float32, torch.int64}  # meta checks shapes and dtypes only


# Ops whose aten meta kernel gives the auxiliary outputs other dtypes/shapes than the CPU
# kernel (the meta kernels follow CUDA). We follow CPU, and compare only output 0 on meta.
META_DISAGREES_WITH_CPU = {aten.native_layer_norm.default, aten.native_batch_norm.default,
                           aten._native_batch_norm_legit.default,
                           aten._native_batch_norm_legit.no_stats,
                           aten.native_group_norm.default}
UNDEFINED_VALUES = {aten.empty.memory_format, aten.empty_like.default, aten.new_empty.default,
                    aten.empty_strided.default, aten.new_empty_strided.default}
# Random ops draw other numbers than eager (see [Note: random prims]): compare shape and
# dtype here; test_random.py checks their distributions and consistency.
RANDOM = {aten.native_dropout.default, aten.bernoulli.p, aten.bernoulli.default,
          aten.rand.default, aten.rand_like.default, aten.randn.default,
          aten.randn_like.default, aten.uniform.default, aten.normal_functional.default,
          aten.normal.Tensor_Tensor, aten.normal.Tensor_float, aten.normal.float_Tensor}
# Ops that write into their arguments (batch norm's running statistics): the decomposition
# runs on copies, and the copies must end up equal to the arguments eager mutated.
MUTATES = {aten.native_batch_norm.default, aten._native_batch_norm_legit.default}


def _clone_args(args):
    return torch.utils._pytree.tree_map(
        lambda a: a.clone() if isinstance(a, torch.Tensor) else a, args)


class CrossRef(TorchDispatchMode):
    """Run each decomposed op both ways and compare; return the eager result."""

    def __init__(self):
        super().__init__()
        self.hits = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        decomposition = decomposition_table.get(func)
        decomposed_args = _clone_args(args) if func in MUTATES else args
        expected = func(*args, **kwargs)
        if decomposition is not None:
            actual = decomposition(*decomposed_args, **kwargs)  # inner aten ops run eagerly
            if actual is not NotImplemented:
                self.hits[func] += 1
                self.compare(func, args, kwargs, actual, expected)
                if func in MUTATES:
                    tensors = [t for t in torch.utils._pytree.tree_leaves(args)
                               if isinstance(t, torch.Tensor)]
                    copies = [t for t in torch.utils._pytree.tree_leaves(decomposed_args)
                              if isinstance(t, torch.Tensor)]
                    assert_same(copies, tensors, f"{func}: mutated arguments")
        return expected

    def compare(self, func, args, kwargs, actual, expected):
        compared = expected
        if func in UNDEFINED_VALUES or func in RANDOM:  # only shape and dtype are defined
            actual, compared = _to_meta(actual), _to_meta(expected)
        leaves = torch.utils._pytree.tree_leaves(expected)
        if func in META_DISAGREES_WITH_CPU and leaves[0].device.type == "meta":
            actual, compared = actual[0], expected[0]
        if isinstance(compared, (tuple, list)):  # backward ops return None for unasked grads
            pairs = [(a, e) for a, e in zip(actual, compared) if e is not None]
            actual, compared = [a for a, _ in pairs], [e for _, e in pairs]
        shapes = [tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args]
        assert_same(actual, compared, f"{func} on {shapes} {kwargs}")


def _to_meta(x):
    return torch.utils._pytree.tree_map(
        lambda t: t.to("meta") if isinstance(t, torch.Tensor) else t, x)


OPINFOS = {".".join(filter(None, (op.name, op.variant_test_name))): op for op in op_db}
# Decompositions no OpInfo reaches: reached by the hand-written HAND_CASES below.
COVERED_BY_HAND = {aten.pow.Scalar, aten.rsub.Scalar, aten._unsafe_view.default,
                   aten.detach.default, aten.alias.default, aten.lift_fresh.default,
                   aten._native_batch_norm_legit_no_training.default,
                   aten._native_batch_norm_legit.no_stats,
                   aten._native_batch_norm_legit_functional.default,
                   aten._scaled_dot_product_flash_attention_for_cpu.default,
                   aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
                   aten.bernoulli.p, aten.native_dropout.default, aten.uniform.default,
                   aten.normal_functional.default, aten.normal.Tensor_Tensor,
                   aten.normal.Tensor_float, aten.normal.float_Tensor,
                   aten.rand_like.default, aten.copy.default, aten.fill.Tensor,
                   aten.div.Scalar_mode, aten.floor_divide.Scalar, aten.fmod.Scalar,
                   aten.remainder.Scalar_Tensor, aten.copysign.Scalar, aten.xlogy.Scalar_Self,
                   aten.xlogy.Scalar_Other,
                   aten.clamp_max.default, aten.bitwise_and.Scalar, aten.bitwise_or.Scalar,
                   aten.bitwise_xor.Scalar, aten.bitwise_left_shift.Tensor_Scalar,
                   aten.bitwise_right_shift.Tensor_Scalar, aten._safe_softmax.default}
# Decompositions of ops with no CPU kernel (cuDNN's batch norm): checked against the native
# ops they equal, and against the real ops where CUDA runs ([Note: cuDNN's batch norm]).
CUDA_ONLY = {aten.cudnn_batch_norm.default, aten.cudnn_batch_norm_backward.default,
             aten.cudnn_grid_sampler.default, aten.cudnn_grid_sampler_backward.default}
# (OpInfo, dtype) pairs whose samples expose a known gap: run by test_known_gaps, which
# expects them to fail (strict xfail), and skipped by the main test.
KNOWN_GAPS: dict[tuple[str, torch.dtype], str] = {}


def _op(name: str) -> torch._ops.OpOverload:
    packet, overload = name.split(".")
    return getattr(getattr(aten, packet), overload)


def _samples(opinfo, dtype, device, requires_grad=False):
    for sample in opinfo.sample_inputs("cpu", dtype, requires_grad=requires_grad):
        if device == "meta":
            sample = sample.transform(lambda t: t.to("meta") if isinstance(t, torch.Tensor)
                                      else t)
        yield sample


def _runs_in_eager(opinfo, sample) -> bool:
    """Inputs eager rejects (int ** negative int, ...) are not our business."""
    try:
        opinfo.op(sample.input, *sample.args, **sample.kwargs)
    except Exception:
        return False
    return True


# The first samples of each OpInfo cover its interesting cases (broadcasting, 0-dim, scalars,
# non-contiguous); later ones repeat them at other sizes. Capped to keep CI within budget.
MAX_SAMPLES = {"cpu": 20, "meta": 6}
# OpInfos to run: those some decomposed op relies on, plus a few with extra variants.
TESTED_OPINFOS = sorted(set(FORWARD.values()) | {"div.trunc_rounding", "bitwise_not",
                                                  "max.binary", "min.binary"})


def run_opinfo(key: str, device: str, dtypes) -> Counter:
    opinfo, mode = OPINFOS[key], CrossRef()
    for dtype in dtypes if device == "cpu" else [d for d in dtypes if d in META_DTYPES]:
        if dtype not in opinfo.supported_dtypes("cpu"):
            continue
        torch.manual_seed(0)
        for i, sample in enumerate(_samples(opinfo, dtype, device)):
            if i >= MAX_SAMPLES[device]:
                break
            if _runs_in_eager(opinfo, sample):
                with mode:
                    opinfo.op(sample.input, *sample.args, **sample.kwargs)
    return mode.hits


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("key", TESTED_OPINFOS)
def test_decomposition_matches_eager(key, device):
    dtypes = [d for d in DTYPES if (key, d) not in KNOWN_GAPS]
    hits = run_opinfo(key, device, dtypes)
    if device == "cpu":
        for op in [_op(o) for o, k in FORWARD.items() if k == key]:
            assert hits[op] > 0, f"{op} was never reached by {key} samples"


def test_known_gaps_still_fail():
    """Each KNOWN_GAPS entry must still fail (fixing one means deleting its entry), and the
    gaps stay a small fraction of what is tested."""
    for key, dtype in KNOWN_GAPS:
        with pytest.raises(AssertionError):
            run_opinfo(key, "cpu", [dtype])
    assert len(KNOWN_GAPS) < 0.05 * len(TESTED_OPINFOS) * len(DTYPES)


def _grad_inputs(sample):
    leaves = torch.utils._pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("key", BACKWARD_OPINFOS)
def test_backward_decompositions_match_eager(key):
    """Gradients: run forward and backward eagerly under CrossRef, so every backward op
    autograd calls (gelu_backward, native_layer_norm_backward, ...) is checked against
    its decomposition on the very arguments the real backward passes."""
    opinfo, mode = OPINFOS[key], CrossRef()
    for dtype in (torch.float64, torch.float32):
        torch.manual_seed(0)
        for i, sample in enumerate(_samples(opinfo, dtype, "cpu", requires_grad=True)):
            if i >= MAX_SAMPLES["cpu"] or not _runs_in_eager(opinfo, sample):
                continue
            out = opinfo.op(sample.input, *sample.args, **sample.kwargs)
            outs = [o for o in torch.utils._pytree.tree_leaves(out)
                    if isinstance(o, torch.Tensor) and o.requires_grad]
            inputs = _grad_inputs(sample)
            if not outs or not inputs:
                continue
            grads = [torch.randn_like(o) for o in outs]
            with mode:
                out = opinfo.op(sample.input, *sample.args, **sample.kwargs)
                outs = [o for o in torch.utils._pytree.tree_leaves(out)
                        if isinstance(o, torch.Tensor) and o.requires_grad]
                torch.autograd.grad(outs, inputs, grads, allow_unused=True)
    for op in [_op(o) for o, k in BACKWARD.items() if k == key]:
        assert mode.hits[op] > 0, f"{op} was never reached by the backward of {key}"


def test_every_decomposition_is_tested():
    tested = set(COVERED_BY_HAND) | {_op(o) for o in FORWARD} | {_op(o) for o in BACKWARD} \
        | CUDA_ONLY
    assert set(decomposition_table) <= tested, set(decomposition_table) - tested
    assert set(FORWARD.values()) <= set(FORWARD_OPINFOS) & set(TESTED_OPINFOS)
    assert set(BACKWARD.values()) <= set(BACKWARD_OPINFOS)


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


def _bn_args(x):
    return x.float(), torch.randn(3), None, torch.randn(3), torch.rand(3) + 0.5


def _attention(x, causal=True, mask=None):
    q, k, v = (torch.randn(2, 2, 4, 8, dtype=x.dtype if x.is_floating_point() else None)
               for _ in range(3))
    return aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal,
                                                            attn_mask=mask)


def _attention_backward(x):
    q, k, v = (torch.randn(2, 2, 4, 8, requires_grad=True) for _ in range(3))
    mask = torch.randn(4, 4)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return torch.autograd.grad(out, (q, k, v), torch.randn_like(out))


def _safe_softmax(x):
    """A row of -inf (softmax would give nan; _safe_softmax gives zeros), along both dims."""
    dtype = x.dtype if x.is_floating_point() else torch.float32
    x = torch.where(torch.tensor([[True], [False]]), float("-inf"), x.to(dtype))
    return aten._safe_softmax(x, -1), aten._safe_softmax(x, 0, torch.float32)


HAND_CASES = {
    aten.pow.Scalar: lambda x: 2 ** x, aten.rsub.Scalar: lambda x: 2 - x,
    aten.detach.default: lambda x: x.detach(), aten.alias.default: aten.alias,
    aten._unsafe_view.default: lambda x: x.t().reshape(6),
    aten.lift_fresh.default: aten.lift_fresh,
    aten._native_batch_norm_legit_no_training.default: lambda x: (
        aten._native_batch_norm_legit_no_training(*_bn_args(x), 0.1, 1e-5)),
    aten._native_batch_norm_legit.no_stats: lambda x: aten._native_batch_norm_legit(
        x.float(), None, torch.randn(3), True, 0.1, 1e-5),
    aten._native_batch_norm_legit_functional.default: lambda x: (
        aten._native_batch_norm_legit_functional(*_bn_args(x), True, 0.1, 1e-5)),
    aten._scaled_dot_product_flash_attention_for_cpu.default: _attention,
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default: _attention_backward,
    aten.bernoulli.p: lambda x: aten.bernoulli.p(x.float(), 0.3),
    aten.native_dropout.default: lambda x: aten.native_dropout(x.float(), 0.3, True),
    aten.uniform.default: lambda x: aten.uniform(x.float(), -2, 3),
    aten.normal_functional.default: lambda x: aten.normal_functional(x.float(), 1.0, 2.0),
    aten.normal.Tensor_Tensor: lambda x: torch.normal(x.float(), x.float().abs() + 0.5),
    aten.normal.Tensor_float: lambda x: torch.normal(x.float(), 0.5),
    aten.normal.float_Tensor: lambda x: torch.normal(2.0, x.float().abs() + 0.5),
    aten.rand_like.default: lambda x: torch.rand_like(x.float()),
    aten.copy.default: lambda x: aten.copy(x, torch.tensor([1, 2, 3])),
    aten.fill.Tensor: lambda x: aten.fill(x, torch.tensor(7)),
    aten.div.Scalar_mode: lambda x: aten.div.Scalar_mode(x.float(), 0.7, rounding_mode="floor"),
    aten.floor_divide.Scalar: lambda x: aten.floor_divide.Scalar(x.float(), -1.5),
    aten.fmod.Scalar: lambda x: torch.fmod(x, 2), aten.remainder.Scalar_Tensor: lambda x: (
        torch.remainder(5, x.float() + 10)),
    aten.copysign.Scalar: lambda x: torch.copysign(x, -1.0),
    aten.xlogy.Scalar_Self: lambda x: torch.xlogy(2, x.abs() + 1),
    aten.xlogy.Scalar_Other: lambda x: torch.xlogy(x, 3),
    aten.clamp_max.default: lambda x: x.clamp_max(0.5),
    aten.bitwise_and.Scalar: lambda x: (x > 0) & True,
    aten.bitwise_or.Scalar: lambda x: x.long() | 6, aten.bitwise_xor.Scalar: lambda x: x.long() ^ 5,
    aten.bitwise_left_shift.Tensor_Scalar: lambda x: torch.bitwise_left_shift(x.long(), 2),
    aten.bitwise_right_shift.Tensor_Scalar: lambda x: torch.bitwise_right_shift(x.long(), 1),
    aten._safe_softmax.default: _safe_softmax,
}


@pytest.mark.parametrize("op", list(HAND_CASES), ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_hand_cases(op, dtype):
    x = (torch.randn(2, 3) * 3).to(dtype)
    torch.manual_seed(0)
    with CrossRef() as mode:
        HAND_CASES[op](x)
    assert mode.hits[op] >= 1


@pytest.mark.parametrize("training", [True, False])
def test_cudnn_batch_norm_decompositions(training):
    """cuDNN's batch norm is the native one with another calling convention: outputs,
    running statistics written in training, and the three gradients. On CPU against the
    native ops; on a GPU also against cuDNN's own (float32, where eager picks it)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, 5, device=device)
    weight, bias = torch.randn(3, device=device), torch.randn(3, device=device)
    stats = (torch.randn(3, device=device), torch.rand(3, device=device) + 0.5)
    grad = torch.randn_like(x)
    decomposed_stats = [t.clone() for t in stats]
    out, mean, invstd, reserve = decomposition_table[aten.cudnn_batch_norm.default](
        x, weight, bias, *decomposed_stats, training, 0.1, 1e-5)
    assert reserve.dtype == torch.uint8 and reserve.numel() == 0
    native_stats = [t.clone() for t in stats]
    reference = aten.cudnn_batch_norm if device == "cuda" else aten.native_batch_norm
    want = reference(x, weight, bias, *native_stats, training, 0.1, 1e-5)
    assert_same(out, want[0], "output")
    assert_same(decomposed_stats, native_stats, "running statistics")
    if not training:
        return
    assert_same([mean, invstd], list(want[1:3]), "saved statistics")
    grads = decomposition_table[aten.cudnn_batch_norm_backward.default](
        x, grad, weight, *stats, mean, invstd, 1e-5, reserve)
    if device == "cuda":
        expected = aten.cudnn_batch_norm_backward(x, grad, weight, *stats, mean, invstd, 1e-5,
                                                  want[3])
    else:
        expected = aten.native_batch_norm_backward(grad, x, weight, *stats, mean, invstd, True,
                                                   1e-5, [True, True, True])
    assert_same(list(grads), list(expected), "gradients", tol=dict(rtol=1e-4, atol=1e-4))


def test_cudnn_grid_sampler_decompositions():
    """[Note: cuDNN's grid sampler]: ``F.grid_sample`` with the settings ATen hands to cuDNN
    (bilinear, zeros, aligned corners), values and both gradients. On CPU against the
    general sampler through autograd; on a GPU also against cuDNN's own op."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 6, device=device, requires_grad=True)
    grid = (torch.rand(2, 4, 7, 2, device=device) * 2.4 - 1.2).requires_grad_()  # some outside
    want = torch.nn.functional.grid_sample(x, grid, "bilinear", "zeros", align_corners=True)
    grad = torch.randn_like(want)
    want_x, want_grid = torch.autograd.grad(want, (x, grid), grad)
    got = decomposition_table[aten.cudnn_grid_sampler.default](x.detach(), grid.detach())
    assert_same(got, want.detach(), "samples")
    got_x, got_grid = decomposition_table[aten.cudnn_grid_sampler_backward.default](
        x.detach(), grid.detach(), grad)
    assert_same([got_x, got_grid], [want_x, want_grid], "gradients",
                tol=dict(rtol=1e-4, atol=1e-4))
    other = torch.nn.functional.grid_sample(x, grid, align_corners=False)
    assert not torch.allclose(got, other)  # the corner convention is the one cuDNN uses
    if device == "cuda":
        assert_same(got, aten.cudnn_grid_sampler(x.detach(), grid.detach()), "cuDNN's")


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
    # operator.getitem picks the results of a prim with two (mean_m2, behind x.var)
    assert all(prims.is_prim(t) or t is operator.getitem for t in calls)
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


@pytest.mark.parametrize("kernel,stride,padding,dilation,ceil_mode,shape", [
    (3, 2, 1, 1, False, (2, 3, 9, 8)),   # the convnet's stem pool: overlapping windows
    (3, 1, 1, 1, False, (1, 2, 5, 6)),   # stride 1: each position in up to 9 windows
    (2, 3, 0, 1, False, (1, 2, 8, 7)),   # stride past the kernel: rows no window reads
    (3, 2, 1, 2, True, (1, 2, 9, 10)),   # dilation and ceil mode
    (2, 2, 1, 1, False, (1, 1, 3, 1)),   # one column: windows mostly padding
    ((3, 2), (2, 1), (1, 0), 1, True, (2, 1, 7, 5)),
])
def test_max_pool_backward_by_hand(kernel, stride, padding, dilation, ceil_mode, shape):
    """The max pool's gradient (a scatter_add to each window's winner) against eager's on the
    real backward's arguments (CrossRef), in geometries the OpInfo samples may not reach,
    ties included (a window of equal values sends its gradient to the first)."""
    torch.manual_seed(0)
    x = torch.randint(0, 4, shape).double().requires_grad_()  # small ints: many ties
    y = torch.nn.functional.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode)
    grad = torch.randn_like(y)
    with CrossRef() as mode:
        y = torch.nn.functional.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode)
        (got,) = torch.autograd.grad(y, x, grad)
    assert mode.hits[torch.ops.aten.max_pool2d_with_indices_backward.default] == 1
    (want,) = torch.autograd.grad(
        torch.nn.functional.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode), x, grad)
    torch.testing.assert_close(got, want)
