"""``python -m driver``: the demo prints every stage and matches eager; exercises tooling."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from driver import exercises

SECTIONS = ["captured FX graph", "guards", "prims graph", "loop-level IR", "fusion groups",
            "kernel", "wrapper", "matches eager"]


def run_driver(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "driver", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=600)


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_compile_demo_prints_every_stage(target, tmp_path):
    result = run_driver("compile", "--target", target, "--numel", "4096", "--dump", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    positions = [result.stdout.find(s) for s in SECTIONS]
    assert -1 not in positions, result.stdout
    assert positions == sorted(positions), "sections out of pipeline order"
    assert "speedup" in result.stdout
    assert (tmp_path / "graph_0" / "wrapper.py").exists()


def test_compile_a_file(tmp_path):
    source = tmp_path / "prog.py"
    source.write_text(textwrap.dedent("""
        import torch

        def f(a, b):
            return torch.relu(a * b) + 1

        def example_inputs():
            return torch.randn(8, 3), torch.randn(3)
    """))
    result = run_driver("compile", f"{source}:f", "--target", "cpp", "--no-timing")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "matches eager" in result.stdout


def test_compile_a_missing_file_says_so(tmp_path):
    result = run_driver("compile", str(tmp_path / "nope.py"))
    assert result.returncode != 0 and "does not exist" in result.stderr


SOURCE = textwrap.dedent('''
    def f(x):
        """Doubles."""
        # BEGIN EXERCISE demo-ex: double x
        y = x + x
        return y
        # END EXERCISE demo-ex
''')


def test_stub_replaces_only_the_region():
    stubbed = exercises.stub_source(SOURCE, "demo-ex")
    namespace = {}
    exec(stubbed, namespace)
    with pytest.raises(NotImplementedError, match="demo-ex: double x"):
        namespace["f"](1)
    assert "x + x" not in stubbed and '"""Doubles."""' in stubbed


def test_stub_without_end_marker_is_an_error():
    with pytest.raises(ValueError, match="END EXERCISE"):
        exercises.stub_source(SOURCE.replace("# END EXERCISE demo-ex", ""), "demo-ex")


def test_every_stage_ships_an_exercise_with_tests():
    found = exercises.discover()
    stages = {ex.stage.name for ex in found.values()}
    assert stages >= {"01_dynamo", "02_aotautograd", "03_primtorch", "04_inductor"}
    for ex in found.values():
        assert ex.tests.exists(), ex
        assert (ex.stage / "exercises" / f"{ex.name}.md").exists(), ex


EXAMPLE = textwrap.dedent("""
    import torch

    class Net(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x * 2) + 1

    def example_inputs():
        return (torch.randn(64),)
