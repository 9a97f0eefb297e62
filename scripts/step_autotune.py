"""evt's max-autotune on training steps: each region's fused kernel timed against its unfused path
(the region's ops compiled by Inductor, as the rest of the step runs; EVT_DEBUG=1 prints every
decision and the unfused path it was timed against: `unfused (inductor) ...`, or
`unfused (eager, Inductor failed: ...)` where Inductor could not compile it), then the step timed
under CUDA graphs with the default mode and with max-autotune's choices, so a region that loses to
the unfused path shows by name.

    EVT_DEBUG=1 python scripts/step_autotune.py [--cases step/gpt2,step/bert] [--top 1]

`--top` is EVT_AUTOTUNE_TOP (configs built per region; 1: the heuristic's choice, which measures
profitability only).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from evt.backend import evt_backend  # noqa: E402
from evt.bench import measure, steps  # noqa: E402
from evt.bench.plan import all_cases  # noqa: E402
from evt.runtime import dispatch  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", default="step/gpt2,step/bert")
    p.add_argument("--top", default="1")
    a = p.parse_args()
    os.environ["EVT_AUTOTUNE_TOP"] = a.top
    by_name = {c.name: c for c in all_cases()}
    for name in a.cases.split(","):
        w = steps.build(by_name[name], torch.bfloat16, "cuda")
        inputs = w.make_inputs(0)
        row = {}
        for mode, options in (("default", None), ("max-autotune", {"autotune": True})):
            torch._dynamo.reset()
            dispatch.reset()
            fn = w.wrap(
                torch.compile(w.target, backend=evt_backend, dynamic=False, options=options)
            )
            t0 = time.time()
            fn(*inputs)
            torch.cuda.synchronize()
            first = time.time() - t0
            row[mode] = measure.graph_time_ms(fn, [inputs], "cuda")
            print(f"== {name} {mode}: first call {first:.1f} s, {row[mode] * 1e3:.1f} us per step "
                  f"under CUDA graphs; launches {dict(dispatch.launches())}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
