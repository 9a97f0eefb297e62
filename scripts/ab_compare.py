"""Compare two variants of evt timed in alternating `evt bench` runs (A, B, A, B, ...): each
case's evt ÷ bare-GEMM ratio (the mm baseline timed in the same run, so a clock that drifts
between runs falls on both), per run and as the geomean over each variant's runs, and the ratio
of A's to B's. Under CUDA graphs by default (`--as-run`: the times as called).

    python scripts/ab_compare.py --a out/ab/on1,out/ab/on2 --b out/ab/off1,out/ab/off2 \\
        [--labels PDL,plain] [--as-run]

Prints a markdown table (benchmarks/results/2026-11-28-H200-session39/README.md: the finishing
kernel's programmatic dependent launch against the plain one).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evt.bench import report  # noqa: E402


def ratios(folder: Path, key: str) -> dict[str, float]:
    """case -> mm time ÷ evt time of one run's results.json (cases both measured)."""
    results = json.loads((folder / "results.json").read_text())["results"]
    return report.speedup(results, "evt", "mm", field=key)


def table(a: list[Path], b: list[Path], labels: tuple[str, str], key: str) -> str:
    runs_a, runs_b = [ratios(f, key) for f in a], [ratios(f, key) for f in b]
    cases = sorted(set.intersection(*(set(r) for r in runs_a + runs_b)))
    if not cases:
        raise SystemExit("ab_compare: no case has evt and mm in every run")
    la, lb = labels
    head = [f"{la} {i + 1}" for i in range(len(a))] + [f"{lb} {i + 1}" for i in range(len(b))]
    lines = [
        "| case | " + " | ".join(head) + f" | {la} (geomean) | {lb} (geomean) | {la} ÷ {lb} |",
        "|---" * (len(head) + 4) + "|",
    ]
    gains = []
    for case in cases:
        xa, xb = [r[case] for r in runs_a], [r[case] for r in runs_b]
        ga, gb = report.geomean(xa), report.geomean(xb)
        gains.append(ga / gb)
        cells = " | ".join(f"{x:.3f}" for x in xa + xb)
        lines.append(f"| {case} | {cells} | {ga:.3f} | {gb:.3f} | {ga / gb:.3f} |")
    lines.append(f"\n{la} ÷ {lb}, geomean over {len(cases)} cases: {report.geomean(gains):.3f} "
                 f"(evt ÷ the bare GEMM, {'under CUDA graphs' if key == 'graph_ms' else 'as run'})")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", required=True, help="comma-separated result folders of variant A")
    p.add_argument("--b", required=True, help="comma-separated result folders of variant B")
    p.add_argument("--labels", default="A,B", help="the two variants' names (default A,B)")
    p.add_argument("--as-run", action="store_true", help="times as called, not CUDA graphs")
    args = p.parse_args(argv)
    a = [Path(f) for f in args.a.split(",") if f]
    b = [Path(f) for f in args.b.split(",") if f]
    labels = tuple(args.labels.split(",", 1)) if "," in args.labels else ("A", "B")
    print(table(a, b, labels, "time_ms" if args.as_run else "graph_ms"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
