"""max-autotune's decision for each region of some bench cases, timed two ways: CUDA graph
replays (`autotune.pick_timer`, what max-autotune uses) and calls timed one by one with CUDA
events, the host's launch inside each (`timing.cuda_time_ms`, max-autotune's timer before
schedule 4). Shows how much the host's cost of a call moves the fused-or-unfused choice.

    python scripts/autotune_timers.py 'ce_backward/gpt2,bias/gpt2'   # on the GPU machine
"""

from __future__ import annotations

import sys
import warnings

import torch


def main(only: str) -> None:
    from evt.bench import ops, steps
    from evt.bench.plan import make_plan
    from evt.runtime import autotune, dispatch, timing

    real = autotune.measure

    def both(region, built, problem, timer=None, baseline="inductor", device="cuda"):
        graphs = real(region, built, problem, None, baseline, device)
        calls = real(region, built, problem, timing.cuda_time_ms, baseline, device)
        for name, d in (("graph replays", graphs), ("calls + host", calls)):
            best = d.fused_ms if d.fused_ms is not None else float("nan")
            print(f"  {built.spec.name} {tuple(problem)} [{name}]: fused {best:.4f} ms, "
                  f"unfused {d.unfused_ms or float('nan'):.4f} ms -> "
                  f"{'fuse' if d.fuse else 'unfused'} ({d.config})", flush=True)  # fmt: skip
        return graphs

    autotune.measure = both
    for case in make_plan(only=only, baselines="evt", device="cuda").cases:
        print(f"{case.name}:", flush=True)
        w = (ops if case.kind == "op" else steps).build(case, torch.bfloat16, "cuda")
        dispatch.reset()
        autotune.reset()
        torch._dynamo.reset()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = torch.compile(w.target, backend="evt", options={"autotune": True})
            compiled(*w.make_inputs(0))
        w.release()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "ce_backward/gpt2,bias/gpt2,layernorm_stats/gpt2")
