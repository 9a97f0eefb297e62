"""`report.md`: the results file as markdown tables (every number comes from the records)."""

from __future__ import annotations

import statistics

from evt.bench import coverage, in_turn, ops, provenance
from evt.bench import report as R

MIB = 1 / 2**20
LEGEND = (
    "Cells: a number; `wrong` (checked, not timed); `n/a` (raised: the text is listed below); "
    "`timeout` (ran past the per-item limit); `fallback` (evt's regions ran unfused); "
    "`not measured (stage time limit)` (its stage ran out of time first: `--resume` measures "
    "it); `not run` (planned, but no session ran that baseline on it); `—` (not planned: does "
    "not apply, or outside the baseline's subset)."
)


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
    merged = provenance.merged_note(data)
    return (
        f"# evt benchmark: {gpu}, {cfg['dtype']}\n\n{env.get('time')} · "
        + " · ".join(facts)
        + (f"\n\n{merged}" if merged else "")
        + "\n\nTimes are medians after warm-up (see `benchmarks/README.md`); every result was "
        "checked against a float64 reference before it was timed. Speedup of A over B = "
        "time(B) / time(A); > 1 means A is faster. " + LEGEND
    )


def summary_table(results: list[dict]) -> str:
    rows = []
    for b, row in R.summary(results):
        cells = [row[k] for k in ("op", "step", "vs_mm", "op_graph", "step_graph", "vs_mm_graph")]
        rows.append([b] + [f"{R.fmt(v, 2)} ({n})" for v, n in cells])
    head = [
        "baseline",
        "evt speedup over it, GEMM suite (cases)",
        "evt speedup over it, training steps (cases)",
        "its fraction of bare cuBLAS mm (cases)",
        "evt speedup over it, GEMM suite under CUDA graphs (cases)",
        "evt speedup over it, training steps under CUDA graphs (cases)",
        "its fraction of mm under CUDA graphs (cases)",
    ]
    return (
        "## Summary (geometric means)\n\nThe first three columns time each call as a user's "
        "code makes it (host work included: the GPU idles when the host is slower than the "
        "kernel); the last three replay the same calls from CUDA graphs (the GPU's time alone). "
        "A training step whose host time per step (its own table) exceeds its time is paced by "
        "the host, not its kernels.\n\n"
        + table(head, rows)
    )


def by_pattern(results: list[dict], peer: str = "cublaslt") -> str:
    """evt against `peer` per pattern (geomeans over its shapes), as run and under CUDA graphs,
    with both fractions of the bare GEMM under graphs: the cuBLASLt target of issue #7 is set on
    the bias, ReLU and tanh-GELU epilogues, its training epilogues (the saved pre-activation,
    GELU's backward) are compared apart."""
    groups = {g: (g,) for g in dict.fromkeys(r["case"].split("/")[0] for r in R.cases_in(results, "op"))}
    if peer == "cublaslt":
        groups["issue #7's target: " + ", ".join(ops.CUBLASLT_TARGET)] = ops.CUBLASLT_TARGET
    rows = []
    for name, members in groups.items():
        mine = [r for r in results if r["kind"] == "op" and r["case"].split("/")[0] in members]
        cols = [R.speedup(mine, "evt", peer), R.speedup(mine, "evt", peer, field="graph_ms"),
                R.speedup(mine, peer, "mm", field="graph_ms"), R.speedup(mine, "evt", "mm", field="graph_ms")]  # fmt: skip
        if cols[0] or cols[1]:
            n = max(map(len, cols))
            rows.append([name, str(n)] + [R.fmt(R.geomean(c.values()), 2) for c in cols])
    if not rows:
        return ""
    head = ["pattern", "cases", f"evt speedup over {peer}", "the same under CUDA graphs",
            f"{peer}'s fraction of mm under graphs", "evt's fraction of mm under graphs"]  # fmt: skip
    return f"## evt against {peer}, by pattern (geometric means over its shapes)\n\n" + table(head, rows)


