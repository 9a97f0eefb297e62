"""Time one MLP training step (forward + loss + backward) with eager, torch.compile and evt, in
one process on one GPU, after checking each against an fp32 eager reference.

    python scripts/mlp_step_time.py [--tokens 8192 --dim 1024 --hidden 4096] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import time

import torch

from evt.examples import MLP


def run_step(model, x, probe):
    for p in model.parameters():
        p.grad = None
    x.grad = None
    (model(x).float() * probe).sum().backward()
    return [x.grad] + [p.grad for p in model.parameters()]


def bench(fn) -> float:
    """Median ms per call, the benchmark harness's timer (triton's do_bench, else CUDA events)."""
    from evt.bench.measure import time_ms

    return time_ms(fn, "cuda")


def profile(fn) -> None:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=60))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--json")
    p.add_argument("--profile", action="store_true", help="print a torch.profiler table of evt's step")
    a = p.parse_args()
    torch.manual_seed(0)
    base = MLP(a.dim, a.hidden).cuda().bfloat16()
    x = torch.randn(a.tokens, a.dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    probe = torch.randn(a.tokens, a.dim, device="cuda")
    ref_model = copy.deepcopy(base).float()
    xr = x.detach().float().requires_grad_()
    want = run_step(ref_model, xr, probe)
    rows = {}
    variants = [
        ("eager", None), ("torch.compile", {}), ("evt", {"backend": "evt"}),
        ("torch.compile cudagraphs", {"mode": "reduce-overhead"}),
        ("evt cudagraphs", {"backend": "evt", "mode": "reduce-overhead"}),
    ]
    for name, opts in variants:
        model = copy.deepcopy(base)
        fn = model if opts is None else torch.compile(model, **opts)
        t0 = time.perf_counter()
        got = run_step(fn, x, probe)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - t0
        err = max(((g.float() - w).abs().max() / w.abs().max()).item() for g, w in zip(got, want))
        ms = bench(lambda fn=fn: run_step(fn, x, probe))
        rows[name] = {"ms": ms, "max_rel_err": err, "first_call_s": compile_s}
    from evt.runtime import dispatch

    print("evt launches:", dict(dispatch.launches()), "fallbacks:", dict(dispatch.FALLBACKS))
    if a.profile:
        profile(lambda: run_step(fn, x, probe))
    for name, r in rows.items():
        print(f"{name:>24}: {r['ms']:.3f} ms/step  (eager/this {rows['eager']['ms'] / r['ms']:.3f}x,"
              f" max rel err {r['max_rel_err']:.2e}, first call {r['first_call_s']:.1f} s)")
    out = {"shape": vars(a), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "results": rows}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
