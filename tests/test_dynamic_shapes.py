"""Dynamic shapes end to end: one compiled graph for many sizes, through all four stages.

Eager is the oracle; the compile count (``compiled.graphs``) is the point: a GPT-style decoder
fed every length from 4 to 256 compiles at most twice (static at the first length, symbolic
from the second on), on every backend and both code generators.
Chapter: book/docs/dynamic-shapes.md.
"""

import os
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import driver

DEVICE = os.environ.get("MINIPT2_TEST_DEVICE", "cpu")
TARGETS = ["triton"] if DEVICE == "cuda" else ["triton", "cpp"]
BACKENDS = [("eager", None), ("aot_eager", None), *(("inductor", t) for t in TARGETS)]


@pytest.fixture(autouse=True)
def _fresh():
    driver.reset()
    torch.set_default_device(DEVICE)
    with warnings.catch_warnings():
        warnings.simplefilter("error", driver.api.FallbackWarning if hasattr(
            driver.api, "FallbackWarning") else UserWarning)
        yield
    torch.set_default_device(None)
    driver.reset()


def compile_with(model, backend, target, **kwargs):
    options = {"target": target} if target else None
    return driver.compile(model, backend=backend, options=options, **kwargs)


def source_of(compiled, prefix: str) -> str:
    return "\n".join(text for record in compiled.graphs for key, text in
                     record.artifacts.items() if key.startswith(prefix))


# ------------------------------------------------------------------ a small GPT-2 decoder


class Attention(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.c_attn, self.c_proj = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)
        self.n_head = n_head

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in (q, k, v))  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = Attention(n_embd, n_head)
        self.fc, self.proj = nn.Linear(n_embd, 4 * n_embd), nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class TinyGPT(nn.Module):
    """nanoGPT's inference path: the logits of the last position, ``(B, 1, vocab)``."""

    def __init__(self, vocab=64, block_size=256, n_embd=32, n_head=2, n_layer=2):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, n_embd), nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)  # (B, T, C)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x)[:, -1:, :])


ALL_LENGTHS = list(range(4, 257))
# Running the prims op by op in Python (aot_eager) takes longer: every third length; the
# Triton interpreter takes seconds per forward at the longest lengths: a few, spread out.
LENGTHS = {"aot_eager": list(range(4, 257, 3)) + [256], "interpreter": [4, 5, 6, 17, 48]}


@pytest.mark.parametrize("backend,target", BACKENDS, ids=lambda v: str(v))
def test_gpt_decode_compiles_at_most_twice(backend, target):
    torch.manual_seed(0)
    model = TinyGPT().eval()
    tokens = torch.randint(64, (2, 256))
    compiled = compile_with(model, backend, target)
    interpreted = target == "triton" and DEVICE != "cuda"
    lengths = LENGTHS.get("interpreter" if interpreted else backend, ALL_LENGTHS)
    with torch.no_grad():
        for length in lengths:
            idx = tokens[:, :length]
            torch.testing.assert_close(compiled(idx), model(idx), rtol=1e-4, atol=1e-5)
    assert len(compiled.graphs) == 2
    shape_guards = [str(g) for g in compiled.graphs[1].guards if g.source == "shapes"]
    assert "2 <= idx.size()[1]" in shape_guards
    assert not any("==" in g for g in shape_guards), shape_guards  # nothing specialised
    if backend == "inductor":
        wrapper = compiled.graphs[1].artifacts["wrapper"]
        assert "s0 = arg0.size(1)" in wrapper  # the length, read from the tokens
        # on a GPU attention stays one library kernel ([Note: library attention with
        # symbolic sizes]); on the CPU it is the math path, fused by inductor
        fused = "_scaled_dot_product_efficient_attention" in wrapper
        assert fused == (DEVICE == "cuda"), wrapper
        # the static graph too: a short sequence ([Note: short attention])
        static = compiled.graphs[0].artifacts["wrapper"]
        assert ("_scaled_dot_product_efficient_attention" in static) == (DEVICE == "cuda")


