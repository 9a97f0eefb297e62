"""Why a training step runs slower as run than under CUDA graphs: a torch.profiler trace of a few
steps per baseline, summarised as
  - host time per step for several queue depths (n steps enqueued back to back): a per-step time
    that grows with n means the host blocks on a full launch queue, i.e. the GPU sets the pace;
  - the CPU side of each launch API (cudaLaunchKernel, cuLaunchKernelEx, ...): calls per step and
    mean time per call (a launch that takes far longer than ~5 us stalls the step);
  - GPU time per step: the sum of kernel times and the idle gaps between kernels on the stream;
  - the host ops by self CPU time per step (where the host time goes beyond the launches).

    python scripts/step_trace.py [--steps step/mlp] [--baselines evt,compile] [--trace DIR]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import torch
from step_host import warmed_calls  # scripts/, beside this file
from torch.profiler import ProfilerActivity, profile

from evt.bench import measure

STEPS_TRACED = 10


def summarise(trace: dict, n: int) -> str:
    """Launch-API and kernel statistics per step from a chrome trace's events."""
    events = trace.get("traceEvents", [])
    api: dict[str, list[float]] = defaultdict(list)
    kernels: list[tuple[float, float, str]] = []
    for e in events:
        if e.get("ph") != "X":
            continue
        cat, name, dur = e.get("cat", ""), e.get("name", ""), float(e.get("dur", 0))
        if cat == "cuda_runtime" or cat == "cuda_driver":
            api[name].append(dur)
        elif cat == "kernel":
            kernels.append((float(e["ts"]), dur, name))
    lines = ["  launch/runtime API            calls/step   mean us   max us"]
    for name, durs in sorted(api.items(), key=lambda kv: -sum(kv[1]))[:12]:
        lines.append(f"  {name[:28]:28s} {len(durs) / n:10.1f} {sum(durs) / len(durs):9.1f} "
                     f"{max(durs):8.1f}")  # fmt: skip
    kernels.sort()
    busy = sum(d for _, d, _ in kernels)
    span = (kernels[-1][0] + kernels[-1][1] - kernels[0][0]) if kernels else 0.0
    lines.append(f"  kernels/step {len(kernels) / n:.1f}; GPU busy {busy / n:8.1f} us/step, "
                 f"span {span / n:8.1f} us/step, idle {(span - busy) / n:8.1f} us/step")  # fmt: skip
    by_name: dict[str, list[float]] = defaultdict(list)
    for _, d, name in kernels:
        by_name[name].append(d)
    lines.append("  kernel                                                  calls/step   mean us")
    for name, durs in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:15]:
        lines.append(f"  {name[:56]:56s} {len(durs) / n:10.1f} {sum(durs) / len(durs):9.1f}")
    gaps = sorted(
        ((b[0] - (a[0] + a[1]), a[2], b[2]) for a, b in zip(kernels, kernels[1:])), reverse=True
    )
    lines.append("  largest gaps between kernels (us, before -> after):")
    for gap, before, after in gaps[:6]:
        lines.append(f"    {gap:8.1f}  {before[:40]} -> {after[:40]}")
    return "\n".join(lines)


def cpu_ops(prof, n: int) -> str:
    """The host side op by op: calls per step and self CPU time per step (us), the ops that
    take the most first: where a step's host time goes beyond the launches."""
    rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in rows) / n
    lines = [f"  host ops (self CPU time; all ops {total:.0f} us/step)      calls/step  self us/step"]
    for e in rows[:25]:
        lines.append(f"  {e.key[:52]:52s} {e.count / n:10.1f} {e.self_cpu_time_total / n:12.1f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", default="step/mlp")
    ap.add_argument("--baselines", default="evt,compile")
    ap.add_argument("--trace", default=None, help="folder for the chrome traces")
    args = ap.parse_args()
    for name, b, call in warmed_calls(args.steps.split(","), args.baselines.split(",")):
        depths = {n: measure.host_ms(call, "cuda", n) * 1e3 for n in (2, 10, 40)}
        print(f"\n== {name} {b}: host us/step by steps enqueued: "
              + ", ".join(f"{n}: {t:.0f}" for n, t in depths.items()))  # fmt: skip
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(STEPS_TRACED):
                call()
            torch.cuda.synchronize()
        folder = Path(args.trace or "/tmp")
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name.replace('/', '_')}-{b}.json"
        prof.export_chrome_trace(str(path))
        print(summarise(json.loads(path.read_text()), STEPS_TRACED))
        print(cpu_ops(prof, STEPS_TRACED))


if __name__ == "__main__":
    main()