""")


def test_a_module_class_as_name(tmp_path):
    (tmp_path / "net.py").write_text(EXAMPLE)
    result = run_driver("compile", f"{tmp_path / 'net.py'}:Net", "--target", "cpp",
                        "--no-timing", "--stage", "inductor")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "captured FX graph" not in result.stdout  # --stage filters
    assert "1. inductor" in result.stdout and "matches eager" in result.stdout


def test_missing_name_says_which(tmp_path):
    (tmp_path / "net.py").write_text(EXAMPLE)
    result = run_driver("compile", f"{tmp_path / 'net.py'}:Nope")
    assert result.returncode != 0 and "'Nope'" in result.stderr


def test_bad_arguments_are_a_usage_error():
    result = run_driver("compile", "--target", "tpu")
    assert result.returncode == 2 and "usage" in result.stderr
    assert run_driver("frobnicate").returncode == 2


def test_explain_the_demo():
    result = run_driver("explain")
    assert result.returncode == 0, result.stderr
    assert "graphs: 1" in result.stdout and "x.size() ==" in result.stdout


def test_report_is_self_contained_html(tmp_path):
    out = tmp_path / "report.html"
    result = run_driver("report", "--target", "cpp", "-o", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    page = out.read_text()
    assert page.count("<svg") >= 1 and 'class="kernel"' in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def stderr_with_logs(channels: str, fn: str, calls: str) -> str:
    """stderr of a fresh process that compiles ``fn`` (C++ target) and runs ``calls`` with
    ``MINIPT2_LOGS=channels``."""
    code = ("import torch, driver\n"
            f"f = driver.compile({fn}, options={{'target': 'cpp'}})\n{calls}\n")
    env = {**__import__("os").environ, "MINIPT2_LOGS": channels}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    return result.stderr


def test_logs_by_channel():
    err = stderr_with_logs("fusion,recompiles", "lambda x: x.sin() * 2",
                           "f(torch.randn(3)); f(torch.randn(4))")
    assert "[minipt2.fusion]" in err and "[minipt2.recompiles]" in err
    assert "[minipt2.guards]" not in err


def test_logs_include_the_backward_graphs_artifacts():
    err = stderr_with_logs("kernels,wrapper", "lambda x: (x.sin() * 2).sum()",
                           "f(torch.randn(3, requires_grad=True)).backward()")
    assert "inductor (backward): kernel cpp_" in err  # sin's gradient: cos * 2
    assert "inductor (backward):" in err.split("[minipt2.wrapper]", 2)[-1]


def _chromium():
    import shutil

    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(not _chromium(), reason="no chromium: `make test` installs Debian's "
                    "chromium where apt-get is allowed; this machine has none")
def test_report_renders_in_headless_chromium(tmp_path):
    out = tmp_path / "report.html"
    assert run_driver("report", "--target", "cpp", "-o", str(out)).returncode == 0
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1200,1600"]
    dom = subprocess.run([_chromium(), *flags, "--dump-dom", out.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert "<svg" in dom and 'class="node"' in dom and 'class="kernel"' in dom
    shot = tmp_path / "shot.png"
    subprocess.run([_chromium(), *flags, f"--screenshot={shot}", out.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 20_000  # a blank page is ~5 kB


def test_progress_line_only_on_a_terminal(monkeypatch, capsys):
    import io

    import torch

    import driver
    from driver import progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    fake = Tty()
    monkeypatch.setattr(sys, "stderr", fake)
    driver.compile(lambda x: x.cos() + 1, options={"target": "cpp"})(torch.randn(4))
    assert "[minipt2] compiling graph 0" in fake.getvalue()
    assert fake.getvalue().endswith("\r")  # the line is erased when done
    monkeypatch.setenv("MINIPT2_PROGRESS", "0")
    assert not progress.enabled()


def test_bench_passes_its_options_through(tmp_path):
    out = tmp_path / "rows.json"
    result = run_driver("bench", "--device", "cpu", "--size", "tiny", "--workloads", "trig",
                        "--no-torch-compile", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "trig" in result.stdout and out.exists()


def test_bench_with_cold_caches_compiles_into_new_folders(tmp_path):
    """``--cold-caches``: the run's first calls compile into new empty cache folders, which
    the JSON names; without it the caches are used as found."""
    import json
    import shutil

    out = tmp_path / "rows.json"
    result = run_driver("bench", "--device", "cpu", "--size", "tiny", "--workloads", "trig",
                        "--no-torch-compile", "--cold-caches", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    caches = json.loads(out.read_text())["meta"]["caches"]
    assert caches.startswith("cold: new empty folders under ")
    root = Path(caches.split(" under ", 1)[1])
    try:
        assert any((root / "minipt2").rglob("*")), "minipt2 compiled elsewhere"
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = run_driver("bench", "--device", "cpu", "--size", "tiny", "--workloads", "trig",
                        "--no-torch-compile", "--out", str(out))
    assert json.loads(out.read_text())["meta"]["caches"] == "as found"


def test_bench_compare_none_skips_the_peer():
    """``--compare torch`` (the issue's spelling, the default) times torch.compile beside
    eager; ``--compare none`` is ``--no-torch-compile``."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import run as bench_run

    assert bench_run.parse(["--compare", "none"]).no_torch_compile
    assert not bench_run.parse(["--compare", "torch"]).no_torch_compile
    assert not bench_run.parse([]).no_torch_compile
    assert bench_run.parse(["--no-torch-compile"]).no_torch_compile


def test_verify_retries_a_failing_reference_once_and_shows_its_output(monkeypatch, tmp_path):
    """A reference run that fails beside the others runs once more; failing again, the
    problem carries the tail of pytest's output."""
    ex = exercises.Exercise("demo-ex", "double x", tmp_path / "m.py", tmp_path, tmp_path / "t.py")
    ex.tests.write_text("")
    monkeypatch.setattr(exercises, "write_stubbed_package", lambda ex, dest: dest)

    def fake(codes):
        def run_tests(ex, first_on_path, quiet, output=None):
            if output is not None:
                output.append("E   AssertionError: boom\n1 failed")
            return codes.pop(0) if first_on_path is None else 1  # the stub always fails
        return run_tests

    monkeypatch.setattr(exercises, "run_tests", fake([1, 0]))
    assert exercises.verify_one(ex) == []
    monkeypatch.setattr(exercises, "run_tests", fake([1, 1]))
    (problem,) = exercises.verify_one(ex)
    assert "tests FAIL on the reference" in problem and "AssertionError: boom" in problem
