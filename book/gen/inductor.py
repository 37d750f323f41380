"""Outputs for the inductor chapter: a softmax compiled to one Triton and one C++ kernel,
and the scheduling, tiling and autotuning examples.

``generate(write)`` compiles ``torch.softmax(x * 0.125, -1)`` for both targets (the Triton
one runs in the interpreter when there is no GPU) and writes, under ``inductor/``, the loop
IR, the fusion log, the kernels and the wrappers, after checking the result against eager.
Then: the fusion log of a LayerNorm backward (horizontal fusion), the wrapper of
``gelu(x @ w + b)`` (one kernel after the library call), the flat kernel of gelu_bias, the
tiled kernel of
``x.t() + b``, and a wrapper compiled with ``mode="max-autotune"``.
"""

from __future__ import annotations

import itertools

import torch


def softmax(x):
    return torch.softmax(x * 0.125, -1)


def gelu_bias(x, b):
    return torch.nn.functional.gelu(x + b) * 0.5 + x


def kernel_only(source: str, target: str) -> str:
    """The header comment and the kernel itself, without the helpers printed above it."""
    lines = source.splitlines()
    start = "@triton.jit" if target == "triton" else 'extern "C"'
    at = max(i for i, line in enumerate(lines) if line.startswith(start))
    header = list(itertools.takewhile(lambda line: line.startswith(("# ", "// ")), lines))
    return "\n".join(header + ["..."] + lines[at:])


def generate(write) -> None:
    import driver

    for target, ext in (("triton", "py"), ("cpp", "cpp")):
        driver.reset()
        x = torch.randn(8, 100)
        compiled = driver.compile(softmax, options={"target": target})
        torch.testing.assert_close(compiled(x), softmax(x))
        (record,) = compiled.graphs
        kernels = [v for k, v in record.artifacts.items() if k.startswith("kernels/")]
        assert len(kernels) == 1, f"softmax should be one {target} kernel, got {len(kernels)}"
        write(f"inductor/softmax_{target}.{ext}", kernel_only(kernels[0], target))
        write(f"inductor/softmax_{target}_wrapper.py", call_only(record.artifacts["wrapper"]))
        if target == "cpp":
            write("inductor/softmax_loop_ir.txt", record.artifacts["loop_ir"])
            write("inductor/softmax_fusion.txt", record.artifacts["fusion"])
    scheduling_examples(write)


def call_only(wrapper: str) -> str:
    return wrapper.split("def call")[1].join(["def call", ""])


def scheduling_examples(write) -> None:
    """Horizontal fusion in a backward pass, an epilogue after mm, tiling, autotuning."""
    import torch.nn.functional as F

    import driver

    driver.reset()
    x, w, b = (torch.randn(8, 37, requires_grad=True), torch.randn(37, requires_grad=True),
               torch.randn(37, requires_grad=True))
    compiled = driver.compile(lambda x, w, b: F.layer_norm(x, (37,), w, b),
                              options={"target": "cpp"})
    compiled(x, w, b).sum().backward()
    (record,) = compiled.graphs
    write("inductor/layernorm_backward_fusion.txt", record.artifacts["backward/fusion"])

    driver.reset()
    x, w, b = torch.randn(8, 16), torch.randn(16, 24), torch.randn(24)
    compiled = driver.compile(lambda x, w, b: F.gelu(x @ w + b), options={"target": "cpp"})
    torch.testing.assert_close(compiled(x, w, b), F.gelu(x @ w + b))
    (record,) = compiled.graphs
    write("inductor/linear_gelu_wrapper.py", call_only(record.artifacts["wrapper"]))

    driver.reset()
    x, b = torch.randn(64, 2048), torch.randn(2048)
    compiled = driver.compile(gelu_bias, options={"target": "triton"})
    torch.testing.assert_close(compiled(x, b), gelu_bias(x, b))
    (record,) = compiled.graphs
    (kernel,) = [v for k, v in record.artifacts.items() if k.startswith("kernels/")]
    assert "xmask" not in kernel and "evict_last" in kernel, "[Note: the flat kernel's ...]"
    write("inductor/gelu_bias_triton.py", kernel_only(kernel, "triton"))

    driver.reset()
    x, b = torch.randn(37, 53), torch.randn(37)
    compiled = driver.compile(lambda x, b: x.t() + b, options={"target": "triton"})
    torch.testing.assert_close(compiled(x, b), x.t() + b)
    (record,) = compiled.graphs
    (kernel,) = [v for k, v in record.artifacts.items() if k.startswith("kernels/")]
    assert "YBLOCK" in kernel, "a transposed read should make a tiled kernel"
    write("inductor/transpose_triton.py", kernel_only(kernel, "triton"))
    write("inductor/transpose_triton_wrapper.py", call_only(record.artifacts["wrapper"]))

    driver.reset()
    compiled = driver.compile(lambda x: x.t().sin(), mode="max-autotune",
                              options={"target": "triton"})
    torch.testing.assert_close(compiled(x), x.t().sin())
    (record,) = compiled.graphs
    write("inductor/autotune_wrapper.py", call_only(record.artifacts["wrapper"]))
    template_example(write)
    last_program_example(write)
    column_producer_example(write)


