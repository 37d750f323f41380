"""mkdocs hook: generate the book's outputs when the book is built.

Every graph, guard, kernel and listing the chapters show is produced here, from the code as it
is, into ``book/generated/`` (never committed); chapters include those files by name with
``--8<--``. A stale or missing output therefore fails ``mkdocs build --strict``.
"""

from __future__ import annotations

import contextlib
import dis
import importlib.util
import io
import os
from pathlib import Path

GENERATED = Path(__file__).resolve().parent / "generated"


def _write(name: str, text: str) -> None:
    path = GENERATED / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip() + "\n")


def _demo_artifacts(target: str) -> None:
    """Compile the demo for one target and write each stage's artifact under a fixed name."""
    import torch

    import driver
    from driver import debug, programs

    driver.reset()
    x, y = programs.demo_inputs(target, numel=1024)
    compiled = driver.compile(programs.demo, options={"target": target})
    out = compiled(x, y)
    ok, err = programs.compare(programs.demo(x, y), out)
    (record,) = compiled.graphs
    kernels = []
    for key, _title, text in debug.stage_sections(record):
        if key.startswith("kernels/"):
            kernels.append(f"# ---- {key} ----\n{text}")
        else:
            _write(f"demo_{target}/{debug.file_name(key)}", text)
    _write(f"demo_{target}/kernels.txt", "\n".join(kernels))
    _write(f"demo_{target}/result.txt",
           f"matches eager: {ok} (max abs difference {err:.3g}); "
           f"{len(kernels)} kernel(s) on target {target!r}; inputs {tuple(x.shape)} {x.dtype}")
    torch.testing.assert_close(out, programs.demo(x, y))


def _bytecode() -> None:
    from driver import programs

    buffer = io.StringIO()
    dis.dis(programs.demo, file=buffer)
    _write("demo_bytecode.txt", buffer.getvalue())


def _chapter_generators() -> None:
    """Each ``book/gen/<chapter>.py`` defines ``generate(write)``; ``write(name, text)`` puts a
    file under ``book/generated/`` for that chapter's ``--8<--`` includes."""
    for path in sorted((Path(__file__).resolve().parent / "gen").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"book_gen_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.generate(_write)


def on_pre_build(config, **kwargs) -> None:
    os.environ.setdefault("MINIPT2_BOOK_BUILD", "1")
    with contextlib.redirect_stdout(io.StringIO()):
        _bytecode()
        for target in ("cpp", "triton"):
            _demo_artifacts(target)
        _chapter_generators()
