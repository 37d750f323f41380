"""Kernels that the Triton interpreter runs but a GPU would refuse to compile.

The interpreter checks a kernel's shapes only as far as a program runs, and an empty tensor
launches none: on an H200, the tiled kernel of ``x.t().abs()`` for a [0, 5] ``x`` failed to
compile ("Expected pointer argument to have shape [8, 1] but got [1, 1]"; [Note: dense
stores] in codegen/triton.py) while the interpreter passed it. Triton's front end (Python
AST to Triton IR, where shapes are checked) needs no GPU, so these tests compile every
kernel launched, for an sm_90 target, with the arguments and launch parameters it is
launched with, then let the interpreter run it. Each case is also checked against eager.
"""

from __future__ import annotations

import re

import inductor
import pytest
import torch
from inductor.codegen.triton import ensure_interpreter_if_no_gpu, interpreting
from inductor_testing import assert_close, device_for, prims_graph, shape_of, to_target


@pytest.fixture
def gpu_front_end(monkeypatch):
    """Compile (front end only, for sm_90) each kernel the interpreter is asked to run."""
    ensure_interpreter_if_no_gpu()
    if not interpreting():
        pytest.skip("a real GPU compiles every kernel anyway; see the module docstring")
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.compiler import ASTSource
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import mangle_type

    target = GPUTarget("cuda", 90, 32)
    backend = CUDABackend(target)
    compiled = []
    run = InterpretedFunction.run

    def compile_then_run(self, *args, grid, warmup, **kwargs):
        names = list(self.arg_names)
        signature = {n: mangle_type(a) for n, a in zip(names, args)}
        constants = {n: kwargs[n] for n in names[len(args):]}  # XBLOCK, RBLOCK, ...
        signature.update(dict.fromkeys(constants, "constexpr"))
        options = backend.parse_options({"num_warps": kwargs.get("num_warps", 4)})
        context = ir.context()
        ir.load_dialects(context)
        backend.load_dialects(context)
        source = ASTSource(for_the_gpu(self.fn), signature, constants)
        source.make_ir(target, options, backend.get_codegen_implementation(options),
                       backend.get_module_map(), context)  # raises CompilationError
        compiled.append(self.fn.__name__)
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)

    monkeypatch.setattr(InterpretedFunction, "run", compile_then_run)
    return compiled


def for_the_gpu(fn):
    """The ``@triton.jit`` function ``fn`` of a generated module, as the GPU compiler sees
    it: the module imported again with the interpreter off, so that ``fn`` and the helpers
    it calls (``add``, ``philox``) are ``JITFunction``s."""
    import importlib.util
    import inspect
    import os

    path = inspect.getsourcefile(fn)
    spec = importlib.util.spec_from_file_location(f"gpu_{fn.__name__}", path)
    module = importlib.util.module_from_spec(spec)
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "0"  # read when @triton.jit decorates
    try:
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = saved
    return getattr(module, fn.__name__)


def compile_and_run(fn, inputs, mode="default"):
    inputs = to_target(inputs, "triton")
    compiled = inductor.compile_fx_inner(prims_graph(fn, inputs), inputs, target="triton",
                                         mode=mode)
    return compiled, compiled(*inputs)


def sources(compiled) -> list[str]:
    return [v for k, v in compiled.artifacts.items() if k.startswith("kernels/")]


def test_the_front_end_catches_an_undersized_store_address(gpu_front_end):
    """The check itself can fail: the kernel the H200 refused, as it was printed."""
    import importlib.util
    import os
    import tempfile

    text = '''import triton
import triton.language as tl


@triton.jit
def triton_poi_fused_abs_0(in_ptr0, out_ptr0, ynumel, xnumel, YBLOCK: tl.constexpr,
                           XBLOCK: tl.constexpr):
    yindex = tl.program_id(1) * YBLOCK + tl.arange(0, YBLOCK)[:, None]
    ymask = yindex < ynumel
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[None, :]
    xmask = xindex < xnumel
    tmp0 = tl.load(in_ptr0 + (5 * xindex + yindex), ymask & xmask)
    tl.store(out_ptr0 + (xindex), tl.abs(tmp0), xmask)
'''
    path = os.path.join(tempfile.mkdtemp(), "undersized.py")  # the front end reads the file
    with open(path, "w") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location("undersized", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    empty = torch.empty(0)
    with pytest.raises(Exception, match="Expected pointer argument to have shape"):
        module.triton_poi_fused_abs_0[(0, 5)](empty, empty, 5, 0, YBLOCK=8, XBLOCK=1,
                                              num_warps=1)


@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (1, 1), (0, 40), (40, 1), (1, 40)])
def test_tiled_kernels_of_degenerate_shapes_compile(shape, gpu_front_end):
    x = torch.randn(shape)
    _, (out,) = compile_and_run(lambda p, a: p.abs(p.permute(a, [1, 0])), [x])
    assert_close(out, x.t().abs())
    assert gpu_front_end  # a kernel was launched (and so compiled)


