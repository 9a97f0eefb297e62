"""The C++ launch path (evt/runtime/fast_launch.cpp, evt/runtime/fast.py) without a GPU: its CPU
variant against a fake kernel library in a child process (tests/fast_launch_cpu.py), the CUDA
variant's source through the host compiler's front end, and the build's failure paths."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest

from evt.errors import CompileError
from evt.runtime import fast

CC = shutil.which("cc") or shutil.which("gcc")
CXX = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
ROOT = Path(__file__).resolve().parent.parent
needs_compilers = pytest.mark.skipif(CC is None or CXX is None, reason="no host C/C++ compiler")


@needs_compilers
def test_cpu_variant_serves_repeated_calls(tmp_path):
    env = {**os.environ, "EVT_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    for var in ("EVT_INJECT", "EVT_VERIFY", "EVT_FAST_LAUNCH"):
        env.pop(var, None)
    proc = subprocess.run([sys.executable, "-m", "tests.fast_launch_cpu", str(tmp_path), CC],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("ok:") == 11, proc.stdout


@needs_compilers
def test_cuda_variant_compiles(tmp_path):
    """The CUDA variant through the compiler's front end (linking needs a CUDA torch). A CPU
    torch ships c10/cuda's headers but not the one its CMake generates: a stand-in is added."""
    try:
        cmd = fast.command(fast.SOURCE, tmp_path / "x.so", "cuda")
    except CompileError as e:
        pytest.skip(f"no CUDA headers here: {e}")
    assert "-DEVT_FAST_CUDA" in cmd and "-lc10_cuda" in cmd
    generated = tmp_path / "include" / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h"
    generated.parent.mkdir(parents=True)
    generated.write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    i = cmd.index("-o")
    syntax = [*cmd[:i], "-fsyntax-only", str(fast.SOURCE), f"-idirafter{tmp_path / 'include'}"]
    syntax = [a for a in syntax if a != "-shared"]
    proc = subprocess.run(syntax, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_command_matches_this_torch(tmp_path):
    import torch

    cmd = fast.command(Path("a.cpp"), Path("a.so"), "cpu")
    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    assert abi in cmd and "-DEVT_FAST_CUDA" not in cmd and "-lc10_cuda" not in cmd
    assert f"-I{Path(torch.__file__).resolve().parent / 'include'}" in cmd
    assert cmd[cmd.index("-o") + 1 :][:2] == ["a.so", "a.cpp"]


def test_no_cuda_headers_is_a_clear_error(monkeypatch):
    from evt.codegen import nvcc

    monkeypatch.setattr(nvcc, "nvcc_path", lambda: None)
    monkeypatch.setattr(fast, "CUDA_DEFAULT", "/nonexistent")
    for var in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(CompileError, match="cuda_runtime_api.h not found.*CUDA_HOME"):
        fast.command(Path("a.cpp"), Path("a.so"), "cuda")


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """fast's process state as in a new process, the cache in tmp_path."""
    monkeypatch.setenv("EVT_CACHE_DIR", str(tmp_path))
    for name, value in (("_future", None), ("_loaded", None), ("_failed", False), ("_names", [])):
        monkeypatch.setattr(fast, name, value)
    monkeypatch.setattr(fast, "_pool", fast._pool.__wrapped__)  # a pool per test


def test_a_failed_build_warns_once_and_keeps_python(fresh, monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert fast.ensure("cpu") is False
        assert fast.ensure("cpu") is False
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "C++ launch path is unavailable" in messages[0], messages
    assert fast.loaded() is None and not fast.launches()


def test_a_compile_error_names_the_compiler_and_keeps_the_log(fresh, monkeypatch, tmp_path):
    broken = tmp_path / "fast_launch.cpp"
    broken.write_text("this is not C++;\n")
    monkeypatch.setattr(fast, "SOURCE", broken)
    if CXX is None:
        pytest.skip("no host C++ compiler")
    with pytest.raises(CompileError, match="failed to compile.*error"):
        fast.build("cpu")
    logs = list((tmp_path / "failed").glob("*/build.log"))
    assert len(logs) == 1 and "error" in logs[0].read_text()


def test_off_switch(fresh, monkeypatch):
    monkeypatch.setenv("EVT_FAST_LAUNCH", "0")
    assert not fast.wanted() and fast.prefetch("cuda") is None and fast.ensure("cuda") is False


def test_the_backend_loads_it_after_a_compile_on_sm90(monkeypatch):
    """On an SM90 machine the backend starts the build beside the kernels and loads the library
    after the compile returns (never inside an op call); elsewhere it does neither."""
    import torch

    from evt import backend
    from evt.runtime import dispatch

    calls = []
    monkeypatch.setattr(fast, "prefetch", lambda: calls.append("prefetch"))
    monkeypatch.setattr(fast, "ensure", lambda wait=True: calls.append(f"ensure wait={wait}"))
    monkeypatch.setattr(fast, "pending", lambda: False)
    monkeypatch.setattr(dispatch, "prefetch", lambda spec, problem=None: None)  # no nvcc here

    def f(x, w):
        return torch.relu(x @ w)

    x, w = torch.randn(32, 16), torch.randn(16, 24)
    for sm90 in (False, True):
        calls.clear()
        monkeypatch.setattr(dispatch, "sm90_available", lambda sm90=sm90: sm90)
        torch._dynamo.reset()
        compiled = torch.compile(f, backend=backend.evt_backend, options={"rest": "eager"})
        torch.testing.assert_close(compiled(x, w), f(x, w))
        assert calls == (["prefetch", "ensure wait=True"] if sm90 else []), (sm90, calls)


def test_under_no_wait_a_compile_leaves_it_building_and_a_later_call_loads_it(fresh, monkeypatch):
    """EVT_WAIT_KERNELS=0: the compile returns while the library builds; each call of the
    compiled graph checks, and the first one after the build loads it, before the graph's ops."""
    from concurrent.futures import Future

    import torch

    from evt import backend
    from evt.runtime import dispatch

    building: Future = Future()
    loads: list[str] = []
    monkeypatch.setenv("EVT_WAIT_KERNELS", "0")
    monkeypatch.setattr(fast, "wanted", lambda: True)
    monkeypatch.setattr(fast, "_future", building)
    monkeypatch.setattr(torch.ops, "load_library", loads.append)
    monkeypatch.setattr(dispatch, "sm90_available", lambda: True)
    monkeypatch.setattr(dispatch, "prefetch", lambda spec, problem=None: None)  # no nvcc here

    def f(x, w):
        return torch.relu(x @ w)

    x, w = torch.randn(32, 16), torch.randn(16, 24)
    torch._dynamo.reset()
    # a compile that waited would block: the build then fails after 60 s, and the test with it
    timer = threading.Timer(60, lambda: building.set_exception(RuntimeError("waited")))
    timer.start()
    compiled = torch.compile(f, backend=backend.evt_backend, options={"rest": "eager"})
    torch.testing.assert_close(compiled(x, w), f(x, w))
    torch.testing.assert_close(compiled(x, w), f(x, w))
    timer.cancel()
    assert loads == [] and fast.pending() and fast.loaded() is None
    building.set_result(Path("/built/evt_fast.so"))
    assert loads == []  # not from the builder's thread: at the next call
    torch.testing.assert_close(compiled(x, w), f(x, w))
    assert loads == ["/built/evt_fast.so"] and fast.loaded() == "cuda" and not fast.pending()
    compiled(x, w)
    assert len(loads) == 1