def last_program_example(write) -> None:
    """A mean of 512 x 256 values and a bias gradient's column sum, split as on a GPU
    (this machine may have none, so CPU tensors are let split too): each pair of kernels is
    one, whose last programs finish ([Note: the last program finishes])."""
    from inductor import split_reduction

    import driver

    x = torch.randn(512, 256)
    fn = lambda a: (a.mean(), a.sum(0))  # noqa: E731
    devices = split_reduction.SPLIT_DEVICES
    split_reduction.SPLIT_DEVICES = devices | {"cpu"}
    try:
        driver.reset()
        compiled = driver.compile(fn, options={"target": "triton"})
        for got, want in zip(compiled(x), fn(x)):
            torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-4)
    finally:
        split_reduction.SPLIT_DEVICES = devices
    (record,) = compiled.graphs
    kernels = [v for k, v in record.artifacts.items() if k.startswith("kernels/")]
    assert len(kernels) == 2 and all("_then_" in k for k in kernels), "two one-launch kernels"
    mean = next(k for k in kernels if "div" in k.split("@triton.jit")[-1])
    write("inductor/last_program_triton.py", kernel_only(mean, "triton"))
    write("inductor/last_program_wrapper.py", call_only(record.artifacts["wrapper"]))
    verdicts = [line for line in record.artifacts["fusion"].splitlines() if "finished by" in line]
    write("inductor/last_program_fusion.txt", "\n".join(verdicts) + "\n")


def column_producer_example(write) -> None:
    """A bias gradient's column sum with the pointwise loop that makes the gradient, split
    as on a GPU: one kernel, placed "rx" ([Note: a column sum's producer]), whose last
    programs finish the sum."""
    from inductor import split_reduction

    import driver

    def step(g, a):
        t = torch.tanh(a)
        grad = g * (1 - t * t)  # tanh's backward: the gradient the multiplies read too
        return grad, grad.sum(0)  # ... and the bias gradient

    g, a = torch.randn(4096, 96), torch.randn(4096, 96)
    devices = split_reduction.SPLIT_DEVICES
    split_reduction.SPLIT_DEVICES = devices | {"cpu"}
    try:
        driver.reset()
        compiled = driver.compile(step, options={"target": "triton"})
        for got, want in zip(compiled(g, a), step(g, a)):
            torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-4)
    finally:
        split_reduction.SPLIT_DEVICES = devices
    (record,) = compiled.graphs
    (kernel,) = [v for k, v in record.artifacts.items() if k.startswith("kernels/")]
    write("inductor/column_producer_fusion.txt", record.artifacts["fusion"])
    body = kernel.split("@triton.jit")[-3]  # the first kernel's: producer and partial sums
    write("inductor/column_producer_triton.py", "@triton.jit" + body.rstrip() + "\n")


def template_example(write) -> None:
    """A Linear and GELU under ``max-autotune`` with the matmul template forced on
    (``MINIPT2_MM_TEMPLATE=1``: this machine may have no GPU to time the choice on): the
    template kernel with its epilogue, the wrapper, and the fusion log's verdict."""
    import os

    import driver

    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 96)
    x = torch.randn(48, 64)
    fn = lambda a: torch.nn.functional.gelu(layer(a))  # noqa: E731
    before = os.environ.get("MINIPT2_MM_TEMPLATE")
    os.environ["MINIPT2_MM_TEMPLATE"] = "1"
    try:
        driver.reset()
        compiled = driver.compile(fn, mode="max-autotune", options={"target": "triton"})
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), fn(x), atol=1e-4, rtol=1e-4)
    finally:
        if before is None:
            del os.environ["MINIPT2_MM_TEMPLATE"]
        else:
            os.environ["MINIPT2_MM_TEMPLATE"] = before
    (record,) = compiled.graphs
    (kernel,) = [v for k, v in record.artifacts.items() if k.startswith("kernels/")]
    assert "tl.dot(" in kernel, "the Linear should have become a template"
    write("inductor/mm_template_triton.py", kernel_only(kernel, "triton"))
    write("inductor/mm_template_wrapper.py", call_only(record.artifacts["wrapper"]))
    verdicts = [line for line in record.artifacts["fusion"].splitlines() if "= mm:" in line]
    write("inductor/mm_template_fusion.txt", "\n".join(verdicts) + "\n")
