"""Outputs of the dynamic-shapes chapter: a graph with size arithmetic and its guards, the
guards of automatic dynamic (static first, then symbolic), a relation guard and its
recompile, aotautograd's size nodes, and inductor's kernels and wrapper with sizes as
arguments. Each example is compiled and checked against eager when the book is built.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

W = torch.randn(6, 8)  # a global: dynamic=True makes only the arguments' sizes symbolic


def heads(x):
    B, T = x.shape[0], x.shape[1]
    h = (x @ W).view(B, -1, 4)  # (B, 2T, 4)
    return h[:, : T // 2].softmax(-1)


def branchy(x):
    if x.shape[0] > 4:
        return x.sum(0)
    return x.mean(0)


def decoder(idx, wte, wpe):
    pos = torch.arange(idx.shape[1])
    x = wte[idx] + wpe[pos]  # (B, T, C)
    return F.layer_norm(x, x.shape[-1:])[:, -1]


def rows(x):
    return torch.softmax(x * 2, dim=-1)


def guards_of(record, sources: tuple[str, ...] = ("shapes",), names: tuple[str, ...] = ()):
    return "\n".join(str(g) for g in record.guards
                     if g.source in sources or any(str(g).startswith(n) for n in names))


def kernel_only(source: str) -> str:
    """The header comment and the last function of a kernel module (helpers elided)."""
    lines = source.splitlines()
    header = [line for line in lines[:4] if line.startswith(("# ", "// "))]
    start = max(i for i, line in enumerate(lines)
                if line.startswith(("@triton.jit", 'extern "C"')))
    return "\n".join([*header, "...", *lines[start:]])


def generate(write) -> None:
    import driver

    torch.manual_seed(0)
    # 1. size arithmetic in one graph, and its guards
    driver.reset()
    compiled = driver.compile(heads, backend="eager", dynamic=True)
    for batch, length in ((3, 10), (5, 14), (2, 9)):
        x = torch.randn(batch, length, 6)
        torch.testing.assert_close(compiled(x), heads(x))
    (record,) = compiled.graphs
    write("dynamic/heads_graph.txt", record.gm.print_readable(print_output=False))
    write("dynamic/heads_guards.txt", guards_of(record, names=("x.",)))

    # 2. automatic dynamic: lengths 4, 5, 6, ... compile twice
    driver.reset()
    wte, wpe = torch.randn(50, 16), torch.randn(64, 16)
    compiled = driver.compile(decoder, backend="eager")
    for length in range(4, 12):
        idx = torch.randint(0, 50, (2, length))
        torch.testing.assert_close(compiled(idx, wte, wpe), decoder(idx, wte, wpe))
    first, second = compiled.graphs
    write("dynamic/automatic_guards.txt",
          "# graph 0 (length 4): static\n" + guards_of(first, (), ("idx.size",)) +
          "\n# graph 1 (length 5, then every length): symbolic\n" +
          guards_of(second, ("shapes",), ("idx.size",)))

    # 3. a relation guard, and the one recompile when it flips
    driver.reset()
    compiled = driver.compile(branchy, backend="eager", dynamic=True)
    for n in (6, 9, 3, 2):
        x = torch.randn(n, 5)
        torch.testing.assert_close(compiled(x), branchy(x))
    write("dynamic/branch_guards.txt", "\n".join(
        f"# graph {i}\n" + guards_of(r) for i, r in enumerate(compiled.graphs)))

    # 4. aotautograd: sizes in the graph
    driver.reset()
    compiled = driver.compile(rows, backend="aot_eager", dynamic=True)
    x = torch.randn(3, 7)
    torch.testing.assert_close(compiled(x), rows(x))
    (record,) = compiled.graphs
    write("dynamic/rows_prims_graph.txt",
          record.compiled.fw_graph.print_readable(print_output=False))

    # 5. inductor: sizes as kernel arguments, bound by the wrapper
    for target in ("triton", "cpp"):
        driver.reset()
        compiled = driver.compile(rows, options={"target": target}, dynamic=True)
        for shape in ((3, 7), (5, 100)):
            x = torch.randn(shape)
            torch.testing.assert_close(compiled(x), rows(x))
        (record,) = compiled.graphs
        (kernel,) = [t for k, t in record.artifacts.items() if k.startswith("kernels/")]
        write(f"dynamic/rows_{target}_kernel.txt", kernel_only(kernel))
        wrapper = record.artifacts["wrapper"]
        write(f"dynamic/rows_{target}_wrapper.txt", "def call" + wrapper.split("def call")[1])
