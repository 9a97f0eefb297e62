"""`scripts/kernel_pack.py`: kernels built on one machine travel to another's cache in an archive
(with a fake compiler: milliseconds, no nvcc)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from evt.codegen import config as cfgs
from evt.runtime import build, cache
from scripts import kernel_pack
from tests.runtime_fakes import FakeEmitter, fake_compile, fc1_spec

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def machines(tmp_path, monkeypatch):
    """A cache here (`here`), an empty one on the other machine (`there`), and the pack folder."""
    monkeypatch.setenv("EVT_CACHE_DIR", str(tmp_path / "here"))
    monkeypatch.setenv("EVT_TEST_COUNTER", str(tmp_path / "calls"))
    monkeypatch.setattr(build, "EMITTER", FakeEmitter)
    monkeypatch.setattr(build, "_futures", {})
    monkeypatch.setattr(kernel_pack, "PACK", tmp_path / "kpack")
    (tmp_path / "kpack").mkdir()
    return tmp_path


def unpack(archive: Path, root: Path) -> None:
    """What scripts/device_env.sh does with each carried archive."""
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-xJf", str(archive), "-C", str(root)], check=True)


def test_a_packed_kernel_is_found_on_the_other_machine(machines, monkeypatch, capsys):
    so = build.build(fc1_spec(), compile_fn=fake_compile)
    key = so.parent.name
    broken = build.build(fc1_spec("other", dtype="f16"), compile_fn=fake_compile)
    broken.write_bytes(b"truncated")  # fails its integrity record: not packed
    archive = machines / "kpack" / "kernels.tar.xz"
    kernel_pack.pack(archive, new_only=False)
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == sorted(f"{key}/{f}" for f in
                                                (cache.SO, cache.CU, cache.LOG, cache.META))  # fmt: skip
    monkeypatch.setenv("EVT_CACHE_DIR", str(machines / "there"))
    assert cache.lookup(key) is None
    unpack(archive, machines / "there")
    assert cache.lookup(key) == machines / "there" / key / cache.SO
    assert build.plan(fc1_spec(), compile_fn=fake_compile).key == key  # the same job there
    # what the other machine builds next goes back alone
    monkeypatch.setattr(build, "_futures", {})
    extra = build.build(fc1_spec(dtype="f16"), compile_fn=fake_compile).parent.name
    back = machines / "kernels-1.tar.xz"
    kernel_pack.pack(back, new_only=True)
    with tarfile.open(back) as tar:
        assert {n.split("/")[0] for n in tar.getnames()} == {extra}
    capsys.readouterr()
    kernel_pack.pack(machines / "kpack" / "kernels-1.tar.xz", new_only=True)  # now carried too
    kernel_pack.pack(machines / "again.tar.xz", new_only=True)
    assert "no finished entry not carried" in capsys.readouterr().out
    assert not (machines / "again.tar.xz").exists()


def test_device_env_unpacks_every_carried_archive():
    text = (ROOT / "scripts" / "device_env.sh").read_text()
    assert "for pack in .kpack/*.tar.xz" in text and 'tar -xJf "$pack" -C "$EVT_CACHE_DIR"' in text


def test_build_tests_builds_what_a_gpu_test_module_captures(machines, monkeypatch, capsys):
    """`build --tests NAME` builds `tests/test_gpu_NAME.py`'s `captured()` regions at the configs
    the test's process picks, skips a region with a static reason against it, builds a module's
    `prebuilt_specs()` at their default config and its `prebuilt_kernels()` at their own, both
    kinds where a module has both, and refuses a module with none of them or one that does not exist."""
    import sys
    import types

    from evt.runtime import dispatch, guards

    spec, refused = fc1_spec(), fc1_spec("refused")
    module = types.ModuleType("tests.test_gpu_fake")
    big = (8192, 3072, 768, 1)  # a test of its own, where the same signature picks another config
    module.captured = lambda: {"one": [(spec, (256, 512, 128, 1)), (refused, (256, 512, 128, 1))],
                               "two": [(spec, big)]}  # fmt: skip
    monkeypatch.setitem(sys.modules, "tests.test_gpu_fake", module)
    monkeypatch.setitem(sys.modules, "tests.test_gpu_bare", types.ModuleType("tests.test_gpu_bare"))
    monkeypatch.setattr(guards, "static_reason", lambda s: "refused" if s.name == "refused" else None)
    monkeypatch.setattr(dispatch, "_configs", {})  # this process's configs: none chosen yet
    original = build.prefetch
    monkeypatch.setattr(build, "prefetch", lambda s, c, compile_fn=None: original(s, c, fake_compile))
    kernel_pack.build_tests(["fake"])
    assert "2 of 2 test kernels built" in capsys.readouterr().out
    picks = {cfgs.heuristic(spec, *problem[:3])[0] for problem in [(256, 512, 128, 1), big]}
    assert len(picks) == 2, picks
    for config in picks:
        assert cache.lookup(build.plan(spec, config, fake_compile).key) is not None
    fuzzed = types.ModuleType("tests.test_gpu_fuzzed")  # the fuzzer's: specs at their default config
    fuzzed.prebuilt_specs = lambda: [fc1_spec("fuzzed", dtype="f16")]
    monkeypatch.setitem(sys.modules, "tests.test_gpu_fuzzed", fuzzed)
    kernel_pack.build_tests(["fuzzed"])
    assert "1 of 1 test kernels built" in capsys.readouterr().out
    assert cache.lookup(build.plan(fc1_spec("fuzzed", dtype="f16"), None, fake_compile).key)
    configs = types.ModuleType("tests.test_gpu_configs_fake")  # (spec, config) pairs, the config tests'
    pairs = [(fc1_spec("paired"), cfgs.TileConfig.from_label(label))
             for label in ("128x128x64_c1x1_pingpong", "128x64x64_c1x1_cooperative")]  # fmt: skip
    configs.prebuilt_kernels = lambda: pairs
    monkeypatch.setitem(sys.modules, "tests.test_gpu_configs_fake", configs)
    kernel_pack.build_tests(["configs_fake"])
    assert "2 of 2 test kernels built" in capsys.readouterr().out
    configs.captured = module.captured  # a module with both: its pairs and its captured regions
    kernel_pack.build_tests(["configs_fake"])
    assert "4 of 4 test kernels built" in capsys.readouterr().out
    for paired, config in pairs:
        assert cache.lookup(build.plan(paired, config, fake_compile).key) is not None
    with pytest.raises(SystemExit, match="none of captured"):
        kernel_pack.build_tests(["bare"])
    with pytest.raises(SystemExit, match="no tests/test_gpu_missing.py"):
        kernel_pack.build_tests(["missing"])


def test_consolidate_merges_the_carried_archives_into_one(machines, monkeypatch, capsys):
    """`consolidate` writes one archive holding each key of every carried archive once (two
    archives that share a key), removes the merged ones, and what it writes unpacks as
    scripts/device_env.sh unpacks it, to entries the cache finds."""
    first = build.build(fc1_spec(), compile_fn=fake_compile).parent.name
    kernel_pack.pack(machines / "kpack" / "kernels-1.tar.xz", new_only=False)
    second = build.build(fc1_spec(dtype="f16"), compile_fn=fake_compile).parent.name
    kernel_pack.pack(machines / "kpack" / "kernels-2.tar.xz", new_only=False)  # first again
    out = machines / "kpack" / "kernels.tar.xz"
    kernel_pack.consolidate(out)
    assert sorted(p.name for p in (machines / "kpack").iterdir()) == ["kernels.tar.xz"]
    with tarfile.open(out) as tar:
        names = tar.getnames()
    assert len(names) == len(set(names)) == 8 and {n.split("/")[0] for n in names} == {first, second}
    assert "2 kernels from 2 archives" in capsys.readouterr().out
    kernel_pack.pack(machines / "kpack" / "kernels-3.tar.xz", new_only=False)
    failed = machines / "failed" / cache.FAILED / ("0" * 64)  # a failed build's record, packed
    failed.mkdir(parents=True)  # with the entries by hand (.kpack/kernels-110 held one)
    (failed / cache.LOG).write_text("error: ...")
    with tarfile.open(machines / "kpack" / "kernels-4.tar.xz", "w:xz") as tar:
        tar.add(failed.parent, arcname=cache.FAILED)
    kernel_pack.consolidate(out)  # the consolidated archive takes in later ones, entries only
    assert sorted(p.name for p in (machines / "kpack").iterdir()) == ["kernels.tar.xz"]
    assert kernel_pack.archive_keys(out) == {first, second}
    monkeypatch.setenv("EVT_CACHE_DIR", str(machines / "there"))
    unpack(out, machines / "there")
    assert cache.lookup(first) is not None and cache.lookup(second) is not None


def test_build_autotune_goes_case_by_case_in_part_4s_order(monkeypatch):
    """`build --autotune` hands the cases to one prebuild, each with its whole shortlist, in the
    order part 4 measures them (breadth first), so a build cut short leaves the first cases whole."""
    from evt.bench import prebuild
    from evt.runtime.autotune import shortlist

    calls = []
    monkeypatch.setattr(prebuild, "prebuild", lambda cases, dtype, log, **kw: calls.append(
        ([c.name for c in cases], kw.get("configs"))) or 0)  # fmt: skip
    kernel_pack.build("bias/gpt2,step/mlp,bias/bert", "bf16", [], autotune=True)
    assert calls == [(["bias/bert", "step/mlp", "bias/gpt2"], shortlist)]
    calls.clear()
    kernel_pack.build("bias/gpt2,bias/bert", "bf16", [], autotune=False)
    assert calls == [(["bias/bert", "bias/gpt2"], None)]


def test_consolidate_drop_stale_leaves_out_what_no_run_finds(machines, monkeypatch, capsys):
    """`consolidate --drop-stale` keeps an entry only where this checkout computes its key again
    from its record: after the renderer changes (as a header edit would), the entries built before
    are left out and the one built after is kept, and it is found after unpacking."""
    config = cfgs.TileConfig.from_label("128x128x64_c1x1_pingpong")
    old = [build.build(fc1_spec(dtype=d), config, compile_fn=fake_compile).parent.name
           for d in ("bf16", "f16")]  # fmt: skip
    kernel_pack.pack(machines / "kpack" / "kernels-1.tar.xz", new_only=False)
    out = machines / "kpack" / "kernels.tar.xz"
    kernel_pack.consolidate(out, drop_stale=True, compile_fn=fake_compile)
    assert kernel_pack.archive_keys(out) == set(old)  # nothing changed yet: nothing stale
    render = FakeEmitter.render
    monkeypatch.setattr(FakeEmitter, "render", staticmethod(lambda s, c: render(s, c) + "// v2\n"))
    monkeypatch.setattr(build, "_futures", {})
    new = build.build(fc1_spec(), config, compile_fn=fake_compile).parent.name
    assert new not in old
    kernel_pack.pack(machines / "kpack" / "kernels-2.tar.xz", new_only=True)
    capsys.readouterr()
    kernel_pack.consolidate(out, drop_stale=True, compile_fn=fake_compile)
    assert kernel_pack.archive_keys(out) == {new}
    assert "1 kernels from 1 archives, 2 stale left out" in capsys.readouterr().out
    assert sorted(p.name for p in (machines / "kpack").iterdir()) == ["kernels.tar.xz"]
    monkeypatch.setenv("EVT_CACHE_DIR", str(machines / "there"))
    unpack(out, machines / "there")
    assert cache.lookup(new) is not None


def test_the_gpu_fuzzers_prebuilt_specs_are_its_seeds():
    """`build --tests fuzz` builds what tests/test_gpu_fuzz.py's fixture builds: one spec per seed
    and regression, each at the default config (`prebuilt_specs`)."""
    from evt.testing import fuzz
    from tests import test_gpu_fuzz

    specs = test_gpu_fuzz.prebuilt_specs()
    assert len(specs) == len(test_gpu_fuzz.SEEDS) + len(test_gpu_fuzz.REGRESSIONS)
    assert specs[0] == fuzz.generate(test_gpu_fuzz.SEEDS[0])


def test_build_tests_names_the_modules_that_list_their_kernels():
    """`build --tests`'s help names every GPU test module with captured(), prebuilt_specs() or
    prebuilt_kernels() (its list was written by hand and had left out `batched`), and no other."""
    names = kernel_pack.test_modules()
    assert {"batched", "configs", "fuzz", "mlp", "models", "nested_batch", "node_coverage",
            "one_hot", "statistics"} <= set(names)  # fmt: skip
    assert "ops" not in names  # its kernels build inside the tests
    usage = subprocess.run([sys.executable, "scripts/kernel_pack.py", "build", "--help"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert all(name in usage for name in names)


def test_build_dry_run_says_which_kernels_a_device_call_would_build(machines, monkeypatch, capsys):
    """`build --dry-run`: each kernel the selected cases need is counted as carried (.kpack), only
    in the local cache (`pack --new` carries it) or in neither, and the last are listed with
    the cases that need them; nothing is built."""
    from types import SimpleNamespace

    from evt.bench import prebuild

    local = build.build(fc1_spec(), compile_fn=fake_compile).parent.name  # finished here
    carried, missing = "c" * 64, "m" * 64
    with tarfile.open(machines / "kpack" / "kernels.tar.xz", "w:xz") as tar:
        info = tarfile.TarInfo(f"{carried}/{cache.SO}")
        tar.addfile(info)
    fake = [("bias/gpt2", carried), ("bias/gpt2", local), ("bias/bert", missing),
            ("step/mlp", missing), ("bias/bert", carried)]  # fmt: skip
    monkeypatch.setattr(prebuild, "jobs", lambda cases, dtype, log, device: (
        (case, SimpleNamespace(key=key)) for case, key in fake))  # fmt: skip
    calls = build._futures.copy()
    needed = kernel_pack.plan_only("bias/gpt2,bias/bert,step/mlp", "bf16")
    assert build._futures == calls  # nothing submitted
    out = capsys.readouterr().out
    assert "3 cases need 3 kernels: 1 in .kpack, 1 only in" in out and "1 in neither" in out
    assert f"to build: {missing[:16]}  bias/bert, step/mlp" in out
    assert needed == {carried: ["bias/gpt2", "bias/bert"], local: ["bias/gpt2"],
                      missing: ["bias/bert", "step/mlp"]}  # fmt: skip
