"""Does the bench's prebuild build every kernel a case's run asks for? For each case, the build
jobs the prebuild plans (meta capture) and the ones the evt baseline's first call plans on the
device, by region: key, tile config and problem; for a region whose key differs, the spec and the
config of both sides, and the kernel's source diff.

    python scripts/prebuild_check.py [--cases step/mlp,step/gpt2]
"""

from __future__ import annotations

import argparse
import difflib

import torch

from evt import ir
from evt.bench import baselines, steps
from evt.bench.plan import all_cases
from evt.bench.prebuild import prebuild
from evt.runtime import build, dispatch


def record(into: list):
    """Wrap build.plan so every planned job lands in `into` (region, config label, key, job)."""
    original = build.plan

    def plan(spec, config=None, compile_fn=None):
        job = original(spec, config, compile_fn)
        into.append((spec.name, getattr(config, "label", None), job.key, job, spec))
        return job

    build.plan = plan
    return original


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="step/mlp,step/gpt2")
    args = ap.parse_args()
    by_name = {c.name: c for c in all_cases()}
    for name in args.cases.split(","):
        case = by_name[name]
        pre: list = []
        original = record(pre)
        prebuild([case], torch.bfloat16, print, "cuda")
        run: list = []
        build.plan = original
        record(run)
        dispatch.reset()
        w = steps.build(case, torch.bfloat16, "cuda")
        fn = baselines.BASELINES["evt"].build(w, "cuda")
        fn(*w.make_inputs(0))
        torch.cuda.synchronize()
        build.plan = original
        keys = {k for _, _, k, _, _ in pre}
        print(f"\n== {name}: prebuild planned {len(pre)} jobs, the run {len(run)}")
        for region, label, key, job, spec in run:
            hit = "prebuilt" if key in keys else "MISSING"
            print(f"  {hit:8} {region:22} {label} {key[:16]}")
            if key in keys:
                continue
            same = [p for p in pre if p[0] == region]
            for _, plabel, pkey, pjob, pspec in same:
                print(f"    prebuild had {region} as {plabel} {pkey[:16]}")
                if ir.to_json(pspec) != ir.to_json(spec):
                    print("    spec differs:\n      prebuild " + ir.to_json(pspec)[:1500])
                    print("      run      " + ir.to_json(spec)[:1500])
                diff = difflib.unified_diff(pjob.source.splitlines(), job.source.splitlines(),
                                            "prebuild", "run", n=1, lineterm="")  # fmt: skip
                print("\n".join(list(diff)[:60]))


if __name__ == "__main__":
    main()
