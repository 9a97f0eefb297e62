"""Score the tile-config heuristic against every committed exhaustive sweep: for each (sweep,
pattern, region, shape), the config `evt.codegen.config.heuristic` ranks first among the configs
that sweep timed, and its speed as a fraction of the measured best. No GPU: the sweeps are
`benchmarks/results/*/config_sweep*.json` (written by benchmarks/config_sweep.py; left out: rows
that timed another functor (--functor) or another raster order / swizzle than evt launches
(--tile-orders; sweeps before session 15 timed CUTLASS's, which evt launched then; since
session 65 evt launches the other raster order where its waves read less, `wave_traffic.
raster_order`, and rows of that order count where it is what evt launches), sweeps
of an epilogue with an exp or erf taken before those functors went straight to the SFU in
session 13 (`SFU_SINCE`), and rows of 128-wide ping-pong tiles on wide grids at K > 1024 from
before session 31 launched them with swizzle 2: `PINGPONG_SWIZZLE_SINCE`), the specs are
captured on the CPU.

    python benchmarks/heuristic_score.py [--show 0.97]   (cases below that fraction are listed)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

from evt.codegen import config as cfgs

RESULTS = Path(__file__).parent / "results"
# Session 13 made exp, sigmoid and the exact GELU 20-35% fewer instructions (evt_functors.h): the
# sweeps of such epilogues before it timed other kernels (ping-pong now wins the exact GELU).
SFU_SINCE = "2026-11-23-H100-session13"
SFU_PATTERNS = ("bias_gelu", "bias_gelu_aux", "dgrad_gelu", "softmax_stats", "ce_forward",
                "ce_backward")  # fmt: skip


# Session 31 launches 128-wide ping-pong tiles with swizzle 2 on grids of 16 or more tile columns
# at K > 1024 (`wave_traffic.wide_pingpong`): earlier sweeps timed those rows in the compiled
# order, so they no longer time what evt launches.
PINGPONG_SWIZZLE_SINCE = "2026-11-27-H100-session31"


def _wide_pingpong(row: dict) -> bool:
    from evt.codegen import wave_traffic

    cfg = cfgs.TileConfig.from_label(row["config"])
    return wave_traffic.wide_pingpong(cfg, row["m"], row["n"], row["k"], row.get("l", 1), cfgs.SM_COUNT)


def _launched(row: dict) -> str:
    """The order evt launches `row`'s config in at its shape now, asked for its own (0:0):
    `launch.Kernel.resolve`'s rule, 0 the kernel's compiled choice."""
    from evt.codegen import wave_traffic

    cfg = cfgs.TileConfig.from_label(row["config"])
    r, s, _ = wave_traffic.launch_order(cfg, row["m"], row["n"], row["k"], row.get("l", 1), cfgs.SM_COUNT)
    return f"{r}:{s}"


def _timed_as_launched(row: dict, folder: str) -> bool:
    """Whether `row` timed its config in the order evt launches it in now. A row of evt's own
    order (0:0) by the order the sweep recorded as launched (since session 31), else where evt
    now launches neither another raster order (session 65) nor, from before session 31, a wide
    ping-pong grid's swizzle 2; a row of an explicit order (`--tile-orders`) only where that is
    the raster order evt now takes instead of CUTLASS's and what it launches."""
    ours = _launched(row)
    if row.get("tile_order", "0:0") != "0:0":
        return not ours.startswith("0:") and row.get("launched") == ours
    if "launched" in row:
        return row["launched"] == ours
    return ours.startswith("0:") and not (folder < PINGPONG_SWIZZLE_SINCE and _wide_pingpong(row))


def sweeps() -> dict[tuple[str, str, str, str], list[dict]]:
    """(run folder, pattern, region, shape) -> the sweep's rows for it."""
    groups: dict[tuple[str, str, str, str], list[dict]] = {}
    for f in sorted(RESULTS.glob("*/config_sweep*.json")):
        for r in json.loads(f.read_text()):
            if r.get("functors"):
                continue  # an A/B run of another functor, not what evt renders
            if r.get("epilogue") == "bare":
                continue  # a region's GEMM without its epilogue (`--bare`), not a region
            if r.get("l2_window", "-") != "-":
                continue  # timed with L2 keeping an operand (`--l2-window`), not as evt runs
            if r["pattern"] in SFU_PATTERNS and f.parent.name < SFU_SINCE:
                continue  # the functors of an earlier session
            if not _timed_as_launched(r, f.parent.name):
                continue  # another raster order / swizzle than the one evt launches now
            groups.setdefault((f.parent.name, r["pattern"], r["region"], r["shape"]), []).append(r)
    return groups


def score(groups, specs) -> list[tuple[tuple, dict, dict]]:
    """(group key, the heuristic's pick, the measured best) per group."""
    out = []
    for key, rows in groups.items():
        spec = specs[(key[1], key[2])]
        r = rows[0]
        timed = {}  # a config two sweeps of the folder both timed counts once, at its faster run
        for row in rows:
            if row["config"] not in timed or row["tflops"] > timed[row["config"]]["tflops"]:
                timed[row["config"]] = row
        ranked = [_timed_as(c, timed) for c in cfgs.heuristic(spec, r["m"], r["n"], r["k"], r.get("l", 1))]
        pick = next(timed[label] for label in ranked if label in timed)
        out.append((key, pick, max(timed.values(), key=lambda row: row["tflops"])))
    return out


def _timed_as(cfg: cfgs.TileConfig, timed: dict) -> str:
    """The label a sweep timed `cfg` under: a sweep from before the heuristic chose the aux
    loads' stages (`config.source_stages`, session 14) timed CUTLASS's, one from before it chose
    epilogue subtiles for one-k-block problems (`config.epilogue_subtile`, session 23) CUTLASS's
    subtile."""
    if cfg.label in timed:
        return cfg.label
    if cfg.epi_stages_c and (label := dataclasses.replace(cfg, epi_stages_c=0).label) in timed:
        return label
    if cfg.epi_n and (label := dataclasses.replace(cfg, epi_n=0).label) in timed:
        return label
    return dataclasses.replace(cfg, epi_n=0, epi_stages_c=0).label


def capture_specs(groups) -> dict[tuple[str, str], object]:
    """(pattern, region) -> the region's spec: a suite pattern's captured on the CPU at tiny
    shapes, a training step's (`config_sweep.py --steps`) on the meta device at its own."""
    from config_sweep import capture, capture_step  # benchmarks/ is this script's folder

    specs = {}
    for pattern in sorted({k[1] for k in groups}):
        regions = [s for s, _ in capture_step(pattern)] if pattern.startswith("step/") else capture(pattern)
        specs.update({(pattern, s.name): s for s in regions})
    return specs


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--show", type=float, default=0.97, help="list cases below this fraction")
    a = p.parse_args()
    groups = sweeps()
    results = score(groups, capture_specs(groups))
    fractions = [pick["tflops"] / best["tflops"] for _, pick, best in results]
    for (run, pattern, _, shape), pick, best in results:
        f = pick["tflops"] / best["tflops"]
        if f < a.show:
            print(f"{run:18} {pattern + '/' + shape:28} pick {pick['config']:28} {f:.3f} "
                  f"of {best['config']}")  # fmt: skip
    geo = math.exp(sum(map(math.log, fractions)) / len(fractions))
    print(f"{len(fractions)} cases: the heuristic's pick runs at {geo:.3f} of the measured best "
          f"in geomean, {min(fractions):.3f} at worst")  # fmt: skip


if __name__ == "__main__":
    main()
