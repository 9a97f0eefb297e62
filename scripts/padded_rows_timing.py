"""Time ViT's scaled attention scores (tests/specs.scaled_scores, 768 heads x 197 x 197 x 64)
stored into padded rows (`TileConfig.pad_rows`) at N = 197, against the same kernels at an
aligned N = 200 and 208 (same M), and cuBLAS's bmm at each N: what the unaligned extent costs;
then at N = 197 with rows padded to 16, 32, 64 and 128 bytes (`ir.row_pitch` patched: the
kernels take the row stride as an argument).

    python scripts/padded_rows_timing.py [--build-only]    (kernels built here first: no GPU)
"""

from __future__ import annotations

import sys

import torch

from evt.codegen import config as cfgs
from evt.runtime import build, launch
from evt.testing.inputs import make_inputs
from tests import specs

LABELS = ("128x256x64_c1x1_cooperative_pr", "128x128x64_c1x1_pingpong_pr", "128x128x64_c1x1_cooperative_pr",
          "64x256x64_c1x1_pingpong_pr")  # fmt: skip


def main(build_only: bool) -> None:
    spec = specs.scaled_scores()
    jobs = {label: build.prefetch(spec, cfgs.TileConfig.from_label(label)) for label in LABELS}
    kernels = {label: launch.Kernel(spec, launch.load(job.result())) for label, job in jobs.items()}
    if build_only:
        return
    from evt.runtime.timing import replay_ms as gpu_ms  # CUDA graph replays: no host time

    for n in (197, 200, 208):
        x = make_inputs(spec, 197, n, 64, seed=0, device="cuda", batch=(768,))
        a, b = x[spec.gemm.a.input], x[spec.gemm.b.input]
        b = b.transpose(-1, -2) if spec.gemm.b.transposed else b
        mm = gpu_ms(lambda a=a, b=b: torch.matmul(a, b)) * 1e3
        row = [f"N={n}: bmm {mm:6.1f} us"]
        for label, kernel in kernels.items():
            row.append(f"{label.split('_c1x1_')[0]}-{label.split('_')[2]} {gpu_ms(lambda k=kernel, x=x: k(x)) * 1e3:6.1f} us")
        print(" | ".join(row), flush=True)
    from evt import ir

    for unit in (16, 32, 64, 128):
        ir.row_pitch = lambda n, dtype, unit=unit: -(-n * 2 // unit) * unit // 2  # bf16
        x = make_inputs(spec, 197, 197, 64, seed=0, device="cuda", batch=(768,))
        row = [f"N=197, rows padded to {unit:3} bytes (pitch {ir.row_pitch(197, 'bf16')})"]
        for label, kernel in kernels.items():
            kernel = launch.Kernel(spec, kernel.library)  # plans made afresh for the new strides
            row.append(f"{label.split('_c1x1_')[0]}-{label.split('_')[2]} {gpu_ms(lambda k=kernel, x=x: k(x)) * 1e3:6.1f} us")
        print(" | ".join(row), flush=True)


if __name__ == "__main__":
    main("--build-only" in sys.argv)