@pytest.mark.skipif(DEVICE != "cuda", reason="library attention is a CUDA kernel")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", ["causal", "plain", "mask", "head12", "grad"])
def test_symbolic_attention_on_the_gpu(case, dtype):
    """One library kernel where it applies, the math path where it does not (a mask, a head
    size that is not a multiple of 8, a gradient): equal to eager either way, in one
    symbolic graph."""
    head = 12 if case == "head12" else 16

    def attend(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                              is_causal=case in ("causal", "grad"))

    compiled = compile_with(attend, "inductor", "triton")
    torch.manual_seed(0)
    for length in (5, 9, 23):
        q, k, v = (torch.randn(2, 3, length, head, dtype=dtype, requires_grad=case == "grad")
                   for _ in range(3))
        mask = torch.randn(length, length, dtype=dtype) if case == "mask" else None
        with torch.no_grad() if case != "grad" else torch.enable_grad():
            got, want = compiled(q, k, v, mask), attend(q, k, v, mask)
        tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}
        torch.testing.assert_close(got, want, **tol)
        if case == "grad":
            g = torch.randn_like(want)
            torch.testing.assert_close(torch.autograd.grad(got, (q, k, v), g),
                                       torch.autograd.grad(want, (q, k, v), g), **tol)
    assert len(compiled.graphs) == 2
    wrapper = compiled.graphs[1].artifacts["wrapper"]
    fused = "_scaled_dot_product_efficient_attention" in wrapper
    assert fused == (case in ("causal", "plain")), wrapper


@pytest.mark.skipif(DEVICE != "cpu", reason="the CPU's flash attention kernel")
@pytest.mark.parametrize("target", ["cpp", "triton"])
@pytest.mark.parametrize("case", ["causal", "plain", "grad", "mask", "head_sizes"])
def test_symbolic_attention_on_the_cpu(case, target):
    """[Note: CPU attention with symbolic sizes]: ATen's CPU flash kernel where ATen itself
    would pick it (with a gradient too: its backward op is kept whole), the math path with a
    mask or unequal head sizes; equal to eager either way, in one symbolic graph."""

    def attend(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                              is_causal=case in ("causal", "grad"))

    compiled = compile_with(attend, "inductor", target)
    torch.manual_seed(0)
    for length in (5, 9, 23):
        q, k, v = (torch.randn(2, 3, length, 4 if case == "head_sizes" and i == 2 else 8,
                               requires_grad=case == "grad") for i in range(3))
        mask = torch.randn(length, length) if case == "mask" else None
        with torch.no_grad() if case != "grad" else torch.enable_grad():
            got, want = compiled(q, k, v, mask), attend(q, k, v, mask)
        torch.testing.assert_close(got, want)
        if case == "grad":
            g = torch.randn_like(want)
            torch.testing.assert_close(torch.autograd.grad(got, (q, k, v), g),
                                       torch.autograd.grad(want, (q, k, v), g))
    assert len(compiled.graphs) == 2
    graphs = "".join(v for k, v in compiled.graphs[1].artifacts.items() if "wrapper" in k)
    flash = "_scaled_dot_product_flash_attention_for_cpu" in graphs
    assert flash == (case in ("causal", "plain", "grad")), graphs
    if case == "grad":
        assert "_scaled_dot_product_flash_attention_for_cpu_backward" in graphs


# ------------------------------------------------------------------ an MLP over batch sizes


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 32), nn.GELU(), nn.Linear(32, 32), nn.LayerNorm(32),
                         nn.Linear(32, 5))


@pytest.mark.parametrize("backend,target", BACKENDS, ids=lambda v: str(v))
def test_mlp_training_over_batch_sizes(backend, target):
    model, reference = mlp(), mlp()
    compiled = compile_with(model, backend, target)
    for batch in (3, 8, 5, 17, 2, 64):
        x = torch.randn(batch, 12)
        x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
        out, want = compiled(x1), reference(x2)
        torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)
        (out * out).sum().backward()
        (want * want).sum().backward()
        torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-4, atol=1e-5)
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
            p.grad = q.grad = None
    assert len(compiled.graphs) == 2  # batch 3 static, then one graph for every batch


def sum_and_double(x):
    y = torch.sin(x) * x
    return y.sum(), y * 2  # the loss below uses only the first output


@pytest.mark.parametrize("backend,target", BACKENDS[1:], ids=lambda v: str(v))
def test_missing_gradients_take_each_calls_shape(backend, target):
    """An output the loss does not use gets zeros as its gradient (the backward graph reads
    them). With symbolic sizes they must have this call's shape, not the first call's:
    [Note: the Function's fixed cost] keeps the first call's shapes only for static programs."""
    compiled = compile_with(sum_and_double, backend, target)
    for batch in (3, 8, 5, 17):
        x = torch.randn(batch, 4)
        x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
        compiled(x1)[0].backward()
        sum_and_double(x2)[0].backward()
        torch.testing.assert_close(x1.grad, x2.grad)
    assert len(compiled.graphs) == 2


