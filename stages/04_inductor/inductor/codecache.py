"""The on-disk cache of generated code: C++ shared objects, Triton modules, wrappers.

Input: source text (and, for C++, the compiler flags). Output: a loaded callable: a ctypes
function for C++, the ``@triton.jit`` kernel for Triton, the wrapper module's namespace.

Chapter: book/docs/inductor.md ("The code cache").

[Note: code cache]
Entries are addressed by a hash of everything that determines the binary (source, flags,
compiler version, and the CPU's feature flags, because of ``-march=native``), so a hit is
always valid to reuse. The directory (``$MINIPT2_CACHE_DIR``, else ``~/.cache/minipt2``) is
private to the user (0700): loading a shared object runs its code. Writes go to a temporary
file in the same directory and are published with ``os.replace``, which is atomic, so two
processes compiling the same kernel at once both end up with a complete file. A shared
object that fails to load is deleted and rebuilt, never trusted.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inductor.exc import CompileError

CXX = os.environ.get("CXX", "g++")
# --8<-- [start:cxx-flags]
# Never -ffast-math; -fno-math-errno is safe: see [Note: vector math] in codegen/cpp.py.
CXXFLAGS = ("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-shared", "-fPIC",
            "-std=c++17")
VECTOR_MATH_FLAGS = ("-DMINIPT2_VECTOR_MATH", "-lmvec")


def cache_dir() -> Path:
    """The cache root, created private (0700) if it does not exist yet."""
    root = Path(os.environ.get("MINIPT2_CACHE_DIR") or Path.home() / ".cache" / "minipt2")
    if not root.exists():
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(root, 0o700)  # mkdir's mode is filtered by the umask
    return root


def subdir(*parts: str) -> Path:
    path = cache_dir().joinpath(*parts)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def code_hash(*parts: str) -> str:
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()
    return "c" + digest[:24]


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write via a temporary file and ``os.replace``: readers never see half a file."""
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@functools.cache
def compiler_version() -> str:
    try:
        return subprocess.run([CXX, "--version"], capture_output=True, text=True).stdout
    except OSError as e:
        raise CompileError(f"no C++ compiler: {CXX!r} could not be run ({e})") from e


@functools.cache
def cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return sys.platform


@functools.cache
def vector_math_flags() -> tuple[str, ...]:
    """``VECTOR_MATH_FLAGS`` if this compiler and libc can link libm's vector variants (an
    executable, so a missing symbol fails now, not at load time), else ``()``: scalar libm.
    ``MINIPT2_VECTOR_MATH=0`` forces the scalar path. See [Note: vector math]."""
    if os.environ.get("MINIPT2_VECTOR_MATH", "1") == "0":
        return ()
    from inductor.codegen.cpp import PRELUDE

    # the answer is cached on disk too: the probe costs a compile (~0.6 s) per process
    answer = subdir("probe") / code_hash(PRELUDE, " ".join(CXXFLAGS), compiler_version(),
                                         cpu_flags())
    if not answer.exists():
        write_atomic(answer, "yes" if _probe_vector_math() else "no")
    return VECTOR_MATH_FLAGS if answer.read_text() == "yes" else ()


def _probe_vector_math() -> bool:
    """Can we build and link an executable that calls every vector variant we declare?"""
    from inductor.codegen.cpp import LIBMVEC_BINARY, LIBMVEC_UNARY, PRELUDE

    calls = [f"x[i] = std::{fn}(x[i]);" for fn in LIBMVEC_UNARY]
    calls += [f"x[i] = std::{fn}(x[i], x[i]);" for fn in LIBMVEC_BINARY]
    body = "\n".join(f"#pragma omp simd\nfor (int i = 0; i < 64; ++i) {c}" for c in calls)
    source = f"{PRELUDE}\nfloat x[64];\ndouble y[64];\nint main() {{\n{body}\n" \
             f"{body.replace('x[i]', 'y[i]')}\nreturn x[0] > 0 && y[0] > 0;\n}}\n"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.cpp"
        src.write_text(source)
        flags = [f for f in CXXFLAGS if f not in ("-shared", "-fPIC")]
        cmd = [CXX, *flags, "-DMINIPT2_VECTOR_MATH", str(src), "-o", str(Path(tmp) / "probe"),
               "-lmvec"]
        return subprocess.run(cmd, capture_output=True).returncode == 0


