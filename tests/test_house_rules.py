"""The stage's subject is ours: no torch compiler internals inside stages/ or driver/.

DESIGN.md lists the forbidden modules; driver/swap.py is the one adapter allowed to use them.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = ("torch._dynamo", "torch._inductor", "torch._functorch", "torch.func", "torch._decomp",
             "torch._refs", "torch._prims", "torch._subclasses", "torch.export",
             "torch.fx.experimental", "functorch", "torch.compile")
ALLOWED = {ROOT / "driver" / "swap.py"}


def package_sources():
    for folder in [ROOT / "driver", *sorted((ROOT / "stages").glob("*/*"))]:
        if (folder / "__init__.py").exists():
            yield from (p for p in folder.rglob("*.py") if p not in ALLOWED)


def used_names(tree: ast.AST):
    """Every module imported, and every dotted ``torch.x.y`` attribute chain used."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.lineno, node.module
            yield from ((node.lineno, f"{node.module}.{a.name}") for a in node.names)
        elif isinstance(node, ast.Attribute):
            parts, inner = [], node
            while isinstance(inner, ast.Attribute):
                parts.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id == "torch":
                yield node.lineno, ".".join(["torch", *reversed(parts)])


def violations(source: str) -> list[str]:
    found = []
    for lineno, name in used_names(ast.parse(source)):
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN):
            found.append(f"line {lineno}: {name}")
    return found


def test_the_check_catches_each_forbidden_form():
    assert violations("import torch._dynamo")
    assert violations("from torch._inductor.compile_fx import compile_fx")
    assert violations("from torch import _refs")  # reported as torch._refs
    assert violations("import torch\ntorch.compile(f)")
    assert violations("from torch.fx.experimental.proxy_tensor import make_fx")
    assert not violations("import torch.fx\nfrom torch.utils._pytree import tree_map")


@pytest.mark.parametrize("path", list(package_sources()), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_forbidden_torch_internals(path):
    assert violations(path.read_text()) == [], f"{path}: the stage's subject is ours (DESIGN.md)"
