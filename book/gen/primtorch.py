"""Outputs for the PrimTorch chapter: the coverage table and a backward op's decomposition.

``generate(write)`` writes ``primtorch_coverage.md`` (prims by kind, decomposed overloads by
family, extern ops) and ``primtorch_gelu_backward.txt`` (the prims graph the tracer records
for ``aten.gelu_backward``).
"""

from __future__ import annotations

from collections import Counter


def _coverage_table() -> str:
    import primtorch
    from primtorch import prims

    kinds = Counter(p.kind for p in prims.PRIMS.values())
    families = Counter(fn.__module__.rsplit(".", 1)[-1]
                       for fn in primtorch.decomposition_table.values())
    rows = ["| what | count |", "|---|---|", f"| prims | {len(prims.PRIMS)} |"]
    rows += [f"| &nbsp;&nbsp;{kind} prims | {n} |" for kind, n in sorted(kinds.items())]
    rows.append(f"| decomposed aten overloads | {len(primtorch.decomposition_table)} |")
    rows += [f"| &nbsp;&nbsp;`decompositions/{family}.py` | {n} |"
             for family, n in sorted(families.items())]
    rows.append(f"| extern ops | {len(primtorch.extern_ops)} |")
    externs = ", ".join(f"`{op}`" for op in sorted(str(o) for o in primtorch.extern_ops))
    return "\n".join(rows) + f"\n\nThe extern ops: {externs}.\n"


def _gelu_backward_graph() -> str:
    import aotautograd
    import primtorch
    import torch

    def fn(grad, x):
        return torch.ops.aten.gelu_backward(grad, x, approximate="tanh")

    gm = aotautograd.trace(fn, [torch.randn(4, 8), torch.randn(4, 8)],
                           decompositions=primtorch.decomposition_table)
    return gm.code.strip()


def generate(write) -> None:
    write("primtorch_coverage.md", _coverage_table())
    write("primtorch_gelu_backward.txt", _gelu_backward_graph())
