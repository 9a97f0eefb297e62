"""Compile generated kernels with nvcc (no GPU needed). Each kernel is built at most once per run,
two at a time, and cached under `$EVT_TEST_CACHE` (default `~/.cache/evt-tests/`) by a sha256
of the source, the flags and the nvcc version, so reruns are instant."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from evt.codegen.config import TileConfig
from evt.codegen.emit import render
from evt.codegen.nvcc import headers_digest, nvcc_command, nvcc_flags, nvcc_path, nvcc_version
from evt.runtime.build import uses_local_memory
from tests import specs

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(nvcc_path() is None, reason="nvcc not found (PATH or $CUDA_HOME/bin)"),
]

# the MLP's forward (bias, GELU, a saved pre-activation), its dgrad with GELU' and fc1's bias
# gradient (a row reduction), one kernel with every newer functor and bool mask loads/stores, and
# a batched GEMM (attention's scores) with an aux load every batch reads (static L stride 0), and
# every reduction and statistic (the online-softmax, Welford and plain per-row visitors of
# evt_statistics.h with their finishing kernels, a max over M, a deterministic sum over
# everything), in a tree and (batched) in a DAG visitor, an fp32 GEMM on TF32 tensor cores, and
# LayerNorm's backward (two row and two column reductions in one epilogue), and attention's scores
# with a nested batch L = (B, H) (q and k read in place from [B, S, H, D]; GETT strides for A, B,
# D, the aux loads, the aux store and the row broadcast) and softmax's statistics over N (partials
# and outputs by the flat batch l1 * L2 + l2), P·V with v read in place (n-major B)
# and dK = dSᵀ·Q (m-major A, q read in place), both without an epilogue, and LayerNorm's backward
# computing xhat from an aux load and two column broadcasts (a subtree reading only loads), and
# BatchNorm1d's statistics over M (evt_column_statistics.h: the swap shuffle, the warps' shared
# memory)
KERNELS = ("mlp_fc1_forward", "mlp_dgrad_gelu_bias", "activations", "attention_scores",
           "row_statistics", "batched_row_statistics", "mlp_fc1_forward_tf32",
           "layer_norm_backward", "nested_attention_statistics", "nested_attention_values",
           "nested_attention_key_grad", "batched_row_statistics_streamk",
           "mlp_fc1_forward_registers", "layer_norm_backward_recomputed",
           "mlp_fc1_forward_staged", "scaled_scores_staged", "batch_statistics")  # fmt: skip
# kernels built from a spec of tests.specs at another tile config than its default: name ->
# (spec, config). Stream-K: CUTLASS's stream-K scheduler with the statistics' deferred partials
# and a batch (its GPU test: tests/test_gpu_configs.py). Registers: D (CUTLASS's void D, an
# Sm90AuxStore of 0 stages at the root) and the aux store from registers one element at a time,
# as outputs whose rows are not whole 16-byte vectors are stored (ViT's 197 x 197 scores). Staged:
# D and the aux store through shared memory, copied out by the epilogue's threads (ping-pong;
# and batched scores with a stored copy, cooperative with 64-wide subtiles).
VARIANTS = {
    "batched_row_statistics_streamk": (
        "batched_row_statistics", TileConfig(128, 128, 64, scheduler="streamk")),
    "mlp_fc1_forward_registers": (
        "mlp_fc1_forward", TileConfig(128, 128, 64, schedule="pingpong", store_align=1)),
    "mlp_fc1_forward_staged": (
        "mlp_fc1_forward", TileConfig(128, 128, 64, schedule="pingpong", staged_stores=True)),
    "scaled_scores_staged": (
        "scaled_scores", TileConfig(128, 256, 64, epi_n=64, staged_stores=True)),
}  # fmt: skip


def variant(name: str):
    """(spec, tile config: None for its default) of kernel `name`."""
    spec_name, config = VARIANTS.get(name, (name, None))
    return getattr(specs, spec_name)(), config
PARALLEL = 2  # a CUTLASS kernel takes ~3.5 GB to compile


def _cache_dir() -> Path:
    root = os.environ.get("EVT_TEST_CACHE") or Path.home() / ".cache" / "evt-tests"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class Build:
    so: Path
    log: Path
    tmp: Path | None = None  # nvcc writes here, then the file is renamed to `so`
    cmd: list[str] = field(default_factory=list)
    proc: subprocess.Popen | None = None


def _start(name: str, cache: Path) -> Build:
    """Write the source and start nvcc unless the cache already holds the library."""
    source = render(*variant(name))
    key_text = "\0".join([source, headers_digest(source), *nvcc_flags(), nvcc_version()])
    key = hashlib.sha256(key_text.encode()).hexdigest()[:24]
    build = Build(cache / f"{name}-{key}.so", cache / f"{name}-{key}.log")
    if build.so.exists() and build.log.exists():
        return build
    cu = cache / f"{name}-{key}.cu"
    cu.write_text(source)
    build.tmp = build.so.with_suffix(f".tmp{os.getpid()}.so")
    build.cmd = nvcc_command(cu, build.tmp)
    build.proc = subprocess.Popen(
        build.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    return build


def _finish(build: Build) -> None:
    if build.proc is None or build.tmp is None:
        return
    out, _ = build.proc.communicate()
    if build.proc.returncode != 0:
        pytest.fail(f"nvcc failed:\n{' '.join(build.cmd)}\n{out[-6000:]}")
    build.log.write_text(out)
    os.replace(build.tmp, build.so)


@pytest.fixture(scope="module")
def built() -> dict[str, tuple[Path, str]]:
    """name -> (shared library, compiler output); builds run `PARALLEL` at a time."""
    cache = _cache_dir()
    builds: dict[str, Build] = {}
    for first in range(0, len(KERNELS), PARALLEL):
        batch = {name: _start(name, cache) for name in KERNELS[first : first + PARALLEL]}
        for build in batch.values():
            _finish(build)
        builds |= batch
    return {name: (b.so, b.log.read_text()) for name, b in builds.items()}


@pytest.mark.parametrize("name", KERNELS)
def test_compiles_without_serialized_wgmma(built, name):
    _, output = built[name]
    assert "C7510" not in output, output  # wgmma serialized: a perf bug (missing -DNDEBUG?)
    assert not uses_local_memory(output), f"{name} keeps data in local memory (slow):\n{output}"
    assert "warning" not in output.lower(), output


@pytest.mark.parametrize("name", KERNELS)
def test_exports_the_abi(built, name):
    so, _ = built[name]
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) not found")
    symbols = subprocess.run(
        ["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True, check=True
    ).stdout
    exported = {line.split()[-1] for line in symbols.splitlines() if " T " in line}
    spec_name = variant(name)[0].name
    fns = ("run", "workspace", "signature")
    assert {f"evt_{spec_name}_{fn}" for fn in fns} <= exported


def assert_host_functions_answer(so: Path, spec_name: str, nested: bool = False) -> None:
    """The workspace query, the signature and the tile-order check are host code: called here
    (no GPU), they answer. (A device-only function called from host code compiles, and nvcc
    makes the whole host function an `exit(1)`: a kernel whose launcher killed its process,
    warning nowhere.) A nested batch's workspace query takes L1, L2 where the others take L,
    then the tile order (raster + 4 * swizzle): raster 0-2 and swizzle 0 (evt's choice), 1, 2, 4,
    8 answer, the rest 0 bytes; a launch in such an order returns -6 (kBadTileOrder) before it
    touches a device."""
    batch = "2, 3" if nested else "2"
    ints = 5 if nested else 4
    code = (
        "import ctypes, sys\n"
        "lib = ctypes.CDLL(sys.argv[1])\n"
        f"ws = lib.evt_{spec_name}_workspace\n"
        f"ws.restype, ws.argtypes = ctypes.c_size_t, [ctypes.c_int] * {ints + 1}\n"
        f"sig = lib.evt_{spec_name}_signature\n"
        "sig.restype = ctypes.c_char_p\n"
        f"run = lib.evt_{spec_name}_run\n"
        "P, I = ctypes.c_void_p, ctypes.c_int\n"
        f"run.restype, run.argtypes = I, [P] * 4 + [I] * {ints + 1} + [P, ctypes.c_size_t, P]\n"
        "orders = [r + 4 * s for r, s in ((0, 0), (1, 4), (2, 8), (3, 1), (0, 3), (0, 16))]\n"
        f"sizes = [ws(256, 256, 128, {batch}, o) for o in orders]\n"
        f"refused = run(None, None, None, None, 256, 256, 128, {batch}, 3, None, 0, None)\n"
        "print(len(sig()), refused, *sizes)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(so)], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip(), (done.returncode, done.stdout, done.stderr)
    assert done.stdout.split()[1:2] + done.stdout.split()[5:] == ["-6", "0", "0", "0"], done.stdout


@pytest.mark.parametrize("name", KERNELS)
def test_host_functions_run_without_a_gpu(built, name):
    so, _ = built[name]
    spec = variant(name)[0]
    assert_host_functions_answer(so, spec.name, spec.gemm.nested)
