"""The swizzle evt launches with (`auto_swizzle`, evt/templates/evt_launch.h), evaluated on the
host: a small program built by nvcc prints its choice for the suite's shapes and the edge cases,
so the rule the session-15 sweep fitted is checked without a GPU (the GPU tier checks that every
order computes the same result: tests/test_gpu_configs.py)."""

from __future__ import annotations

import subprocess

import pytest

from evt.codegen.nvcc import nvcc_flags, nvcc_path

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(nvcc_path() is None, reason="nvcc not found (PATH or $CUDA_HOME/bin)"),
]

H100_SMS = 132
# (M, N, K, L, tile M, tile N, cluster M, cluster N) -> swizzle
CASES = {
    # K <= 1024, one GEMM, even tile counts: 2 (bias + ReLU at 128x128 ping-pong: +11-28%)
    (8192, 3072, 768, 1, 128, 128, 1, 1): 2,  # GPT-2's MLP: 64 x 24 tiles
    (8192, 4096, 1024, 1, 128, 256, 1, 1): 2,  # BERT's: 64 x 16
    (8192, 50304, 768, 1, 128, 256, 1, 1): 2,  # GPT-2's vocabulary: 64 x 197 -> 64 x 198, 96 waves either way
    # rounding the grid up adds a wave: ViT's 99 x 24 tiles (18 waves) -> 100 x 24 (19)
    (12608, 3072, 768, 1, 128, 128, 1, 1): 1,
    (12608, 3072, 768, 1, 128, 256, 1, 1): 1,  # 99 x 12: 9 waves -> 10
    # K > 1024: CUTLASS's 1 (+-4% there)
    (8192, 1024, 4096, 1, 128, 256, 1, 1): 1,
    (8192, 1025, 1025, 1, 128, 128, 1, 1): 1,
    # batched (attention's scores): 1
    (1024, 1024, 64, 96, 128, 128, 1, 1): 1,
    # a single tile row or column: nothing to swizzle
    (128, 8192, 512, 1, 128, 128, 1, 1): 1,
    (8192, 100, 512, 1, 128, 128, 1, 1): 1,
    # 65 x 24 tiles (12 waves): swizzle 2 rounds M to 66 (still 12), with a 2x1 cluster to 68 (13)
    (8320, 3072, 768, 1, 128, 128, 1, 1): 2,
    (8320, 3072, 768, 1, 128, 128, 2, 1): 1,
}

PROGRAM = r"""
#include <cstdio>
#include "evt_launch.h"
int main() {
  long long cases[][8] = {CASES};
  for (auto& c : cases) {
    std::printf("%d\n", evt::launch::auto_swizzle(c[0], c[1], c[2], c[3], int(c[4]), int(c[5]),
                                                  int(c[6]), int(c[7]), SMS));
  }
}
"""


def test_auto_swizzle_takes_2_only_at_small_k_for_one_gemm_without_an_added_wave(tmp_path):
    rows = ", ".join("{" + ", ".join(map(str, case)) + "}" for case in CASES)
    (tmp_path / "t.cu").write_text(PROGRAM.replace("CASES", rows).replace("SMS", str(H100_SMS)))
    flags = [f for f in nvcc_flags() if f.startswith(("-I", "-std", "--expt"))]
    subprocess.run([nvcc_path(), *flags, "-o", str(tmp_path / "t"), str(tmp_path / "t.cu")],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    out = subprocess.run([str(tmp_path / "t")], check=True, capture_output=True, text=True).stdout
    got = dict(zip(CASES, map(int, out.split()), strict=True))
    assert got == CASES, {case: (got[case], want) for case, want in CASES.items() if got[case] != want}