def cxx_flags() -> tuple[str, ...]:
    """Everything on the compiler's command line but the file names (part of the key)."""
    return CXXFLAGS + vector_math_flags()
# --8<-- [end:cxx-flags]


class CppCodeCache:
    """C++ source -> compiled, loaded function. See [Note: code cache]."""

    loaded: dict[str, Any] = {}  # in-process: key -> ctypes.CDLL
    compiles = 0  # how many times the compiler actually ran (tests read this)
    lock = threading.Lock()  # kernels are built from several threads at once

    @classmethod
    def load(cls, source: str, fn_name: str) -> Callable[..., Any]:
        key = code_hash(source, " ".join(cxx_flags()), compiler_version(), cpu_flags())
        if key not in cls.loaded:
            directory = subdir("cpp", key)
            src, so = directory / "kernel.cpp", directory / "kernel.so"
            if not src.exists():
                write_atomic(src, source)
            lib = cls._try_load(so, fn_name)
            if lib is None:
                cls._compile(src, so)
                lib = cls._try_load(so, fn_name)
                if lib is None:
                    raise CompileError(f"compiled {so} but could not load {fn_name} from it")
            cls.loaded[key] = lib
        fn = getattr(cls.loaded[key], fn_name)
        fn.restype = None
        return fn

    @staticmethod
    def _try_load(so: Path, fn_name: str) -> ctypes.CDLL | None:
        if not so.exists():
            return None
        try:
            lib = ctypes.CDLL(str(so))
            getattr(lib, fn_name)
            return lib
        except (OSError, AttributeError):
            so.unlink(missing_ok=True)  # corrupt or foreign: rebuild, never trust
            return None

    @classmethod
    def _compile(cls, src: Path, so: Path) -> None:
        fd, tmp = tempfile.mkstemp(dir=so.parent, prefix=".kernel.", suffix=".so")
        os.close(fd)
        flags = cxx_flags()
        libs = [f for f in flags if f.startswith("-l")]  # after the source, for the linker
        cmd = [CXX, *(f for f in flags if f not in libs), str(src), "-o", tmp, *libs]
        result = subprocess.run(cmd, capture_output=True, text=True)
        with cls.lock:
            cls.compiles += 1
        if result.returncode != 0:
            Path(tmp).unlink(missing_ok=True)
            raise CompileError(f"C++ compilation failed for {src}:\n{' '.join(cmd)}\n"
                               f"{result.stderr}")
        os.replace(tmp, so)


def load_python_module(source: str, kind: str, stem: str) -> Any:
    """Write ``source`` to the cache and import it from there (so tracebacks, and Triton's
    ``inspect.getsource``, see a real file). ``kind`` is "triton" or "wrapper"."""
    key = code_hash(source)
    path = subdir(kind, key) / f"{stem}.py"
    if not path.exists():
        write_atomic(path, source)
    module_name = f"minipt2_{kind}_{key}_{stem}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def exec_python_source(source: str, kind: str, stem: str, namespace: dict[str, Any]) -> dict:
    """Write ``source`` to the cache and run it in a fresh copy of ``namespace`` (names the
    source uses but does not define, such as kernels, are bound there)."""
    path = subdir(kind, code_hash(source)) / f"{stem}.py"
    if not path.exists():
        write_atomic(path, source)
    scope = dict(namespace)
    exec(compile(source, str(path), "exec"), scope)
    return scope


class TritonCodeCache:
    """Triton kernel source -> the ``@triton.jit`` function, imported from the cache."""

    @staticmethod
    def load(source: str, kernel_name: str) -> Any:
        from inductor.codegen.triton import ensure_interpreter_if_no_gpu

        ensure_interpreter_if_no_gpu()  # before @triton.jit runs; [Note: triton interpreter]
        return getattr(load_python_module(source, "triton", kernel_name), kernel_name)
