"""evt and torch.compile on a training step, measured in turn in one process.

The bench times each baseline in its own stage, so in its own process at another moment. Where
a step is paced by the host (host time per step above its CUDA-graph time), that compares the
two processes' hosts as much as the two compilers: in session 28 two runs of the same code gave
the MLP step 0.69x and 0.98x torch.compile as run. This stage builds both in one process, checks
both, then measures them in turn for `ROUNDS` rounds (evt, compile, evt, ...): per round, the
as-run time of a step (`measure.time_ms`), the host's time per step (`measure.host_ms`) and, on
CUDA, the step replayed from CUDA graphs captured once before the rounds (`graph_ms`: the GPU's
time alone, also paired round by round; a capture that fails is recorded as `graph_error`).
The record keeps every round's numbers (`in_turn`); the report gives medians, spread and the
ratio of medians (`summarize`), and in how many rounds the first was faster with a sign test's
p-value (`rounds_faster`): the two timings of a round ran back to back, so a drift of the host's
speed over the run touches both.
"""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING

import torch

from evt.bench import check, measure

if TYPE_CHECKING:
    from evt.bench.runner import CaseState

ROUNDS = 11  # sign test below 0.05: over 7 rounds only at 7 of 7; over 11 from 10 of 11 on
PAIR = ("evt", "compile")  # the first is compared against the second
FIELDS = ("time_ms", "host_ms", "graph_ms")
HOST_STEPS = 20  # steps enqueued per host-time reading


def measure_pair(s: CaseState, device: str, rec: dict) -> None:
    """Fill `rec` (the "in-turn" baseline's record of a step case) with both baselines' as-run
    and host times per round; "wrong" (nothing timed) if either gives a wrong result."""
    from evt.bench.baselines import BASELINES
    from evt.bench.runner import error_text

    pair, rounds = PAIR, ROUNDS
    impls, built = {}, {}
    for name in pair:
        b = BASELINES[name]
        if b.is_evt:
            from evt.runtime import dispatch

            dispatch.reset()
        built[name] = b.build(s.workload, device)
        impl = measure.rotating(built[name], s.input_sets)
        try:
            verdict = check.compare(impl(), *s.expected(b))
        except Exception as e:  # noqa: BLE001 - which of the two failed is the record's error
            rec.update(status="n/a", error=f"{name}: {error_text(e)}")
            return
        if not verdict.ok:
            rec.update(status="wrong", error=f"{name}: {verdict.why}")
            return
        impls[name] = impl
    replays = {}
    if device.startswith("cuda"):
        try:
            replays = {n: measure.graph_replay(built[n], s.input_sets) for n in pair}
        except Exception as e:  # noqa: BLE001 - recorded; the as-run rounds stand
            rec["graph_error"] = error_text(e)
    rec.update(status="ok", in_turn=alternate(impls, device, rounds, replays=replays))
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def alternate(impls: dict, device: str, rounds: int, host_steps: int = HOST_STEPS,
              replays: dict | None = None) -> dict:
    """name -> field -> one value per round: each round times every call of `impls` (no
    arguments) in turn, as run (`measure.time_ms`), the host's time per call (`measure.host_ms`
    over `host_steps` calls enqueued back to back) and, for the names `replays` has, its CUDA
    graphs' replay (`graph_ms`). A field no round measured is left out."""
    replays = replays or {}
    times: dict[str, dict[str, list[float]]] = {n: {f: [] for f in FIELDS} for n in impls}
    for _ in range(rounds):
        for name, impl in impls.items():
            times[name]["time_ms"].append(measure.time_ms(impl, device))
            times[name]["host_ms"].append(measure.host_ms(impl, device, host_steps))
            if name in replays:
                times[name]["graph_ms"].append(measure.time_ms(replays[name], device))
    return {n: {f: v for f, v in fields.items() if v} for n, fields in times.items()}


def summarize(rec: dict) -> dict[str, dict[str, tuple[float, float, float]]]:
    """baseline -> field -> (median, min, max) over the record's rounds."""
    return {
        name: {f: (statistics.median(v), min(v), max(v)) for f, v in fields.items() if v}
        for name, fields in rec.get("in_turn", {}).items()
    }


def ratio(rec: dict, field: str) -> float | None:
    """The first baseline's median over the second's (below 1: the first is faster)."""
    medians = {n: f[field][0] for n, f in summarize(rec).items() if field in f}
    names = list(rec.get("in_turn", {}))
    if len(names) != 2 or any(n not in medians for n in names) or not medians[names[1]]:
        return None
    return medians[names[0]] / medians[names[1]]


def rounds_faster(rec: dict, field: str) -> tuple[int, int, float] | None:
    """(rounds in which the first baseline's `field` was below the second's, rounds compared,
    two-sided sign-test p-value: how likely so lopsided a count is if neither were faster)."""
    fields = rec.get("in_turn", {})
    names = list(fields)
    if len(names) != 2 or any(field not in fields[n] for n in names):
        return None
    pairs = [(a, b) for a, b in zip(fields[names[0]][field], fields[names[1]][field]) if a != b]
    if not pairs:
        return None
    n, k = len(pairs), sum(a < b for a, b in pairs)
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1)) / 2**n
    return k, n, min(1.0, 2 * tail)
