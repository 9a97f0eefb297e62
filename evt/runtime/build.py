"""Render, compile and cache one kernel: `build(spec) -> Path` of its shared library.

A kernel depends only on static properties, so it is built from its canonical spec
(`evt.runtime.canonical`) under a C name derived from its cache key (`k<16 hex>`): identical
regions of different layers share one binary, and a new batch size never runs nvcc.
`prefetch(spec)` starts a build on a thread pool (nvcc runs in a subprocess, so builds proceed in
parallel while the graph finishes compiling), `evt.codegen.nvcc.parallel_jobs()` at a time. More
than one build at a time shows a progress line on stderr (`evt.runtime.progress`).
"""

from __future__ import annotations

import collections
import hashlib
import shlex
import subprocess
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import evt
from evt import debug
from evt.errors import CodegenError, CompileError
from evt.ir import KernelSpec
from evt.runtime import cache
from evt.runtime.canonical import canonical
from evt.runtime.progress import PROGRESS

ARCH = "sm_90a"
# (cu_path, so_path) -> the finished process; nvcc's log is its stdout + stderr
CompileFn = Callable[[Path, Path], subprocess.CompletedProcess]
# what renders C++: `render(spec, config)`, `default_config(spec)`, `signature(spec, config)`;
# None means evt.codegen.emit (tests substitute a fake)
EMITTER: Any = None
BUILDS: collections.Counter = collections.Counter()  # cache key -> compiler runs in this process


@dataclass
class BuildTime:
    """When a kernel's build was queued, when its compiler started and ended (`time.monotonic()`;
    None until then), for the compiler runs of this process (`timeline()`)."""

    region: str
    name: str
    queued: float
    started: float | None = None
    ended: float | None = None
    ok: bool | None = None


@dataclass(frozen=True)
class Job:
    key: str
    name: str  # the canonical C name the library is built under
    region: str  # the region that asked first (for messages)
    spec: KernelSpec  # named `name`
    config: Any
    source: str
    signature: str  # what evt_<name>_signature() must return
    compile_fn: CompileFn


def emitter() -> Any:
    if EMITTER is not None:
        return EMITTER
    from evt.codegen import emit

    return emit


def plan(spec: KernelSpec, config=None, compile_fn: CompileFn | None = None) -> Job:
    """Render `spec` and compute its cache key (no compiler runs)."""
    from evt.codegen import nvcc

    toolchain = _toolchain(compile_fn)
    em = emitter()
    try:
        config = config or em.default_config(spec)
        probe = canonical(spec)  # node and kernel names derived from structure alone
        rendered = em.render(probe, config)
        key = cache_key(probe, config, rendered, (*toolchain, nvcc.headers_digest(rendered)))
        named = canonical(spec, "k" + key[:16])
        source = em.render(named, config)
        signature = em.signature(named, config) if hasattr(em, "signature") else ""
    except Exception as e:
        raise CodegenError(f"evt: cannot render region {spec.name}: {type(e).__name__}: {e}") from e
    return Job(key, named.name, spec.name, named, config, source, signature,
               compile_fn or compile_with_nvcc)  # fmt: skip


def cache_key(spec: KernelSpec, config, source: str, toolchain: tuple[str, ...]) -> str:
    parts = (spec.signature(), repr(config), *toolchain, ARCH, evt.__version__, source)
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() + b"\0")
    return h.hexdigest()


def build(spec: KernelSpec, config=None, compile_fn: CompileFn | None = None) -> Path:
    """The cached shared library of `spec`, compiling it if needed (at most once per machine)."""
    return compile_job(plan(spec, config, compile_fn))


def compile_job(job: Job) -> Path:
    meta = {"name": job.name, "region": job.region, "signature": job.signature,
            "config": repr(job.config), "spec": job.spec.signature()}  # fmt: skip
    return cache.get_or_build(job.key, lambda tmp: _compile_into(job, tmp), meta)


def _compile_into(job: Job, tmp: Path) -> None:
    cu, so = tmp / cache.CU, tmp / cache.SO
    cu.write_text(job.source)
    debug.log(4, f"kernel {job.name} (region {job.region}): {cache.entry_dir(job.key) / cache.CU}")
    BUILDS[job.key] += 1
    start = time.monotonic()
    with _lock:
        times = _times.setdefault(job.key, BuildTime(job.region, job.name, start))
        times.started = start
    try:
        proc = job.compile_fn(cu, so)
    except Exception as e:
        times.ended, times.ok = time.monotonic(), False
        (tmp / cache.LOG).write_text(f"{type(e).__name__}: {e}\n")
        raise CompileError(_failure(job, f"the compiler could not run: {e}", str(e))) from e
    times.ended, times.ok = time.monotonic(), proc.returncode == 0 and so.is_file()
    log = ((proc.stdout or "") + (proc.stderr or "")).replace(
        str(tmp), str(cache.failed_dir(job.key))
    )
    (tmp / cache.LOG).write_text(log)
    _took[job.key] = times.ended - start
    if proc.returncode != 0 or not so.is_file():
        raise CompileError(_failure(job, f"nvcc exited with {proc.returncode}", log))
    if "C7510" in log:
        warnings.warn(f"evt: kernel {job.name}: ptxas serialized wgmma (C7510), see "
                      f"{cache.entry_dir(job.key) / cache.LOG}", stacklevel=2)  # fmt: skip
    if uses_local_memory(log):
        debug.log(1, f"kernel {job.name} (region {job.region}, tile {_label(job.config)}) keeps "
                     "data in local memory (ptxas): expect a slow epilogue; max-autotune times "
                     "the other configs, EVT_DEBUG=5 prints the nvcc command")  # fmt: skip