@pytest.mark.parametrize("target", TARGETS)
def test_kernels_take_sizes_as_arguments(target):
    model = mlp()
    compiled = compile_with(model, "inductor", target, dynamic=True)
    with torch.no_grad():
        for batch in (7, 33):
            x = torch.randn(batch, 12)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    assert len(compiled.graphs) == 1
    kernels = source_of(compiled, "kernels/")
    assert ("int64_t s0" if target == "cpp" else ", s0,") in kernels
    wrapper = compiled.graphs[0].artifacts["wrapper"]
    assert "s0 = arg0.size(0)" in wrapper and "empty_strided((s0, 32)" in wrapper


# ------------------------------------------------------------------ shape-dependent Python


def split_heads(x, w):
    B = x.shape[0]
    half = x.shape[1] // 2
    h = (x @ w).view(B, -1, 4)  # (B, T * 8 / 4, 4)
    return h[:, :half].softmax(-1).sum(1) * half


@pytest.mark.parametrize("backend,target", BACKENDS, ids=lambda v: str(v))
def test_shape_arithmetic_stays_in_one_graph(backend, target):
    w = torch.randn(6, 8)
    compiled = compile_with(split_heads, backend, target, dynamic=True)
    for batch, width in ((3, 6), (5, 6), (9, 6)):
        x = torch.randn(batch, width, 6).reshape(batch * width, 6)[: batch * width]
        x = x.reshape(batch, width, 6)
        torch.testing.assert_close(compiled(x, w), split_heads(x, w), rtol=1e-4, atol=1e-5)
    assert len(compiled.graphs) == 1
    guards = [str(g) for g in compiled.graphs[0].guards]
    assert "2 <= x.size()[0]" in guards and "x.size()[1] == 6" not in guards
    report = driver.explain(split_heads)(torch.randn(4, 6, 6), w)
    assert report.graph_break_count == 0


def test_symbolic_matmul_runs_as_python_in_both_tracers(monkeypatch):
    """[Note: composite ops and symbolic sizes]: ``x @ w`` on symbolic sizes goes through
    dynamo/composites.py in dynamo's example values and in aotautograd's trace (with
    PyTorch 2.11 ATen's own C++ ``matmul`` refuses symbolic tensors)."""
    from dynamo import composites

    seen = []
    for name, python_version in list(composites.OVERRIDES.items()):
        def spy(a, b, _version=python_version):
            seen.append(type(a).__name__)
            return _version(a, b)
        monkeypatch.setitem(composites.OVERRIDES, name, spy)
    compiled = compile_with(split_heads, "aot_eager", None, dynamic=True)
    x, w = torch.randn(3, 6, 6), torch.randn(6, 8)
    torch.testing.assert_close(compiled(x, w), split_heads(x, w), rtol=1e-4, atol=1e-5)
    assert len(seen) >= 2, seen  # once for dynamo's example value, once in aotautograd


def branch_on_length(x):
    if x.shape[0] > 8:
        return x.cumsum(0) * 2 if False else x.sum(0) + x.shape[0]
    return x.amax(0) - x.shape[0]


@pytest.mark.parametrize("backend,target", BACKENDS, ids=lambda v: str(v))
def test_failing_relation_recompiles_exactly_once(backend, target):
    compiled = compile_with(branch_on_length, backend, target, dynamic=True)
    for n in (10, 12, 40):
        x = torch.randn(n, 3)
        torch.testing.assert_close(compiled(x), branch_on_length(x))
    assert len(compiled.graphs) == 1
    assert "x.size()[0] > 8" in [str(g) for g in compiled.graphs[0].guards]
    for n in (4, 6, 2, 8, 9, 30):  # the relation fails once, then both graphs serve
        x = torch.randn(n, 3)
        torch.testing.assert_close(compiled(x), branch_on_length(x))
    assert len(compiled.graphs) == 2


@pytest.mark.parametrize("target", TARGETS)
def test_mark_dynamic_compiles_once(target):
    model = mlp()
    compiled = compile_with(model, "inductor", target)
    with torch.no_grad():
        for batch in (4, 6, 9):
            x = torch.randn(batch, 12)
            driver.mark_dynamic(x, 0)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    assert len(compiled.graphs) == 1


# ------------------------------------------------------------------ dtypes, strides, size 1


def rows(x, y):
    return (x.float() * y).softmax(-1) + x.float().mean(-1, keepdim=True)


