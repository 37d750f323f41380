"""The model suite's measurement (``--suite models``): one row per model workload and dtype.

Eager, minipt2 (``driver.compile(model)``) and ``torch.compile`` each get their own model,
built by the workload's seeded factory (same initial weights), and run the same step:

- "train": zero the grads, forward (the model returns its loss), backward, ``SGD.step``;
- "infer": the forward under ``torch.no_grad``, the model in eval mode;
- "decode": the forward once per sequence length, under ``torch.no_grad``; the step's time is
  the total over every length. With dynamic shapes minipt2 compiles twice (the first length
  static, then the length symbolic; the ``graphs`` column says so), and the row also times
  each length on its own (``per_length``: eager ms, minipt2 ms, speedup; ``minipt2_worst_speedup``
  is the smallest), since the goal is to be faster than eager at *every* length.

Per row: warm times (``triton.testing.do_bench`` on CUDA; on CPU interleaved wall-clock rounds),
both speedups over eager, first-call seconds (and ``minipt2_ready_s``: until the matrix
multiply templates minipt2 compiles behind library calls are in use, which the timing waits
for; when there were any, ``minipt2_error_templates``: a second step of each model, the
templates' against eager's), max relative error vs eager of the first step's
output (the loss, or the logits), minipt2's kernel count (artifacts named ``*kernels/*``, over
every compiled graph, backward included) and graph count, both counted after the timed steps.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import models
import torch
from common import first_call, geomean, rel_error, time_interleaved, time_rounds

import driver
from driver.timing import time_ms

LR = 1e-4  # SGD's learning rate: small, so thousands of timed steps stay finite


def make_step(model: Callable, w: models.ModelWorkload, params) -> Callable[[], torch.Tensor]:
    """One step of the workload on ``model`` (eager, or compiled around the module)."""
    if w.kind == "train":
        opt = torch.optim.SGD(params, lr=LR)

        def train_step() -> torch.Tensor:
            opt.zero_grad(set_to_none=True)
            loss = model(*w.inputs)
            loss.backward()
            opt.step()
            return loss.detach()
        return train_step
    if w.kind == "infer":
        def infer_step() -> torch.Tensor:
            with torch.no_grad():
                return model(*w.inputs)
        return infer_step
    prefixes = [w.inputs[0][:, :length].contiguous() for length in w.lengths]

    def decode_step() -> torch.Tensor:
        with torch.no_grad():
            return torch.cat([model(idx) for idx in prefixes], dim=1)  # (B, lengths, vocab)
    decode_step.model, decode_step.prefixes = model, prefixes  # for per-length timing
    return decode_step


def per_length(fns: dict[str, Callable], device: str) -> list[dict]:
    """Each decode length timed on its own: one forward of each model (``fns``: name ->
    decode step)."""
    rows = []
    for idx in fns["eager"].prefixes:
        def forward(step: Callable, idx=idx) -> Callable:
            def run() -> torch.Tensor:
                with torch.no_grad():
                    return step.model(idx)
            return run
        calls = {who: forward(fn) for who, fn in fns.items()}
        ms = ({who: time_ms(fn, device=device) for who, fn in calls.items()}
              if device == "cuda" else time_interleaved(calls, repeat=5))
        row = {"length": idx.shape[1], **{f"{who}_ms": t for who, t in ms.items()}}
        row["minipt2_speedup"] = ms["eager"] / ms["minipt2"]
        rows.append(row)
    return rows


def fresh_model(w: models.ModelWorkload) -> torch.nn.Module:
    module = w.make_model()
    return module.train() if w.kind == "train" else module.eval()


def minipt2_step(w: models.ModelWorkload, target: str,
                 mode: str = "default") -> tuple[Callable, Callable]:
    """(step, () -> (kernel count, graph count)) of minipt2's compiled model."""
    import driver

    driver.reset()
    module = fresh_model(w)
    compiled = driver.compile(module, mode=mode, options={"target": target})

    def counts() -> tuple[int, int]:
        graphs = compiled.graphs
        kernels = sum(sum(1 for key in g.artifacts if "kernels/" in key) for g in graphs)
        return kernels, len(graphs)
    return make_step(compiled, w, module.parameters()), counts


def peer_step(w: models.ModelWorkload, mode: str = "default") -> Callable:
    torch.compiler.reset()
    module = fresh_model(w)
    return make_step(torch.compile(module, mode=mode), w, module.parameters())


