"""nvcc tier of the fuzzer: two fixed-seed generated specs compile without warnings, and their
launchers' host functions answer without a GPU: seed 171 (a DAG with every node kind but the
column broadcast, bool mask loads and stores, a row reduction, an f16 GEMM) and seed 233 (a
nested batch L = L1 x L2: an f16 GEMM with B n-major, two full per-batch aux loads and one read
by every batch, an aux store, a row broadcast). Cached like tests/test_nvcc.py (same directory, keyed by
source, flags, nvcc)."""

from __future__ import annotations

import hashlib
import os
import subprocess

import pytest

from evt import ir
from evt.codegen.emit import render
from evt.codegen.nvcc import (
    LOCAL_MEMORY,
    headers_digest,
    nvcc_command,
    nvcc_flags,
    nvcc_path,
    nvcc_version,
)
from evt.testing import fuzz
from tests.test_nvcc import _cache_dir, assert_host_functions_answer

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(nvcc_path() is None, reason="nvcc not found (PATH or $CUDA_HOME/bin)"),
]

SEEDS = {
    171: {"acc", "aux_load", "aux_store", "row_broadcast", "scalar", "compute", "row_reduction"},
    233: {"acc", "aux_load", "aux_store", "row_broadcast", "compute"},
}


@pytest.mark.parametrize("seed", SEEDS)
def test_generated_spec_compiles(seed):
    spec = fuzz.generate(seed)
    kinds = {n.kind for n in spec.nodes}
    assert kinds >= SEEDS[seed], kinds
    if seed == 233:
        every = [n.broadcast_l for n in spec.nodes if isinstance(n, ir.AuxLoad)]
        assert spec.gemm.nested and spec.gemm.b.major == "n" and sorted(every) == [False, False, True]
    source = render(spec)
    key_text = "\0".join([source, headers_digest(source), *nvcc_flags(), nvcc_version()])
    key = hashlib.sha256(key_text.encode()).hexdigest()[:24]
    cache = _cache_dir()
    so, log = cache / f"fuzz{seed}-{key}.so", cache / f"fuzz{seed}-{key}.log"
    if not (so.exists() and log.exists()):
        cu = cache / f"fuzz{seed}-{key}.cu"
        cu.write_text(source)
        tmp = so.with_suffix(f".tmp{os.getpid()}.so")
        proc = subprocess.run(nvcc_command(cu, tmp), capture_output=True, text=True)
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"nvcc failed on fuzz seed {seed}:\n{output[-6000:]}"
        log.write_text(output)
        os.replace(tmp, so)
    output = log.read_text()
    # a random DAG may keep data in local memory (slow, not wrong); any other warning fails
    warned = [ln for ln in output.splitlines() if "warning" in ln.lower() and LOCAL_MEMORY not in ln]
    assert "C7510" not in output and not warned, output
    assert_host_functions_answer(so, spec.name, spec.gemm.nested)
