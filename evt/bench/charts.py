"""PNG charts of a results file (matplotlib, imported only here; skipped when missing).

ops.png    GEMM suite: each baseline's TFLOP/s as a fraction of the bare cuBLAS GEMM, per case
           (speedup over eager when the bare GEMM was not measured)
steps.png  training steps: each baseline's speedup over eager, per step, as run (host included)
steps_graphs.png  the same replayed from CUDA graphs (the GPU's time alone), where measured
"""

from __future__ import annotations

from pathlib import Path

from evt.bench import report as R


def series(
    results: list[dict], kind: str, against: str, field: str = "time_ms"
) -> tuple[list[str], dict[str, list]]:
    """Case names and, per baseline, speedup over `against` per case (None where missing), by
    `field` (`time_ms` as run, `graph_ms` under CUDA graphs)."""
    cases = [c["case"] for c in R.cases_in(results, kind)]
    out = {}
    for b in R.baselines_in(results, kind):
        s = R.speedup(results, b, against, kind, field)
        if s and b != against:
            out[b] = [s.get(c) for c in cases]
    return cases, out


def _bars(plt, cases: list[str], values: dict[str, list], ylabel: str, title: str, path: Path):
    fig, ax = plt.subplots(figsize=(min(36, max(8, 2 + 0.45 * len(cases))), 5))
    width = 0.8 / max(1, len(values))
    for n, (name, ys) in enumerate(values.items()):
        xs = [i + n * width for i, y in enumerate(ys) if y is not None]
        ax.bar(xs, [y for y in ys if y is not None], width, label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(cases))], cases, rotation=60, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write(out: Path, data: dict) -> tuple[list[Path], str | None]:
    """Write the charts; returns (paths written, why charts were skipped or None)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return [], f"matplotlib is not installed ({e}): charts skipped"
    res, gpu = data["results"], ((data["env"].get("gpu") or {}).get("name") or "cpu")
    written = []
    against = "mm" if any(r["baseline"] == "mm" and r["status"] == "ok" for r in res) else "eager"
    cases, values = series(res, "op", against)
    if values:
        path = out / "ops.png"
        label = "TFLOP/s / bare cuBLAS GEMM" if against == "mm" else "speedup over eager"
        _bars(plt, cases, values, label, f"GEMM+epilogue suite, {gpu}", path)
        written.append(path)
    cases, values = series(res, "step", "eager")
    if values:
        path = out / "steps.png"
        _bars(plt, cases, values, "speedup over eager", f"training steps as run, {gpu}", path)
        written.append(path)
    cases, values = series(res, "step", "eager", "graph_ms")
    if values:
        path = out / "steps_graphs.png"
        title = f"training steps under CUDA graphs (GPU time), {gpu}"
        _bars(plt, cases, values, "speedup over eager", title, path)
        written.append(path)
    return written, None
