"""``python -m driver``: watch a program go through every stage.

    python -m driver compile [FILE[:NAME]] [--target triton|cpp|fallback] [--dump DIR]
    python -m driver exercise list | start NAME | check NAME | verify
    python -m driver bench [--suite micro] [...]   (benchmarks/run.py)

``compile`` with no FILE compiles the built-in demo, ``(x.sin() + y.cos()) * 2 - x``, on the
best device present (CUDA -> Triton, else C++). With FILE, NAME (default ``model``) is a
function or ``nn.Module`` in that file, and the file's ``example_inputs()`` returns its
arguments. It prints each stage's artifact in pipeline order, checks the result against eager
and prints eager vs compiled time.

Chapter: book/docs/driver.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import torch

import driver
from driver import debug
from driver.timing import time_ms


def demo(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # --8<-- [start:demo]
    return (x.sin() + y.cos()) * 2 - x
    # --8<-- [end:demo]


def default_target() -> str:
    return "triton" if torch.cuda.is_available() else "cpp"


def demo_inputs(target: str, numel: int | None) -> tuple:
    device = "cuda" if torch.cuda.is_available() and target == "triton" else "cpu"
    if numel is None:
        # The Triton interpreter runs kernels in numpy: keep it small on the CPU.
        numel = {"cuda": 1 << 26}.get(device, 1 << 20 if target != "triton" else 1 << 14)
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(numel, generator=gen).to(device)
    y = torch.randn(numel, generator=gen).to(device)
    return x, y


def load_target(spec: str):
    """``FILE[:NAME]`` -> (callable, example inputs)."""
    path, _, name = spec.partition(":")
    name = name or "model"
    if not Path(path).is_file():
        raise SystemExit(f"error: FILE {path!r} does not exist")
    module_spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    if not hasattr(module, name):
        raise SystemExit(f"error: {path} has no {name!r} (use FILE:NAME)")
    if not hasattr(module, "example_inputs"):
        raise SystemExit(f"error: {path} needs an example_inputs() function returning the args")
    return getattr(module, name), tuple(module.example_inputs())


def print_section(title: str, text: str) -> None:
    print(f"\n{'=' * 8} {title} {'=' * max(4, 78 - len(title))}")
    print(text.rstrip())


def compare(expected, actual) -> tuple[bool, float]:
    """Eager is the oracle: same structure, values within the dtype's tolerance."""
    flat_e, _ = torch.utils._pytree.tree_flatten(expected)
    flat_a, _ = torch.utils._pytree.tree_flatten(actual)
    worst = 0.0
    for e, a in zip(flat_e, flat_a):
        if isinstance(e, torch.Tensor):
            try:
                torch.testing.assert_close(a, e, equal_nan=True)
            except AssertionError:
                return False, float("inf")
            diff = (a.double() - e.double()).abs().max().item() if e.numel() else 0.0
            worst = max(worst, diff)
    return len(flat_e) == len(flat_a), worst


def cmd_compile(args) -> int:
    target = args.target or default_target()
    if args.file:
        fn, inputs = load_target(args.file)
    else:
        fn, inputs = demo, demo_inputs(target, args.numel)
    compiled = driver.compile(fn, options={"target": target})
    actual = compiled(*inputs)
    expected = fn(*inputs)
    devices = sorted({str(t.device) for t in inputs if isinstance(t, torch.Tensor)})
    print(f"minipt2: compiling {getattr(fn, '__name__', type(fn).__name__)} "
          f"for target {target!r} on {', '.join(devices)}")
    for record in compiled.graphs:
        print(f"\n#### graph {record.index}")
        for _key, title, text in debug.stage_sections(record):
            print_section(title, text)
        if args.dump:
            folder = debug.write_record(record, args.dump)
            print(f"\n(artifacts written to {folder})")
    ok, err = compare(expected, actual)
    print_section("result", f"{'matches' if ok else 'DOES NOT MATCH'} eager "
                  f"(max abs difference {err:.3g})")
    if not args.no_timing:
        eager_ms = time_ms(lambda: fn(*inputs))
        compiled_ms = time_ms(lambda: compiled(*inputs))
        print(f"eager {eager_ms:.3f} ms, minipt2 {compiled_ms:.3f} ms, "
              f"speedup {eager_ms / compiled_ms:.2f}x")
        if args.vs_torch_compile:
            from driver import swap

            peer = swap.torch_compile(fn)
            peer(*inputs)
            peer_ms = time_ms(lambda: peer(*inputs))
            print(f"torch.compile {peer_ms:.3f} ms, speedup {eager_ms / peer_ms:.2f}x; "
                  f"minipt2 / torch.compile time ratio {compiled_ms / peer_ms:.2f}")
    return 0 if ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m driver", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile", help="compile a program and print every stage's artifact")
    c.add_argument("file", nargs="?", help="FILE[:NAME]; default: the built-in demo")
    c.add_argument("--target", choices=["triton", "cpp", "fallback"])
    c.add_argument("--dump", metavar="DIR", help="also write the artifacts under DIR")
    c.add_argument("--numel", type=int, help="demo size (elements per input)")
    c.add_argument("--no-timing", action="store_true", help="skip the timing runs")
    c.add_argument("--vs-torch-compile", action="store_true",
                   help="also time torch.compile in the same run")
    c.set_defaults(run=cmd_compile)
    b = sub.add_parser("bench", help="the benchmark suite (benchmarks/run.py)", add_help=False)
    b.add_argument("rest", nargs=argparse.REMAINDER)
    b.set_defaults(run=cmd_bench)
    from driver import exercises

    exercises.add_parser(sub)
    return parser


def cmd_bench(args) -> int:
    """Run ``benchmarks/run.py`` with the remaining arguments (the driver never imports it)."""
    import runpy

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "run.py"
    if not script.exists():
        raise SystemExit(f"error: {script} is missing (run from a source checkout)")
    sys.argv = [str(script), *args.rest]
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
