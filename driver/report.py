"""``python -m driver report``: one self-contained HTML page of a compilation.

Input: a ``Program`` (function or module and its inputs) and a target.
Output: an HTML file with no external resources: every stage's artifact, pictures of the
captured and prims graphs (inline SVG, nodes coloured by the kernel they were fused into when
inductor says so), each kernel's source with its time where a profiler can see it, and the
end-to-end times and speedup.

Chapter: book/docs/driver.md ("The HTML report").
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from pathlib import Path

import torch

import driver
from driver import debug, programs
from driver.timing import time_ms

PALETTE = ["#fdd49e", "#c6dbef", "#c7e9c0", "#dadaeb", "#fcbba1", "#d9d9d9", "#fee391",
           "#a1d99b", "#9ecae1", "#bcbddc"]
BOX_W, BOX_H, GAP_X, GAP_Y = 150, 30, 20, 40


def _label(node: torch.fx.Node) -> str:
    if node.op in ("placeholder", "output"):
        return node.name if node.op == "placeholder" else "output"
    target = node.target
    name = getattr(target, "__name__", None) or str(target)
    return f"{node.name}: {name}"[:22]


def _depths(nodes: list[torch.fx.Node]) -> dict[torch.fx.Node, int]:
    depth: dict[torch.fx.Node, int] = {}
    for node in nodes:  # FX graphs are in topological order
        depth[node] = 1 + max((depth[i] for i in node.all_input_nodes if i in depth), default=-1)
    return depth


# --8<-- [start:graph-svg]
def graph_svg(gm: torch.fx.GraphModule, groups: dict[str, int] | None = None) -> str:
    """The graph as layered boxes and arrows: a node's row is its longest path from an input.

    ``groups`` maps node names to a kernel number; nodes of one kernel share a colour.
    """
    nodes = list(gm.graph.nodes)
    depth = _depths(nodes)
    rows: dict[int, list[torch.fx.Node]] = {}
    for node in nodes:
        rows.setdefault(depth[node], []).append(node)
    pos = {n: (GAP_X + col * (BOX_W + GAP_X), GAP_Y // 2 + d * (BOX_H + GAP_Y))
           for d, row in rows.items() for col, n in enumerate(row)}
    width = GAP_X + max(len(r) for r in rows.values()) * (BOX_W + GAP_X)
    height = GAP_Y + len(rows) * (BOX_H + GAP_Y)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="graph" width="{width}" '
             f'height="{height}" font-family="monospace" font-size="11">']
    for node in nodes:
        x1, y1 = pos[node]
        for src in node.all_input_nodes:
            x0, y0 = pos[src]
            parts.append(f'<line x1="{x0 + BOX_W / 2}" y1="{y0 + BOX_H}" x2="{x1 + BOX_W / 2}" '
                         f'y2="{y1}" stroke="#888" marker-end="url(#arrow)"/>')
    for node in nodes:
        x, y = pos[node]
        group = (groups or {}).get(node.name)
        fill = "#ffffff" if group is None else PALETTE[group % len(PALETTE)]
        title = "" if group is None else f"<title>kernel {group}</title>"
        parts.append(f'<g class="node">{title}<rect x="{x}" y="{y}" width="{BOX_W}" '
                     f'height="{BOX_H}" rx="4" fill="{fill}" stroke="#444"/>'
                     f'<text x="{x + 6}" y="{y + 19}">{html.escape(_label(node))}</text></g>')
    marker = ('<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" '
              'markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0L10,5L0,10z" '
              'fill="#888"/></marker></defs>')
    return parts[0] + marker + "".join(parts[1:]) + "</svg>"
# --8<-- [end:graph-svg]


def kernel_times_ms(compiled, inputs: tuple) -> dict[str, float]:
    """Per-kernel device time from the profiler (CUDA only; CPU kernels are not visible)."""
    if not any(isinstance(t, torch.Tensor) and t.is_cuda for t in inputs):
        return {}
    compiled(*inputs)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            compiled(*inputs)
        torch.cuda.synchronize()
    times = {}
    for event in prof.key_averages():
        times[event.key] = event.device_time_total / 1e3 / 10
    return times


def _section(title: str, body: str) -> str:
    return f"<section><h2>{html.escape(title)}</h2>{body}</section>"


def _pre(text: str, cls: str = "") -> str:
    return f'<pre class="{cls}">{html.escape(text)}</pre>'


def _record_sections(record, times: dict[str, float]) -> Iterable[str]:
    compiled = record.compiled
    prims_gm = getattr(compiled, "prims_graph_module", None)
    groups = getattr(compiled, "kernel_groups", None)
    yield _section("dynamo: captured graph (picture)", graph_svg(record.gm))
    if prims_gm is not None:
        yield _section("prims graph (picture; colour = kernel)", graph_svg(prims_gm, groups))
    for key, title, text in debug.stage_sections(record):
        if key.startswith("kernels/"):
            name = Path(key).stem
            t = times.get(name)
            note = f"{t:.4f} ms per call (profiler)" if t is not None else \
                "time: per-kernel times need a CUDA profiler; see the end-to-end time"
            yield _section(title, f'<p class="ktime">{html.escape(note)}</p>'
                           + _pre(text, "kernel"))
        else:
            yield _section(title, _pre(text))


STYLE = """body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}
pre{background:#f6f6f6;padding:.8em;overflow-x:auto;font-size:12px}
svg.graph{border:1px solid #ddd;background:#fff;max-width:100%;height:auto}
h2{font-size:1.05em;border-bottom:1px solid #ccc}"""


def render(program, compiled, eager_ms: float, compiled_ms: float, ok: bool) -> str:
    times = {}
    for record in compiled.graphs:
        times.update(kernel_times_ms(record.compiled, tuple(record.example_inputs)))
    body = [f"<h1>minipt2 report: {html.escape(program.name)}</h1>",
            f'<p class="summary">matches eager: {ok}; eager {eager_ms:.4f} ms, minipt2 '
            f"{compiled_ms:.4f} ms, speedup {eager_ms / compiled_ms:.2f}x</p>"]
    for record in compiled.graphs:
        body.append(f"<h1>graph {record.index}</h1>")
        body.extend(_record_sections(record, times))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>minipt2 report</title>"
            f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>")


def write_report(program, target: str, output: str) -> Path:
    compiled = driver.compile(program.fn, options={"target": target})
    actual = compiled(*program.inputs)
    ok, _ = programs.compare(program.fn(*program.inputs), actual)
    eager_ms = time_ms(lambda: program.fn(*program.inputs), repeat=5)
    compiled_ms = time_ms(lambda: compiled(*program.inputs), repeat=5)
    path = Path(output)
    path.write_text(render(program, compiled, eager_ms, compiled_ms, ok))
    return path
