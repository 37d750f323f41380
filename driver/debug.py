"""Artifacts of a compilation, as text and as files.

Input: the ``GraphRecord`` list of a compiled function (captured graph, guards, and the later
stages' ``artifacts`` mapping, which each stage fills in pipeline order; its graphs are
printed when read).
Output: readable sections (``stage_sections``) for the CLI and the book, and with
``MINIPT2_DEBUG_DIR=DIR`` (or ``python -m driver compile --dump DIR``) one folder per compiled
graph: ``captured_graph.py``, ``guards.txt``, ``prims_graph.txt``, ``loop_ir.txt``,
``fusion.txt``, ``kernels/<name>``, ``wrapper.py``.

Chapter: book/docs/driver.md.
"""

from __future__ import annotations

import os
from pathlib import Path

from driver import logs

# Section titles, in pipeline order, for the artifact keys the stages produce.
TITLES = {
    "captured_graph": "dynamo: captured FX graph",
    "guards": "dynamo: guards",
    "aten_graph": "aotautograd: aten graph",
    "joint_graph": "aotautograd: joint forward+backward graph",
    "fw_graph": "aotautograd: forward graph (after partitioning)",
    "bw_graph": "aotautograd: backward graph (after partitioning)",
    "partition": "aotautograd: what the forward saves for the backward",
    "prims_graph": "aotautograd + primtorch: prims graph",
    "loop_ir": "inductor: loop-level IR",
    "fusion": "inductor: fusion groups",
    "wrapper": "inductor: wrapper",
}


# The stage that produced each artifact (``--stage`` filters by these names).
STAGES = ("dynamo", "aotautograd", "primtorch", "inductor")


def stage_of(key: str) -> str:
    key = key.removeprefix("backward/")
    if key in ("captured_graph", "guards"):
        return "dynamo"
    if key == "prims_graph":
        return "primtorch"
    if key in ("aten_graph", "joint_graph", "fw_graph", "bw_graph", "partition"):
        return "aotautograd"
    return "inductor"


def captured_graph_text(gm) -> str:
    return gm.print_readable(print_output=False).strip() + "\n"


def stage_sections(record, wanted=lambda key: True) -> list[tuple[str, str, str]]:
    """(key, title, text) for every artifact of one graph that ``wanted(key)`` asks for, in
    pipeline order; the others are not printed."""
    sections = []
    if wanted("captured_graph"):
        sections.append(("captured_graph", TITLES["captured_graph"],
                         captured_graph_text(record.gm)))
    if wanted("guards"):
        sections.append(("guards", TITLES["guards"],
                         "\n".join(str(g) for g in record.guards) + "\n"))
    for key in record.artifacts:  # the stages add them in pipeline order
        if wanted(key):
            sections.append((key, title_of(key), record.artifacts[key]))
    return sections


def title_of(key: str) -> str:
    base = key.removeprefix("backward/")
    if base.startswith("kernels/"):
        title = f"inductor: kernel {base[len('kernels/'):]}"
    else:
        title = TITLES.get(base, base)
    if base != key:
        stage, _, what = title.partition(": ")
        title = f"{stage} (backward): {what}"
    return title


def file_name(key: str) -> str:
    if Path(key).name in ("captured_graph", "wrapper"):
        return key + ".py"
    return key if "." in Path(key).name else key + ".txt"


def write_record(record, directory: str | os.PathLike) -> Path:
    """Write one graph's artifacts under ``directory/graph_<index>/``; returns that folder."""
    folder = Path(directory) / f"graph_{record.index}"
    for key, _title, text in stage_sections(record):
        path = folder / file_name(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


def after_call(compiled) -> None:
    """After each call of a compiled function: report graphs compiled by that call.

    Their guards exist only now (dynamo stores them after the backend returns): log them,
    note a recompile, and with ``MINIPT2_DEBUG_DIR`` set write the graph's folder.
    """
    seen = getattr(compiled, "_reported", set())
    if len(seen) == len(compiled._recorder.records):
        return
    directory = os.environ.get("MINIPT2_DEBUG_DIR")
    name = getattr(compiled._orig_fn, "__name__", "fn")
    for record in compiled.graphs:
        if record.index in seen:
            continue
        if record.index > 0:
            logs.logger("recompiles").info("%s: graph %d compiled (a guard of the earlier "
                                           "graphs failed, or a graph break)", name, record.index)
        logs.log_artifact("guards", f"guards of {name} graph {record.index}",
                          "\n".join(str(g) for g in record.guards))
        if directory:
            write_record(record, Path(directory) / name)
        seen.add(record.index)
    object.__setattr__(compiled, "_reported", seen)
