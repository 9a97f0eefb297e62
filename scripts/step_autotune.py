"""evt's max-autotune on training steps: each region's fused kernel timed against its unfused path
(the region's ops compiled by Inductor, as the rest of the step runs; EVT_DEBUG=1 prints every
decision and the unfused path it was timed against: `unfused (inductor) ...`, or
`unfused (eager, Inductor failed: ...)` where Inductor could not compile it), then the step timed
under CUDA graphs with the default mode and with max-autotune's choices, so a region that loses to
the unfused path shows by name.

    EVT_DEBUG=1 python scripts/step_autotune.py [--cases step/gpt2,step/bert] [--top 1]
        [--modes default,max-autotune,inductor-max-autotune] [--dump-after SECONDS]

`--top` is EVT_AUTOTUNE_TOP (configs built per region; 1: the heuristic's choice, which measures
profitability only). `inductor-max-autotune` is the peer's cold start: torch.compile's Inductor
with mode="max-autotune-no-cudagraphs" (its Triton GEMM templates timed, no evt; the step is timed
in a CUDA graph of ours, which Inductor's own would refuse to be captured in). `--dump-after` prints every
thread's stack to stderr after that many seconds (and again each time as many pass), to see where
a first call that outruns a device call's limit spends its time.
"""

from __future__ import annotations

import argparse
import faulthandler
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

MODES = {  # mode -> (backend, torch.compile's mode, options)
    "default": (evt_backend, None, None),
    "max-autotune": (evt_backend, None, {"autotune": True}),
    # without Inductor's own CUDA graphs: the step is timed inside one of ours
    "inductor-max-autotune": ("inductor", "max-autotune-no-cudagraphs", None),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", default="step/gpt2,step/bert")
    p.add_argument("--top", default="1")
    p.add_argument("--modes", default="default,max-autotune")
    p.add_argument("--dump-after", type=float, default=0)
    a = p.parse_args()
    os.environ["EVT_AUTOTUNE_TOP"] = a.top
    if a.dump_after:
        faulthandler.dump_traceback_later(a.dump_after, repeat=True)
    by_name = {c.name: c for c in all_cases()}
    start = time.time()
    for name in a.cases.split(","):
        w = steps.build(by_name[name], torch.bfloat16, "cuda")
        inputs = w.make_inputs(0)
        for mode in a.modes.split(","):
            backend, compile_mode, options = MODES[mode]
            torch._dynamo.reset()
            dispatch.reset()
            fn = w.wrap(torch.compile(w.target, backend=backend, mode=compile_mode,
                                      dynamic=False, options=options))  # fmt: skip
            t0 = time.time()
            fn(*inputs)
            torch.cuda.synchronize()
            first = time.time() - t0
            print(f"== [{time.time() - start:.0f} s] {name} {mode}: first call {first:.1f} s",
                  flush=True)  # fmt: skip
            step_ms = measure.graph_time_ms(fn, [inputs], "cuda")
            print(f"== [{time.time() - start:.0f} s] {name} {mode}: first call {first:.1f} s, "
                  f"{step_ms * 1e3:.1f} us per step under CUDA graphs; "
                  f"launches {dict(dispatch.launches())}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
