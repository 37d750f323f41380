"""``python -m driver ops``: what primtorch covers, and what a traced program falls back on.

Input: argv (``--list`` to name every op, ``--demo`` to also trace a small training step).
Output: a report on stdout: prims by kind, decomposed aten overloads by family, extern ops,
and, with ``--demo``, how many calls of a traced MLP forward are prims, extern or fallback.

Chapter: book/docs/primtorch.md ("Extern ops and fallbacks").
"""

from __future__ import annotations

import argparse
from collections import Counter


def _families(table: dict) -> Counter:
    """Decomposed overloads per decomposition module (elementwise, activations, ...)."""
    return Counter(fn.__module__.rsplit(".", 1)[-1] for fn in table.values())


def _demo_coverage() -> dict:
    import aotautograd
    import primtorch
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.LayerNorm(32))
    gm = aotautograd.trace(model, [torch.randn(4, 16)],
                           decompositions=primtorch.decomposition_table)
    return primtorch.coverage(gm)


def report(list_ops: bool = False, demo: bool = False) -> str:
    import primtorch
    from primtorch import prims

    lines = [f"prims: {len(prims.PRIMS)}"]
    kinds = Counter(p.kind for p in prims.PRIMS.values())
    lines += [f"  {kind:16} {n}" for kind, n in sorted(kinds.items())]
    table = primtorch.decomposition_table
    lines.append(f"decomposed aten overloads: {len(table)}")
    lines += [f"  {family:16} {n}" for family, n in sorted(_families(table).items())]
    lines.append(f"extern ops: {len(primtorch.extern_ops)}")
    if list_ops:
        lines.append("prims: " + " ".join(sorted(prims.PRIMS)))
        lines.append("decomposed: " + " ".join(sorted(str(op) for op in table)))
        lines.append("extern: " + " ".join(sorted(str(op) for op in primtorch.extern_ops)))
    if demo:
        cov = _demo_coverage()
        lines.append("traced MLP forward: " + ", ".join(
            f"{kind} {sum(c.values())} calls" for kind, c in cov.items()))
        for kind in ("extern", "fallback"):
            for name, n in sorted(cov[kind].items()):
                lines.append(f"  {kind:8} {name} x{n}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m driver ops",
                                     description="primtorch coverage: prims, decomposed, "
                                                 "extern and fallback ops")
    parser.add_argument("--list", action="store_true", help="name every op")
    parser.add_argument("--demo", action="store_true",
                        help="also trace a small MLP and count its ops by kind")
    args = parser.parse_args(argv)
    print(report(list_ops=args.list, demo=args.demo))
    return 0