def per_case(
    results: list[dict],
    kind: str,
    field: str,
    title: str,
    digits: int = 1,
    scale: float = 1.0,
    ratios: bool = False,
    wanted: frozenset = frozenset(),
    field_time: str = "time_ms",
) -> str:
    cases, names = R.cases_in(results, kind), R.baselines_in(results, kind)
    mine = [r for r in results if r["kind"] == kind]
    if not mine or not (ratios or any(r.get(field) is not None for r in mine)):
        return ""  # the main tables show every case, measured or not; the others what was
    idx = R.index(results)
    cell = lambda c, b: R.cell(idx.get((c, b)), field, digits, scale, (c, b) in wanted)  # noqa: E731
    others = [b for b in names if b != "evt"] if ratios and "evt" in names else []
    speed = {b: R.speedup(results, "evt", b, kind, field_time) for b in others}
    head = ["case", "size"] + names + [f"evt vs {b}" for b in others]
    rows = []
    for c in cases:
        row = [c["case"], R.dims(c)]
        row += [cell(c["case"], b) for b in names]
        row += [
            R.fmt(speed[b].get(c["case"]), 2) + ("×" if c["case"] in speed[b] else "")
            for b in others
        ]
        rows.append(row)
    return f"## {title}\n\n" + table(head, rows)


def compile_table(data: dict) -> str:
    """Cold / warm first-call seconds per case and compiled baseline, and evt's prebuild."""
    results = [r for r in data["results"] if r.get("compile_cold_s") is not None]
    if not results:
        return ""
    names = R.baselines_in(results)
    idx = R.index(results)
    rows = []
    for c in R.cases_in(results, "op") + R.cases_in(results, "step"):
        cells = [idx.get((c["case"], b)) for b in names]
        rows.append([c["case"]] + [pair(r) for r in cells])
    head = ["case"] + [f"{b} cold / warm" for b in names]
    return (
        "## Compile time (s)\n\nThe first call of a fresh compile, with empty (cold) and filled "
        "(warm) Inductor caches, apart from run time. " + coverage.prebuild_note(data)
        + "\n\n" + table(head, rows)
    )  # fmt: skip


def pair(r: dict | None) -> str:
    if r is None or r.get("compile_cold_s") is None:
        return "—"
    return f"{R.fmt(r['compile_cold_s'])} / {R.fmt(r['compile_warm_s'])}"


def evt_notes(results: list[dict]) -> str:
    rows = []
    for r in results:
        n = r.get("notes") or {}
        if r["baseline"] != "evt" or "regions" not in n:
            continue
        fb = "; ".join(f"{k}: {v}" for k, v in (n.get("fallbacks") or {}).items())
        kernels = "; ".join(k.partition(": ")[2] for k in n.get("kernels") or [])
        rows.append(
            [
                r["case"],
                str(len(n["regions"])),
                str(n.get("unfused_gemms")),
                str(n.get("kernels_built")),
                str(n.get("kernel_launches")),
                R.fmt(n.get("host_us_per_region_call"), 1),
                "; ".join(n["regions"])[:300],
                kernels[:300] or "—",
                fb[:300],
            ]
        )
    head = ["case", "regions", "unfused GEMMs", "kernels built", "kernel launches"]
    head += ["host us per region call", "fused", "kernels (tile config, tile order, problem)"]
    head += ["fallbacks"]
    note = ("`host us per region call`: the C++ launch path's own host time per call (outputs, "
            "workspace, the kernel's launcher with its CUDA launches), the op's dispatch from "
            "Python not included; — where no call took that path.\n\n")
    return "## What evt did\n\n" + note + table(head, rows) if rows else ""


def autotune_decisions(results: list[dict]) -> list[tuple[str, dict]]:
    """(case, outcome) of every region evt's max-autotune decided, each (case, region, problem)
    once, the outcome its cold compile measured before any cached replay of it."""
    seen: dict[tuple, tuple[str, dict]] = {}
    for r in results:
        for o in (r.get("notes") or {}).get("autotune") or []:
            key = (r["case"], o["region"], tuple(o["problem"]))
            if key not in seen or (o.get("measured") and not seen[key][1].get("measured")):
                seen[key] = (r["case"], o)
    return list(seen.values())


