"""Session 67: host time per call outside the bench. In one fresh process: the host probe
(`measure.host_probe_us`), then for each case and baseline (evt, compile) the bench's own build
of it (`runner.build_impl`: cold and warm compile, as the bench's stage does) and `measure.host_ms`
read 7 times (100 calls each), then the probe again. Prints one JSON line per reading."""

import json
import statistics
import sys

import torch

from evt.bench import baselines, measure, runner
from evt.bench.plan import make_plan

only = sys.argv[1]
names = sys.argv[2].split(",") if len(sys.argv) > 2 else ["evt", "compile"]
print(json.dumps({"probe_start_us": round(measure.host_probe_us("cuda"), 2)}), flush=True)
for case in make_plan(only=only, baselines="evt", device="cuda").cases:
    s = runner.CaseState.build(case, torch.bfloat16, "cuda")
    for name in names:
        b = baselines.BASELINES[name]
        rec, notes = {}, {}
        with runner.fresh_inductor_cache():
            impl = runner.build_impl(b, s, "cuda", rec, notes)
            call = measure.rotating(impl, s.input_sets)
            hs = [measure.host_ms(call, "cuda", n=100) for _ in range(7)]
        torch._dynamo.reset()
        print(json.dumps({"case": case.name, "baseline": name,
                          "host_us_median": round(statistics.median(hs) * 1e3, 1),
                          "host_us_min": round(min(hs) * 1e3, 1),
                          "probe_us": round(measure.host_probe_us("cuda"), 2)}), flush=True)
print(json.dumps({"probe_end_us": round(measure.host_probe_us("cuda"), 2)}), flush=True)
