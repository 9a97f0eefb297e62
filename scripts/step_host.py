"""Where a training step's host time goes, per baseline: the host's time per step (steps enqueued
back to back) and a cProfile of those steps (functions by own time and by cumulative time), so a
step that is host-bound shows which Python runs between its kernels.

    python scripts/step_host.py [--steps step/mlp] [--baselines eager,evt,compile] [--top 25]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats

import torch

from evt.bench import baselines, measure, steps
from evt.bench.plan import all_cases


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", default="step/mlp")
    ap.add_argument("--baselines", default="eager,evt,compile")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--n", type=int, default=30)
    args = ap.parse_args()
    by_name = {c.name: c for c in all_cases()}
    if "evt" in args.baselines.split(","):
        from evt.bench.prebuild import prebuild

        prebuild([by_name[n] for n in args.steps.split(",")], torch.bfloat16, print, "cuda")
    for name in args.steps.split(","):
        w = steps.build(by_name[name], torch.bfloat16, "cuda")
        inputs = w.make_inputs(0)
        for b in args.baselines.split(","):
            fn = baselines.BASELINES[b].build(w, "cuda")
            call = lambda fn=fn, inputs=inputs: fn(*inputs)  # noqa: E731
            for _ in range(5):
                call()
            print(f"\n== {name} {b}: host {measure.host_ms(call, 'cuda', args.n) * 1e3:7.1f} us per step")
            prof = cProfile.Profile()
            torch.cuda.synchronize()
            prof.enable()
            for _ in range(args.n):
                call()
            prof.disable()
            torch.cuda.synchronize()
            for key in ("tottime", "cumulative"):
                out = io.StringIO()
                pstats.Stats(prof, stream=out).sort_stats(key).print_stats(args.top)
                text = out.getvalue()
                print(text[text.find("   ncalls"):])


if __name__ == "__main__":
    main()