def autotune_table(results: list[dict]) -> str:
    """evt's max-autotune per region: where the heuristic ranks the config the timing chose,
    what the timing gained over the heuristic's pick (the default mode's kernel), and where a
    measured decision's time went (`Decision.seconds`; — in results recorded before it)."""
    from evt.runtime.autotune import GRAPHS, PHASES

    decided = autotune_decisions(results)
    if not decided:
        return ""
    rows, gains, ranks, spent = [], [], [], []
    for case, o in decided:
        phases = phase_seconds(o)
        if phases:
            spent.append(phases)
        timed = o.get("heuristic_ms") and o.get("best_ms")
        gain = o["heuristic_ms"] / o["best_ms"] if timed else None
        if o.get("rank") is not None:
            ranks.append(o["rank"])
        if gain is not None:
            gains.append(gain)
        chosen = f"{o['config']} ({o['tile_order']})" if o.get("config") else "—"
        unfused = f"{R.fmt(o.get('unfused_ms'), 4)} ({o.get('unfused_by') or 'not timed'})"
        verdict = "fused" if o["fuse"] else "left unfused"
        if (o.get("reason") or "").startswith("not measured"):  # `autotune._unmeasured`
            verdict = f"fused with the heuristic's config, {o['reason']}"
        elif (o.get("reason") or "").startswith("no candidate config ran"):  # every one failed
            verdict = f"left unfused: {o['reason']}"
        if o.get("timer") and o["timer"] != GRAPHS:
            verdict += f"; timed as {o['timer']}"
        m, n, k, *batch = o["problem"]
        shape = f"{m}x{n}x{k}" + (f" ({batch[0]} batches)" if batch and batch[0] != 1 else "")
        rows.append([case, o["region"], shape,
                     f"{o.get('heuristic') or '—'}: {R.fmt(o.get('heuristic_ms'), 4)}",
                     chosen, str(o.get("rank") or "—"), R.fmt(o.get("best_ms"), 4),
                     R.fmt(gain, 3), unfused, verdict + ("" if o.get("measured") else ", cached"),
                     " / ".join(f"{x:.1f}" for x in phases.values()) or "—"])
    first = sum(1 for k in ranks if k == 1)
    spread = ", ".join(f"rank {k}: {ranks.count(k)}" for k in sorted(set(ranks)))
    text = (f"Each region's shortlist (the heuristic's top `EVT_AUTOTUNE_TOP` and the best of "
            f"every other schedule) timed with its epilogue in every tile order, from CUDA graph "
            f"replays (unless the verdict says otherwise), in the item's cold compile. "
            f"{len(decided)} regions decided; the config the timing chose was the heuristic's "
            f"own pick in {first} of {len(ranks)} ({spread}). Gain: the heuristic's pick in "
            f"evt's tile order over the chosen config and order, geomean "
            f"{R.fmt(R.geomean(gains), 3)} over {len(gains)}.")
    if spent:
        total = {p: sum(s[p] for s in spent) for p in PHASES}
        text += (f" Measured decisions that recorded their phases' wall seconds ({len(spent)}) "
                 f"spent {total['unfused_compile']:.1f} s compiling their unfused paths, "
                 f"{total['builds']:.1f} s waiting for their kernels' builds, "
                 f"{total['checks']:.1f} s checking the candidates against the reference and "
                 f"{total['timing']:.1f} s timing (— where cached, or recorded before they were).")
    head = ["case", "region", "M x N x K", "heuristic's pick: ms", "chosen (tile order)",
            "its heuristic rank", "ms", "gain", "unfused: ms (by)", "verdict",
            "s: unfused compile / builds / checks / timing"]
    title = "## evt's max-autotune: the configs the timing chose"
    return f"{title}\n\n{text}\n\n" + table(head, rows)


def departures(decisions: list[dict]) -> list[str]:
    """What a case's max-autotune decisions changed from the default mode's kernels: another
    config, another tile order (0:0 is evt's own), or the region left unfused."""
    changed = []
    for o in decisions:
        if not o.get("fuse"):
            changed.append(f"{o['region']} left unfused")
        elif o.get("config") and o.get("heuristic") and o["config"] != o["heuristic"]:
            changed.append(f"{o['region']} {o['config']} ({o['tile_order']})")
        elif o.get("tile_order") not in (None, "0:0"):
            changed.append(f"{o['region']} order {o['tile_order']}")
    return changed


