"""Why is a region's kernel slow? Time a hand-built spec and variants of it with parts of its
epilogue removed, at one problem shape and under a few tile configs, next to the bare cuBLAS GEMM,
with each kernel's registers, stack frame and spills (cuobjdump --dump-resource-usage).

    python scripts/spec_ablation.py [--spec layer_norm_backward] [--shape 8192x768x3072]
        [--configs 128x128x64_c1x1_cooperative,128x64x64_c1x1_cooperative]

The variants of LayerNorm's backward (tests.specs.layer_norm_backward): `full`, `one_row`
(the weight gradient's row reduction dropped), `no_row` (both row reductions dropped), `no_col`
(both column reductions dropped), `acc` (D = acc * gamma * n only: the GEMM and one RowBroadcast);
those of the residual add with LayerNorm's statistics: see `residual_stats_variants`.
Every variant is checked against the reference path before it is timed.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from evt import ir  # noqa: E402
from evt.codegen import config as cfgs  # noqa: E402
from evt.runtime import build, launch, reference  # noqa: E402
from evt.testing.inputs import make_inputs  # noqa: E402
from tests import specs  # noqa: E402


def without(spec: ir.KernelSpec, name: str, drop: set[str], passthrough: set[str]) -> ir.KernelSpec:
    """`spec` less the nodes in `drop`, the reductions in `passthrough` turned into identities
    (a reduction passes its argument on); outputs renumbered 1, 2, ... in their old order."""
    nodes = []
    for n in spec.nodes:
        if n.name in drop:
            continue
        if n.name in passthrough:
            n = ir.Compute(n.name, "identity", (n.arg,))
        nodes.append(n)
    out, _ = ir.renumber_outputs(nodes)
    used = [spec.gemm.a.input, spec.gemm.b.input] + [n.input for n in out if hasattr(n, "input")]
    return ir.KernelSpec(f"{spec.name}_{name}", spec.gemm, tuple(out), spec.d, spec.d_dtype,
                         max(used) + 1)  # inputs dropped from the end only  # fmt: skip


def layer_norm_backward_variants() -> dict[str, ir.KernelSpec]:
    s = specs.layer_norm_backward()
    return {
        "full": s,
        "one_row": without(s, "one_row", {"gx", "weight_grad"}, set()),
        "no_row": without(s, "no_row", {"gx", "weight_grad"}, {"bias_grad"}),
        "no_col": without(s, "no_col", {"ggx", "sum_ggx"}, {"sum_gg"}),
        "acc": without(s, "acc", {"gx", "weight_grad", "ggx", "sum_ggx", "xhat"},
                       {"bias_grad", "sum_gg"}),
    }  # fmt: skip


def residual_stats_variants() -> dict[str, ir.KernelSpec]:
    """The residual add with LayerNorm's statistics (tests.specs.mlp_fc2_residual_stats): `full`,
    `no_stats` (the Welford statistics dropped), `no_residual` (the residual's aux load dropped:
    statistics of acc + bias), `bias` (D = acc + bias only)."""
    s = specs.mlp_fc2_residual_stats()
    no_residual = (
        ir.AccFetch("acc"),
        ir.RowBroadcast("bias", 2, "bf16"),
        ir.Compute("h", "add", ("acc", "bias"), "bf16"),
        ir.WelfordStats("norm", "h", "f32", mean_output=1, var_output=2, keepdim=(False, False)),
    )
    return {
        "full": s,
        "no_stats": without(s, "no_stats", {"norm"}, set()),
        "no_residual": ir.KernelSpec(f"{s.name}_no_residual", s.gemm, no_residual, "h", "bf16", 3),
        "bias": ir.KernelSpec(f"{s.name}_bias", s.gemm, no_residual[:3], "h", "bf16", 3),
    }


VARIANTS = {"layer_norm_backward": layer_norm_backward_variants,
            "mlp_fc2_residual_stats": residual_stats_variants}  # fmt: skip


def resource_usage(library: str) -> str:
    """REG / STACK / LOCAL of the library's GEMM kernel (not its finishing kernels), as
    cuobjdump prints them."""
    try:
        text = subprocess.run(["cuobjdump", "--dump-resource-usage", library], capture_output=True,
                              text=True, timeout=60).stdout  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cuobjdump failed: {e}"
    function = ""
    for line in text.splitlines():
        if line.strip().startswith("Function "):
            function = line
        found = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", line)
        if found and "device_kernel" in function:
            return "reg {} stack {} smem {} local {}".format(*found.groups())
    return "no GEMM kernel in cuobjdump's output"


def kernel_times(fn, runs: int = 20) -> str:
    """Each CUDA kernel's mean device time per call of `fn` (torch.profiler), longest first: the
    GEMM apart from a statistic's finishing kernel."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            fn()
        torch.cuda.synchronize()
    times: dict[str, float] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            name = "gemm" if "device_kernel" in e.name else e.name.split("<")[0].split("(")[0][:40]
            times[name] = times.get(name, 0.0) + e.device_time / runs
    return ", ".join(f"{k} {v:.1f} us" for k, v in sorted(times.items(), key=lambda kv: -kv[1]))