@pytest.mark.parametrize("target", [*TARGETS, "fallback"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_dtypes_and_strides_with_symbolic_sizes(target, dtype):
    compiled = compile_with(rows, "inductor", target, dynamic=True)
    for n, m in ((3, 5), (7, 5), (4, 11), (1, 5), (6, 1)):
        x = (torch.randn(m, n) * 4).to(dtype).t()  # transposed: strides (1, n)
        y = torch.randn(n, m)
        tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}
        torch.testing.assert_close(compiled(x, y), rows(x, y), **tol)
    # (3, 5), (7, 5), (4, 11) share one graph; size 1 is specialised ([Note: 0/1
    # specialization]), each size-1 case compiles its own
    assert len(compiled.graphs) <= 3


def empty_rows(x):
    return x.sum(-1) * 2


@pytest.mark.parametrize("target", TARGETS)
def test_empty_and_unit_sizes(target):
    compiled = compile_with(empty_rows, "inductor", target, dynamic=True)
    for shape in ((0, 4), (1, 4), (5, 4), (5, 0), (9, 4)):
        x = torch.randn(shape)
        torch.testing.assert_close(compiled(x), empty_rows(x))


# ------------------------------------------------------------------ data-dependent sizes


def keep_positive(x):
    y = x * 2
    kept = y[y > 0]  # its size depends on the data: a graph break
    return kept.sum() + y.shape[0]


@pytest.mark.parametrize("backend,target", BACKENDS, ids=lambda v: str(v))
def test_boolean_mask_breaks_cleanly(backend, target):
    compiled = compile_with(keep_positive, backend, target, dynamic=True)
    for n in (5, 8, 13):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), keep_positive(x))
    report = driver.explain(keep_positive)(torch.randn(6))
    assert report.graph_break_count == 1
    assert "depends on the data" in report.break_reasons[0]


def test_swapped_torch_inductor_compiles_per_shape():
    """PyTorch's Inductor cannot read our symbolic sizes: the swap backend compiles it once
    per input shape instead, so a symbolic graph from our dynamo stays correct."""
    def scaled(x):
        return (x.sin() * x.shape[0]).sum(0)

    compiled = driver.compile(scaled, backend="torch-inductor")
    for n in (3, 4, 5):
        x = torch.randn(n, 4)
        torch.testing.assert_close(compiled(x), scaled(x))
    assert len(compiled.graphs) == 2  # ours: static, then symbolic


@pytest.mark.parametrize("target", TARGETS)
def test_views_with_symbolic_strides_reach_library_calls(target):
    """A reshape over symbolic sizes indexes with ``//`` and ``%`` (``32*s0*(v0 // s0) +
    32*(v0 % s0)``); simplified inside the loops' ranges it is a stride, so ``mm`` gets a
    ``reinterpret`` view of the buffer and no kernel copies it ([Note: views into library
    calls], ``view_index``)."""
    torch.manual_seed(0)
    w1, w2 = torch.randn(16, 32), torch.randn(8, 5)

    def f(x):
        h = x @ w1  # (B, 32), a library call's buffer
        heads = h.view(x.shape[0], 4, 8)  # split the last dim: a view
        return heads.reshape(-1, 8) @ w2  # (4*B, 8): rows of the same memory

    compiled = compile_with(f, "inductor", target, dynamic=True)
    for batch in (3, 7):
        x = torch.randn(batch, 16)
        torch.testing.assert_close(compiled(x), f(x), rtol=1e-5, atol=1e-5)
    assert len(compiled.graphs) == 1
    record = compiled.graphs[0]
    assert not any("copy" in key for key in record.artifacts if key.startswith("kernels/"))
    assert "reinterpret(buf" in record.artifacts["wrapper"]


@pytest.mark.parametrize("target", TARGETS)
def test_an_input_written_in_place_keeps_its_symbolic_sizes(target):
    """A graph over symbolic sizes that writes an input in place: the sizes are read from
    the input's placeholder (the trace once looked them up on the written value's node and
    failed, so the graph ran eagerly). fullgraph=True: a failure raises."""

    def f(buf, x):
        buf.mul_(0.5)
        return (buf + x).sum()

    compiled = driver.compile(f, dynamic=True, fullgraph=True, options={"target": target})
    for n in (8, 13, 21):
        mine, theirs, x = torch.ones(n), torch.ones(n), torch.randn(n)
        torch.testing.assert_close(compiled(mine, x), f(theirs, x))
        torch.testing.assert_close(mine, theirs)
    assert len(compiled.graphs) == 1
