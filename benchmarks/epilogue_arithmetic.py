"""Epilogues of growing arithmetic after one GEMM: evt's fused kernel against torch.compile's
unfused path (cuBLAS and Inductor's kernel), beside what the default mode's profitability check
(`evt.codegen.profit`) predicts for each.

Each case is y = f((x @ w.T + b).float()).to(bf16) with bf16 x [M, K], w [N, K], b [N], and f
one of `EPILOGUES`: from a ReLU to the tanh GELU written out in float32 (libm's tanhf in ~25
nodes) and chains of tanh; the `RESIDUAL` ones add a bf16 r [M, N] read in the epilogue. Timed, each under CUDA graphs, median of rotating input sets
(`evt.bench.measure.time_ms` of a `graph_replay`), the three in turn `--rounds` times:
- `fused`: evt with `EVT_PROFIT=0` (the region fused whatever the check says), at the default
  mode's tile config;
- `unfused`: `torch.compile` (Inductor: cuBLAS's addmm, then one Triton kernel for f);
- `evt`: evt in its default mode (the check on): the fused kernel or the unfused path.
`predicted` is the check's (fused, unfused) microseconds (`RegionReport.predicted`); `decision`
whether it fused; `config` the fused kernel's tile config. The check is right where it fuses exactly the cases whose fused kernel is
faster (within its margin).

    python benchmarks/epilogue_arithmetic.py [--shapes 8192x4096x1024,...] [--only 'tanh*']
        [--json out.json] [--rounds 7]   (the three ways in turn, medians kept)
    python benchmarks/epilogue_arithmetic.py --prebuild   # no GPU: build the kernels (nvcc)
    python benchmarks/epilogue_arithmetic.py --score      # no GPU: the check against the
                                                          # committed runs' measurements
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import statistics
import sys
import warnings
from pathlib import Path
from unittest import mock

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _horner(u: torch.Tensor, degree: int) -> torch.Tensor:
    """A polynomial of `degree` in u by Horner's rule: degree multiplies and adds."""
    y = u * 0.01 + 0.5
    for i in range(degree - 1):
        y = y * u + (0.25 - 0.01 * i)
    return y


def _gelu_written(u: torch.Tensor) -> torch.Tensor:  # HF's gelu_new, in float32 here
    return 0.5 * u * (1.0 + torch.tanh(0.7978845608028654 * (u + 0.044715 * torch.pow(u, 3.0))))


EPILOGUES = {
    "relu": torch.relu,
    "gelu": F.gelu,  # evt's exact-GELU functor
    "silu": F.silu,
    "poly8": lambda u: _horner(u, 8),
    "poly32": lambda u: _horner(u, 32),
    "tanh": torch.tanh,  # libm's tanhf
    "softplus_written": lambda u: torch.log(1.0 + torch.exp(u)),
    "gelu_written": _gelu_written,
    "tanh3": lambda u: torch.tanh(torch.tanh(torch.tanh(u))),
    "mish_written": lambda u: u * torch.tanh(torch.log(1.0 + torch.exp(u))),
    # with a residual r [M, N] loaded in the epilogue: memory the arithmetic can overlap
    "tanh_residual": lambda u, r: torch.tanh(u) + r.float(),
    "gelu_written_residual": lambda u, r: _gelu_written(u) + r.float(),
    "poly32_residual": lambda u, r: _horner(u, 32) + r.float(),
}
RESIDUAL = ("tanh_residual", "gelu_written_residual", "poly32_residual")
SHAPES = ("8192x4096x256", "8192x4096x1024", "8192x4096x4096")


def case_fn(name: str):
    f = EPILOGUES[name]

    def fn(x, w, b, r):
        u = torch.addmm(b, x, w.t()).float()
        return (f(u, r) if name in RESIDUAL else f(u)).to(torch.bfloat16)

    return fn


def inputs(shape: str, device: str, sets: int = 1) -> list[tuple]:
    m, n, k = map(int, shape.split("x"))
    g = torch.Generator(device="cpu").manual_seed(0)

    def one():
        x = torch.randn(m, k, generator=g).to(device, torch.bfloat16)
        w = (torch.randn(n, k, generator=g) / k**0.5).to(device, torch.bfloat16)
        b = torch.randn(n, generator=g).to(device, torch.bfloat16)
        return x, w, b, torch.randn(m, n, generator=g).to(device, torch.bfloat16)

    return [one() for _ in range(sets)]


def compiled(fn, profit: bool, example: tuple):
    """`fn` compiled by evt, with its graph's region reports (`evt.explain.recording`)."""
    from evt.explain import recording
    from evt.runtime import dispatch

    os.environ["EVT_PROFIT"] = "1" if profit else "0"
    torch._dynamo.reset()
    # a kernel's tile config is chosen at the first shape a process runs it at
    # (`dispatch.config_for`): each case picks its own, as in a fresh process
    dispatch.reset()
    reports: list = []
    with recording(reports):
        c = torch.compile(fn, backend="evt")
        c(*example)
    return c, [r for g in reports for r in g.regions]


def prebuild(names: list[str], shapes: list[str]) -> None:
    """Build every case's fused kernel here (meta capture, the default mode's configs)."""
    import evt
    from evt.runtime import dispatch

    os.environ["EVT_PROFIT"] = "0"  # the fused kernels, whatever the check would say
    futures = []
    for shape in shapes:
        for name in names:
            dispatch.reset()
            with warnings.catch_warnings(), dispatch.reference_only():
                warnings.simplefilter("ignore")
                report = evt.explain(case_fn(name), *inputs(shape, "meta")[0])
            futures += [dispatch.build_for(spec, problem) for spec, problem in report.kernels()]
    for f in futures:
        if f is not None:
            print(f.exception() or "built", flush=True)


