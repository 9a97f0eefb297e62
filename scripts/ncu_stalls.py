"""Sum Nsight Compute's warp-stall samples per SASS opcode: where a kernel's warps wait, and on
what. The input is ncu's per-instruction export of a report taken with `--section
SourceCounters` (scripts/ncu_case.py runs one suite case for it):

    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > REPORT_sass.csv
    python scripts/ncu_stalls.py REPORT_sass.csv [--top 12]

Prints the total samples, the stall reasons over the whole kernel, the samples and executed
instructions per opcode, and for each of the top stall reasons the opcodes it was sampled on
(session 15: the exact GELU's epilogue FFMA/FMUL "selected" and "dispatch stall" in equal parts,
`benchmarks/results/2026-11-23-H100-session15/ncu/stalls_by_opcode.txt`).
"""

from __future__ import annotations

import argparse
import collections
import csv
import re

OPCODE = re.compile(r"(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]*)?")  # after the predicate


def number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def read(path: str) -> tuple[list[str], list[dict[str, str]]]:
    """The export's column names and rows (its first line names the kernel)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = next(i for i, r in enumerate(rows) if "Source" in r and "Address" in r)
    names = rows[header]
    return names, [dict(zip(names, r)) for r in rows[header + 1:] if len(r) == len(names)]


def opcode(source: str) -> str:
    m = OPCODE.match(source.strip())
    return m.group(1) + (m.group(2) or "") if m else source.strip()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=12)
    a = p.parse_args()
    names, rows = read(a.csv)
    reasons = [n for n in names if n.startswith("stall_") and "Not Issued" not in n]
    total = collections.Counter()
    samples, executed = collections.Counter(), collections.Counter()
    by_reason = {r: collections.Counter() for r in reasons}
    for row in rows:
        op = opcode(row["Source"])
        samples[op] += number(row.get("Warp Stall Sampling (All Samples)", "0"))
        executed[op] += number(row.get("Instructions Executed", "0"))
        for r in reasons:
            total[r] += number(row[r])
            by_reason[r][op] += number(row[r])

    def show(counter: collections.Counter) -> str:
        return ", ".join(f"{k} {int(v)}" for k, v in counter.most_common(a.top) if v)

    print(f"samples: {int(sum(samples.values()))}, warp instructions executed: "
          f"{int(sum(executed.values()))}")  # fmt: skip
    print(f"stall reasons: {show(total)}")
    print(f"samples per opcode: {show(samples)}")
    print(f"executed per opcode: {show(executed)}")
    for r, _ in total.most_common(6):
        print(f"{r}: {show(by_reason[r])}")


if __name__ == "__main__":
    main()
