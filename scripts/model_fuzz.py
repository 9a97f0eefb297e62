"""The graph-level differential fuzzer over many seeds (CPU: regions on the reference path):
random small training programs (`evt.testing.models`) with evt against eager in float32. Prints
each seed whose loss or a gradient differs by more than --tol (relative to the tensor's largest
element) or that raises, with the program it ran.

    python scripts/model_fuzz.py [--seed 0] [--count 400] [--tol 1e-4] [--dynamic]

(`EVT_NESTED_BATCH=1` in the environment fuzzes the in-place attention heads too.)
"""

from __future__ import annotations

import argparse
import time
import warnings

from evt.testing.models import compare, describe, program


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--count", type=int, default=400)
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--dynamic", action="store_true", help="torch.compile(dynamic=True)")
    args = p.parse_args()
    warnings.simplefilter("ignore")
    start, bad, regions = time.time(), 0, 0
    for seed in range(args.seed, args.seed + args.count):
        text = describe(program(seed)[0])
        try:
            errs, n = compare(seed, dynamic=True if args.dynamic else None)
        except Exception as e:  # noqa: BLE001 - a crash is a finding: report it and go on
            bad += 1
            print(f"seed {seed}: raised {type(e).__name__}: {str(e)[:300]}\n  {text}")
            continue
        regions += n
        worst = max(errs, key=errs.__getitem__)
        if errs[worst] > args.tol:
            bad += 1
            print(f"seed {seed}: {worst} off by {errs[worst]:.3g} ({n} regions)\n  {text}")
    print(f"{args.count} seeds, {bad} failed, {regions} regions formed, {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
