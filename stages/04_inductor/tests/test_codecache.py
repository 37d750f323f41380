"""The code cache: private directory, hits, corrupt entries rebuilt, compile errors."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import inductor
import pytest
import torch
from inductor.codecache import CppCodeCache, cache_dir
from inductor_testing import prims_graph

SOURCE = 'extern "C" void minipt2_test_fn(float* out) { out[0] = 42.0f; }\n'


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIPT2_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(CppCodeCache, "loaded", {})
    return tmp_path / "cache"


def call_test_fn(fn) -> float:
    import ctypes

    out = torch.zeros(1)
    fn.argtypes = [ctypes.c_void_p]
    fn(out.data_ptr())
    return out.item()


def test_cache_dir_is_private(fresh_cache):
    assert cache_dir() == fresh_cache
    assert stat.S_IMODE(os.stat(fresh_cache).st_mode) == 0o700


def test_second_compile_hits_the_disk_cache(fresh_cache, monkeypatch):
    before = CppCodeCache.compiles
    assert call_test_fn(CppCodeCache.load(SOURCE, "minipt2_test_fn")) == 42.0
    assert CppCodeCache.compiles == before + 1
    monkeypatch.setattr(CppCodeCache, "loaded", {})  # as a new process would
    assert call_test_fn(CppCodeCache.load(SOURCE, "minipt2_test_fn")) == 42.0
    assert CppCodeCache.compiles == before + 1


def compile_in_subprocess(cache) -> None:
    script = ("from inductor.codecache import CppCodeCache; import sys; "
              "CppCodeCache.load(sys.argv[1], 'minipt2_test_fn')")
    env = dict(os.environ, MINIPT2_CACHE_DIR=str(cache))
    subprocess.run([sys.executable, "-c", script, SOURCE], env=env, check=True, timeout=120)


def test_corrupt_shared_object_is_rebuilt(fresh_cache):
    # Built by another process: this one must not have the .so mapped (the loader would
    # hand back the mapped copy without reading the file again).
    compile_in_subprocess(fresh_cache)
    (so,) = fresh_cache.glob("cpp/*/kernel.so")
    so.write_bytes(b"not an ELF file")
    before = CppCodeCache.compiles
    assert call_test_fn(CppCodeCache.load(SOURCE, "minipt2_test_fn")) == 42.0
    assert CppCodeCache.compiles == before + 1


def test_compile_error_names_the_source(fresh_cache):
    with pytest.raises(inductor.CompileError, match=r"kernel\.cpp[\s\S]*error"):
        CppCodeCache.load('extern "C" void broken( {\n', "broken")


def test_concurrent_processes_share_one_entry(fresh_cache):
    script = ("from inductor.codecache import CppCodeCache; import sys; "
              "CppCodeCache.load(sys.argv[1], 'minipt2_test_fn')")
    env = dict(os.environ, MINIPT2_CACHE_DIR=str(fresh_cache))
    procs = [subprocess.Popen([sys.executable, "-c", script, SOURCE], env=env)
             for _ in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert len(list(fresh_cache.glob("cpp/*/kernel.so"))) == 1
    assert not list(fresh_cache.glob("cpp/*/.kernel*"))  # no temporary left behind


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only set-up")
def test_triton_interpreter_is_switched_on_without_a_gpu(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    x = torch.randn(5)
    gm = prims_graph(lambda p, a: p.neg(a), [x])
    compiled = inductor.compile_fx_inner(gm, [x], target="triton")
    assert os.environ["TRITON_INTERPRET"] == "1"
    torch.testing.assert_close(compiled(x)[0], -x)
    (source,) = [v for k, v in compiled.artifacts.items() if k.startswith("kernels/")]
    assert "libdevice" not in source


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only set-up")
def test_interpreter_works_when_triton_was_imported_first():
    script = """
import sys, os
sys.path.insert(0, sys.argv[1])
import torch, triton, triton.language  # before inductor sets TRITON_INTERPRET
from inductor_testing import prims_graph
import inductor
x = torch.randn(37)
gm = prims_graph(lambda p, a: p.mul(p.tanh(a), p.expm1(p.log1p(p.abs(a)))), [x])
(out,) = inductor.compile_fx_inner(gm, [x], target="triton")(x)
torch.testing.assert_close(out, x.tanh() * x.abs().log1p().expm1())
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    subprocess.run([sys.executable, "-c", script, os.path.dirname(__file__)], env=env,
                   check=True, timeout=120)
