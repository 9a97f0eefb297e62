"""`evt cache` and the cache's housekeeping (`clear`, `sweep`), with the fake compiler."""

from __future__ import annotations

import os
import threading
import time

import pytest

from evt import cli
from evt.runtime import build, cache, cache_cli
from tests.runtime_fakes import FakeEmitter, count, failing_compile, fake_compile, fc1_spec


@pytest.fixture(autouse=True)
def fake_toolchain(tmp_path, monkeypatch):
    monkeypatch.setenv("EVT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EVT_TEST_COUNTER", str(tmp_path / "calls"))
    monkeypatch.setenv("EVT_PROGRESS", "0")
    monkeypatch.setattr(build, "EMITTER", FakeEmitter)
    monkeypatch.setattr(build, "_futures", {})
    return tmp_path


def two_kernels() -> list:
    return [build.build(fc1_spec(dtype=d), compile_fn=fake_compile) for d in ("bf16", "f16")]


def test_info_counts_kernels_and_lists_them(capsys):
    paths = two_kernels()
    with pytest.raises(Exception, match="failed to compile"):
        build.build(fc1_spec(dtype="f32"), compile_fn=failing_compile)
    assert cli.main(["cache"]) == 0
    out = capsys.readouterr().out
    assert str(cache.root()) in out and "2 kernels" in out and "1 failed build " in out
    assert cli.main(["cache", "info", "--verbose"]) == 0
    out = capsys.readouterr().out
    for p in paths:
        assert p.parent.name[:16] in out  # the C name is k + the key's first 16 hex digits
    assert out.count("evt_f0_addmm") == 2 and "damaged" not in out
    paths[0].write_bytes(b"truncated")
    assert "damaged: rebuilt on next use" in cache_cli.info(verbose=True)


def test_entries_report_size_and_age():
    path = two_kernels()[0]
    old = time.time() - 7200
    os.utime(path.parent / cache.META, (old, old))
    found = {e.key: e for e in cache_cli.entries()}
    entry = found[path.parent.name]
    assert entry.intact and entry.bytes == cache.tree_bytes(path.parent) > 0
    assert 7100 < entry.age_s < 7300 and cache_cli.human_age(entry.age_s) == "2 h"
    assert cache_cli.human_bytes(1_234_567) == "1.2 MB" and cache_cli.human_bytes(12) == "12 B"


def test_clear_removes_everything_but_the_root_lock(capsys, fake_toolchain):
    two_kernels()
    (cache.root() / ".tmp-0123456789abcdef-x").mkdir()
    assert cli.main(["cache", "clear"]) == 0
    assert "removed 2 kernels" in capsys.readouterr().out
    assert [p.name for p in cache.root().iterdir()] == [cache.ROOT_LOCK]
    two_kernels()  # the cache works after a clear: both rebuilt
    assert count(fake_toolchain / "calls") == 4


def test_clear_waits_for_a_build_in_progress():
    started, release, waited = threading.Event(), threading.Event(), threading.Event()

    def produce(tmp):
        started.set()
        release.wait(10)
        (tmp / cache.SO).write_bytes(b"library")

    builder = threading.Thread(target=cache.get_or_build, args=("a" * 64, produce))
    builder.start()
    started.wait(10)
    clearer = threading.Thread(target=cache.clear, kwargs={"wait": waited.set})
    clearer.start()
    assert waited.wait(10)
    time.sleep(0.2)
    assert clearer.is_alive()  # blocked until the build is published
    release.set()
    builder.join(10)
    clearer.join(10)
    assert not clearer.is_alive() and cache.lookup("a" * 64) is None


def test_sweep_removes_only_stale_leftovers():
    root = cache.root()
    stale, fresh, trash = root / ".tmp-0000-a", root / ".tmp-1111-b", root / ".trash-c"
    for d in (stale, fresh, trash):
        (d / "sub").mkdir(parents=True)
    old = time.time() - cache.STALE_S - 60
    for d in (stale, trash):
        os.utime(d, (old, old))
    assert sorted(cache.sweep()) == sorted([stale, trash])
    assert fresh.is_dir() and not stale.exists() and not trash.exists()


def test_first_build_of_a_process_sweeps(monkeypatch):
    monkeypatch.setattr(cache, "_swept", set())
    leftover = cache.root() / ".tmp-killed"
    leftover.mkdir()
    old = time.time() - 2 * cache.STALE_S
    os.utime(leftover, (old, old))
    two_kernels()
    assert not leftover.exists()


def test_stale_age_outlives_the_compiler_timeout():
    from evt.codegen import nvcc

    assert cache.STALE_S > nvcc.NVCC_TIMEOUT_S