def uses_local_memory(log: str) -> bool:
    """Whether ptxas said (-warn-lmem-usage) that a kernel of the library uses local memory."""
    from evt.codegen.nvcc import LOCAL_MEMORY

    return LOCAL_MEMORY in log


def _label(config) -> str:
    return getattr(config, "label", None) or "default"


def first_errors(log: str, count: int = 5) -> list[str]:
    """A compiler log's first lines that say "error", else its last lines."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    return [ln for ln in lines if "error" in ln.lower()][:count] or lines[-count:]


def _failure(job: Job, what: str, log: str) -> str:
    where = cache.failed_dir(job.key)
    errors = first_errors(log)
    return "\n".join([
        f"evt: kernel {job.name} (built for region {job.region}) failed to compile: {what}",
        f"  source: {where / cache.CU}",
        f"  log:    {where / cache.LOG}",
        *(["  first errors:"] + [f"    {ln}" for ln in errors] if errors else []),
        "  The region runs unfused; EVT_DEBUG=5 prints the nvcc command line.",
    ])  # fmt: skip


def compile_with_nvcc(cu: Path, so: Path) -> subprocess.CompletedProcess:
    from evt.codegen import nvcc

    return nvcc.compile_library(cu, so)


def _toolchain(compile_fn: CompileFn | None) -> tuple[str, ...]:
    from evt.codegen import nvcc

    parts = (nvcc.cutlass_version(),)  # our headers: by what each source includes (`plan`)
    if compile_fn not in (None, compile_with_nvcc):  # an injected compiler is its own toolchain
        return ("fn", f"{compile_fn.__module__}.{compile_fn.__qualname__}", *parts)  # type: ignore[union-attr]
    if nvcc.nvcc_path() is None:
        raise CompileError("evt: nvcc not found, so no kernel can be compiled: put the CUDA "
                           "toolkit's bin/ on PATH or set CUDA_HOME; regions run unfused")  # fmt: skip
    return ("nvcc", nvcc.nvcc_version(), shlex.join(nvcc.key_flags()), *parts)


# ---------------------------------------------------------------------------------------------
# Background builds
# ---------------------------------------------------------------------------------------------
_futures: dict[str, Future] = {}
_took: dict[str, float] = {}  # cache key -> seconds its compiler ran (for the progress line)
_times: dict[str, BuildTime] = {}  # cache key -> its build's timeline (`timeline()`)
_lock = threading.Lock()


@lru_cache(maxsize=1)
def _pool() -> ThreadPoolExecutor:
    from evt.codegen import nvcc

    return ThreadPoolExecutor(max_workers=nvcc.parallel_jobs(), thread_name_prefix="evt-nvcc")


def submit(job: Job) -> Future:
    """A future of `compile_job(job)`; one per key and process. A key with no finished entry yet
    counts towards the progress line, which hears of it before the future is done."""
    with _lock:
        if job.key not in _futures:
            queued = not (cache.entry_dir(job.key) / cache.META).is_file()
            if queued:
                PROGRESS.add()
                _times.setdefault(job.key, BuildTime(job.region, job.name, time.monotonic()))
            _futures[job.key] = _pool().submit(_reported if queued else compile_job, job)
        return _futures[job.key]


def wait_all(timeout: float | None = None) -> bool:
    """Wait for every build this process started; False if some still run after `timeout` s."""
    with _lock:
        futures = list(_futures.values())
    return not wait(futures, timeout=timeout).not_done


def timeline() -> list[BuildTime]:
    """The compiler runs of this process, in the order they were queued: when each was queued,
    started and ended (a queued build starts when one of `parallel_jobs()` threads is free)."""
    with _lock:
        return sorted((replace(t) for t in _times.values()), key=lambda t: t.queued)


def _reported(job: Job) -> Path:
    label, ok = f"{job.name} (region {job.region})", False
    try:
        path, ok = compile_job(job), True
        return path
    finally:
        PROGRESS.finish(label, _took.pop(job.key, None), ok)


def prefetch(spec: KernelSpec, config=None, compile_fn: CompileFn | None = None) -> Future:
    """Start building `spec` in the background; the future holds the library path or the error."""
    try:
        return submit(plan(spec, config, compile_fn))
    except Exception as e:  # render or toolchain failure: report it through the future
        failed: Future = Future()
        failed.set_exception(e)
        return failed
