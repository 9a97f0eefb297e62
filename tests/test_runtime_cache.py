"""The kernel cache and builder, with a fake compiler (milliseconds, no nvcc)."""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest
import torch

from evt.errors import CompileError
from evt.runtime import build, cache, reference
from evt.runtime.canonical import canonical
from tests.runtime_fakes import (
    FakeEmitter,
    count,
    crashing_compile,
    failing_compile,
    fake_compile,
    fc1_inputs,
    fc1_spec,
    local_memory_compile,
)


@pytest.fixture(autouse=True)
def fake_toolchain(tmp_path, monkeypatch):
    monkeypatch.setenv("EVT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EVT_TEST_COUNTER", str(tmp_path / "calls"))
    monkeypatch.setattr(build, "EMITTER", FakeEmitter)
    monkeypatch.setattr(build, "_futures", {})
    return tmp_path


def calls(tmp_path) -> int:
    return count(tmp_path / "calls")


def test_entry_is_complete_and_reused(fake_toolchain):
    path = build.build(fc1_spec(), compile_fn=fake_compile)
    entry = path.parent
    meta = json.loads((entry / cache.META).read_text())
    assert path.name == cache.SO and entry.name == meta["key"] and entry.parent == cache.root()
    assert meta["sha256"] == cache.file_sha256(path)
    assert meta["name"] == "k" + meta["key"][:16] and meta["region"] == "evt_f0_addmm"
    assert f"evt_{meta['name']}_run" in (entry / cache.CU).read_text()
    assert not [p for p in cache.root().iterdir() if p.name.startswith(".tmp-")]
    assert build.build(fc1_spec(), compile_fn=fake_compile) == path
    assert calls(fake_toolchain) == 1


def test_identical_regions_share_one_binary(fake_toolchain):
    a = build.build(fc1_spec("evt_f0_addmm"), compile_fn=fake_compile)
    b = build.build(fc1_spec("evt_f4_addmm_7"), compile_fn=fake_compile)
    assert a == b and calls(fake_toolchain) == 1


def test_node_names_do_not_matter():
    spec = fc1_spec()
    renamed = canonical(spec, "evt_f3_addmm_2")
    assert renamed.signature() != spec.signature()
    assert (
        build.plan(renamed, compile_fn=fake_compile).key
        == build.plan(spec, compile_fn=fake_compile).key
    )
    inputs = fc1_inputs()
    for a, b in zip(reference.run(spec, inputs), reference.run(renamed, inputs), strict=True):
        assert torch.equal(a, b)


def test_key_covers_config_source_and_toolchain(monkeypatch):
    spec = fc1_spec()
    base = build.plan(spec, compile_fn=fake_compile).key
    assert build.plan(spec, "other-config", compile_fn=fake_compile).key != base
    assert build.plan(spec, compile_fn=failing_compile).key != base
    monkeypatch.setattr(FakeEmitter, "render", staticmethod(lambda s, c: "// changed template"))
    assert build.plan(spec, compile_fn=fake_compile).key != base


def test_key_covers_cutlass_and_our_headers(monkeypatch):
    from evt.codegen import nvcc

    base = build.plan(fc1_spec(), compile_fn=fake_compile).key
    monkeypatch.setattr(nvcc, "headers_digest", lambda source: "edited evt_functors.h")
    headers = build.plan(fc1_spec(), compile_fn=fake_compile).key
    monkeypatch.setattr(nvcc, "cutlass_version", lambda: "9.9.9")
    assert len({base, headers, build.plan(fc1_spec(), compile_fn=fake_compile).key}) == 3


def test_key_hashes_only_the_headers_a_kernel_includes(monkeypatch, tmp_path):
    """Editing evt_statistics.h re-keys the kernels with statistics, not the others; a header
    one of ours includes counts as if the source included it."""
    from evt.codegen import emit, nvcc
    from tests import specs

    monkeypatch.setattr(build, "EMITTER", emit)
    plain, stats = specs.ALL["mlp_fc1_forward"](), specs.ALL["layer_norm_backward"]()
    names = {s.name: [p.name for p in nvcc.included_headers(emit.render(s))] for s in (plain, stats)}
    assert names == {plain.name: ["evt_functors.h", "evt_launch.h"],
                     stats.name: ["evt_functors.h", "evt_launch.h", "evt_statistics.h"]}  # fmt: skip
    assert [p.name for p in nvcc.included_headers('#include "evt_statistics.h"\n')] == [
        "evt_functors.h", "evt_launch.h", "evt_statistics.h"]  # fmt: skip
    before = {s.name: build.plan(s, compile_fn=fake_compile).key for s in (plain, stats)}
    real = nvcc._header_text

    def edited(path):
        return real(path) + ("\n// edited" if path.name == "evt_statistics.h" else "")

    monkeypatch.setattr(nvcc, "_header_text", edited)
    after = {s.name: build.plan(s, compile_fn=fake_compile).key for s in (plain, stats)}
    assert after[plain.name] == before[plain.name]
    assert after[stats.name] != before[stats.name]


