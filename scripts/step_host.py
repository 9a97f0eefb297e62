"""Where a training step's host time goes, per baseline: the host's time per step (steps enqueued
back to back) and a cProfile of those steps (functions by own time and by cumulative time), so a
step that is host-bound shows which Python runs between its kernels. One step also runs under
`torch.cuda.set_sync_debug_mode("warn")`: every call that synchronizes the host with the GPU
(a copy to the host, `.item()`, a blocking allocation) is listed with the line that made it, since
a step that syncs cannot run ahead of its kernels (as-run time = host + GPU).

    python scripts/step_host.py [--steps step/mlp] [--baselines eager,evt,compile] [--top 25]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import traceback
import warnings

import torch

from evt.bench import baselines, measure, steps
from evt.bench.plan import all_cases
from evt.runtime import fast


def warmed_calls(step_names: list[str], baseline_names: list[str]):
    """(step, baseline, call) for each step and baseline: `call()` runs one bf16 training step
    on CUDA, warmed up (evt's kernels prebuilt in one parallel batch first)."""
    by_name = {c.name: c for c in all_cases()}
    if "evt" in baseline_names:
        from evt.bench.prebuild import prebuild

        prebuild([by_name[n] for n in step_names], torch.bfloat16, print, "cuda")
    for name in step_names:
        torch._dynamo.reset()  # Dynamo's 8 compiles of a code object afresh (the bench raises past them)
        w = steps.build(by_name[name], torch.bfloat16, "cuda")
        inputs = w.make_inputs(0)
        for b in baseline_names:
            fn = baselines.BASELINES[b].build(w, "cuda")
            call = lambda fn=fn, inputs=inputs: fn(*inputs)  # noqa: E731
            for _ in range(5):
                call()
            yield name, b, call


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", default="step/mlp")
    ap.add_argument("--baselines", default="eager,evt,compile")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--n", type=int, default=30)
    args = ap.parse_args()
    for name, b, call in warmed_calls(args.steps.split(","), args.baselines.split(",")):
        print(f"\n== {name} {b}: host {measure.host_ms(call, 'cuda', args.n) * 1e3:7.1f} us per step")
        with fast.timed():  # a pass of its own: the C++ path's clock reads cost host time
            before = fast.host_times()
            timed_us = measure.host_ms(call, "cuda", args.n) * 1e3
            spent = fast.host_times_since(before)
        if spent:
            print(f"   (with the C++ path timing its calls: {timed_us:7.1f} us per step)")
        print_region_times(spent)
        print_syncs(call)
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


def print_region_times(spent: dict) -> None:
    """Each evt region's host time per launch from the C++ path over the timed steps
    (`fast.host_times_since`): the C++ call (outputs, workspace, launcher) and the kernel's
    launcher inside it."""
    if not spent:
        return
    print(f"{'region':<24} {'launches':>8} {'C++ call us':>11} {'launcher us':>11}")
    for name, t in sorted(spent.items()):
        print(f"{name:<24} {t.launches:>8} {t.call_us:>11.1f} {t.launcher_us:>11.1f}")


def print_syncs(call) -> None:
    """The synchronizing calls of one step, each with the innermost frames that made it."""
    torch.cuda.synchronize()
    seen: list[str] = []

    def record(message, category, filename, lineno, file=None, line=None):
        if str(message).startswith("Synchronization debug mode is a prototype"):
            return  # torch's note on switching the mode on (its first use), not a sync
        stack = "".join(traceback.format_stack(limit=8)[:-1])
        seen.append(f"{message}\n{stack}")

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            call()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    print(f"synchronizing calls in one step: {len(seen)}")
    for text in seen[:5]:
        print(text)


if __name__ == "__main__":
    main()
