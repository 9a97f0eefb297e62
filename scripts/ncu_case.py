"""One evt call of a bench suite case, for Nsight Compute: builds the case's evt function at its
real shapes, warms it up (compiles, selects), then runs one call between cudaProfilerStart/Stop.

    ncu --profile-from-start off --kernel-name regex:cutlass --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats --section SourceCounters \
        python scripts/ncu_case.py ce_forward/gpt2
"""

from __future__ import annotations

import sys

import torch

from evt.bench import baselines, ops
from evt.bench.plan import all_cases
from evt.bench.prebuild import prebuild
from evt.runtime import dispatch


def main() -> None:
    by_name = {c.name: c for c in all_cases()}
    case = by_name[sys.argv[1]]
    prebuild([case], torch.bfloat16, print, "cuda")
    w = ops.build(case, torch.bfloat16, "cuda")
    inputs = w.make_inputs(0)
    dispatch.reset()
    fn = baselines.BASELINES["evt"].build(w, "cuda")
    for _ in range(3):
        fn(*inputs)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    fn(*inputs)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
