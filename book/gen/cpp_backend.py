"""Outputs for the C++ backend chapter (book/docs/cpp-backend.md).

``generate(write)`` compiles, on the C++ target, ``gelu(x + b) * 0.5 + x`` (one kernel whose
loop calls ``std::erf``: vectorised through libmvec), a small MLP (its weights reach ``mm``
as strided views) and the same MLP on the fallback target; it checks each against eager
and writes the kernel and the wrappers under ``cpp_backend/``.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F


def gelu_bias(x, b):
    return F.gelu(x + b) * 0.5 + x


def kernel_only(source: str) -> str:
    lines = source.splitlines()
    at = max(i for i, line in enumerate(lines) if line.startswith('extern "C"'))
    header = list(itertools.takewhile(lambda line: line.startswith(("# ", "// ")), lines))
    return "\n".join(header + ["..."] + lines[at:])


def call_only(wrapper: str) -> str:
    return wrapper.split("def call")[1].join(["def call", ""])


def generate(write) -> None:
    import driver

    driver.reset()
    x, b = torch.randn(64, 256), torch.randn(256)
    compiled = driver.compile(gelu_bias, options={"target": "cpp"})
    torch.testing.assert_close(compiled(x, b), gelu_bias(x, b))
    (record,) = compiled.graphs
    (kernel,) = [v for k, v in record.artifacts.items() if k.startswith("kernels/")]
    write("cpp_backend/gelu_bias.cpp", kernel_only(kernel))

    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 8))
    x = torch.randn(4, 16)
    for target in ("cpp", "fallback"):
        driver.reset()
        compiled = driver.compile(model, options={"target": target})
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x))
        (record,) = compiled.graphs
        write(f"cpp_backend/mlp_{target}_wrapper.py", call_only(record.artifacts["wrapper"]))
