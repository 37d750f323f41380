"""Outputs of the Dynamo chapter: bytecode, a captured module graph, its guards, an
autocast region's graph and example dtypes, explain output for a graph break, the
bytecode of a resume function and the generated rebuild after a break. All made from the code as
it is when the book is built."""

from __future__ import annotations

import dis
import io
import re

import torch
import torch.nn.functional as F


def scaled_sum(x, weights):
    total = x
    for w in weights:
        total = total + w * x
    return total


class Logged(torch.nn.Module):
    """A forward with a ``print`` in the middle, as in the benchmark's graph_breaks."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.sink = io.StringIO()

    def forward(self, x):
        h = F.gelu(self.fc(x))
        print("step", x.shape[0], file=self.sink)
        return h * 0.5


class TinyMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def item_branch(x):
    y = x.sin()
    if y.sum().item() > 0:
        return y + 1
    return y - 1


def autocast_block(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = F.linear(x, w).relu()
    return y.float().sum(dim=0)


def _dis(fn_or_code) -> str:
    buffer = io.StringIO()
    dis.dis(fn_or_code, file=buffer, depth=0)
    # object addresses differ between builds; keep the listing stable
    return re.sub(r" at 0x[0-9a-f]+", "", buffer.getvalue())


def _strip_paths(text: str) -> str:
    return re.sub(r"(/[^\s:]+/)(\w+\.py)", r"\2", text)


def generate(write) -> None:
    import dynamo

    dynamo.reset()
    write("dynamo/loop_bytecode.txt", _dis(scaled_sum))

    graphs = []

    def recording(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch.manual_seed(0)
    model = TinyMLP()
    opt = dynamo.optimize(recording)(model.forward)
    x = torch.randn(2, 8)
    torch.testing.assert_close(opt(x), model(x))
    write("dynamo/module_graph.py", graphs[0].code.strip())
    (entry,) = dynamo.cache_entries(opt)
    write("dynamo/module_guards.txt", "\n".join(str(g) for g in entry.guards))

    graphs.clear()
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    out = dynamo.optimize(recording)(autocast_block)(x, w)
    assert out.dtype == autocast_block(x, w).dtype
    (gm,) = graphs
    write("dynamo/autocast_graph.py", gm.code.strip())
    dtypes = [f"{n.name}: {n.meta['example_value'].dtype}" for n in gm.graph.nodes
              if "example_value" in n.meta]
    write("dynamo/autocast_dtypes.txt", "\n".join(dtypes))

    report = dynamo.explain(item_branch)(torch.randn(4))
    write("dynamo/explain_break.txt", _strip_paths(str(report)))

    from dynamo.codegen import _resume_functions

    resume = [fn for (code, *_), fn in _resume_functions.items() if code is item_branch.__code__]
    write("dynamo/resume_bytecode.txt", _dis(resume[0].__code__))
    dynamo.reset()

    opt = dynamo.optimize(recording)(Logged().forward)
    for _ in range(2):
        opt(torch.randn(4, 8))
    (entry,) = [e for e in dynamo.cache_entries(opt) if e.break_point is not None]
    write("dynamo/rebuild_function.py", entry.rebuild.source_text.strip())
    dynamo.reset()
