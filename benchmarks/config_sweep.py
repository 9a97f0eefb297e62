"""Time one region's kernel under several tile configurations, at real shapes, next to cuBLAS.

The seed of the config search (issue: fast kernels): builds every (spec, config) in parallel,
checks each against the reference path, then times it with CUDA events.

    python benchmarks/config_sweep.py [--shapes 8192x4096x1024,8192x3072x768] [--json out.json]
"""

from __future__ import annotations

import argparse
import json

import torch

from evt.codegen.config import TileConfig
from evt.runtime import build, launch, reference
from tests import specs

CONFIGS = [
    TileConfig(128, 256, 64),
    TileConfig(128, 128, 64),
    TileConfig(128, 256, 64, cluster_m=2),
    TileConfig(64, 256, 64, schedule="pingpong"),
    TileConfig(128, 128, 64, schedule="pingpong"),
    TileConfig(64, 128, 64, schedule="pingpong"),
]
SPECS = {
    "fc1_bias_gelu_aux": specs.mlp_fc1_forward,
    "fc2_bias_residual": specs.mlp_fc2_residual,
    "dgrad_gelu": specs.mlp_dgrad_gelu,
}


def inputs_for(spec, m, n, k):
    """Random inputs laid out as the spec expects (see tests/specs.py)."""
    bf = dict(device="cuda", dtype=torch.bfloat16)
    a = torch.randn(m, k, **bf)
    b = (
        torch.randn(n, k, **bf) / k**0.5
        if spec.gemm.b.transposed
        else torch.randn(k, n, **bf) / k**0.5
    )
    rest = []
    for node in spec.nodes:
        if node.kind == "row_broadcast":
            rest.append((node.input, torch.randn(n, **bf)))
        elif node.kind == "aux_load":
            rest.append((node.input, torch.randn(m, n, **bf)))
    out = [None] * spec.num_inputs
    out[spec.gemm.a.input], out[spec.gemm.b.input] = a, b
    for i, t in rest:
        out[i] = t
    return out


def time_ms(fn) -> float:
    from evt.bench.measure import time_ms as harness_time_ms

    return harness_time_ms(fn, "cuda")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="8192x4096x1024,8192x3072x768,16384x4096x4096")
    p.add_argument("--json")
    a = p.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")]
    jobs = {
        (name, cfg): build.prefetch(make(), cfg) for name, make in SPECS.items() for cfg in CONFIGS
    }
    rows = []
    for (name, cfg), fut in jobs.items():
        spec = SPECS[name]()
        try:
            kernel = launch.Kernel(spec, launch.load(fut.result()))
        except Exception as e:  # noqa: BLE001
            print(f"{name} {cfg.label}: build failed: {str(e)[:200]}")
            continue
        for m, n, k in shapes:
            x = inputs_for(spec, m, n, k)
            got, want = kernel(x), reference.run(spec, x)
            err = max(
                ((g.float() - w.float()).abs().max() / w.float().abs().max()).item()
                for g, w in zip(got, want)
            )
            ms = time_ms(lambda kernel=kernel, x=x: kernel(x))
            b = x[1].t() if spec.gemm.b.transposed else x[1]
            mm = time_ms(lambda a=x[0], b=b: torch.mm(a, b))
            tf = 2 * m * n * k / ms / 1e9
            rows.append(
                dict(
                    spec=name,
                    config=cfg.label,
                    m=m,
                    n=n,
                    k=k,
                    ms=ms,
                    tflops=tf,
                    vs_mm=mm / ms,
                    err=err,
                )
            )
            print(
                f"{name:18} {cfg.label:28} {m}x{n}x{k}: {ms:.4f} ms {tf:6.1f} TFLOP/s "
                f"{mm / ms:.2f}x mm  err {err:.1e}"
            )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
