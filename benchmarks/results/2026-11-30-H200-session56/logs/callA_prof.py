"""Profile where evt's max-autotune compile of patchtst's step spends its time (cProfile, main thread)."""
import cProfile
import io
import pstats
import sys
import time

import torch

from evt.bench.runner import fresh_inductor_cache
from evt.bench.steps import build, cases

mode = sys.argv[1]  # "evt" or "inductor"
case = next(c for c in cases() if c.name == "step/patchtst")
w = build(case, torch.bfloat16, "cuda")
with fresh_inductor_cache():
    if mode == "evt":
        compiled = torch.compile(w.target, backend="evt", mode="max-autotune")
    else:
        compiled = torch.compile(w.target, mode="max-autotune")
    step = w.wrap(compiled)
    inputs = w.make_inputs(0)
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    step(*inputs)
    torch.cuda.synchronize()
    prof.disable()
    print(f"{mode}: first step {time.perf_counter() - t:.1f} s", flush=True)
    prof.dump_stats(f"/tmp/d/prof_{mode}.out")
    s = io.StringIO()
    st = pstats.Stats(prof, stream=s).sort_stats("cumulative")
    st.print_stats(120)
    print(s.getvalue()[:60000])