@pytest.mark.parametrize("shape", [(0, 5), (3, 0), (1,), (37, 53), (40, 40, 1)])
def test_stores_of_index_independent_values_compile(shape, gpu_front_end):
    """``out = 3.0`` (``x.new_full``), flat and tiled (a transposed read beside it)."""
    x = torch.randn(shape)
    flip = list(reversed(range(len(shape))))

    def fn(p, a):
        three = p.full(shape_of(a), 3.0, dtype=torch.float32, device=device_for("triton"))
        return three, p.add(p.permute(a, flip), p.permute(three, flip))

    _, (three, out) = compile_and_run(fn, [x])
    assert_close(three, torch.full(shape, 3.0))
    assert_close(out, x.permute(flip) + 3.0)
    assert gpu_front_end


@pytest.mark.parametrize("shape,dims", [((0, 5), [1]), ((5, 0), [1]), ((1, 1), [1]),
                                        ((1, 300), [1]), ((300, 1), [1]), ((1, 9000), [1]),
                                        ((3, 5), [0, 1]), ((0, 5), [0])])
def test_reduction_kernels_of_degenerate_shapes_compile(shape, dims, gpu_front_end):
    """A reduction's block sizes are 1 along an extent of 0 or 1, in the heuristic and in
    every autotuning candidate, so its addresses cover its values ([Note: dense stores]):
    a sum, a constant stored beside it, and softmax's epilogue stored over [x, r]."""
    x = torch.randn(shape)

    def fn(p, a):
        total = p.sum(a, dims)
        ones = p.full(shape_of(total), 1.0, dtype=torch.float32, device=device_for("triton"))
        kept = [d for d in range(len(shape)) if d not in dims]
        back = p.broadcast_in_dim(total, shape_of(a), kept)
        return total, p.add(total, ones), p.sub(a, back)

    for mode in ("default", "max-autotune"):  # the candidates are compiled too
        _, (total, plus_one, centred) = compile_and_run(fn, [x], mode)
        want = x.sum(dims)
        assert_close(total, want, rtol=1e-5, atol=1e-4)  # float32 sums in another order
        assert_close(plus_one, want + 1, rtol=1e-5, atol=1e-4)
        assert_close(centred, x - x.sum(dims, keepdim=True), rtol=1e-5, atol=1e-4)
    assert gpu_front_end


def test_flat_address_that_depends_only_on_a_size(gpu_front_end):
    """``y + x[-1]`` with dynamic sizes reads at ``s0 - 1``: the same for every lane, so it
    is printed as a block (``tl.full``), as a constant address is."""
    import dynamo
    import primtorch

    dynamo.reset()
    compiled = []

    def backend(gm, example_inputs):
        compiled.append(inductor.compile_fx(gm, example_inputs, options={"target": "triton"}))
        return compiled[-1]

    def fn(x, y):
        return y + x[-1]

    old = dynamo.config.meta_decompositions
    dynamo.config.meta_decompositions = primtorch.decomposition_table
    try:
        opt = dynamo.optimize(backend, dynamic=True)(fn)
        for n in (5, 9):
            x, y = torch.randn(n), torch.randn(n + 2)
            torch.testing.assert_close(opt(x, y), fn(x, y))
    finally:
        dynamo.config.meta_decompositions = old
        dynamo.reset()
    kernel = "\n".join(sources_of(compiled[0]))
    assert re.search(r"tl\.load\(in_ptr\d \+ \(tl\.full\(\[XBLOCK\], [^)]*s\d", kernel), kernel
    assert gpu_front_end


def sources_of(compiled_graph) -> list[str]:
    return [v for k, v in compiled_graph.artifacts.items() if k.startswith("kernels/")]
