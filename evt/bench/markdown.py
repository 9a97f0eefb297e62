"""`report.md`: the results file as markdown tables (every number comes from the records)."""

from __future__ import annotations

from evt.bench import report as R

MIB = 1 / 2**20


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def heading(data: dict) -> str:
    env, cfg = data["env"], data["config"]
    gpu = (env.get("gpu") or {}).get("name") or cfg["device"]
    smi = (env.get("gpu") or {}).get("nvidia_smi") or {}
    git = env.get("git") or {}
    facts = [
        f"torch {env.get('torch')}",
        f"CUDA {env.get('cuda')}",
        f"triton {env.get('triton')}",
        f"CUTLASS {env.get('cutlass')}",
        f"driver {smi.get('driver_version', '?')}",
        f"SM clock {smi.get('clocks.sm', '?')} (max {smi.get('clocks.max.sm', '?')})",
        f"evt {env.get('evt')} @ {(git.get('commit') or 'unknown')[:12]}"
        + (" (with local changes)" if git.get("dirty") else ""),
    ]
    return (
        f"# evt benchmark: {gpu}, {cfg['dtype']}\n\n{env.get('time')} · "
        + " · ".join(facts)
        + "\n\nTimes are medians after warm-up (see `benchmarks/README.md`); every result was "
        "checked against a float64 reference before it was timed. Speedup of A over B = "
        "time(B) / time(A); > 1 means A is faster."
    )


def summary_table(results: list[dict]) -> str:
    rows = []
    for b, row in R.summary(results):
        (op, n_op), (st, n_st), (sol, n_sol) = row["op"], row["step"], row["vs_mm"]
        rows.append(
            [
                b,
                f"{R.fmt(op, 2)} ({n_op})",
                f"{R.fmt(st, 2)} ({n_st})",
                f"{R.fmt(sol, 2)} ({n_sol})",
            ]
        )
    head = [
        "baseline",
        "evt speedup over it, GEMM suite (cases)",
        "evt speedup over it, training steps (cases)",
        "its fraction of bare cuBLAS mm (cases)",
    ]
    return "## Summary (geometric means)\n\n" + table(head, rows)


def per_case(
    results: list[dict],
    kind: str,
    field: str,
    title: str,
    digits: int = 1,
    scale: float = 1.0,
    ratios: bool = False,
) -> str:
    cases, names = R.cases_in(results, kind), R.baselines_in(results, kind)
    if not any(r.get(field) is not None for r in results if r["kind"] == kind):
        return ""
    idx = R.index(results)
    others = [b for b in names if b != "evt"] if ratios and "evt" in names else []
    speed = {b: R.speedup(results, "evt", b, kind) for b in others}
    head = ["case", "size"] + names + [f"evt vs {b}" for b in others]
    rows = []
    for c in cases:
        row = [c["case"], R.dims(c)]
        row += [R.cell(idx.get((c["case"], b)), field, digits, scale) for b in names]
        row += [
            R.fmt(speed[b].get(c["case"]), 2) + ("×" if c["case"] in speed[b] else "")
            for b in others
        ]
        rows.append(row)
    return f"## {title}\n\n" + table(head, rows)


def compile_table(results: list[dict]) -> str:
    rows = [r for r in results if r.get("compile_cold_s") is not None]
    if not rows:
        return ""
    body = [
        [r["case"], r["baseline"], R.fmt(r["compile_cold_s"]), R.fmt(r["compile_warm_s"])]
        for r in rows
    ]
    return (
        "## Compile time (s): first call of a fresh compile, with empty (cold) and filled "
        "(warm) Inductor caches\n\n" + table(["case", "baseline", "cold", "warm"], body)
    )


def evt_notes(results: list[dict]) -> str:
    rows = []
    for r in results:
        n = r.get("notes") or {}
        if r["baseline"] != "evt" or "regions" not in n:
            continue
        fb = "; ".join(f"{k}: {v}" for k, v in (n.get("fallbacks") or {}).items())
        rows.append(
            [
                r["case"],
                str(len(n["regions"])),
                str(n.get("unfused_gemms")),
                str(n.get("kernels_built")),
                str(n.get("kernel_launches")),
                "; ".join(n["regions"])[:300],
                fb[:300],
            ]
        )
    head = ["case", "regions", "unfused GEMMs", "kernels built", "kernel launches", "fused"]
    head += ["fallbacks"]
    return "## What evt did\n\n" + table(head, rows) if rows else ""


def problem_list(results: list[dict]) -> str:
    items = [
        f"- **{r['case']} / {r['baseline']}**: {r['status']}: "
        f"{' '.join((r.get('error') or '').split())[:400]}"
        for r in R.problems(results)
    ]
    return ("## Not timed (full text in results.json)\n\n" + "\n".join(items)) if items else ""


def render(data: dict) -> str:
    res = data["results"]
    parts = [
        heading(data),
        summary_table(res),
        per_case(
            res, "op", "tflops", "GEMM+epilogue suite: TFLOP/s, and evt's speedup", 1, 1, True
        ),
        per_case(res, "op", "gbps", "GEMM+epilogue suite: GB/s (inputs + outputs once)", 0),
        per_case(
            res, "step", "time_ms", "Training steps: ms per step, and evt's speedup", 2, 1, True
        ),
        per_case(res, "step", "peak_mem_bytes", "Training steps: peak memory (MiB)", 0, MIB),
        compile_table(res),
        evt_notes(res),
        problem_list(res),
    ]
    return "\n\n".join(p for p in parts if p) + "\n"
