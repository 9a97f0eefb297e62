"""`evt bench`: measure the GEMM+epilogue suite and training steps against every baseline.

    evt bench --quick                       the quick subset (< 3 min on one H100)
    evt bench                               everything, stage by stage (resumable)
    evt bench --resume --out DIR            continue a run: finished stages are skipped
    evt bench --part 1 --out DIR            one call's share of the full run (see plan.PARTS)
    evt bench --device cpu --small --baselines eager,evt     a CPU smoke run (tests)

`add_parser(subparsers)` registers the subcommand; `main(args)` runs it; `python -m evt.bench` and
`benchmarks/run.py` take the same options.
"""

from __future__ import annotations

import argparse
import functools
import time
from pathlib import Path

import torch

from evt.bench import charts, env, isolate, markdown, plan, provenance, runner
from evt.bench.baselines import BASELINES, STAGES
from evt.bench.store import ResumeError, Store
from evt.bench.workload import DTYPES

REPORT_RESERVE_S = 15.0  # of --time-budget, kept for writing the reports at the end
MIN_STAGE_S = 10.0  # a stage is not started with less time than this left


def configure(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--quick", action="store_true", help="the quick subset (see evt.bench.plan)")
    p.add_argument("--out", help="results folder (default: benchmarks/results/<date>-<gpu>)")
    p.add_argument("--only", help="comma-separated globs over case, pattern or shape names")
    p.add_argument("--baselines", help=f"comma-separated, from: {', '.join(BASELINES)}")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--device", default="cuda")
    p.add_argument("--resume", action="store_true", help="continue the results in --out")
    p.add_argument("--retry", action="store_true", help="with --resume: measure n/a ones again")
    p.add_argument("--redo", action="store_true",
                   help="with --resume: measure the selected items again, ok ones too (narrow "
                        "them with --only and --baselines; e.g. the report's cases timed as run "
                        "slower than their host and GPU times explain)")  # fmt: skip
    p.add_argument("--small", action="store_true", help="tiny shapes (CPU smoke runs, tests)")
    p.add_argument("--list", action="store_true", help="print the plan and exit")
    p.add_argument("--stage", choices=STAGES, help="run only this stage, in this process")
    p.add_argument("--stage-ends", type=float, help=argparse.SUPPRESS)  # a child's: when (epoch s)
    p.add_argument(
        "--isolate",
        choices=("process", "none"),
        help="a child process per stage (default on CUDA) or all in this process",
    )
    p.add_argument(
        "--stage-timeout",
        type=float,
        default=900.0,
        help="seconds a stage's process may run (default 900)",
    )
    p.add_argument(
        "--time-budget",
        type=float,
        help="seconds this whole invocation may take; stages share what is left, in order "
        f"(default: none; {plan.QUICK_TIME_BUDGET_S:g} with --quick, "
        f"{plan.PART_TIME_BUDGET_S:g} with --part)",
    )
    p.add_argument(
        "--item-timeout",
        type=float,
        help="seconds one measurement (compile, check, timing) may take before it is killed and "
        f"recorded 'timeout' (child processes only; default none, {plan.PART_ITEM_TIMEOUT_S:g} "
        "with --part)",
    )
    p.add_argument(
        "--step-item-timeout",
        type=float,
        help="the same for a training step's measurement (default: --item-timeout; "
        f"{plan.PART_STEP_ITEM_TIMEOUT_S:g} with --part)",
    )
    p.add_argument(
        "--part",
        choices=sorted(plan.PARTS),
        help="one device call's share of the full run: "
        + "; ".join(f"{k}: {v.doc}" for k, v in plan.PARTS.items())
        + " (implies --resume; see scripts/bench_full.sh)",
    )
    return p


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register `bench` on an argparse subparsers object (`evt.cli` calls this)."""
    p = subparsers.add_parser("bench", help="benchmark evt against eager, cuBLAS(Lt), Inductor")
    configure(p).set_defaults(fn=main)
    return p


def child_argv(args: argparse.Namespace, out: Path, stage: str) -> list[str]:
    """The options of a child process that runs `stage` of this run, in-process."""
    values = {"--out": str(out), "--dtype": args.dtype, "--device": args.device, "--stage": stage}
    values.update({"--isolate": "none", "--only": args.only, "--baselines": args.baselines})
    argv = [x for opt, value in values.items() if value for x in (opt, value)]
    flags = (("--resume", True), ("--quick", args.quick), ("--small", args.small))
    return argv + [opt for opt, on in flags if on]


def apply_part(args: argparse.Namespace) -> None:
    """--part and --quick: their baselines and limits, where the options do not say."""
    if args.part:
        args.baselines = args.baselines or ",".join(plan.PARTS[args.part].baselines)
        args.resume = True
        args.item_timeout = args.item_timeout or plan.PART_ITEM_TIMEOUT_S
        args.step_item_timeout = args.step_item_timeout or plan.PART_STEP_ITEM_TIMEOUT_S
        args.time_budget = args.time_budget or plan.PART_TIME_BUDGET_S
    if args.quick:
        args.time_budget = args.time_budget or plan.QUICK_TIME_BUDGET_S


def stage_limit(args, start: float) -> float | None:
    """Seconds the next stage may run: --stage-timeout, within what --time-budget has left."""
    if args.time_budget is None:
        return args.stage_timeout
    left = start + args.time_budget - REPORT_RESERVE_S - time.monotonic()
    return min(args.stage_timeout, left) if left >= MIN_STAGE_S else None


def run_stages(args, the_plan: plan.Plan, store: Store, out: Path, start: float) -> None:
    dtype = DTYPES[args.dtype]
    if args.stage:  # a child process: this one stage, watched by its parent
        beat = functools.partial(isolate.beat, out, args.stage)
        ends = None if args.stage_ends is None else time.monotonic() + args.stage_ends - time.time()
        runner.run_stage(the_plan, args.stage, store, args.device, dtype, print, beat, ends)
        return
    inline = (args.isolate or ("process" if args.device.startswith("cuda") else "none")) == "none"
    for stage in the_plan.stages():
        todo = plan.pending(the_plan, store.results, stage)
        if not todo:
            print(f"[{stage}] nothing left to measure: skipped")
            continue
        limit = stage_limit(args, start)
        if limit is None:
            why = f"--time-budget {args.time_budget:g} s was spent before stage {stage} started"
            store.mark(todo, "skipped", why, skip="time")
            print(f"[{stage}] {len(todo)} not measured (stage time limit): {why}")
            continue
        t0 = time.monotonic()
        store.stage_run(stage, started=env.now(), limit_s=round(limit), item_s=args.item_timeout,
                        step_item_s=args.step_item_timeout)  # fmt: skip
        print(f"[{stage}] {len(todo)} measurements, {limit:.0f} s at most")
        if inline:
            runner.run_stage(the_plan, stage, store, args.device, dtype, deadline=t0 + limit)
        else:
            argv = child_argv(args, out, stage)
            isolate.run_stage(stage, argv, limit, args.item_timeout, the_plan, store,
                              step_item_s=args.step_item_timeout)  # fmt: skip
        left = len(plan.pending(the_plan, store.results, stage))
        wall = round(time.monotonic() - t0, 1)
        store.stage_run(stage, finished=env.now(), wall_s=wall, left=left)
        write_reports(out, store)  # a call cut off later still brings these back


def write_reports(out: Path, store: Store) -> None:
    (out / "report.md").write_text(markdown.render(store.data))
    written, why = charts.write(out, store.data)
    print(f"wrote {out / 'results.json'}, {out / 'report.md'}" + "".join(f", {p}" for p in written))
    if why:
        print(why)


def main(args: argparse.Namespace) -> int:
    start = time.monotonic()
    apply_part(args)
    try:
        the_plan = plan.make_plan(args.quick, args.only, args.baselines, args.device, args.small)
    except ValueError as e:
        print(f"evt bench: {e}")
        return 2
    if args.list:
        print(plan.describe(the_plan))
        return 0
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("evt bench: no CUDA device here; for a CPU smoke run: --device cpu --small")
        return 2
    out = Path(args.out or env.default_out(args.device))
    config = {
        "dtype": args.dtype,
        "device": args.device,
        "gpu": env.gpu_slug(args.device),
        "small": args.small,
    }
    try:
        store = Store.open(out, config, resume=args.resume)
    except ResumeError as e:
        print(f"evt bench: {e}")
        return 2
    if not args.stage:
        store.add_session(provenance.session(args))
    if args.retry:
        n = store.requeue({i.key for i in the_plan.items})
        print(f"--retry: {n} n/a, timeout and fallback results queued again")
    if args.redo:
        n = store.requeue({i.key for i in the_plan.items}, redo=True)
        print(f"--redo: {n} results queued again")
    run_stages(args, the_plan, store, out, start)
    if not args.stage:
        write_reports(out, store)
    return 0


def run(argv: list[str] | None = None) -> int:
    """Parse `argv` as `evt bench` would and run."""
    p = configure(argparse.ArgumentParser(prog="evt bench", description=__doc__.split("\n")[0]))
    return main(p.parse_args(argv))
