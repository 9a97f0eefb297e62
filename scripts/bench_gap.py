"""Why a bench evt row is slower than its kernel alone: for a few suite cases or training steps
(step/mlp, ...), per baseline,
the bench's own timing (`evt.bench.measure.time_ms`), the host's time per call (calls enqueued
back to back, no sync in between), the time under a CUDA graph (host cost removed), and the CUDA
kernels one call launches with their device times (torch.profiler).

    python scripts/bench_gap.py [--cases bias_relu/gpt2,dgrad_bias_grad/bert] [--json out.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections import defaultdict

import torch
from torch.utils.flop_counter import FlopCounterMode

from evt.bench import baselines, measure, ops, steps
from evt.bench.plan import all_cases

DEFAULT = "bias_relu/gpt2,bias_relu/bert-down,bias_gelu_aux/gpt2,dgrad_bias_grad/bert,residual_scale_cast/bert"


def graph_ms(fn, inputs: tuple) -> float | str:
    try:
        return measure.graph_time_ms(fn, [inputs], "cuda")
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        return f"n/a: {type(e).__name__}: {str(e)[:120]}"


def kernels(call, n: int = 10) -> list[tuple[str, float, float]]:
    """(kernel name, calls per step, device us per call) for every CUDA kernel one call runs."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            call()
        torch.cuda.synchronize()
    total: dict[str, list[float]] = defaultdict(list)
    for e in prof.events():
        if e.device_type.name == "CUDA":
            total[e.name].append(e.device_time)
    rows = sorted(((k, len(v) / n, sum(v) / n) for k, v in total.items()), key=lambda r: -r[2])
    return [(short_name(k), per, us) for k, per, us in rows]


def short_name(name: str) -> str:
    """A kernel's name cut to 80 characters, plus a hash of the whole name where it was cut:
    CUTLASS kernels differ only deep inside their template arguments."""
    if len(name) <= 90:
        return name
    return f"{name[:80]}..#{hashlib.sha1(name.encode()).hexdigest()[:6]}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=DEFAULT)
    ap.add_argument("--baselines", default="mm,eager,evt,compile")
    ap.add_argument("--json")
    ap.add_argument("--top", type=int, default=12, help="kernels listed per baseline")
    args = ap.parse_args()
    by_name = {c.name: c for c in all_cases()}
    if "evt" in args.baselines.split(","):  # all evt kernels at once, configs for the real shapes
        from evt.bench.prebuild import prebuild

        prebuild([by_name[n] for n in args.cases.split(",")], torch.bfloat16, print, "cuda")
    report = []
    for name in args.cases.split(","):
        torch._dynamo.reset()  # Dynamo's 8 compiles of a code object afresh (the bench raises past them)
        case = by_name[name]
        w = (ops if case.kind == "op" else steps).build(case, torch.bfloat16, "cuda")
        inputs = w.make_inputs(0)
        with FlopCounterMode(display=False) as counter:
            w.eager(*inputs)
        flop = counter.get_total_flops()
        print(f"\n== {name} {case.dims}")
        for b in args.baselines.split(","):
            base = baselines.BASELINES[b]
            if not base.applies(case, "cuda"):
                continue
            if b == "evt":
                from evt.runtime import dispatch

                dispatch.reset()  # configs for this case's shapes (as the bench does)
            fn = base.build(w, "cuda")
            call = lambda fn=fn, inputs=inputs: fn(*inputs)  # noqa: E731
            for _ in range(3):
                call()
            row = {
                "case": name,
                "baseline": b,
                "bench_ms": measure.time_ms(call, "cuda"),
                "host_us": measure.host_ms(call, "cuda", 200) * 1e3,
                "graph_ms": graph_ms(fn, inputs),
                "kernels": kernels(call),
            }
            report.append(row)
            g = row["graph_ms"]
            gtxt = f"{g * 1e3:7.1f} us ({flop / g / 1e9:5.0f} TF/s)" if isinstance(g, float) else g
            print(f"  {b:8s} bench {row['bench_ms'] * 1e3:7.1f} us ({flop / row['bench_ms'] / 1e9:5.0f}"
                  f" TF/s)  host {row['host_us']:6.1f} us/call  graph {gtxt}")
            busy = sum(us for _, _, us in row["kernels"])
            print(f"      {busy:7.1f} us  kernels in all ({sum(p for _, p, _ in row['kernels']):.0f} launches)")
            for k, per, us in row["kernels"][: args.top]:
                print(f"      {us:7.1f} us  x{per:.1f}  {k}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
