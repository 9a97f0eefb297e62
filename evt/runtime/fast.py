"""The C++ hot path of `evt::fused_gemm` (`fast_launch.cpp`): build it, load it, feed it.

A region's call from Inductor's generated code costs ~30 us of host time through Python (the op's
Python kernel, the guards' fingerprint, output allocation, ctypes), twice a cuBLAS call. Once this
library is loaded, the op's CUDA kernel is C++: it looks the spec and the inputs' layout up in a
table of launch plans and calls the kernel's launcher directly; a miss goes to
`evt::fused_gemm_slow` (Python), and `dispatch.run` then hands the launch's plan to `remember`.

The library is compiled with the host C++ compiler against the running torch's headers, once per
machine, torch build and source (an entry of the kernel cache, built in the background while the
backend compiles a graph), and loaded by the backend after its compile, never inside an op call.
Under `EVT_WAIT_KERNELS=0` the backend does not wait for that build: a graph compiled while it
runs loads it before one of its later calls, once built (`evt.backend.load_launch_path_later`).
`EVT_FAST_LAUNCH=0` keeps every call in Python.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import hashlib
import os
import shlex
import shutil
import subprocess
import threading
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from evt import debug
from evt.errors import CompileError
from evt.runtime import cache
from evt.runtime.build import first_errors

SOURCE = Path(__file__).with_name("fast_launch.cpp")
BUILD_TIMEOUT_S = 600
CUDA_DEFAULT = "/usr/local/cuda"  # where the CUDA toolkit is when nothing says otherwise

_lock = threading.Lock()
_future: Future | None = None
_loaded: str | None = None  # "cuda" or "cpu": the dispatch key the loaded library serves
_names: list[str] = []  # registration id -> region name
_failed = False  # a call into the library failed: it stays unused in this process
# seconds: its compiler's run in this process (None: it ran in none), `ensure`'s waits for it
TIMES: dict[str, float | None] = {"compiler_s": None, "ensure_waited_s": 0.0}


def wanted() -> bool:
    """Whether this process should use the C++ path: EVT_FAST_LAUNCH is not 0 and torch has CUDA."""
    return os.environ.get("EVT_FAST_LAUNCH", "1") != "0" and torch.version.cuda is not None


def loaded() -> str | None:
    """The device type the loaded library serves ("cuda", "cpu" in tests), or None."""
    return None if _failed else _loaded


def prefetch(device: str = "cuda") -> Future | None:
    """Start building the library in the background (once per process)."""
    global _future
    if device == "cuda" and not wanted():
        return None
    with _lock:
        if _future is None:
            _future = _pool().submit(build, device)
        return _future


def ensure(device: str = "cuda", wait: bool = True) -> bool:
    """Load the library, waiting for its build (a cache hit: a few ms); one warning and False if it
    cannot be built or loaded. Called by the backend after a graph's compile, and (`wait=False`,
    under EVT_WAIT_KERNELS=0) before each call of a graph compiled while it built: False while
    the build runs (`pending()`), the library loaded once it ended."""
    global _loaded
    if _loaded is not None:
        return loaded() == device
    future = prefetch(device)
    if future is None:
        return False
    if not wait and not future.done():
        return False
    try:
        start = time.monotonic()
        try:
            path = future.result()
        finally:
            TIMES["ensure_waited_s"] = (TIMES["ensure_waited_s"] or 0.0) + time.monotonic() - start
        with _lock:
            if _loaded is None:
                torch.ops.load_library(str(path))
                _loaded = device
                debug.log(1, f"C++ launch path loaded from {path}")
    except Exception as e:  # noqa: BLE001 - the Python path stays: slower on the host, same results
        _disable(f"evt: the C++ launch path is unavailable, regions launch from Python "
                 f"(~3x the host time per call): {e}. It needs a host C++ compiler (c++ or "
                 "$CXX) and the CUDA headers ($CUDA_HOME); EVT_DEBUG=5 prints its command, "
                 "EVT_FAST_LAUNCH=0 skips it")  # fmt: skip
        return False
    return loaded() == device


def pending() -> bool:
    """Whether the library is building or built but not loaded yet (neither loaded nor failed)."""
    return _future is not None and _loaded is None and not _failed


def remember(key: str, region: str, kernel, problem, inputs, outputs, padded=None) -> None:
    """Hand a launch that just succeeded to the C++ path: later calls with `key` (the op's spec
    text) and inputs of this layout launch from C++. `padded`: the inputs the launch read, where
    `guards.copy_into_rows` copied some into padded rows (the C++ path copies them the same way)."""
    if loaded() is None:
        return
    pads = [] if padded is None else [
        x for i, (a, b) in enumerate(zip(inputs, padded)) if a is not b for x in (i, b.stride(-2))
    ]  # fmt: skip
    device = inputs[kernel.spec.gemm.a.input].device
    try:
        with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
            plan = kernel.plan(problem)  # the plan of the inputs' device, where it launched
        run = ctypes.cast(kernel.library.run, ctypes.c_void_p).value
        rid = torch.ops.evt_fast.remember(
            key, run, kernel.library.nested, list(inputs), list(outputs),
            list(plan.input_strides), list(plan.output_strides), list(problem.abi_shape),
            plan.tile_order, plan.workspace_bytes, pads,
        )  # fmt: skip
    except Exception as e:  # noqa: BLE001
        _disable(f"evt: the C++ launch path failed ({type(e).__name__}: {e}); "
                 "regions launch from Python from now on")  # fmt: skip
        return
    with _lock:
        while len(_names) <= rid:
            _names.append(region)


def launches() -> collections.Counter:
    """Region name -> launches made by the C++ path since the last `forget_all`."""
    if _loaded is None:
        return collections.Counter()
    counts = torch.ops.evt_fast.launch_counts()
    out: collections.Counter = collections.Counter()
    with _lock:
        for name, n in zip(_names, counts):
            if n:
                out[name] += n
    return out


@dataclass(frozen=True)
class HostTime:
    """A region's launches from the C++ path (those inside `timed()`) and their host time in ns:
    the whole C++ call (outputs, workspace, launcher) and the kernel's launcher alone (its
    parameters, the CUDA launch). The op's dispatch from Python comes on top."""

    launches: int
    call_ns: int
    launcher_ns: int

    def __sub__(self, other: HostTime) -> HostTime:
        return HostTime(self.launches - other.launches, self.call_ns - other.call_ns,
                        self.launcher_ns - other.launcher_ns)  # fmt: skip

    @property
    def call_us(self) -> float:
        """Per launch."""
        return self.call_ns / max(self.launches, 1) / 1e3

    @property
    def launcher_us(self) -> float:
        """Per launch."""
        return self.launcher_ns / max(self.launches, 1) / 1e3