def predicted_gain(decisions: list[dict]) -> float | None:
    """The time the default mode's kernels took ÷ what the timing chose, over a case's regions,
    by the selection's own timings (a region left unfused: its heuristic's kernel ÷ the unfused
    path); None where a region has no timings (cached from a run that kept none, not measured)."""
    gain = 1.0
    for o in decisions:
        chosen = o.get("best_ms") if o.get("fuse") else o.get("unfused_ms")
        if not (o.get("heuristic_ms") and chosen):
            return None
        gain *= o["heuristic_ms"] / chosen
    return gain


def autotune_held_table(results: list[dict]) -> str:
    """Did the selection's gains hold? For each GEMM case where evt's max-autotune chose
    something other than the default mode's kernel, the gain its timing predicted against evt's
    and evt-max-autotune's own times in the bench (under CUDA graphs and as run): the selection
    times each candidate for a few milliseconds inside a compile, the bench times the whole case
    over many rounds, so a few percent found in the first need not show in the second."""
    per_case: dict[str, list[dict]] = {}
    for case, o in autotune_decisions(results):
        per_case.setdefault(case, []).append(o)
    graphs, as_run = R.times(results, "graph_ms"), R.times(results, "time_ms")
    kinds = {r["case"]: r["kind"] for r in results}
    rows, predicted, held = [], [], []
    for case, decisions in per_case.items():
        changed, gain = departures(decisions), predicted_gain(decisions)
        if kinds.get(case) != "op" or not changed or gain is None:
            continue
        pair = [(t.get((case, "evt")), t.get((case, "evt-max-autotune"))) for t in (graphs, as_run)]
        real = [a / b if a and b else None for a, b in pair]
        if real[0] is None:
            continue
        predicted.append(gain)
        held.append(real[0])
        rows.append([case, "; ".join(changed), R.fmt(gain, 3), R.fmt(real[0], 3), R.fmt(real[1], 3)])
    if not rows:
        return ""
    text = (f"On {len(rows)} GEMM cases evt's max-autotune chose something other than the default "
            f"mode's kernel (a config, a tile order, or the unfused path). Its timing predicted "
            f"{R.fmt(R.geomean(predicted), 3)}x the default's speed in geomean; in the bench, "
            f"evt's time ÷ evt-max-autotune's under CUDA graphs was "
            f"{R.fmt(R.geomean(held), 3)} (> 1: the choice paid).")
    head = ["case", "what the timing changed", "predicted gain", "evt ÷ evt-max-autotune, graphs",
            "as run"]
    return ("### Did the timing's choices hold in the bench?\n\n" + text + "\n\n"
            + table(head, rows))  # fmt: skip


def phase_seconds(o: dict) -> dict[str, float]:
    """A measured decision's wall seconds per phase (`evt.runtime.autotune.PHASES`, in order);
    empty where it was read from the cache or recorded before `outcome` had them."""
    from evt.runtime.autotune import PHASES

    seconds = o.get("seconds") or {}
    return {p: float(seconds.get(p, 0.0)) for p in PHASES} if o.get("measured") and seconds else {}


