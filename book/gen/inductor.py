"""Outputs for the inductor chapter: a softmax compiled to one Triton and one C++ kernel.

``generate(write)`` compiles ``torch.softmax(x * 0.125, -1)`` for both targets (the Triton
one runs in the interpreter when there is no GPU) and writes, under ``inductor/``, the loop
IR, the fusion log, the kernels and the wrappers, after checking the result against eager.
"""

from __future__ import annotations

import torch


def softmax(x):
    return torch.softmax(x * 0.125, -1)


def kernel_only(source: str, target: str) -> str:
    """The header comment and the kernel itself, without the helpers printed above it."""
    lines = source.splitlines()
    start = "@triton.jit" if target == "triton" else 'extern "C"'
    at = max(i for i, line in enumerate(lines) if line.startswith(start))
    return "\n".join(lines[:2] + ["..."] + lines[at:])


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
        write(f"inductor/softmax_{target}_wrapper.py",
              record.artifacts["wrapper"].split("def call")[1].join(["def call", ""]))
        if target == "cpp":
            write("inductor/softmax_loop_ir.txt", record.artifacts["loop_ir"])
            write("inductor/softmax_fusion.txt", record.artifacts["fusion"])