@contextlib.contextmanager
def timed() -> Iterator[None]:
    """Inside, the C++ launch path times its calls (`host_times`). Off by default: the four clock
    reads per call cost 0.7-1.5 us of a 15-20 us call (H100 hosts, session 28)."""
    was = bool(torch.ops.evt_fast.set_timing(True)) if _loaded is not None else False
    try:
        yield
    finally:
        if _loaded is not None:
            torch.ops.evt_fast.set_timing(was)


def host_times() -> dict[str, HostTime]:
    """Region name -> its C++ launches made inside `timed()` and their host time, since the last
    `forget_all`."""
    if _loaded is None:
        return {}
    flat = torch.ops.evt_fast.launch_times()
    sums: dict[str, list[int]] = {}
    with _lock:
        for name, k in zip(_names, range(0, len(flat), 3)):
            acc = sums.setdefault(name, [0, 0, 0])
            for i in range(3):
                acc[i] += flat[k + i]
    return {name: HostTime(*acc) for name, acc in sums.items() if acc[0]}


def host_times_since(before: dict[str, HostTime]) -> dict[str, HostTime]:
    """Region name -> its C++ launches and their host time since `before` (a `host_times()`
    reading), for the regions that launched in between."""
    spent = {name: t - before[name] if name in before else t for name, t in host_times().items()}
    return {name: t for name, t in spent.items() if t.launches}