def clock_table(results: list[dict]) -> str:
    """Per baseline, over its GEMM cases timed under CUDA graphs: the median SM clock and mean
    board power while timed (`evt.bench.clocks`), how many of those timings ran at the power
    limit, and its fraction of the bare GEMM's TFLOP/s per GHz of its own clock (what its
    kernels do per cycle, apart from the clock the board's power budget gave them)."""
    ops = [r for r in results if r["kind"] == "op" and r["status"] == "ok" and r.get("graph_sm_mhz")]
    if not ops:
        return ""
    idx = R.index(ops)
    per_ghz = lambda r: r["graph_tflops"] / r["graph_sm_mhz"]  # noqa: E731
    rows = []
    for b in R.baselines_in(ops):
        mine = [r for r in ops if r["baseline"] == b]
        power = [r["graph_power_w"] for r in mine if r.get("graph_power_w")]
        capped = sum("sw-power-cap" in (r.get("clock_events") or []) for r in mine)
        pairs = [(r, idx.get((r["case"], "mm"))) for r in mine]
        ratio = R.geomean(per_ghz(r) / per_ghz(m) for r, m in pairs if m and r["graph_tflops"] and m["graph_tflops"])
        rows.append([b, str(len(mine)), R.fmt(statistics.median(r["graph_sm_mhz"] for r in mine), 0),
                     R.fmt(statistics.fmean(power), 0) if power else "—", f"{capped} of {len(mine)}",
                     R.fmt(ratio, 3) if b != "mm" else "—"])  # fmt: skip
    head = ["baseline", "cases", "median SM clock (MHz)", "mean power (W)", "timings at the power limit",
            "fraction of mm's TFLOP/s per GHz (geomean)"]  # fmt: skip
    return (
        "## Clocks while timed (GEMM suite under CUDA graphs)\n\nnvidia-smi's samples during "
        "each timing (`evt.bench.clocks`): an H100 at its power limit runs well below its maximum "
        "clock, and not every kernel at the same one.\n\n" + table(head, rows)
    )


# An as-run time above both the call's host time and its CUDA-graph time by more than this: the
# two did not overlap, or something else held the call (session 36, an H200: five evt cases
# timed one after another read 1.26-1.51x the larger of the two, up to about their sum).
HELD = 1.15


def held(r: dict) -> bool:
    """Whether `r` was timed as run well above both its host time and its CUDA-graph time."""
    t, host, graph = r.get("time_ms"), r.get("host_ms"), r.get("graph_ms")
    return bool(r["status"] == "ok" and t and host and graph and t > HELD * max(host, graph))


def held_table(results: list[dict]) -> str:
    """The GEMM cases whose as-run time the call's own host and GPU times do not explain, and
    what evt's as-run fraction of the bare GEMM is without them."""
    recs = sorted((r for r in results if r["kind"] == "op" and held(r)),
                  key=lambda r: (r["baseline"], R.SUITE_ORDER.get(r["case"], 0)))  # fmt: skip
    if not recs:
        return ""
    rows = [[r["case"], r["baseline"], R.fmt(r["time_ms"], 4), R.fmt(r["host_ms"], 4),
             R.fmt(r["graph_ms"], 4), R.fmt(r["time_ms"] / max(r["host_ms"], r["graph_ms"]), 2),
             (r.get("finished") or "—")[11:19] or "—"] for r in recs]  # fmt: skip
    idx = R.index(results)
    flagged = {r["case"] for r in recs if r["baseline"] in ("evt", "mm")}
    pairs = [(r, idx.get((r["case"], "mm"))) for r in results
             if r["kind"] == "op" and r["baseline"] == "evt" and r["status"] == "ok"]  # fmt: skip
    ratios = {r["case"]: m["time_ms"] / r["time_ms"] for r, m in pairs
              if m and m["status"] == "ok" and m.get("time_ms") and r.get("time_ms")}  # fmt: skip
    kept = [v for c, v in ratios.items() if c not in flagged]
    without = (f" Without the cases listed for evt or mm, evt's fraction of the bare GEMM as run is "
               f"{R.fmt(R.geomean(kept), 2)} ({len(kept)} cases; {R.fmt(R.geomean(ratios.values()), 2)} "
               f"with them)." if flagged and kept else "")  # fmt: skip
    head = ["case", "baseline", "as run (ms)", "host (ms)", "under CUDA graphs (ms)",
            "as run ÷ the larger", "finished (UTC)"]  # fmt: skip
    text = (f"A call timed as run takes about the larger of its host time and its GPU time when the "
            f"two overlap; these took more than {HELD}x that larger one. Up to their sum, the host "
            "work ran before the GPU work instead of beside it (`triton.do_bench` clears L2 "
            "between calls; a call whose kernels start late in its host path waits for it); "
            "beyond it, something neither time shows held them. Their as-run numbers are kept in "
            "every table above, marked nowhere else: measure them again (`--redo`) before "
            "reading them." + without)
    return "## Timed as run, slower than their host and GPU times explain\n\n" + text + "\n\n" + table(head, rows)


