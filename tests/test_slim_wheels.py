"""`scripts/slim_wheels.sh`: pulp's wheel keeps only linux x86-64's CBC, and still installs (a
fake pulp wheel: no download)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLATFORMS = ("linux/i64", "linux/i32", "linux/arm64", "osx/i64", "win/i64", "win/i32")


def fake_pulp_wheel(whl_dir: Path, work: Path, extra: int = 0) -> Path:
    """pulp-3.3.2 with a CBC file per platform, packed by `wheel` (it writes the RECORD), and
    `extra` more modules listed after them."""
    src = work / "pulp-3.3.2"
    for plat in PLATFORMS:
        (src / "pulp/solverdir/cbc" / plat).mkdir(parents=True)
        (src / "pulp/solverdir/cbc" / plat / "cbc").write_bytes(b"\0" * 1000)
    if extra:
        (src / "pulp/zz").mkdir(parents=True)
    for i in range(extra):
        (src / f"pulp/zz/module_with_a_long_name_to_fill_the_listing_{i:05d}.py").write_text("")
    (src / "pulp/__init__.py").write_text("VERSION = '3.3.2'\n")
    info = src / "pulp-3.3.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pulp\nVersion: 3.3.2\n")
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                "Tag: py3-none-any\n")  # fmt: skip
    subprocess.run([sys.executable, "-m", "wheel", "pack", "-d", str(whl_dir), str(src)],
                   check=True, capture_output=True)  # fmt: skip
    return whl_dir / "pulp-3.3.2-py3-none-any.whl"


@pytest.mark.skipif(shutil.which("unzip") is None, reason="the script lists wheels with unzip")
def test_pulps_wheel_keeps_only_linux_x86_64s_cbc_and_installs(tmp_path):
    pytest.importorskip("wheel", reason="the script repacks with the `wheel` package")
    project = tmp_path / "project"
    (project / ".whl").mkdir(parents=True)
    whl = fake_pulp_wheel(project / ".whl", tmp_path)
    run = lambda: subprocess.run(  # noqa: E731
        ["bash", str(ROOT / "scripts/slim_wheels.sh")], cwd=project, check=True, text=True,
        capture_output=True, env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert "CBC for linux x86-64 only" in run().stdout
    kept = {n for n in zipfile.ZipFile(whl).namelist() if n.startswith("pulp/solverdir/")}
    assert kept == {"pulp/solverdir/cbc/linux/i64/cbc"}
    assert "already slim" in run().stdout
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--target", str(tmp_path / "site"), str(whl)], check=True)  # fmt: skip
    assert (tmp_path / "site/pulp/solverdir/cbc/linux/i64/cbc").exists()


@pytest.mark.skipif(shutil.which("unzip") is None, reason="the script lists wheels with unzip")
def test_a_long_listing_is_still_slimmed(tmp_path):
    """With `set -o pipefail`, `unzip -l | grep -q` failed whenever grep quit at its match before
    unzip had written the rest (SIGPIPE), and the wheel was called "already slim": in CI under
    load (session 47). A listing far past a pipe's buffer after the match makes that certain."""
    pytest.importorskip("wheel", reason="the script repacks with the `wheel` package")
    project = tmp_path / "project"
    (project / ".whl").mkdir(parents=True)
    whl = fake_pulp_wheel(project / ".whl", tmp_path, extra=3000)
    out = subprocess.run(["bash", str(ROOT / "scripts/slim_wheels.sh")], cwd=project, check=True,
                         text=True, capture_output=True,
                         env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"}).stdout  # fmt: skip
    assert "CBC for linux x86-64 only" in out
    kept = {n for n in zipfile.ZipFile(whl).namelist() if n.startswith("pulp/solverdir/")}
    assert kept == {"pulp/solverdir/cbc/linux/i64/cbc"}