def forget_all() -> None:
    if _loaded is not None:
        torch.ops.evt_fast.forget_all()
    with _lock:
        _names.clear()


def set_enabled(on: bool) -> None:
    """Off: every call takes the Python path (reference-only mode, `dispatch.reference_only`)."""
    if _loaded is not None:
        torch.ops.evt_fast.set_enabled(on and not _failed)


def _disable(message: str) -> None:
    global _failed
    with _lock:
        first, _failed = not _failed, True
    if _loaded is not None:
        torch.ops.evt_fast.set_enabled(False)
    if first:
        warnings.warn(message, stacklevel=3)


# ---------------------------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="evt-fast")


def build(device: str = "cuda") -> Path:
    """The cached library for this torch and `device` ("cuda", or "cpu" for tests)."""
    cmd = command(Path(SOURCE.name), Path(cache.SO), device)
    key = hashlib.sha256("\0".join([SOURCE.read_text(), torch.__version__, str(torch.version.cuda),
                                    compiler_version(cmd[0]), *cmd]).encode()).hexdigest()  # fmt: skip
    meta = {"name": f"evt_fast_{device}", "region": "(C++ launch path)"}
    return cache.get_or_build(key, lambda tmp: _compile(tmp, cmd), meta)


def _compile(tmp: Path, cmd: list[str]) -> None:
    shutil.copyfile(SOURCE, tmp / SOURCE.name)
    debug.log(5, f"cd {shlex.quote(str(tmp))} && {shlex.join(cmd)}")
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                          check=False)  # fmt: skip
    TIMES["compiler_s"] = time.monotonic() - start
    log = proc.stdout + proc.stderr
    (tmp / cache.LOG).write_text(log)
    if proc.returncode != 0:
        raise CompileError("the C++ launch path failed to compile (" + shlex.join(cmd[:1]) + "): "
                           + " | ".join(first_errors(log)))  # fmt: skip


def command(source: Path, out: Path, device: str = "cuda") -> list[str]:
    """The host compiler's command line building `source` into the shared library `out`."""
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        raise CompileError("no host C++ compiler (c++ or g++ on PATH, or $CXX)")
    torch_dir = Path(torch.__file__).resolve().parent
    includes, libs = [torch_dir / "include"], ["-lc10", "-ltorch_cpu"]
    defines = [f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
    if device == "cuda":
        includes += _cuda_includes()
        libs += ["-lc10_cuda"]
        defines += ["-DEVT_FAST_CUDA"]
    lib_dir = torch_dir / "lib"
    return [cxx, "-std=c++20", "-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-w", *defines,
            *(f"-I{p}" for p in includes), "-o", str(out), str(source), f"-L{lib_dir}", *libs,
            f"-Wl,-rpath,{lib_dir}"]  # fmt: skip


def _cuda_includes() -> list[Path]:
    """Where cuda_runtime_api.h is: $CUDA_HOME or $CUDA_PATH, the toolkit of nvcc on PATH, or
    /usr/local/cuda."""
    from evt.codegen import nvcc

    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    found = nvcc.nvcc_path()
    homes += [str(Path(found).resolve().parent.parent) if found else None, CUDA_DEFAULT]
    for home in filter(None, homes):
        for include in (Path(home) / "include", Path(home) / "targets" / "x86_64-linux" / "include"):
            if (include / "cuda_runtime_api.h").is_file():
                return [include]
    raise CompileError("cuda_runtime_api.h not found: set CUDA_HOME to the CUDA toolkit")


@lru_cache(maxsize=4)
def compiler_version(cxx: str) -> str:
    try:
        return subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False,
                              timeout=30).stdout.splitlines()[0]  # fmt: skip
    except (OSError, IndexError, subprocess.SubprocessError):
        return "unknown"
