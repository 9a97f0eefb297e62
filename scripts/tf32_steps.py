"""fp32 training steps on TF32 tensor cores: evt's TF32 kernels (`EVT_TF32=1`) against
torch.compile and eager, all with `torch.set_float32_matmul_precision("high")` (cuBLAS's TF32),
in one process on one GPU: each checked against the float64 reference first (norm-wise relative
error per output, the worst reported), then timed as run and under CUDA graphs. Which evt
regions launched and which ran unfused (and why) is printed too.

    python scripts/tf32_steps.py [--steps step/mlp,step/gpt2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", default="step/mlp,step/gpt2")
    ap.add_argument("--json")
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the script (no timing)")
    args = ap.parse_args()
    dev = args.device
    os.environ["EVT_TF32"] = "1"
    torch.set_float32_matmul_precision("high")

    from evt.bench import baselines, check, measure, steps
    from evt.bench.plan import all_cases
    from evt.bench.workload import outputs
    from evt.runtime import dispatch

    by_name = {c.name: c for c in all_cases()}
    rows = []
    for name in args.steps.split(","):
        torch._dynamo.reset()  # Dynamo's 8 compiles of a code object afresh (the bench raises past them)
        w = steps.build(by_name[name], torch.float32, dev)
        inputs = w.make_inputs(0)
        ref = outputs(w.reference(inputs))
        for b in ("eager", "compile", "evt"):
            dispatch.reset()
            fn = w.eager if b == "eager" else baselines.BASELINES[b].build(w, dev)
            got = outputs(fn(*inputs))
            err = max(check.rel_error(g, r) for g, r in zip(got, ref, strict=True) if r is not None)
            timed = dev == "cuda"
            row = {"step": name, "baseline": b, "max_rel_error": err,
                   "ms": measure.time_ms(lambda fn=fn, x=inputs: fn(*x), dev) if timed else 0.0,
                   "graph_ms": measure.graph_time_ms(fn, [inputs], dev) if timed else 0.0}  # fmt: skip
            if b == "evt":
                row["launches"] = dict(dispatch.launches())
                row["fallbacks"] = dict(dispatch.FALLBACKS)
            rows.append(row)
            print(f"{name:12} {b:8} err {err:.2e}  {row['ms']:7.3f} ms  graphs {row['graph_ms']:7.3f} ms"
                  + (f"  launched {sorted(row['launches'])}" if b == "evt" else ""), flush=True)  # fmt: skip
            if b == "evt" and row["fallbacks"]:
                print("  unfused:", row["fallbacks"])
            w.release()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