def label_config(label: str) -> cfgs.TileConfig:
    """A candidate's label, optionally with an epilogue tile: 128x128x64_c1x1_cooperative_e64."""
    base, _, epi = label.rpartition("_e") if "_e" in label else (label, "", "")
    found = {c.label: c for c in cfgs.CANDIDATES}[base]
    return dataclasses.replace(found, epi_n=int(epi)) if epi else found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--spec", default="layer_norm_backward",
                   help="a tests.specs kernel (variants: layer_norm_backward's, mlp_fc2_residual_stats')")  # fmt: skip
    p.add_argument("--variants", default="", help="comma-separated subset (default: all)")
    p.add_argument("--shape", default="8192x768x3072", help="MxNxK")
    p.add_argument("--ncu", action="store_true",
                   help="no timing: one call of each kernel between cudaProfilerStart and Stop, "
                        "for `ncu --profile-from-start off`")  # fmt: skip
    p.add_argument("--profile", action="store_true",
                   help="also each CUDA kernel's device time per call (torch.profiler)")  # fmt: skip
    p.add_argument("--configs", default="128x128x64_c1x1_cooperative,128x64x64_c1x1_cooperative,"
                   "128x128x64_c1x1_pingpong",
                   help="candidate labels, an epilogue tile as a suffix: ..._cooperative_e64")  # fmt: skip
    a = p.parse_args()
    m, n, k = (int(v) for v in a.shape.split("x"))
    configs = [label_config(c) for c in a.configs.split(",")]
    variants = VARIANTS[a.spec]() if a.spec in VARIANTS else {"full": specs.ALL[a.spec]()}
    chosen = a.variants.split(",") if a.variants else list(variants)
    jobs = {(v, c.label): (variants[v], build.prefetch(variants[v], c))
            for v in chosen for c in configs if cfgs.fits(variants[v], c)}  # fmt: skip
    print(f"{len(jobs)} kernels to build", flush=True)
    from evt.bench.measure import profile_once, time_ms

    for (variant, label), (spec, fut) in jobs.items():
        try:
            library = fut.result()
            kernel = launch.Kernel(spec, launch.load(library))
        except Exception as e:  # noqa: BLE001 - reported, the others still run
            print(f"{variant:8} {label:30} build failed: {str(e)[:300]}", flush=True)
            continue
        x = make_inputs(spec, m, n, k, seed=1, device="cuda")
        got, want = kernel(x), reference.run(spec, x)
        err = max(((g.float() - w.float()).abs().max() / w.float().abs().max().clamp_min(1e-6)).item()
                  for g, w in zip(got, want))  # fmt: skip
        if a.ncu:
            profile_once(functools.partial(kernel, x))
            print(f"{variant:8} {label:30} profiled  err {err:.1e}", flush=True)
            continue
        a_, b_ = x[spec.gemm.a.input], x[spec.gemm.b.input]
        a_ = a_.t() if spec.gemm.a.transposed else a_
        b_ = b_.t() if spec.gemm.b.transposed else b_
        ms = time_ms(lambda kernel=kernel, x=x: kernel(x), "cuda")
        mm = time_ms(lambda a_=a_, b_=b_: torch.mm(a_, b_), "cuda")
        print(f"{variant:8} {label:30} {ms * 1e3:7.1f} us  {mm / ms:.2f}x mm ({mm * 1e3:.1f} us)  "
              f"err {err:.1e}  {resource_usage(str(library))}", flush=True)  # fmt: skip
        if a.profile:
            print(f"    kernels: {kernel_times(lambda kernel=kernel, x=x: kernel(x))}", flush=True)


if __name__ == "__main__":
    main()
