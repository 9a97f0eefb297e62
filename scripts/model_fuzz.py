"""The graph-level differential fuzzer over many seeds: random small training programs
(`evt.testing.models`) through the whole pipeline.

On the CPU (default) the regions run on the reference path and evt must match eager in float32
to --tol (relative to each tensor's largest element). With `--device cuda` (an SM90 GPU) each
seed's program with smooth activations runs its real kernels in bf16 (`rest="eager"`: every
region a launch), against fp32 eager: evt's error in the loss and every gradient must stay within
max(2e-2, 2 x bf16 eager's), and no region may fall back. The kernels of all seeds are captured on
the CPU first and built in parallel. Prints every seed that fails or raises, with its program.

    python scripts/model_fuzz.py [--seed 0] [--count 400] [--tol 1e-4] [--dynamic] [--rest inductor]
    python scripts/model_fuzz.py --device cuda --count 30 [--mask padding] [--op OP]

(`EVT_NESTED_BATCH=1` in the environment fuzzes the in-place attention heads too.)

The bf16 bound compares with one eager draw, which can be lucky. Seed 20114 exceeds it (block 0's
LayerNorm weight gradient: 0.021 against eager's 0.0058, D = 16), and session 27 found that it is
rounding, not an evt bug. evt's region rounds proj + bias + residual once, where eager rounds
twice. Eager itself with that single rounding gives 0.0211, and 40 random valid roundings of that
sum give 0.0070-0.0211. At D = 16 the 2e-2 floor is about 4 bf16 steps of the result.
"""

from __future__ import annotations

import argparse
import time
import warnings

from evt.testing.models import (
    ATTENTION_MASKS,
    against_fp32,
    compare,
    describe,
    kernels_of,
    program,
    seeds,
)


def on_cpu(args, chosen) -> tuple[int, int]:
    bad, regions = 0, 0
    for seed in chosen:
        text = describe(program(seed)[0])
        try:
            errs, n = compare(seed, dynamic=True if args.dynamic else None, rest=args.rest)
        except Exception as e:  # noqa: BLE001 - a crash is a finding: report it and go on
            bad += 1
            print(f"seed {seed}: raised {type(e).__name__}: {str(e)[:300]}\n  {text}")
            continue
        regions += n
        worst = max(errs, key=errs.__getitem__)
        if errs[worst] > args.tol:
            bad += 1
            print(f"seed {seed}: {worst} off by {errs[worst]:.3g} ({n} regions)\n  {text}")
    return bad, regions


def on_gpu(chosen) -> tuple[int, int]:
    from evt.runtime import dispatch

    captured = {seed: kernels_of(seed) for seed in chosen}
    jobs = [dispatch.prefetch(spec, problem) for ks in captured.values() for spec, problem in ks]
    print(f"building {len(jobs)} kernels")
    for job in jobs:
        if job is not None:
            job.result()
    bad = 0
    for seed in chosen:
        text = describe(program(seed, smooth=True)[0])
        dispatch.FALLBACKS.clear()
        try:
            errs = against_fp32(seed)
        except Exception as e:  # noqa: BLE001
            bad += 1
            print(f"seed {seed}: raised {type(e).__name__}: {str(e)[:300]}\n  {text}")
            continue
        off = {n: e for n, e in errs.items() if e[0] > max(2e-2, 2 * e[1])}
        if off or dispatch.FALLBACKS:
            bad += 1
            print(f"seed {seed}: (evt, eager) errors {off}, fallbacks {dict(dispatch.FALLBACKS)}\n  {text}")
    return bad, sum(map(len, captured.values()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--count", type=int, default=400)
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--dynamic", action="store_true", help="torch.compile(dynamic=True)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--rest", default="eager", choices=("eager", "inductor"),
                   help="the CPU's rest of the graph: eager, or Inductor, which must also hand each "
                   "region its inputs in its kernel's layouts (evt.testing.layouts)")
    p.add_argument("--mask", choices=ATTENTION_MASKS,
                   help="only seeds with an attention block with this mask (from --seed on)")
    p.add_argument("--op", help="only seeds whose regions compute this op of evt.ir.COMPUTE_OPS "
                   "(from --seed on; e.g. silu_backward_sigmoid, SwiGLU's shared sigmoid)")
    args = p.parse_args()
    warnings.simplefilter("ignore")
    start = time.time()
    chosen = seeds(args.seed, args.count, args.mask, smooth=args.device == "cuda", op=args.op)
    if args.mask or args.op:
        print(f"seeds {', '.join(map(str, chosen))}: {len(chosen)} with {args.mask or args.op}")
    bad, regions = on_gpu(chosen) if args.device == "cuda" else on_cpu(args, chosen)
    print(f"{args.count} seeds, {bad} failed, {regions} regions formed, {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
