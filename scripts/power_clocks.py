"""Does a fused epilogue cost clock speed? For a few suite cases and baselines, replays one call
from a CUDA graph back to back for a few seconds while `nvidia-smi` samples the SM clock, the
board power and the active clock-event (throttle) reasons (`evt.bench.clocks`), then reports the
time per call, the TFLOP/s, the clock and power while it ran, and the TFLOP/s per GHz of SM
clock: where evt's kernel runs at a lower clock than the bare GEMM, that share of the gap is
power, not the kernel's schedule. (`evt bench` records each timing's clock too, but its timings
are short bursts; this holds each call for seconds: the steady state at the power limit.)

    python scripts/power_clocks.py [--cases bias_relu/gpt2,bias_gelu/gpt2] [--baselines mm,evt]
        [--seconds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from evt.bench import baselines, clocks, ops
from evt.bench.plan import all_cases
from evt.runtime import timing

DEFAULT = ("bias_relu/gpt2,bias_gelu_tanh/gpt2,bias_gelu/gpt2,bias_gelu_aux/gpt2,dgrad_gelu/gpt2,"
           "residual_scale_cast/gpt2,layernorm_stats/gpt2,bias_relu/gptj")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=DEFAULT)
    ap.add_argument("--baselines", default="mm,evt")
    ap.add_argument("--seconds", type=float, default=3.0, help="replay time per (case, baseline)")
    ap.add_argument("--json")
    args = ap.parse_args()
    by_name = {c.name: c for c in all_cases()}
    names = args.cases.split(",")
    if "evt" in args.baselines.split(","):
        from evt.bench.prebuild import prebuild

        prebuild([by_name[n] for n in names], torch.bfloat16, print, "cuda")
    sampler = clocks.sampler("cuda")
    if sampler is None:
        raise SystemExit("no CUDA GPU or no nvidia-smi: nothing to sample")
    report = []
    print(f"{'case':26s} {'baseline':9s} {'us':>8s} {'TF/s':>6s} {'MHz':>5s} {'W':>5s} "
          f"{'TF/s/GHz':>8s}  clock events")
    for name in names:
        torch._dynamo.reset()  # Dynamo's 8 compiles of a code object afresh (the bench raises past them)
        case = by_name[name]
        w = ops.build(case, torch.bfloat16, "cuda")
        inputs = w.make_inputs(0)
        with FlopCounterMode(display=False) as counter:
            w.eager(*inputs)
        flop = counter.get_total_flops()
        for b in args.baselines.split(","):
            base = baselines.BASELINES[b]
            if not base.applies(case, "cuda"):
                continue
            if b == "evt":
                from evt.runtime import dispatch

                dispatch.reset()
            fn = base.build(w, "cuda")
            for _ in range(3):
                fn(*inputs)
            graph = timing.capture(lambda fn=fn, inputs=inputs: fn(*inputs))
            graph.replay()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            calls = 0
            t0 = time.monotonic()
            start.record()
            while time.monotonic() - t0 < args.seconds:
                for _ in range(50):
                    graph.replay()
                calls += 50
                torch.cuda.synchronize()  # keeps the host's clock and the samples in step
            end.record()
            torch.cuda.synchronize()
            t1 = time.monotonic()
            us = start.elapsed_time(end) * 1e3 / calls
            # the first half second ramps the clock and the power: the steady state after it
            s = sampler.summary(t0 + 0.5, t1)
            tflops = flop / us / 1e6
            mhz = s.get("sm_mhz")
            per_ghz = tflops / (mhz / 1e3) if mhz else None
            row = {"case": name, "baseline": b, "us": us, "tflops": tflops, "flop": flop,
                   "per_ghz": per_ghz, **s}
            report.append(row)
            print(f"{name:26s} {b:9s} {us:8.1f} {tflops:6.0f} {mhz or 0:5.0f} "
                  f"{s.get('power_w') or 0:5.0f} {per_ghz or 0:8.1f}  "
                  f"{','.join(s.get('events', []))}", flush=True)
            time.sleep(0.5)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
