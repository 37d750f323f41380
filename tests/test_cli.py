"""``python -m driver``: the demo prints every stage and matches eager; exercises tooling."""

import subprocess
import sys
import textwrap

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
