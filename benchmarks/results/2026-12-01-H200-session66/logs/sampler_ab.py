"""Session 66: does the bench's background nvidia-smi sampler (evt.bench.clocks, -lms 20) slow
the host? host_ms and as-run time_ms of evt's and mm's calls, with the sampler running and not,
alternated over rounds in one process."""

import statistics
import sys
import time

import torch

from evt.bench import baselines, clocks, measure, runner
from evt.bench.plan import make_plan

impls = {}
for case in make_plan(only=sys.argv[1], baselines="evt", device="cuda").cases:
    s = runner.CaseState.build(case, torch.bfloat16, "cuda")
    for name in ("evt", "mm", "compile"):
        impl = baselines.BASELINES[name].build(s.workload, "cuda")
        impl(*s.input_sets[0])
        impls[(case.name, name)] = measure.rotating(impl, s.input_sets)
torch.cuda.synchronize()
res = {}
for _r in range(5):
    for mode in ("quiet", "sampled"):
        smp = clocks.Sampler(0) if mode == "sampled" else None
        if smp:
            time.sleep(0.3)
        for key, call in impls.items():
            h = measure.host_ms(call, "cuda", n=100)
            t = measure.time_ms(call, "cuda")
            res.setdefault((*key, mode), []).append((h, t))
        if smp:
            smp.close()
            smp.proc.wait()
for (case, b, mode), v in sorted(res.items()):
    print(
        f"{case:24} {b:8} {mode:8} host_us {statistics.median(x[0] for x in v) * 1e3:7.1f}"
        f"  as_run_us {statistics.median(x[1] for x in v) * 1e3:7.1f}",
        flush=True,
    )
