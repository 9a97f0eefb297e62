"""Fakes for the runtime tests: an emitter and compilers that run in milliseconds, and the MLP's
first forward region (`tests.specs.mlp_fc1_forward`) with inputs and an eager version of it.

Module-level functions, so that processes started with `spawn` can import them by name."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from evt import ir
from evt.runtime import cache
from tests import specs


def fc1_spec(name: str = "evt_f0_addmm", dtype: str = "bf16") -> ir.KernelSpec:
    """h = x @ W1.T + b1 (saved for backward), y = gelu(h), under the region name `name`."""
    spec = dataclasses.replace(specs.mlp_fc1_forward(), name=name)
    if dtype != "bf16":
        spec = dataclasses.replace(spec, gemm=dataclasses.replace(spec.gemm, dtype=dtype))
    return spec


def fc1_inputs(m=64, k=32, n=48, dtype=torch.bfloat16, seed=0) -> list[torch.Tensor]:
    """x [M, K], the Linear weight [N, K] (read transposed), bias [N]."""
    g = torch.Generator().manual_seed(seed)
    x, w, b = (torch.randn(*s, generator=g).to(dtype) for s in ((m, k), (n, k), (n,)))
    return [x, w, b]


def fc1_eager(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    x, w, b = inputs
    pre = F.linear(x, w, b)
    return [F.gelu(pre), pre]


class FakeEmitter:
    """Stands in for evt.codegen.emit: a source that names the kernel and spells its signature."""

    @staticmethod
    def default_config(spec: ir.KernelSpec) -> str:
        return "fake-config"

    @staticmethod
    def render(spec: ir.KernelSpec, config) -> str:
        return f"// kernel evt_{spec.name}_run, config {config}\n// {spec.signature()}\n"

    @staticmethod
    def signature(spec: ir.KernelSpec, config) -> str:
        return f"{spec.name};{config}"


def _count() -> None:
    counter = os.environ.get("EVT_TEST_COUNTER")
    if counter:
        with open(counter, "a") as f:
            f.write(f"{os.getpid()}\n")


def fake_compile(cu: Path, so: Path) -> subprocess.CompletedProcess:
    """Writes a dummy library; counts calls in $EVT_TEST_COUNTER, sleeps $EVT_TEST_SLEEP s."""
    _count()
    time.sleep(float(os.environ.get("EVT_TEST_SLEEP", "0")))
    so.write_bytes(b"not really a library\n" + cu.read_bytes())
    return subprocess.CompletedProcess(["fake-nvcc"], 0, "", "")


def failing_compile(cu: Path, so: Path) -> subprocess.CompletedProcess:
    _count()
    log = (
        f'{cu}(42): error: identifier "evt_missing_functor" is undefined\n'
        f"1 error detected in the compilation of {cu}.\n"
    )
    return subprocess.CompletedProcess(["fake-nvcc"], 2, "", log)


def crashing_compile(cu: Path, so: Path) -> subprocess.CompletedProcess:
    raise FileNotFoundError(2, "No such file or directory", "nvcc")


def count(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def local_memory_compile(cu: Path, so: Path) -> subprocess.CompletedProcess:
    """A build whose ptxas says (-warn-lmem-usage) that the kernel uses local memory."""
    done = fake_compile(cu, so)
    log = "ptxas warning : Local memory used for function '_ZN7cutlass13device_kernelI...'\n"
    return subprocess.CompletedProcess(done.args, 0, "", log)


# A kernel library built with the host C compiler: it records its arguments (`evt_test_record`)
# and fills output 0 with ones; `evt_test_set_rc` sets what its run function returns.
FAKE_KERNEL = r"""
#include <stddef.h>
#include <stdint.h>
static int64_t rec[64];
static int rc = 0;
int evt_kfake_run(void const* const* in, int64_t const* in_strides, void* const* out,
                  int64_t const* out_strides, int M, int N, int K, int L, int order, void* ws,
                  size_t ws_bytes, void* stream) {
  rec[0] = M; rec[1] = N; rec[2] = K; rec[3] = L; rec[7] = order;
  rec[4] = (int64_t)ws_bytes; rec[5] = (int64_t)(intptr_t)ws; rec[6] = (int64_t)(intptr_t)stream;
  for (int i = 0; i < 9; ++i) rec[8 + i] = in_strides[i];
  for (int i = 0; i < 6; ++i) rec[20 + i] = out_strides[i];
  for (int i = 0; i < 3; ++i) rec[30 + i] = (int64_t)(intptr_t)in[i];
  for (int i = 0; i < 2; ++i) rec[33 + i] = (int64_t)(intptr_t)out[i];
  uint16_t* d = (uint16_t*)out[0];
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) d[m * out_strides[0] + n * out_strides[1]] = 0x3F80;  /* 1.0 */
  return rc;
}
size_t evt_kfake_workspace(int M, int N, int K, int L, int order) { rec[36] = order; return 256; }
char const* evt_kfake_signature(void) { return "kfake;sig"; }
int64_t const* evt_test_record(void) { return rec; }
void evt_test_set_rc(int value) { rc = value; }
"""


def build_fake_library(entry: Path, cc: str, signature: str = "kfake;sig") -> Path:
    """The fake library as a cache entry in `entry` (kernel.so + meta.json), for `launch.load`;
    `signature` what it says it is (a config label in it: `launch.Library.pad_rows` etc.)."""
    entry.mkdir(parents=True, exist_ok=True)
    (entry / "fake.c").write_text(FAKE_KERNEL.replace('"kfake;sig"', json.dumps(signature)))
    so = entry / cache.SO
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", so, entry / "fake.c"], check=True)
    (entry / cache.META).write_text(json.dumps({"name": "kfake", "signature": signature}))
    return so