def host_paced(r: dict) -> bool:
    """Whether `r`'s host time per call is above its CUDA-graph time: as run, the host sets its pace."""
    host, graph = r.get("host_ms"), r.get("graph_ms")
    return bool(r["status"] == "ok" and host and graph and host > graph)


def host_table(results: list[dict], wanted: frozenset = frozenset()) -> str:
    """Each GEMM case's host time per call by baseline, and per baseline the cases whose host
    time exceeds their GPU time (session 66: as run, evt's small kernels waited on a host that
    read 2.5x a later process's; under CUDA graphs they were where they had been)."""
    body = per_case(results, "op", "host_ms", "GEMM+epilogue suite: host time per call (us)", 1,
                    1e3, wanted=wanted)  # fmt: skip
    if not body:
        return ""
    ops = [r for r in results
           if r["kind"] == "op" and r["status"] == "ok" and r.get("host_ms") and r.get("graph_ms")]  # fmt: skip
    counts = {b: (sum(host_paced(r) for r in ops if r["baseline"] == b),
                  sum(r["baseline"] == b for r in ops)) for b in R.baselines_in(results, "op")}  # fmt: skip
    paced = ", ".join(f"{b} {n} of {total}" for b, (n, total) in counts.items() if total)
    title, rest = body.split("\n\n", 1)
    text = ("The host's time per call, calls enqueued back to back (`measure.host_ms`). Where it "
            "is above the call's CUDA-graph time, the as-run time measures the host, not the "
            "kernels; host times also move between machines and processes (session 66). Cases "
            f"whose host time exceeds their GPU time: {paced}.")  # fmt: skip
    return f"{title}\n\n{text}\n\n{rest}"


def problem_list(results: list[dict]) -> str:
    items = [
        f"- **{r['case']} / {r['baseline']}**: {R.not_timed(r)}: "
        f"{' '.join((r.get('error') or '').split())[:400]}"
        for r in R.problems(results)
    ]
    return ("## Not timed (full text in results.json)\n\n" + "\n".join(items)) if items else ""


