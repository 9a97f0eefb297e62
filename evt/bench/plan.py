"""What a run will measure: (stage, case, baseline) items, and which of them are still to do.

`--quick` is a fixed subset meant to finish in under 3 minutes on one H100: GPT-2's FFN shape
with bias + tanh GELU (cuBLASLt has that epilogue), the training forward (GELU + saved
pre-activation) and GELU's backward in the dgrad GEMM, and the MLP training step, against
eager, cuBLAS, cuBLASLt, torch.compile and evt. `--only` keeps the cases whose name,
pattern/model or shape matches one of its comma-separated globs (`bias_gelu*`, `gpt2`, `step/*`).

Slow stages (max-autotune, Inductor's CUTLASS backend) measure breadth first: the first shape
of every pattern and every training step, then the second shapes, and so on, so a stage cut short
by its time limit still covers every pattern.

Resume: an item is done when the results hold a final record for it (`store.FINAL`); a "skipped"
record (not measured yet) is retried; `--retry` turns the plan's n/a, timeout and fallback
records back into skipped ones first (after a fix, or with a longer limit). A stage with nothing
left is skipped.

Parts (`--part N`, `scripts/bench_full.sh N`): the full run as calls of the device machine, each
under `PART_TIME_BUDGET_S` (a call may run 10 minutes), resuming the same results folder.
"""

from __future__ import annotations

import collections
import dataclasses
from dataclasses import dataclass
from fnmatch import fnmatch

from evt.bench import ops, steps
from evt.bench.baselines import BASELINES, STAGES
from evt.bench.store import FINAL
from evt.bench.workload import Case

QUICK_CASES = ("bias_gelu_tanh/gpt2", "bias_gelu_aux/gpt2", "dgrad_gelu/gpt2", "step/mlp")
QUICK_BASELINES = ("eager", "mm", "cublaslt", "compile", "evt")
QUICK_TIME_BUDGET_S = 170.0
BREADTH_FIRST = ("max-autotune", "inductor-cutlass", "evt-max-autotune")


@dataclass(frozen=True)
class Part:
    baselines: tuple[str, ...]
    doc: str


PART_TIME_BUDGET_S = 480.0  # of a 600 s call: ~40 s to install wheels, ~15 s to write reports
PART_ITEM_TIMEOUT_S = 240.0
# A training step's cold compile under a max-autotune baseline times every GEMM's choices:
# Inductor's max-autotune took 231 s on GPT-2's checkpointed step (session 34), evt's own ran
# past 240 s on GPT-2's step (session 35). Steps get this much with --part; the rest of a call
# (560 s) still fits the GEMM cases or another step.
PART_STEP_ITEM_TIMEOUT_S = 450.0
PARTS = {
    "1": Part(
        ("eager", "mm", "cublaslt", "sdpa", "evt", "compile", "in-turn", "max-autotune"),
        "eager, cuBLAS, cuBLASLt, SDPA, evt, torch.compile, evt and torch.compile in turn on the "
        "steps; max-autotune with the time left",
    ),
    "2": Part(("inductor-cutlass",), "Inductor's CUTLASS backend on its subset of cases"),
    "3": Part(("max-autotune",), "the rest of max-autotune (repeat while items are left)"),
    "4": Part(("evt-max-autotune",), "evt's own max-autotune (repeat while items are left)"),
    "5": Part(("in-turn-ops",), "evt and torch.compile in turn on the GEMM+epilogue cases "
              "(repeat while items are left)"),
}


@dataclass(frozen=True)
class Item:
    stage: str
    case: Case
    baseline: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.case.name, self.baseline)


@dataclass(frozen=True)
class Plan:
    cases: tuple[Case, ...]
    items: tuple[Item, ...]

    def stages(self) -> list[str]:
        return [s for s in STAGES if any(i.stage == s for i in self.items)]


def all_cases(small: bool = False) -> list[Case]:
    return ops.cases(small) + steps.cases(small)


def split(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def matches(case: Case, patterns: list[str]) -> bool:
    return any(fnmatch(s, p) for p in patterns for s in (case.name, case.group, case.shape))


def add_step_options(ap, batch_div: int = 8) -> None:
    """`--steps` and `--batch-div` of the scripts that capture training steps at a fraction of
    their batch (`step_cases(args.steps, args.batch_div)`)."""
    ap.add_argument("--steps", default="step/*", help="comma-separated globs over the steps")
    ap.add_argument("--batch-div", type=int, default=batch_div, help="the batch is divided by this")


def step_cases(patterns: str, batch_div: int = 1) -> list[Case]:
    """The training-step cases matching `patterns` (comma-separated globs), each with its batch
    (the first dimension) divided by `batch_div`: for captures on the meta device at a fraction
    of the step's size (scripts/step_saved.py, scripts/step_launches.py)."""
    return [dataclasses.replace(c, dims=(max(1, c.dims[0] // batch_div), *c.dims[1:]))
            for c in steps.cases(False) if matches(c, split(patterns))]  # fmt: skip


def make_plan(
    quick: bool = False,
    only: str | None = None,
    baselines: str | None = None,
    device: str = "cuda",
    small: bool = False,
) -> Plan:
    cases = all_cases(small)
    if quick:
        cases = [c for c in cases if c.name in QUICK_CASES]
    if only:
        cases = [c for c in cases if matches(c, split(only))]
    names = split(baselines) or list(QUICK_BASELINES if quick else
                                     [n for n, b in BASELINES.items() if not b.opt_in])  # fmt: skip
    unknown = [n for n in names if n not in BASELINES]
    if unknown:
        raise ValueError(f"unknown baseline(s) {unknown}; choose from {', '.join(BASELINES)}")
    chosen = [BASELINES[n] for n in BASELINES if n in names]
    items = [
        Item(stage, case, b.name)
        for stage in STAGES
        for case in (breadth_first(cases) if stage in BREADTH_FIRST else cases)
        for b in chosen
        if b.stage == stage and b.applies(case, device)
    ]
    return Plan(tuple(cases), tuple(items))


def breadth_first(cases: list[Case]) -> list[Case]:
    """The first case of every group (pattern or step), then the second of each, and so on."""
    seen: collections.Counter = collections.Counter()
    rank = {}
    for c in cases:
        rank[c.name], seen[c.group] = seen[c.group], seen[c.group] + 1
    return sorted(cases, key=lambda c: rank[c.name])


def done_keys(results: list[dict]) -> set[tuple[str, str]]:
    return {(r["case"], r["baseline"]) for r in results if r.get("status") in FINAL}


def pending(plan: Plan, results: list[dict], stage: str | None = None) -> list[Item]:
    """The plan's items without a final result, in run order (optionally of one stage)."""
    done = done_keys(results)
    return [i for i in plan.items if (stage is None or i.stage == stage) and i.key not in done]


def describe(plan: Plan) -> str:
    """A readable listing of the plan, for `--list`."""
    lines = []
    for stage in plan.stages():
        items = [i for i in plan.items if i.stage == stage]
        lines.append(f"stage {stage}: {len(items)} measurements")
        for case in dict.fromkeys(i.case for i in items):
            names = [i.baseline for i in items if i.case == case]
            dims = case.shape if case.kind == "step" else "x".join(map(str, case.dims))
            lines.append(f"  {case.name:28} {dims:22} {', '.join(names)}")
    return "\n".join(lines)