def judged(name: str, shape: str):
    """The check's (spec, problem, saved bytes) for a case, captured on "meta" (no GPU): what
    `evt.pipeline` handed `profit.predict` (`RegionReport.judged_on`; the check off, so that
    the region is lowered and reported whatever it predicts)."""
    import evt
    from evt.runtime import dispatch

    dispatch.reset()
    with warnings.catch_warnings(), dispatch.reference_only(), mock.patch.dict(os.environ, EVT_PROFIT="0"):
        warnings.simplefilter("ignore")
        (region,) = evt.explain(case_fn(name), *inputs(shape, "meta")[0]).regions
    return (region.spec, *region.judged_on)


def committed() -> list[dict]:
    """The committed runs' rows (benchmarks/results/*/epilogue_arithmetic*.json), each case
    (epilogue, shape) at its latest run (folders and files in name order): a later run timed it
    at the code of its day, and since session 65 in turn (`--rounds`)."""
    results = Path(__file__).parent / "results"
    latest = {(r["case"], r["shape"]): r for f in sorted(results.glob("*/epilogue_arithmetic*.json"))
              for r in json.loads(f.read_text())}  # fmt: skip
    return list(latest.values())


def score(rows: list[dict]) -> list[dict]:
    """Each measured row with the check's prediction now: `agrees` where the check fuses exactly
    when the fused kernel was faster, or where the two were within `profit.MARGIN` (a near-tie
    either way costs little)."""
    from evt.codegen import profit
    from evt.codegen.config import TileConfig

    out = []
    for r in rows:
        spec, problem, saved = judged(r["case"], r["shape"])
        # at the config the fused kernel ran at, where the run recorded it
        p = profit.predict(spec, problem, saved, r.get("config") and TileConfig.from_label(r["config"]))
        fuses = p.fused_us <= p.unfused_us * (1 + profit.MARGIN)
        faster = r["fused_ms"] <= r["unfused_ms"]
        near = abs(r["fused_ms"] / r["unfused_ms"] - 1) <= profit.MARGIN
        out.append({**r, "now_us": (p.fused_us, p.unfused_us), "fuses": fuses, "agrees": fuses == faster or near})
    return out


def measure(names: list[str], shapes: list[str], rounds: int = 1) -> list[dict]:
    """Each case's three ways timed in turn, `rounds` times (fused, evt, unfused; each from
    CUDA graphs captured once, after its compile), the medians kept: a drift of the GPU's clocks
    over the run touches all three."""
    from evt.bench import measure as m
    from evt.runtime import dispatch

    rows = []
    for shape in shapes:
        sets = inputs(shape, "cuda", sets=3)
        for name in names:
            fn = case_fn(name)
            row: dict = {"case": name, "shape": shape}
            want = fn(*sets[0]).float()
            replays = {}
            for label, profit in (("fused", False), ("evt", True)):
                c, regions = compiled(fn, profit, sets[0])
                # relative to the output's largest magnitude (the polynomials reach 1e30)
                err = ((c(*sets[0]).float() - want).abs().max() / want.abs().max()).item()
                replays[label] = m.graph_replay(c, sets)
                row[f"{label}_err"] = err
                if label == "fused":
                    row["regions"] = len(regions)
                    row["predicted_us"] = regions[0].predicted if regions else None
                    config = regions and dispatch.config_for(regions[0].spec, None)
                    row["config"] = config.label if config else None
                else:
                    row["decision"] = "fused" if regions else "unfused"
            torch._dynamo.reset()
            replays["unfused"] = m.graph_replay(torch.compile(fn), sets)
            times = m.in_turn(replays, rounds, "cuda")
            row.update({f"{label}_ms": statistics.median(t) for label, t in times.items()})
            row["fused_vs_unfused"] = row["unfused_ms"] / row["fused_ms"]
            if rounds > 1:
                row["rounds_ms"] = times
                row["fused_faster_rounds"] = sum(f < u for f, u in zip(times["fused"], times["unfused"]))
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--only", default="*", help="comma-separated globs over EPILOGUES")
    p.add_argument("--json")
    p.add_argument("--rounds", type=int, default=1,
                   help="time the three ways in turn this many times, keep the medians")
    p.add_argument("--prebuild", action="store_true")
    p.add_argument("--score", action="store_true", help="no GPU: the check against the committed runs")
    a = p.parse_args()
    if a.score:
        rows = score(committed())
        for r in rows:
            f, u = r["now_us"]
            print(f"{r['case']:17} {r['shape']:15} measured fused/unfused {r['fused_ms'] / r['unfused_ms']:.3f}, "
                  f"predicted {f / u:.3f}: {'fuses' if r['fuses'] else 'unfused'}{'' if r['agrees'] else '  WRONG'}")
        print(f"{sum(r['agrees'] for r in rows)} of {len(rows)} decisions right (near-ties count either way)")
        return
    names = [n for n in EPILOGUES if any(fnmatch.fnmatch(n, g) for g in a.only.split(","))]
    shapes = a.shapes.split(",")
    if a.prebuild:
        prebuild(names, shapes)
        return
    rows = measure(names, shapes, a.rounds)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
