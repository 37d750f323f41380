"""Outputs for the inductor chapter's sections on loops that data steers: an embedding and
its backward (indirect loads and atomic adds), ``cat`` (masked loads), ``torch.max`` over
long rows (argmax), a wide LayerNorm (Welford), a long softmax (the online sum) and
dropout (random numbers in the kernel).

Kept apart from ``inductor.py`` (softmax, scheduling) so that each stays one sitting.
``generate(write)`` compiles each example, checks it against eager, and writes its kernel
(and where useful its loop IR or wrapper) under ``inductor/``. Triton kernels run in the
interpreter when there is no GPU.
"""

from __future__ import annotations

import re

import torch


def kernel_text(source: str, keep: tuple[str, ...] = ()) -> str:
    """The header comment, the helpers named in ``keep`` and the kernel (the last function);
    the rest of the module (imports, interpreter stand-ins, reduction helpers) is elided."""
    lines = source.splitlines()
    header = [line for line in lines[:4] if line.startswith(("# ", "// "))]
    starts = [i for i, line in enumerate(lines)
              if line.startswith(("@triton.jit", 'extern "C"'))]
    pieces = []
    for start in starts:
        end = next((i for i in starts if i > start), len(lines))
        name = re.search(r"def (\w+)|void (\w+)", "\n".join(lines[start:start + 2]))
        name = name and (name.group(1) or name.group(2))
        if start == starts[-1] or name in keep:
            pieces.append("\n".join(lines[start:end]).rstrip())
    return "\n".join(header + ["..."]) + "\n" + "\n\n\n".join(pieces)


def kernels(record) -> list[str]:
    return [text for key, text in record.artifacts.items() if key.startswith("kernels/")]


def generate(write) -> None:
    import torch.nn.functional as F
    from inductor.codegen import triton_reduction

    import driver

    torch.manual_seed(0)
    emb, pos = torch.nn.Embedding(50, 16), torch.randn(9, 16)

    def embed(tokens):
        return emb(tokens) + pos  # (B, T, C)

    driver.reset()
    tokens = torch.randint(0, 50, (4, 9))
    compiled = driver.compile(embed, options={"target": "triton"})
    out = compiled(tokens)
    torch.testing.assert_close(out, embed(tokens))
    (record,) = compiled.graphs
    (kernel,) = kernels(record)
    write("inductor/embedding_loop_ir.txt", record.artifacts["loop_ir"])
    write("inductor/embedding_triton.py", kernel_text(kernel))
    out.sum().backward()  # the weight's gradient: a scatter_add
    backward = [v for k, v in record.artifacts.items() if k.startswith("backward/kernels/")]
    write("inductor/embedding_backward_triton.py", kernel_text(backward[-1]))
    emb.weight.grad = None

    driver.reset()
    x, y = torch.randn(4, 5), torch.randn(4, 3)
    compiled = driver.compile(lambda a, b: torch.cat([a.sin(), b.cos()], 1),
                              options={"target": "cpp"})
    torch.testing.assert_close(compiled(x, y), torch.cat([x.sin(), y.cos()], 1))
    (kernel,) = kernels(compiled.graphs[0])
    write("inductor/cat_cpp.cpp", kernel_text(kernel))

    driver.reset()
    saved = triton_reduction.PERSISTENT_MAX
    triton_reduction.PERSISTENT_MAX = 64  # a looped kernel at a size quick to interpret
    try:
        x = torch.randn(4, 300)
        compiled = driver.compile(lambda a: torch.max(a, 1), options={"target": "triton"})
        values, indices = compiled(x)
        torch.testing.assert_close(values, x.max(1).values)
        assert torch.equal(indices, x.max(1).indices)
        (kernel,) = kernels(compiled.graphs[0])
        write("inductor/max_dim_triton.py", kernel_text(kernel))

        driver.reset()
        x, w, b = torch.randn(2, 300) * 3 + 1000, torch.randn(300), torch.randn(300)
        compiled = driver.compile(lambda a: F.layer_norm(a, (300,), w, b),
                                  options={"target": "triton"})
        torch.testing.assert_close(compiled(x), F.layer_norm(x, (300,), w, b),
                                   rtol=1e-4, atol=1e-4)
        (kernel,) = kernels(compiled.graphs[0])
        write("inductor/layernorm_welford_triton.py", kernel_text(kernel))

        driver.reset()  # [Note: online softmax]: the max and the sum in one loop
        x = torch.randn(4, 300)
        compiled = driver.compile(lambda a: torch.softmax(a, 1), options={"target": "triton"})
        torch.testing.assert_close(compiled(x), torch.softmax(x, 1))
        (kernel,) = kernels(compiled.graphs[0])
        write("inductor/softmax_online_triton.py", kernel_text(kernel))
    finally:
        triton_reduction.PERSISTENT_MAX = saved

    driver.reset()
    x, y = torch.randn(64, 32, requires_grad=True), torch.randn(64, 32)
    compiled = driver.compile(lambda a, b: F.dropout(a, 0.1) + b, options={"target": "triton"})
    out = compiled(x, y)
    kept = (out - y) != 0
    torch.testing.assert_close((out - y)[kept], (x / 0.9)[kept].detach())
    (record,) = compiled.graphs
    (kernel,) = kernels(record)
    write("inductor/dropout_triton.py", kernel_text(kernel, keep=("philox",)))
    write("inductor/dropout_triton_wrapper.py",
          record.artifacts["wrapper"].split("def call")[1].join(["def call", ""]))
