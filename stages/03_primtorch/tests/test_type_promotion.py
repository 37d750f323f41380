"""Our promotion rules against torch.result_type, and the elementwise helpers' output."""

import itertools

import pytest
import torch
from primtorch import prims
from primtorch.prims_common import (
    ELEMENTWISE_TYPE_PROMOTION_KIND as KIND,
)
from primtorch.prims_common import (
    broadcast_shapes,
    broadcast_to,
    elementwise_args,
    elementwise_dtypes,
    result_type,
)

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int32, torch.int64, torch.bfloat16,
          torch.float16, torch.float32, torch.float64, torch.complex64]
SCALARS = [True, 3, -1000, 2.5, 1j]


def operands():
    """Tensors with dims, 0-dim tensors and Python numbers of every category."""
    for dtype in DTYPES:
        yield torch.zeros(2, dtype=dtype)
        yield torch.zeros((), dtype=dtype)
    yield from SCALARS


def test_result_type_matches_torch():
    cases = 0
    for a, b in itertools.product(list(operands()), repeat=2):
        if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor):
            continue
        assert result_type(a, b) == torch.result_type(a, b), (a, b)
        cases += 1
    assert cases > 300
    assert result_type(torch.zeros(2, dtype=torch.int8)) == torch.int8


def test_result_type_three_operands():
    # where-like and clamp-like operand mixes, against torch ops that take three operands
    x = torch.zeros(3, dtype=torch.int32)
    lo = torch.zeros((), dtype=torch.float64)
    assert result_type(x, lo, 2) == torch.clamp(x, lo, torch.tensor(2)).dtype
    y = torch.zeros(3, dtype=torch.bfloat16)
    assert result_type(y, lo, 2.5) == torch.bfloat16
    assert result_type(torch.zeros(3, dtype=torch.int8), 2, True) == torch.int8


@pytest.mark.parametrize("dtype", [torch.bool, torch.int32, torch.bfloat16, torch.float64])
def test_elementwise_dtypes(dtype):
    t = torch.zeros(2, dtype=dtype)
    compute, result = elementwise_dtypes(t, kind=KIND.INT_TO_FLOAT)
    assert result == torch.sin(t).dtype
    assert compute == (torch.float32 if result == torch.bfloat16 else result)
    assert elementwise_dtypes(t, t, kind=KIND.ALWAYS_BOOL)[1] == torch.bool
    assert elementwise_dtypes(t, kind=KIND.NO_OPMATH) == (dtype, dtype)
    if dtype == torch.bool:
        assert elementwise_dtypes(t, t, kind=KIND.BOOL_TO_LONG)[1] == torch.int64


@pytest.mark.parametrize("shapes", [[(3, 1), (4,)], [(), (2, 3)], [(1,), (5, 1, 2), (2,)],
                                    [(0, 1), (1, 3)]])
def test_broadcast_shapes(shapes):
    assert tuple(broadcast_shapes(*shapes)) == torch.broadcast_shapes(*shapes)


def test_broadcast_shapes_rejects():
    with pytest.raises(Exception, match="broadcast"):
        broadcast_shapes((3,), (4,))


@pytest.mark.parametrize("shape,target", [((3,), (2, 3)), ((2, 1), (2, 5)), ((), (4, 1)),
                                          ((1, 1, 3), (2, 4, 3)), ((2, 3), (2, 3))])
def test_broadcast_to(shape, target):
    a = torch.randn(shape)
    assert torch.equal(broadcast_to(a, target), a.expand(target))


def test_elementwise_args_inserts_explicit_prims():
    a = torch.arange(6, dtype=torch.int32).reshape(2, 3).t()  # non-contiguous int
    b = torch.tensor(0.5, dtype=torch.float64)  # 0-dim, but float beats int: float64
    (x, y, z), result = elementwise_args(a, b, 2, kind=KIND.DEFAULT)
    assert result == (a + b + 2).dtype == torch.float64 == x.dtype == y.dtype == z.dtype
    assert x.shape == y.shape == z.shape == (3, 2)
    assert torch.equal(z, torch.full((3, 2), 2.0))
    assert torch.equal(prims.add(x, y), a + b)
    f = torch.ones(2, 3, dtype=torch.bfloat16)
    (x, y), result = elementwise_args(f, b, kind=KIND.DEFAULT)
    assert result == torch.bfloat16 and x.dtype == y.dtype == torch.float32  # opmath