def bench_model(w: models.ModelWorkload, args: argparse.Namespace) -> dict:
    module = fresh_model(w)
    eager = make_step(module, w, module.parameters())
    want = eager()  # the first step: the reference every compiled first step is checked against
    dtype = next(module.parameters()).dtype
    row = {"workload": w.name, "dtype": str(dtype).replace("torch.", ""), "kind": w.kind,
           "shape": w.shape}
    fns = {"eager": eager}
    step, counts = minipt2_step(w, args.target, args.mode)
    out, row["minipt2_compile_s"] = first_call(step, ())
    # templates compiling behind library calls: in use before anything else runs or is timed
    start = time.perf_counter()
    built = driver.wait_for_templates()
    row["minipt2_ready_s"] = row["minipt2_compile_s"] + time.perf_counter() - start
    if built:  # the templates' version answers too: a second step of each, compared
        row["minipt2_error_templates"] = rel_error(step(), eager())
    row["minipt2_error"] = rel_error(out, want)
    fns["minipt2"] = step
    if w.kind == "decode":
        row["lengths"] = len(w.lengths)
    if not args.no_torch_compile:
        peer = peer_step(w, args.mode)
        try:
            out, row["torch_compile_s"] = first_call(peer, ())
        except Exception as e:  # noqa: BLE001 - the peer's failure is a result, not ours
            row["torch_compile_failed"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
            row.pop("torch_compile_s", None)
            # a failure inside torch.compile's CUDA graphs can leave their shared state
            # half-updated; the next rows start from a clean slate
            del peer
            torch.compiler.reset()
        else:
            row["torch_compile_error"] = rel_error(out, want)
            fns["torch_compile"] = peer
    device = want.device.type
    row.update({f"{who}_ms": ms for who, ms in time_rounds(fns, device).items()})
    for who in ("minipt2", "torch_compile"):
        if f"{who}_ms" in row:
            row[f"{who}_speedup"] = row["eager_ms"] / row[f"{who}_ms"]
    if w.kind == "decode":
        row["per_length"] = per_length(fns, device)
        row["minipt2_worst_speedup"] = min(r["minipt2_speedup"] for r in row["per_length"])
    # counted after timing, so that graphs recompiled during the timed steps show up too
    row["minipt2_kernels"], row["minipt2_graphs"] = counts()
    return row


def table(rows: list[dict]) -> str:
    head = (f"{'workload':14} {'dtype':8} {'eager ms':>9} {'mpt2 ms':>9} {'tc ms':>9} "
            f"{'mpt2 x':>7} {'tc x':>7} {'mpt2 s':>7} {'tc s':>6} {'mpt2 err':>9} "
            f"{'tc err':>9} {'kern':>5} {'graphs':>6}")
    lines = [head, "-" * len(head)]
    for r in rows:
        def get(key, fmt, r=r):
            return format(r[key], fmt) if key in r else "-"
        lines.append(
            f"{r['workload']:14} {r['dtype']:8} {r['eager_ms']:9.2f} {r['minipt2_ms']:9.2f} "
            f"{get('torch_compile_ms', '9.2f'):>9} {r['minipt2_speedup']:7.2f} "
            f"{get('torch_compile_speedup', '7.2f'):>7} {r['minipt2_compile_s']:7.2f} "
            f"{get('torch_compile_s', '6.2f'):>6} {r['minipt2_error']:9.2e} "
            f"{get('torch_compile_error', '9.2e'):>9} {r['minipt2_kernels']:5d} "
            f"{r['minipt2_graphs']:6d}")
    lines += notes(rows)
    lines += geomean_lines(rows)
    return "\n".join(lines)


def notes(rows: list[dict]) -> list[str]:
    """What the numbers of a decode row mean: graphs compiled against lengths run."""
    out = []
    for r in rows:
        if r["kind"] == "decode":
            worst = r.get("minipt2_worst_speedup")
            out.append(f"note: {r['workload']} {r['dtype']}: {r['lengths']} lengths, minipt2 "
                       f"compiled {r['minipt2_graphs']} graphs (dynamic shapes: the first "
                       f"length static, then one symbolic graph)"
                       + (f"; slowest length {worst:.2f}x eager" if worst else ""))
        if "torch_compile_failed" in r:
            out.append(f"note: {r['workload']} {r['dtype']}: torch.compile failed: "
                       f"{r['torch_compile_failed'][:200]}")
        if "minipt2_error_templates" in r:
            out.append(f"note: {r['workload']} {r['dtype']}: minipt2's matmul templates, "
                       f"compiled behind library calls, were in use after "
                       f"{r['minipt2_ready_s']:.2f} s (first call {r['minipt2_compile_s']:.2f} "
                       f"s); their step's error vs eager's {r['minipt2_error_templates']:.2e}")
    return out


def geomean_lines(rows: list[dict], label: str = "") -> list[str]:
    lines = []
    for dtype in dict.fromkeys(r["dtype"] for r in rows):
        sel = [r for r in rows if r["dtype"] == dtype]
        mp = geomean([r["minipt2_speedup"] for r in sel])
        tc = [r["torch_compile_speedup"] for r in sel if "torch_compile_speedup" in r]
        peer = f"{geomean(tc):.2f}x" if tc else "-"
        if tc and len(tc) < len(sel):
            peer += f" (over the {len(tc)} of {len(sel)} rows it ran)"
        lines.append(f"geomean {dtype}{label}: minipt2 {mp:.2f}x, torch.compile {peer} "
                     f"over eager")
    return lines