def in_turn_table(results: list[dict], baseline: str = "in-turn") -> str:
    """The records of `baseline` ("in-turn": the training steps, "in-turn-ops": GEMM+epilogue
    cases): evt and torch.compile built in one process and timed in turn, medians [min .. max]
    over the rounds and the ratio of medians."""
    recs = [r for r in results if r["baseline"] == baseline]
    if not recs:
        return ""
    steps = baseline == "in-turn"
    unit, counted = ("step", "steps") if steps else ("call", "cases")
    first, second = in_turn.PAIR
    head = ["case", "size", "rounds", f"{first} as run", f"{second} as run", f"{first} / {second}",
            f"{first} faster (rounds, as run)", f"{first} host", f"{second} host",
            f"{first} / {second} host", f"{first} / {second} under CUDA graphs",
            f"{first} faster (rounds, graphs)"]  # fmt: skip

    def spread(stats: dict, name: str, field: str) -> str:
        if field not in stats.get(name, {}):
            return "—"
        mid, lo, hi = stats[name][field]
        return f"{R.fmt(mid, 2)} [{R.fmt(lo, 2)} .. {R.fmt(hi, 2)}]"

    def faster(r: dict, field: str) -> str:
        count = in_turn.rounds_faster(r, field)
        return "—" if count is None else f"{count[0]} of {count[1]} (p {count[2]:.2g})"

    rows, speedups, graph_speedups = [], [], []
    for r in sorted(recs, key=lambda r: R.SUITE_ORDER.get(r["case"], len(R.SUITE_ORDER))):
        if r["status"] != "ok":
            rows.append([r["case"], R.dims(r), R.not_timed(r)] + ["—"] * 9)
            continue
        stats = in_turn.summarize(r)
        rounds = len(next(iter(r["in_turn"].values()))["time_ms"])
        ratios = [in_turn.ratio(r, f) for f in ("time_ms", "host_ms", "graph_ms")]
        if ratios[0]:
            speedups.append(1 / ratios[0])
        if ratios[2]:
            graph_speedups.append(1 / ratios[2])
        rows.append([r["case"], R.dims(r), str(rounds),
                     spread(stats, first, "time_ms"), spread(stats, second, "time_ms"),
                     R.fmt(ratios[0], 2), faster(r, "time_ms"), spread(stats, first, "host_ms"),
                     spread(stats, second, "host_ms"), R.fmt(ratios[1], 2), R.fmt(ratios[2], 2),
                     faster(r, "graph_ms")])  # fmt: skip
    mean, graph_mean = R.geomean(speedups), R.geomean(graph_speedups)
    text = (
        f"{first} and {second} built in one process and timed in turn, round after round (the "
        "tables above time each baseline in its own process, at another moment: where the host "
        "paces a step, those compare two processes' hosts as much as two compilers). Medians "
        f"[min .. max] over the rounds, ms per {unit}; a ratio below 1: {first} is faster. In how "
        f"many rounds {first} took less time than {second} (each round times the two back to "
        "back), with a two-sided sign test's p-value: below 0.05, so lopsided a count is "
        f"unlikely if neither were faster. Under CUDA graphs: each {unit}'s graphs captured once "
        "before the rounds and replayed in them (the GPU's time alone; — where no graph ran)."
        + (f" Geomean {first} speedup as run: {mean:.2f}× ({len(speedups)} {counted})." if mean else "")
        + (f" Under CUDA graphs: {graph_mean:.2f}× ({len(graph_speedups)} {counted})." if graph_mean else "")
    )
    title = "Training steps" if steps else "GEMM+epilogue suite"
    return (f"## {title}: evt and torch.compile measured in turn (ms)\n\n" + text
            + "\n\n" + table(head, rows))  # fmt: skip


def render(data: dict) -> str:
    res = data["results"]
    wanted = frozenset(R.planned(data["config"]))
    parts = [
        heading(data),
        summary_table(res),
        by_pattern(res),
        coverage.coverage_table(res, wanted, table),
        per_case(
            res, "op", "tflops", "GEMM+epilogue suite: TFLOP/s, and evt's speedup", 1, 1, True,
            wanted,
        ),
        per_case(
            res, "op", "graph_tflops",
            "GEMM+epilogue suite under CUDA graphs: TFLOP/s, and evt's speedup", 1, 1, True,
            wanted, field_time="graph_ms",
        ),
        per_case(res, "op", "gbps", "GEMM+epilogue suite: GB/s (inputs + outputs once)", 0,
                 wanted=wanted),
        per_case(
            res, "step", "time_ms", "Training steps: ms per step, and evt's speedup", 2, 1, True,
            wanted,
        ),
        per_case(
            res, "step", "graph_ms",
            "Training steps under CUDA graphs: ms per step, and evt's speedup", 2, 1, True,
            wanted, field_time="graph_ms",
        ),
        per_case(res, "step", "host_ms", "Training steps: host time per step (ms)", 2,
                 wanted=wanted),
        in_turn_table(res),
        in_turn_table(res, "in-turn-ops"),
        per_case(res, "step", "graph_sm_mhz",
                 "Training steps under CUDA graphs: median SM clock while timed (MHz)", 0,
                 wanted=wanted),
        per_case(res, "step", "peak_mem_bytes", "Training steps: peak memory (MiB)", 0, MIB,
                 wanted=wanted),
        per_case(res, "op", "graph_sm_mhz",
                 "GEMM+epilogue suite under CUDA graphs: median SM clock while timed (MHz)", 0,
                 wanted=wanted),
        clock_table(res),
        host_table(res, wanted),
        held_table(res),
        compile_table(data),
        evt_notes(res),
        autotune_table(res),
        autotune_held_table(res),
        coverage.baselines_section(res),
        coverage.stages_table(data, table),
        problem_list(res),
        provenance.sessions_table(data, table),
    ]  # fmt: skip
    return "\n\n".join(p for p in parts if p) + "\n"
