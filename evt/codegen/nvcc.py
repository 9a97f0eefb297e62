"""Where CUTLASS and nvcc are, and how a generated kernel is compiled to a shared library."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
from functools import cache, lru_cache
from pathlib import Path

from evt import debug
from evt.errors import CompileError

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
ARCH_FLAGS = ["-gencode=arch=compute_90a,code=sm_90a"]
# -DNDEBUG matters: CUTLASS's device asserts serialize the wgmma pipeline (ptxas C7510).
# -warn-lmem-usage: ptxas says when a kernel keeps data in local memory (LOCAL_MEMORY below), a
# 2-3x slower epilogue on the H100 (CUTLASS's row reduction at 128x128 before
# evt::Sm90RowReductionDeferred unrolled its loops)
OPT_FLAGS = ["-std=c++17", "--expt-relaxed-constexpr", "-O3", "-DNDEBUG",
             "-Xptxas=-warn-lmem-usage"]  # fmt: skip
LOCAL_MEMORY = "Local memory used for function"
# one exported ABI per .so: the launcher marks its three functions visible, nothing else is
SO_FLAGS = ["-shared", "-Xcompiler=-fPIC", "-Xcompiler=-fvisibility=hidden"]
NVCC_TIMEOUT_S = 1800
# one compiler's peak memory: a CUTLASS SM90 kernel takes about 3.7 GB (benchmarks/compile_time.py)
NVCC_PEAK_BYTES = 4 << 30


def cutlass_dir() -> Path:
    """The CUTLASS source tree (with `include/` and `tools/util/include/`): `$EVT_CUTLASS_DIR`, or
    the copy inside the nvidia-cutlass wheel (`cutlass_library/source`)."""
    env = os.environ.get("EVT_CUTLASS_DIR")
    if env:
        root = Path(env)
    else:
        spec = importlib.util.find_spec("cutlass_library")
        if spec is None or not spec.submodule_search_locations:
            raise CompileError(
                "CUTLASS headers not found: install the nvidia-cutlass wheel "
                "(pip install 'nvidia-cutlass==4.2.*') or set EVT_CUTLASS_DIR to a CUTLASS checkout"
            )
        root = Path(list(spec.submodule_search_locations)[0]) / "source"
    if not (root / "include" / "cutlass" / "cutlass.h").is_file():
        raise CompileError(
            f"{root} has no include/cutlass/cutlass.h: point EVT_CUTLASS_DIR at a CUTLASS checkout"
        )
    return root


def nvcc_path() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    candidate = Path(home) / "bin" / "nvcc" if home else None
    return str(candidate) if candidate and candidate.is_file() else None


@lru_cache(maxsize=1)
def nvcc_version() -> str:
    """The release line of `nvcc --version`, e.g. `Cuda compilation tools, release 13.0, V13.0.88`."""
    nvcc = nvcc_path()
    if nvcc is None:
        return "none"
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
    lines = [ln for ln in out.splitlines() if "release" in ln]
    return lines[-1].strip() if lines else out.strip()


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"', re.MULTILINE)


@cache
def _header_text(path: Path) -> str:
    return path.read_text()


def included_headers(source: str) -> list[Path]:
    """Our headers (evt/templates/*.h) that `source` includes, directly or through one another,
    sorted: what a build cache key of `source` must hash besides the source itself. A kernel
    without statistics does not include evt_statistics.h, so editing that header rebuilds only
    the kernels with statistics or reductions over M."""
    found: dict[str, Path] = {}
    todo = _INCLUDE.findall(source)
    while todo:
        name = todo.pop()
        path = TEMPLATES / name
        if name in found or not path.is_file():
            continue  # CUTLASS's and the toolkit's headers: in the key by their versions
        found[name] = path
        todo += _INCLUDE.findall(_header_text(path))
    return sorted(found.values())


def headers_digest(source: str) -> str:
    """sha256 of the names and contents of `included_headers(source)`."""
    h = hashlib.sha256()
    for f in included_headers(source):
        h.update(f.name.encode() + b"\0" + _header_text(f).encode())
    return h.hexdigest()


@lru_cache(maxsize=1)
def cutlass_version() -> str:
    try:
        return importlib.metadata.version("nvidia-cutlass")
    except importlib.metadata.PackageNotFoundError:
        return os.environ.get("EVT_CUTLASS_DIR", "unknown")


def nvcc_flags() -> list[str]:
    root = cutlass_dir()
    includes = [root / "include", root / "tools" / "util" / "include", TEMPLATES]
    return [*ARCH_FLAGS, *OPT_FLAGS, *(f"-I{p}" for p in includes), *SO_FLAGS]


def key_flags() -> list[str]:
    """`nvcc_flags()` as a cache key sees them: each include folder by its role, not its path.
    The headers' contents are in the key already (`cutlass_version`, `headers_digest`), so a
    kernel cache filled on one machine (where nvcc runs, with no GPU) is valid on another with
    the same nvcc, CUTLASS and evt installed elsewhere (the GPU machine: scripts/kernel_pack.py)."""
    roles = {str(cutlass_dir()): "<cutlass>", str(TEMPLATES): "<evt-templates>"}
    out = []
    for flag in nvcc_flags():
        for path, role in roles.items():
            if flag.startswith("-I" + path):
                flag = "-I" + role + flag[2 + len(path) :]
        out.append(flag)
    return out


def nvcc_command(cu_path: str | Path, out_path: str | Path) -> list[str]:
    """The command line that builds `cu_path` into the shared library `out_path`."""
    nvcc = nvcc_path()
    if nvcc is None:
        raise CompileError("nvcc not found: put the CUDA toolkit's bin/ on PATH or set CUDA_HOME")
    return [nvcc, *nvcc_flags(), "-o", str(out_path), str(cu_path)]


def compile_library(cu: Path, so: Path) -> subprocess.CompletedProcess:
    """Run nvcc in `cu`'s folder (so the log names `kernel.cu`, not a temporary folder)."""
    cmd = nvcc_command(cu.name, so.name)
    debug.log(5, f"cd {shlex.quote(str(cu.parent))} && {shlex.join(cmd)}")
    return subprocess.run(
        cmd, cwd=cu.parent, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S, check=False
    )


def parallel_jobs() -> int:
    """How many kernels compile at once: `$EVT_COMPILE_JOBS`, else the usable cores, fewer when
    the available memory cannot hold that many compilers."""
    env = os.environ.get("EVT_COMPILE_JOBS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    memory = _available_memory()
    by_memory = memory // NVCC_PEAK_BYTES if memory else cores or 1
    return max(1, min(cores or 1, by_memory))


def _available_memory() -> int:
    """MemAvailable from /proc/meminfo in bytes, 0 when unknown."""
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError, IndexError):
        return 0
