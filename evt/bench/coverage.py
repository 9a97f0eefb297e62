"""What a report covers: per baseline, how much of the suite was measured and what became of the
rest; each stage's runs with their time limits; how each baseline was configured. Nothing planned
goes missing silently: an item is measured, or it says why not."""

from __future__ import annotations

from evt.bench import report as R
from evt.bench.baselines import BASELINES

COLUMNS = ("ok", "wrong", "n/a", "timeout", "fallback")


def coverage_table(results: list[dict], wanted: set, table) -> str:
    rows = []
    for b, counts in R.coverage(results, wanted):
        if not counts.get("planned") and len(counts) == 1:
            continue  # nothing planned here (cuBLASLt off CUDA)
        rest = sorted(k for k in counts if k != "planned" and k not in COLUMNS)
        cells = [str(counts.get(k, 0)) for k in COLUMNS]
        rows.append([b, str(counts["planned"])] + cells + [_other(counts, rest)])
    head = ["baseline", "planned (full suite)", *COLUMNS, "not measured / not run"]
    return (
        "## Coverage\n\nWhat became of every (case, baseline) the full suite plans on this "
        "device; `not run`: no session ran that baseline on it.\n\n" + table(head, rows)
    )


def _other(counts: dict, keys: list[str]) -> str:
    return ", ".join(f"{counts[k]} {k}" for k in keys) or "0"


def baselines_section(results: list[dict]) -> str:
    seen = {r["baseline"] for r in results}
    lines = [f"- **{b}**: {BASELINES[b].doc}" for b in BASELINES if b in seen]
    return "## Baselines\n\n" + "\n".join(lines) if lines else ""


def runs(entry: dict) -> list[dict]:
    """A stage's runs (files written before `runs` held one flat entry)."""
    return entry.get("runs") or ([entry] if entry else [])


def item_limits(run: dict) -> str:
    """A stage run's per-item limit, with the training steps' where it differs."""
    item_s, step_s = run.get("item_s"), run.get("step_item_s")
    steps = f" (steps {R.fmt(step_s, 0)})" if step_s and step_s != item_s else ""
    return R.fmt(item_s, 0) + steps


def stages_table(data: dict, table) -> str:
    rows = []
    for stage, entry in data.get("stages", {}).items():
        for run in runs(entry):
            rows.append(
                [
                    stage,
                    str(run.get("session", "?")),
                    str(run.get("started", "?")),
                    R.fmt(run.get("limit_s"), 0),
                    item_limits(run),
                    R.fmt(run.get("wall_s"), 0),
                    str(run.get("left", "?")),
                    f"{R.fmt(run.get('host_probe_us'), 1)} / {R.fmt(run.get('host_probe_end_us'), 1)}",
                ]
            )
    if not rows:
        return ""
    head = ["stage", "session", "started", "time limit (s)", "per-item limit (s)", "wall (s)"]
    return (
        "## Stages\n\nEach run of a stage: its share of the time (`--stage-timeout` within "
        "`--time-budget`), the per-item limit (`--item-timeout`), how many of its items "
        "were left unmeasured, and the host probe at its start and end (`measure.host_probe_us`: "
        "one small in-place add's host time per call in the stage's process; host times of "
        "runs whose probes differ are not comparable).\n\n"
        + table(head + ["left", "host probe (us): start / end"], rows)
    )


def prebuild_note(data: dict) -> str:
    """evt's parallel kernel builds before its stage, which its per-case compile times exclude."""
    done = [r for r in runs(data.get("stages", {}).get("evt", {})) if "prebuild_s" in r]
    if not done:
        return ""
    text = " and ".join(f"{r['prebuild_kernels']} kernels in {r['prebuild_s']:g} s" for r in done)
    return (
        f"evt's compile times exclude its kernel builds, done in parallel before its stage "
        f"({text}); `kernels built` below says which case needed one."
    )
