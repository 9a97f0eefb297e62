"""The progress line of background builds and the size of the build pool (fake compiler)."""

from __future__ import annotations

import io
import sys
import time
import types

import pytest

from evt.runtime import build, progress
from tests.runtime_fakes import FakeEmitter, failing_compile, fake_compile, fc1_spec


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def fake_toolchain(tmp_path, monkeypatch):
    monkeypatch.setenv("EVT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EVT_TEST_SLEEP", "0.3")  # every kernel is queued before one finishes
    monkeypatch.delenv("EVT_PROGRESS", raising=False)
    monkeypatch.setattr(build, "EMITTER", FakeEmitter)
    monkeypatch.setattr(build, "_futures", {})
    monkeypatch.setitem(sys.modules, "tqdm", None)  # the plain line unless a test adds a fake


def prefetch_all(monkeypatch, stream, dtypes=("bf16", "f16"), compile_fn=fake_compile) -> str:
    monkeypatch.setattr(build, "PROGRESS", progress.Progress(stream))
    futures = [build.prefetch(fc1_spec(dtype=d), compile_fn=compile_fn) for d in dtypes]
    for f in futures:
        f.exception(timeout=30)
    return stream.getvalue()


def test_one_line_per_kernel_when_not_a_terminal(monkeypatch):
    out = prefetch_all(monkeypatch, io.StringIO(), ("bf16", "f16", "f32"))
    lines = out.splitlines()
    assert [ln.split(":")[1].strip().split()[-1] for ln in lines[:3]] == ["1/3", "2/3", "3/3"]
    assert all("(region evt_f0_addmm) in " in ln for ln in lines[:3])
    assert lines[3].startswith("evt: compiled 3 kernels in ") and "\r" not in out


def test_one_kernel_is_quiet_and_cached_kernels_do_not_count(monkeypatch):
    assert prefetch_all(monkeypatch, io.StringIO(), ("bf16",)) == ""
    monkeypatch.setattr(build, "_futures", {})
    assert prefetch_all(monkeypatch, io.StringIO(), ("bf16", "f16")) == ""  # bf16 is cached


def test_settings_hide_or_force_it(monkeypatch):
    monkeypatch.setenv("EVT_PROGRESS", "0")
    assert prefetch_all(monkeypatch, io.StringIO()) == ""
    monkeypatch.setenv("EVT_PROGRESS", "1")
    monkeypatch.setattr(build, "_futures", {})
    assert "compiled kernel 1/1" in prefetch_all(monkeypatch, io.StringIO(), ("f32",))


def test_terminal_gets_one_updating_line(monkeypatch):
    out = prefetch_all(monkeypatch, Tty())
    assert out.count("\r") >= 3 and "evt: compiling kernels [" in out and "2/2" in out
    assert out.endswith("\n") and "evt: compiled 2 kernels in " in out.splitlines()[-1]


def slow_failing_compile(cu, so):
    time.sleep(0.3)
    return failing_compile(cu, so)


def test_failures_are_counted(monkeypatch):
    out = prefetch_all(monkeypatch, io.StringIO(), compile_fn=slow_failing_compile)
    assert out.count("FAILED") == 2 and out.splitlines()[-1].endswith(", 2 failed")


def test_tqdm_bar_when_installed(monkeypatch):
    bars = []

    class FakeTqdm:
        def __init__(self, **kwargs):
            self.total, self.n, self.postfix, self.closed = 0, 0, "", False
            bars.append(self)

        def set_postfix_str(self, s, refresh=True):
            self.postfix = s

        def close(self):
            self.closed = True

    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=FakeTqdm))
    out = prefetch_all(monkeypatch, Tty())
    assert len(bars) == 1 and (bars[0].total, bars[0].n) == (2, 2) and bars[0].closed
    assert "(region evt_f0_addmm)" in bars[0].postfix and "\r" not in out
    assert out.startswith("evt: compiled 2 kernels in ")


def test_pool_size(monkeypatch):
    from evt.codegen import nvcc

    monkeypatch.setenv("EVT_COMPILE_JOBS", "3")
    assert nvcc.parallel_jobs() == 3
    monkeypatch.delenv("EVT_COMPILE_JOBS")
    monkeypatch.setattr(nvcc.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(nvcc, "_available_memory", lambda: 9 * 2**30)
    assert nvcc.parallel_jobs() == 2  # memory for two compilers, not sixteen
    monkeypatch.setattr(nvcc, "_available_memory", lambda: 0)  # unknown: one per core
    assert nvcc.parallel_jobs() == 16


def test_a_closed_stderr_never_fails_a_build(monkeypatch):
    stream = io.StringIO()
    stream.close()
    monkeypatch.setattr(build, "PROGRESS", progress.Progress(stream))
    futures = [build.prefetch(fc1_spec(dtype=d), compile_fn=fake_compile) for d in ("bf16", "f16")]
    assert all(f.result(timeout=30).is_file() for f in futures)


def test_the_timeline_says_when_each_build_was_queued_started_and_ended(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    one = ThreadPoolExecutor(max_workers=1)  # the second kernel waits for the first's compiler
    monkeypatch.setattr(build, "_pool", lambda: one)
    monkeypatch.setattr(build, "_times", {})
    before = time.monotonic()
    prefetch_all(monkeypatch, io.StringIO(), ("bf16", "f16"))
    prefetch_all(monkeypatch, io.StringIO(), ("bf16",))  # cached: no compiler run, no entry
    first, second = build.timeline()
    assert before <= first.queued <= first.started and first.queued <= second.queued < first.ended
    assert first.ended <= second.started < second.ended  # queued while the first compiled
    assert all(t.ended - t.started >= 0.3 and t.ok and t.region == "evt_f0_addmm" for t in (first, second))
    monkeypatch.setattr(build, "_futures", {})
    prefetch_all(monkeypatch, io.StringIO(), ("f32",), compile_fn=slow_failing_compile)
    assert build.timeline()[-1].ok is False
