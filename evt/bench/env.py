"""Where the numbers come from: GPU, clocks, driver, library versions, git commit."""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import os
import platform
import re
import subprocess
from pathlib import Path

import torch

import evt

SMI_FIELDS = (
    "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.limit,"
    "persistence_mode"
)
SOURCE_SUFFIXES = (".py", ".j2", ".h", ".cu", ".cuh", ".json")
PROP_FIELDS = (
    "name",
    "major",
    "minor",
    "total_memory",
    "multi_processor_count",
    "L2_cache_size",
    "clock_rate",
    "memory_clock_rate",
    "memory_bus_width",
)


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_info() -> dict:
    """The commit of the evt checkout and whether it had local changes (read-only git calls).
    `EVT_BENCH_GIT_COMMIT`, when set, is the commit recorded: the device machine runs a copy of
    the tree without `.git`, so the command that starts it names the commit."""
    root = Path(__file__).resolve().parents[2]
    status = _run(["git", "--no-optional-locks", "status", "--porcelain"], root)
    commit = os.environ.get("EVT_BENCH_GIT_COMMIT") or _run(["git", "rev-parse", "HEAD"], root)
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def source_fingerprint() -> str:
    """A hash of evt's sources (Python, templates, headers): the same for the same code whether
    or not git is there to say so, and different when local changes differ."""
    root = Path(evt.__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in SOURCE_SUFFIXES and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def nvidia_smi() -> dict | None:
    out = _run(["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader"])
    if not out:
        return None
    values = [v.strip() for v in out.splitlines()[0].split(",")]
    return dict(zip(SMI_FIELDS.split(","), values))


def gpu_info(device: str) -> dict | None:
    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(device)
    info = {f: getattr(props, f) for f in PROP_FIELDS if hasattr(props, f)}
    info["nvidia_smi"] = nvidia_smi()
    return info


def environment(device: str) -> dict:
    return {
        "time": now(),
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "triton": version("triton"),
        "cutlass": version("nvidia-cutlass"),
        "evt": evt.__version__,
        "git": git_info(),
        "evt_source": source_fingerprint(),
        "device": device,
        "gpu": gpu_info(device),
    }


def gpu_slug(device: str) -> str:
    """'nvidia-h100-80gb-hbm3' for the device's name, 'cpu' off CUDA."""
    if not device.startswith("cuda") or not torch.cuda.is_available():
        return "cpu"
    return re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(device).lower()).strip("-")


def default_out(device: str) -> Path:
    return Path("benchmarks/results") / f"{datetime.date.today().isoformat()}-{gpu_slug(device)}"
