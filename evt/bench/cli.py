"""`evt bench`: measure the GEMM+epilogue suite and training steps against every baseline.

    evt bench --quick                       the quick subset (< 3 min on one H100)
    evt bench                               everything, stage by stage (resumable)
    evt bench --resume --out DIR            continue a run: finished stages are skipped
    evt bench --device cpu --small --baselines eager,evt     a CPU smoke run (tests)

`add_parser(subparsers)` registers the subcommand; `main(args)` runs it; `python -m evt.bench` and
`benchmarks/run.py` take the same options.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from evt.bench import charts, env, isolate, markdown, plan, runner
from evt.bench.baselines import BASELINES, STAGES
from evt.bench.store import ResumeError, Store
from evt.bench.workload import DTYPES


def configure(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--quick", action="store_true", help="the quick subset (see evt.bench.plan)")
    p.add_argument("--out", help="results folder (default: benchmarks/results/<date>-<gpu>)")
    p.add_argument("--only", help="comma-separated globs over case, pattern or shape names")
    p.add_argument("--baselines", help=f"comma-separated, from: {', '.join(BASELINES)}")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--device", default="cuda")
    p.add_argument("--resume", action="store_true", help="continue the results in --out")
    p.add_argument("--retry", action="store_true", help="with --resume: measure n/a ones again")
    p.add_argument("--small", action="store_true", help="tiny shapes (CPU smoke runs, tests)")
    p.add_argument("--list", action="store_true", help="print the plan and exit")
    p.add_argument("--stage", choices=STAGES, help="run only this stage, in this process")
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


def run_stages(args, the_plan: plan.Plan, store: Store, out: Path) -> None:
    isolated = args.isolate or ("process" if args.device.startswith("cuda") else "none")
    inline = bool(args.stage) or isolated == "none"
    for stage in [args.stage] if args.stage else the_plan.stages():
        todo = plan.pending(the_plan, store.results, stage)
        if not todo:
            print(f"[{stage}] nothing left to measure: skipped")
            continue
        t0 = time.time()
        store.mark_stage(stage, started=env.now())
        if inline:
            print(f"[{stage}] {len(todo)} measurements")
            runner.run_stage(the_plan, stage, store, args.device, DTYPES[args.dtype])
        else:
            argv = child_argv(args, out, stage)
            isolate.run_stage(stage, argv, args.stage_timeout, the_plan, store)
        left = len(plan.pending(the_plan, store.results, stage))
        store.mark_stage(stage, finished=env.now(), wall_s=round(time.time() - t0, 1), left=left)


def write_reports(out: Path, store: Store) -> None:
    (out / "report.md").write_text(markdown.render(store.data))
    written, why = charts.write(out, store.data)
    print(f"wrote {out / 'results.json'}, {out / 'report.md'}" + "".join(f", {p}" for p in written))
    if why:
        print(why)


def main(args: argparse.Namespace) -> int:
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
        store.add_session()
    if args.retry:
        print(f"--retry: {store.requeue({i.key for i in the_plan.items})} n/a results queued again")
    run_stages(args, the_plan, store, out)
    if not args.stage:
        write_reports(out, store)
    return 0


def run(argv: list[str] | None = None) -> int:
    """Parse `argv` as `evt bench` would and run."""
    p = configure(argparse.ArgumentParser(prog="evt bench", description=__doc__.split("\n")[0]))
    return main(p.parse_args(argv))