def test_key_names_include_folders_by_role_not_path(monkeypatch, tmp_path):
    """A cache filled where CUTLASS lives in one folder serves a machine where it lives in
    another (scripts/kernel_pack.py builds on the CPU machine for the GPU one); other flags
    still count."""
    from pathlib import Path

    from evt.codegen import nvcc

    monkeypatch.setattr(nvcc, "nvcc_path", lambda: "/usr/bin/nvcc")
    monkeypatch.setattr(nvcc, "nvcc_version", lambda: "release 13.0, V13.0.88")
    keys = []
    for root in ("/venv-a/site-packages/cutlass_library/source", "/tmp/site/cutlass_library/source"):
        monkeypatch.setattr(nvcc, "cutlass_dir", lambda root=root: Path(root))
        assert any(f.startswith("-I" + root) for f in nvcc.nvcc_flags())
        assert not any(root in f for f in nvcc.key_flags())
        keys.append(build.plan(fc1_spec()).key)
    monkeypatch.setattr(nvcc, "OPT_FLAGS", [*nvcc.OPT_FLAGS, "-lineinfo"])
    keys.append(build.plan(fc1_spec()).key)
    assert keys[0] == keys[1] != keys[2]


@pytest.mark.parametrize("damage", ["truncate", "drop_meta", "bad_json"])
def test_damaged_entry_is_rebuilt(fake_toolchain, damage):
    path = build.build(fc1_spec(), compile_fn=fake_compile)
    meta = path.parent / cache.META
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:5])
    elif damage == "drop_meta":
        meta.unlink()
    else:
        meta.write_text("{not json")
    assert cache.lookup(path.parent.name) is None
    assert build.build(fc1_spec(), compile_fn=fake_compile) == path
    assert cache.lookup(path.parent.name) == path and calls(fake_toolchain) == 2


def _build_in_child(barrier, results) -> None:
    build.EMITTER = FakeEmitter
    barrier.wait()
    results.put(str(build.build(fc1_spec(), compile_fn=fake_compile)))


def test_two_processes_build_once(fake_toolchain, monkeypatch):
    monkeypatch.setenv("EVT_TEST_SLEEP", "1.0")
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_build_in_child, args=(barrier, results)) for _ in range(2)]
    for p in procs:
        p.start()
    paths = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert paths[0] == paths[1] and calls(fake_toolchain) == 1
    assert cache.lookup(os.path.basename(os.path.dirname(paths[0]))) is not None


def test_compile_error_names_kernel_source_and_first_error(fake_toolchain):
    with pytest.raises(CompileError) as info:
        build.build(fc1_spec(), compile_fn=failing_compile)
    msg = str(info.value)
    key = build.plan(fc1_spec(), compile_fn=failing_compile).key
    cu, log = cache.failed_dir(key) / cache.CU, cache.failed_dir(key) / cache.LOG
    assert "evt_f0_addmm" in msg and f"k{key[:16]}" in msg and "nvcc exited with 2" in msg
    assert str(cu) in msg and str(log) in msg and "evt_missing_functor" in msg
    assert cu.is_file() and "evt_missing_functor" in log.read_text()
    assert cache.lookup(key) is None


def test_compiler_that_cannot_run(fake_toolchain):
    with pytest.raises(CompileError, match="could not run.*No such file"):
        build.build(fc1_spec(), compile_fn=crashing_compile)


def test_missing_nvcc_fails_at_once(monkeypatch):
    from evt.codegen import nvcc

    monkeypatch.setattr(nvcc, "nvcc_path", lambda: None)
    with pytest.raises(CompileError, match="nvcc not found"):
        build.build(fc1_spec())
    assert isinstance(build.prefetch(fc1_spec()).exception(timeout=5), CompileError)


def test_prefetch_builds_once_in_the_background(fake_toolchain):
    futures = [
        build.prefetch(fc1_spec(f"evt_f{i}_addmm"), compile_fn=fake_compile) for i in range(3)
    ]
    assert futures[0] is futures[1] is futures[2]
    assert futures[0].result(timeout=30).is_file() and calls(fake_toolchain) == 1


def test_real_emitter_builds_under_the_canonical_name(monkeypatch):
    pytest.importorskip("evt.codegen.emit")
    monkeypatch.setattr(build, "EMITTER", None)
    a = build.plan(fc1_spec("evt_f0_addmm"), compile_fn=fake_compile)
    b = build.plan(fc1_spec("evt_f9_addmm_3"), compile_fn=fake_compile)
    assert a.key == b.key and a.source == b.source
    assert f"evt_{a.name}_run" in a.source and "evt_f0_addmm" not in a.source
    assert a.signature.startswith(a.name + ";")


def test_a_kernel_in_local_memory_is_reported(fake_toolchain, monkeypatch, capsys):
    monkeypatch.setenv("EVT_DEBUG", "1")
    build.build(fc1_spec(), compile_fn=local_memory_compile)
    err = capsys.readouterr().err
    assert "keeps data in local memory (ptxas): expect a slow epilogue" in err, err
    assert "(region evt_f0_addmm, tile default)" in err, err
    build.build(fc1_spec("evt_f1_addmm"), "other-config", compile_fn=fake_compile)
    assert "local memory" not in capsys.readouterr().err
