"""Session 66: evt's host time per call at this checkout, in this process (PYTHONPATH picks the
tree): the bench's own evt build of each case, host_ms read 7 times, the C++ path's share, and
(--profile) a cProfile of 400 calls of the first case."""

import json
import os
import statistics
import sys

import torch

import evt
from evt.bench import baselines, measure, observe, runner
from evt.bench.plan import make_plan

only, tag = sys.argv[1], sys.argv[2]
profile = "--profile" in sys.argv
b = baselines.BASELINES["evt"]
for case in make_plan(only=only, baselines="evt", device="cuda").cases:
    s = runner.CaseState.build(case, torch.bfloat16, "cuda")
    impl = b.build(s.workload, "cuda")
    impl(*s.input_sets[0])
    torch.cuda.synchronize()
    call = measure.rotating(impl, s.input_sets)
    for _ in range(20):
        call()
    torch.cuda.synchronize()
    hs = [measure.host_ms(call, "cuda", n=100) for _ in range(7)]
    region = observe.region_host_us(lambda call=call: measure.host_ms(call, "cuda", n=100))
    from evt.runtime import dispatch, fast

    print(
        json.dumps(
            {
                "tag": tag,
                "case": case.name,
                "evt": os.path.dirname(evt.__file__),
                "host_us_median": round(statistics.median(hs) * 1e3, 1),
                "host_us_min": round(min(hs) * 1e3, 1),
                "region_cpp_us": region,
                "fast_loaded": fast.loaded(),
                "py_launches": sum(dispatch.LAUNCHES.values()),
                "cpp_launches": sum(fast.launches().values()),
            }
        ),
        flush=True,
    )
    if profile:
        import cProfile
        import io
        import pstats

        pr = cProfile.Profile()
        pr.enable()
        for _ in range(400):
            call()
        pr.disable()
        torch.cuda.synchronize()
        out = io.StringIO()
        pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(35)
        print(f"== profile {tag} {case.name}\n" + out.getvalue(), flush=True)
        profile = False
