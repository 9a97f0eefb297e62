"""The differential fuzzer on an SM90 GPU: random epilogue DAGs (`evt.testing.fuzz`) built by nvcc
and run against the reference path at every shape of `evt.testing.compare.SHAPES`.

    python scripts/fuzz_gpu.py --count 100 --seed 0 --out fuzz-out
    python scripts/fuzz_gpu.py --nested-only --count 30 --seed 0 --out fuzz-nested

With --nested-only the run takes the first COUNT seeds from SEED on whose spec has a nested batch
(L = L1 x L2, `fuzz.NESTED` of all seeds), each run on the inputs of `evt.testing.inputs` (operands
as strided views of larger tensors, batch `inputs.NESTED_BATCH`).

Specs are generated from seeds seed..seed+count-1 and built in parallel (`build.prefetch`, one
build per distinct signature, `EVT_COMPILE_JOBS` at a time). Every case is logged, one JSON line
per seed in OUT/log.jsonl (seed, nodes, status, failures). A failing spec is minimized (while it
still fails the same way on the same shape and inputs) and written as OUT/regressions/<kind>_seed<N>.json;
copy those to tests/fuzz_regressions/, where tests/test_gpu_fuzz.py replays them. The run stops
starting new seeds (and minimizing) after --budget seconds, says which seeds it left, and drops
the builds still queued, so one device call of 600 s fits the default budget.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

from evt import ir
from evt.runtime import build, dispatch
from evt.runtime.canonical import canonical
from evt.testing import fuzz
from evt.testing.compare import SHAPES, Failure, run_case
from evt.testing.minimize import minimize


def prefetch_all(specs: list[ir.KernelSpec]) -> None:
    seen: set[str] = set()
    for s in specs:
        sig = canonical(s).signature()
        if sig not in seen:
            seen.add(sig)
            build.prefetch(s)


def pick(first: int, count: int, nested_only: bool) -> dict[int, ir.KernelSpec]:
    """Seed -> spec for `count` seeds from `first` on (with `nested_only`, the first `count`
    whose spec has a nested batch)."""
    out: dict[int, ir.KernelSpec] = {}
    seed = first
    while len(out) < count:
        spec = fuzz.generate(seed)
        if spec.gemm.nested or not nested_only:
            out[seed] = spec
        seed += 1
    return out


def first_failure(spec: ir.KernelSpec, seed: int) -> tuple[tuple, Failure] | None:
    for shape in SHAPES:
        failure = run_case(spec, shape, seed)
        if failure is not None:
            return shape, failure
    return None


def shrink(spec: ir.KernelSpec, seed: int, shape, failure: Failure, budget: float, jobs: int):
    def fails(candidate: ir.KernelSpec) -> bool:
        found = run_case(candidate, shape, seed)
        return found is not None and found.kind == failure.kind

    return minimize(spec, fails, prepare=lambda cs: prefetch_all(cs[:jobs]), budget_s=budget)


def failure_key(failure: Failure) -> str:
    """Failures with the same key are one bug: a mismatch is keyed by nothing (each is minimized,
    up to --max-minimized), any other kind by its error lines without names, paths and numbers."""
    if failure.kind == "mismatch":
        return ""
    lines = [ln for ln in failure.message.splitlines() if "error" in ln.lower()] or [
        failure.message
    ]
    return failure.kind + ":" + re.sub(r"k[0-9a-f]{16}|\S*/\S*|\d+", "#", " ".join(lines[:2]))


def write_regression(out: Path, seed: int, shape, failure: Failure, spec, small) -> Path:
    path = out / "regressions" / f"{failure.kind}_seed{seed}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"seed": seed, "shape": list(shape), "kind": failure.kind, "message": failure.message,
            "spec": ir.to_json(small), "original": ir.to_json(spec)}  # fmt: skip
    path.write_text(json.dumps(body, indent=1) + "\n")
    return path


def handle_failure(args, seed: int, spec, shape, failure: Failure, keys: dict, n: int) -> dict:
    """Minimize the first failure of each kind of bug (`failure_key`; up to --max-minimized in
    all) and write it as a regression; a repeat is only logged, naming its first seed."""
    key = failure_key(failure)
    first = keys.setdefault(key, seed) == seed if key else True
    out = {"shape": shape, "kind": failure.kind, "message": failure.message,
           "same_as": None if first else keys[key]}  # fmt: skip
    if first:
        small = spec
        budget = min(args.minimize_budget, args.budget - (time.monotonic() - args.start))
        if n < args.max_minimized and budget > 0:
            small = shrink(spec, seed, shape, failure, budget, args.jobs)
        path = write_regression(args.out, seed, shape, failure, spec, small)
        out |= {"minimized_nodes": len(small.nodes), "regression": str(path)}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--nested-only", action="store_true",
                   help="run COUNT seeds whose spec has a nested batch (L1 x L2), skipping others")  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("fuzz-out"))
    p.add_argument("--budget", type=float, default=420.0, help="seconds before no new seed starts")
    p.add_argument("--minimize-budget", type=float, default=120.0, help="seconds per failure")
    p.add_argument("--jobs", type=int, default=16, help="candidates built at once while minimizing")
    p.add_argument(
        "--max-minimized", type=int, default=6, help="minimize only among the first N failures"
    )
    args = p.parse_args(argv)
    start = args.start = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    specs = pick(args.seed, args.count, args.nested_only)
    seeds = list(specs)
    print(f"fuzz: seeds {seeds[0]}..{seeds[-1]}, {len({canonical(s).signature() for s in specs.values()})} "
          f"distinct kernels, shapes {SHAPES}", flush=True)  # fmt: skip
    prefetch_all(list(specs.values()))
    failed, done, keys = [], 0, {}
    with (args.out / "log.jsonl").open("a") as log:
        for seed in seeds:
            if time.monotonic() - start > args.budget:
                print(f"fuzz: budget spent; seeds {seed}..{seeds[-1]} not run", flush=True)
                break
            spec = specs[seed]
            entry: dict[str, object] = {"seed": seed, "nodes": len(spec.nodes)}
            found = first_failure(spec, seed)
            entry["status"] = "ok" if found is None else "fail"
            if found is not None:
                entry |= handle_failure(args, seed, spec, *found, keys, len(failed))
                failed.append(seed)
            log.write(json.dumps(entry) + "\n")
            log.flush()
            done += 1
            print(f"seed {seed}: {entry['status']} {entry.get('kind', '')} "
                  f"{entry.get('message', '')}".rstrip(), flush=True)  # fmt: skip
    print(
        f"fuzz: {done} seeds x {len(SHAPES)} shapes in {time.monotonic() - start:.0f} s, "
        f"{len(failed)} failed {failed}; fallbacks recorded: {len(dispatch.FALLBACKS)}"
    )
    build._pool().shutdown(wait=False, cancel_futures=True)  # builds of seeds not run
    build._pool.cache_clear()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
