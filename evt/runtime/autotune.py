"""max-autotune: choose each region's tile config by timing it, and keep the region fused only
where its kernel beats the unfused path.

`torch.compile(model, backend="evt", mode="max-autotune")` (or `options={"autotune": True}`) asks
for it. For every region, on the problem shape the graph carries:

1. the heuristic's top `EVT_AUTOTUNE_TOP` (default 3) configs, plus the best-ranked config of
   each schedule (cooperative, ping-pong) not among them, are built in parallel, every
   region's at once before the first is timed (`prefetch`; `shortlist`:
   the cost model's blind spot is the schedule: on the H100 ping-pong won LayerNorm's
   statistics where the heuristic ranks it last);
2. each kernel runs **with its fused epilogue** on random inputs laid out as the graph's (the
   GEMM's operands scaled so its accumulator has unit variance: `candidate_inputs`), in
   every tile order of `EVT_AUTOTUNE_ORDERS` (raster:swizzle, default evt's own 0:0 and the
   swizzles 1, 2, 4, 8: runtime arguments of one binary, so they cost no build; on the H100 a
   swizzle moved small-K kernels by up to 28%, and one that does not divide the grid adds
   tiles), its outputs checked against the reference path (a config that computes something
   else is rejected), and is timed in `EVT_AUTOTUNE_ROUNDS` rounds (default 3; each times every
   candidate once, and each keeps its median: `time_candidates`) from replays of a CUDA graph
   (`pick_timer`: the host's cost of a call is not the GPU's; on the H100 it added 21 us to a
   67 us fused kernel and 44 us to its unfused path);
3. the unfused path is timed in the same rounds as the candidates, first in each, and keeps its
   median too (`UNFUSED`), on the same shapes as the rest of the graph would run it
   (`evt.runtime.unfused`): the region's nodes compiled by Inductor with the compile's own
   settings (cuBLAS, or Inductor's max-autotune GEMM choice, plus one or two fused Triton
   kernels), replayed from a CUDA graph as the fused kernel is (both sides timed per call
   instead where the unfused path cannot be captured); op by op in eager on
   `rest="eager"`, or where Inductor fails to compile them (the decision says which ran);
4. the region is lowered with the fastest config and tile order if that is faster than the
   unfused path, else it is left in the graph (where Inductor or eager runs it). The order
   applies at the problem it was timed on; other problems launch in evt's order
   (`evt.runtime.dispatch.tile_order`).

Decisions are cached on disk (`<EVT_CACHE_DIR>/autotune/<key>.json`), keyed by the kernel's
canonical signature, the problem shape, the GPU's name, evt's and torch's versions (evt's with the
hash of its sources, `evt.sources`: a decision timed against older kernels or another heuristic is
timed again) and the cache's schema, and kept in memory, so identical layers and later runs reuse them; a decision is measured
again where the unfused path it was timed against is not the one asked for now (another route or
Inductor mode), or where it was not timed (symbolic shapes) and now can be. `EVT_DEBUG=1` prints each decision;
where a compile measures two regions or more, each measured one also gets a line on stderr as
it is decided (`progress.DECISIONS`, `EVT_PROGRESS`), since they take minutes in all. A measured decision records the wall seconds of its
phases (`Decision.seconds`: the unfused path's compile, waiting for the kernels' builds, the
checks, the timing). Cost: the kernels' builds and, per distinct
region, one Inductor compile of its unfused path (about 2-5 s; longer under Inductor's
max-autotune, which times GEMM choices of its own). Without an SM90 GPU, or where a size has no
hint, nothing is measured and regions are lowered as in the default mode. Where a shape is
symbolic the kernels are timed on its hint but the unfused path is not (it would be compiled
for a shape that may never run): the fastest kernel is kept, unchecked. A region whose
measurement raises (out of memory for its candidates' inputs, say) is lowered as the default
mode lowers it, with one warning naming it and the reason, and nothing cached (`_unmeasured`);
the other regions' decisions stand.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from torch.utils._python_dispatch import _disable_current_modes

import evt
from evt import debug, ir
from evt.codegen.config import TileConfig, heuristic
from evt.errors import LaunchError, first_line
from evt.graph.contain_padded_outputs import copied_outputs
from evt.runtime import build, dispatch, guards, launch, progress, reference, timing, unfused
from evt.runtime import cache as kernel_cache
from evt.runtime.launch import EVT_ORDER, TileOrder
from evt.runtime.timing import random_like
from evt.sources import source_hash

SCHEMA = 6  # of the cached decisions; 6: the unfused path timed in the candidates' rounds; 5:
# candidates timed in rounds (`rounds`), the unfused path before and after them; 4: timed from
# CUDA graph replays (3: tile orders timed, each call timed with the host's launch in it; 2: the
# unfused path compiled by Inductor; 1: eager)
DEFAULT_ORDERS = "0:1,0:2,0:4,0:8"  # besides evt's own 0:0, always timed first

Timer = Callable[[Callable[[], object]], float]


@dataclass(frozen=True)
class Decision:
    fuse: bool
    config: str | None  # the chosen TileConfig's label
    fused_ms: float | None
    unfused_ms: float | None
    # config label (in evt's tile order) or "label@raster:swizzle" -> ms (inf: failed)
    timings: dict[str, float] = field(default_factory=dict)
    reason: str = ""
    baseline: str = ""  # the unfused path asked for: `unfused.baseline` ("inductor ...", "eager")
    unfused_by: str = ""  # what ran when `unfused_ms` was timed ("" if it was not)
    tile_order: str = ""  # the chosen tile order's label ("": evt's, 0:0)
    timer: str = ""  # how both sides were timed (`pick_timer`)
    # wall seconds of `measure`'s phases (`PHASES`); empty in a decision cached before them
    seconds: dict[str, float] = field(default_factory=dict)
    # the outputs the graph copies out of padded rows after each launch (`dense_outputs`), timed
    # with the fused kernel
    dense_copies: tuple[int, ...] = ()


# `Decision.seconds`' keys: building the unfused path (`unfused.runner`: Inductor's compile),
# waiting for the shortlist's kernels and loading them, running each candidate once against the
# reference (and computing it), the timed rounds of the candidates and the unfused path's timings
PHASES = ("unfused_compile", "builds", "checks", "timing")


def top_k() -> int:
    return max(1, int(os.environ.get("EVT_AUTOTUNE_TOP", "3")))


def tile_orders() -> list[TileOrder]:
    """The tile orders every candidate is timed in: evt's own first, then `EVT_AUTOTUNE_ORDERS`
    (comma-separated raster:swizzle; a malformed one is an error naming the variable)."""
    text = os.environ.get("EVT_AUTOTUNE_ORDERS", DEFAULT_ORDERS)
    try:
        orders = [TileOrder.from_label(x) for x in text.split(",") if x.strip()]
    except LaunchError as e:
        raise LaunchError(f"EVT_AUTOTUNE_ORDERS={text!r}: {e}") from None
    return list(dict.fromkeys([EVT_ORDER, *orders]))


def timing_key(config: str, order: TileOrder) -> str:
    """`Decision.timings`' key of `config` timed in `order`."""
    return config if order == EVT_ORDER else f"{config}@{order.label}"


def split_key(key: str) -> tuple[str, TileOrder]:
    config, _, order = key.partition("@")
    return config, TileOrder.from_label(order) if order else EVT_ORDER


def shortlist(spec: ir.KernelSpec, problem) -> list[TileConfig]:
    """The configs max-autotune times for `spec` at `problem`: the heuristic's first `top_k()`,
    then the best-ranked config of every schedule the first few leave out."""
    ranked = heuristic(spec, *problem)
    out = ranked[: top_k()]
    for schedule in dict.fromkeys(c.schedule for c in ranked):
        if all(c.schedule != schedule for c in out):
            out.append(next(c for c in ranked if c.schedule == schedule))
    return out


def _problem(built):
    """The problem shape a region is measured at, or None where nothing is measured (no SM90 GPU,
    a static reason against the kernel, no size hint)."""
    if guards.static_reason(built.spec) or not dispatch.sm90_available():
        return None
    return dispatch.problem_hint(built.spec, [n.meta.get("val") for n in built.inputs])


def _measured(region, key: str, wanted: str) -> Decision | None:
    """The decision made for `key` in this process or on disk, if it still holds: None where it
    is missing, was timed against another unfused path than `wanted`, or could not time the
    unfused path that now can be."""
    decision = _decided.get(key) or load(key)
    if decision is not None and decision.reason.startswith(NOT_MEASURED):
        return decision  # this process's (never on disk): its identical regions do not fail again
    if decision is None or decision.baseline != wanted:
        return None
    if not decision.unfused_by and unfused.timeable(region):
        return None
    return decision


def prefetch(regions, rest: str = "inductor") -> None:
    """`lower_regions`' `prepare` hook: start building the shortlists of every region to be
    measured, all at once, before the first is timed. Built region by region, each decision
    waited for its own few kernels while the other cores idled (BERT's training step: 6 regions,
    60-75 s each, 357 s cold on the 16-core H100 machine). Counts the distinct regions to be
    measured for the progress lines (`progress.DECISIONS`)."""
    todo = set()
    for region, built in regions:
        problem = _problem(built)
        key = None if problem is None else decision_key(built.spec, problem, dense_outputs(region, built))
        if key is None or key in todo or _measured(region, key, unfused.baseline(rest)):
            continue
        todo.add(key)
        for cfg in shortlist(built.spec, problem):
            _submit(built.spec, cfg)  # one that fails here is rejected by `time_candidates`
    progress.DECISIONS.begin(len(todo))


def decide(region, built, rest: str = "inductor") -> bool:
    """`lower_regions`' `keep` hook: whether to lower `region` (built as `built`) on the backend's
    route `rest`; records the chosen config for `evt.runtime.dispatch`."""
    spec = built.spec
    problem = _problem(built)
    if problem is None:
        return True
    dense = dense_outputs(region, built)
    key, wanted = decision_key(spec, problem, dense), unfused.baseline(rest)
    decision, took = _measured(region, key, wanted), "cached"
    if decision is None:
        start = time.monotonic()
        try:
            with _disable_current_modes():  # a pass may run under a fake mode: measure real tensors
                decision = measure(region, built, problem, baseline=wanted, dense=dense)
        except Exception as e:  # noqa: BLE001 - one region's failed measurement must not unfuse the graph
            decision, took = _unmeasured(spec, problem, e), "not measured"
        else:
            took = f"decided in {time.monotonic() - start:.1f} s: builds, the unfused path, timing"
            try:
                store(key, decision)
            except OSError as e:  # a read-only or full cache: this process still has it
                debug.log(1, f"autotune {spec.name}: decision not cached ({e})")
    _decided[key] = decision  # an identical region later in this process is not measured again
    if decision.fuse and decision.config:
        dispatch.set_config(spec, config_of(spec, problem, decision.config))
        dispatch.set_tile_order(spec, problem, decision.config, order_of(decision))
    shown = decision if took != "cached" else replace(decision, seconds={})  # spent by another
    debug.log(1, f"autotune {spec.name} {problem} ({took}): {describe(shown)}")
    if took != "cached":
        progress.DECISIONS.step(summary(spec, problem, decision))
    for listener in _listeners:
        listener(outcome(spec, problem, decision, measured=took != "cached"))
    return decision.fuse


def _unmeasured(spec: ir.KernelSpec, problem, e: Exception) -> Decision:
    """The decision for a region whose measurement raised (out of memory for its candidates'
    inputs, a reference path that failed, ...): lowered as the default mode lowers it (the
    heuristic's config, no check against the unfused path), with one warning naming the region
    and the reason; not cached, so a later compile measures it again. Before, the exception
    reached the backend, which left the whole graph unfused."""
    why = first_line(e)
    warnings.warn(f"evt: max-autotune could not measure region {spec.name} at {problem} ({why}); "
                  "it is lowered as in the default mode, with the heuristic's config and no "
                  "check against its unfused path", stacklevel=3)  # fmt: skip
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # what an out-of-memory measurement left cached
    return Decision(True, None, None, None, reason=f"{NOT_MEASURED}: {why}")


NOT_MEASURED = "not measured"  # the reason of `_unmeasured`'s decisions


def summary(spec: ir.KernelSpec, problem, d: Decision) -> str:
    """One line for a measured decision's progress line: what was chosen, by how much it beat
    the unfused path, and what the measurement took (the part of it Inductor's compile took)."""
    if d.fuse and not d.config:
        chosen = f"lowered with the heuristic's config ({d.reason})"
    elif d.fuse:
        order = f" in tile order {d.tile_order}" if d.tile_order else ""
        faster = (f", {d.unfused_ms / d.fused_ms:.2f}x faster than unfused"
                  if d.unfused_ms and d.fused_ms else "")  # fmt: skip
        chosen = f"fused with {d.config}{order}{faster}"
    else:
        chosen = f"left unfused ({d.reason})"
    took = ""
    if d.seconds:
        took = (f"; {sum(d.seconds.values()):.1f} s, {d.seconds.get('unfused_compile', 0.0):.1f} s "
                "of it Inductor compiling the unfused path")  # fmt: skip
    return f"{spec.name} at {'x'.join(str(x) for x in problem)}: {chosen}{took}"


def outcome(spec: ir.KernelSpec, problem, decision: Decision, measured: bool) -> dict:
    """What `decide` chose for `spec` at `problem`, for a report (`evt.bench.observe`): the
    heuristic's pick and its time in evt's tile order, the chosen config's place in the
    heuristic's ranking (1: the pick itself; None where none was chosen), its time, the
    unfused path's, whether this process measured it or read it from the cache, the seconds
    of its phases (`Decision.seconds`; empty where read from the cache: this process spent none),
    and every candidate's time (`timing_key` -> ms, None where it failed or computed something
    else), so a results file can rank the whole shortlist, not only the pick and the winner."""
    ranked = [c.label for c in heuristic(spec, *problem)]
    pick = ranked[0] if ranked else None
    heuristic_ms = decision.timings.get(pick, math.inf) if pick else math.inf
    return {
        "region": spec.name,
        "problem": list(problem),
        "fuse": decision.fuse,
        "config": decision.config,
        "tile_order": decision.tile_order or EVT_ORDER.label,
        "rank": ranked.index(decision.config) + 1 if decision.config in ranked else None,
        "candidates": len({split_key(k)[0] for k in decision.timings}),
        "heuristic": pick,
        "heuristic_ms": heuristic_ms if math.isfinite(heuristic_ms) else None,  # inf: it failed
        "best_ms": decision.fused_ms,
        "unfused_ms": decision.unfused_ms,
        "unfused_by": decision.unfused_by,
        "timer": decision.timer,  # GRAPHS, or calls where the unfused path could not be captured
        "measured": measured,
        "seconds": dict(decision.seconds) if measured else {},
        "reason": decision.reason,
        "dense_copies": list(decision.dense_copies),  # timed with each candidate
        "timings": {k: (ms if math.isfinite(ms) else None) for k, ms in decision.timings.items()},
    }


def order_of(decision: Decision) -> TileOrder:
    return TileOrder.from_label(decision.tile_order) if decision.tile_order else EVT_ORDER


def tuned_order(spec: ir.KernelSpec, problem, config: str) -> TileOrder | None:
    """The tile order max-autotune chose for `spec` at `problem` with the config labelled
    `config` (in this process or cached on disk), or None where it chose none there."""
    key = decision_key(spec, problem)
    decision = _decided.get(key) or load(key)
    if decision is None or not decision.fuse or decision.config != config:
        return None
    try:
        return order_of(decision)
    except LaunchError:
        return None  # a cache entry written by hand or another version: evt's order


_decided: dict[str, Decision] = {}
_listeners: list[Callable[[dict], None]] = []  # each called with every decision's `outcome`


def reset() -> None:
    """Forget this process's decisions (tests); the disk cache stays."""
    _decided.clear()


def describe(d: Decision) -> str:
    times = ", ".join(f"{k} {v:.4f} ms" for k, v in d.timings.items())
    order = d.tile_order or EVT_ORDER.label
    verdict = f"fused with {d.config} in tile order {order}" if d.fuse else "left unfused"
    if d.fuse and not d.config:
        verdict = "lowered with the heuristic's config"
    timed = f"({d.unfused_by}) {d.unfused_ms:.4f} ms" if d.unfused_ms is not None else "n/a"
    how = f"; timed as {d.timer}" if d.timer else ""
    if d.dense_copies:
        how += f", each candidate with the dense copies of outputs {list(d.dense_copies)}"
    took = ", ".join(f"{k.replace('_', ' ')} {v:.1f} s" for k, v in d.seconds.items())
    return f"{verdict} ({d.reason}); unfused {timed}; {times}{how}" + (f"; took {took}" if took else "")


def config_of(spec: ir.KernelSpec, problem, label: str) -> TileConfig:
    for cfg in heuristic(spec, *problem):
        if cfg.label == label:
            return cfg
    raise KeyError(label)


def measure(
    region, built, problem, timer: Timer | None = None, baseline: str = "inductor", device="cuda",
    dense: Sequence[int] = (),
) -> Decision:
    """Time the candidates and the unfused path (see the module docstring) with `timer`, by
    default from CUDA graph replays (`pick_timer`). The unfused path is timed in the candidates'
    rounds (`time_candidates`), so both sides keep a median over the same stretch of the
    GPU's clock; each candidate with the dense copies of the outputs in `dense`
    (`dense_outputs`). The decision records the wall seconds of each of `PHASES`."""
    phases: dict[str, float] = {}
    start = time.monotonic()
    runner = unfused.runner(region, baseline, device)
    start = _spent(phases, "unfused_compile", start)
    how = "given timer"
    if timer is None:
        timer, how = pick_timer(runner)
    _spent(phases, "timing", start)
    others = {UNFUSED: runner.run} if runner is not None else {}
    rejected: dict[str, str] = {}
    timings = time_candidates(built, problem, timer, device, phases=phases, others=others,
                              rejected=rejected, dense=dense)  # fmt: skip
    unfused_ms = timings.pop(UNFUSED, None)
    decision = choose(timings, unfused_ms)
    if decision.reason == NO_CANDIDATE and rejected:
        key, why = next(iter(rejected.items()))
        decision = replace(decision, reason=f"{NO_CANDIDATE} ({len(rejected)} rejected; the "
                                            f"first, {key}: {why})")  # fmt: skip
        warnings.warn(f"evt: max-autotune: region {built.spec.name} at {problem}: "
                      f"{decision.reason}; it is left unfused", stacklevel=2)  # fmt: skip
    seconds = {p: round(phases.get(p, 0.0), 2) for p in PHASES}
    return replace(decision, baseline=baseline, unfused_by=runner.by if runner else "", timer=how,
                   seconds=seconds, dense_copies=tuple(dense))  # fmt: skip


def _spent(phases: dict[str, float], phase: str, since: float) -> float:
    """Add the wall seconds since `since` to `phases[phase]`; returns now."""
    now = time.monotonic()
    phases[phase] = phases.get(phase, 0.0) + now - since
    return now


def pick_timer(runner: unfused.Runner | None) -> tuple[Timer, str]:
    """(timer, what it times): replays of CUDA graphs, so the host's cost of a call (evt's
    Python launch, Inductor's wrapper) is not counted on either side, as under CUDA graphs or
    with the host running ahead of the GPU; calls timed back to back for every side where the
    unfused path cannot be captured (tried here: that timing is not kept)."""
    if runner is None:
        return timing.replay_ms, GRAPHS
    try:
        timing.replay_ms(runner.run)
        return timing.replay_ms, GRAPHS
    except Exception as e:  # noqa: BLE001 - e.g. a host sync inside the unfused path
        why = first_line(e, 160)
        debug.log(1, f"autotune: the unfused path could not be captured in a CUDA graph ({why}); "
                     f"timing calls instead")  # fmt: skip
        return timing.gpu_ms, f"calls (the unfused path could not be captured: {why})"


GRAPHS = "cuda graph replays"
# `time_candidates`' key of the unfused path, timed in the candidates' rounds: session 43 (H200)
# timed it before and after them and kept the mean, and at LLaMA-7B's SwiGLU it read 1.1025 ms
# against the fused kernel's 1.1440, where the bench then measured the unfused path 4% slower
# (plausibly the first timing, after the compile's idle seconds, ran before the GPU reached
# its power cap; in the rounds it is one sample of three, and both sides share the drift)
UNFUSED = "unfused"


def rounds() -> int:
    """How many rounds every candidate is timed in (`EVT_AUTOTUNE_ROUNDS`, default 3)."""
    return max(1, int(os.environ.get("EVT_AUTOTUNE_ROUNDS", "3")))


def time_candidates(
    built, problem, timer: Timer, device: str = "cuda", phases: dict[str, float] | None = None,
    others: dict[str, Callable[[], object]] | None = None, rejected: dict[str, str] | None = None,
    dense: Sequence[int] = (),
) -> dict[str, float]:
    """`timing_key(config, order)` -> ms of the `shortlist`'s kernels in each of `tile_orders()`
    (inf: failed or wrong): every candidate checked, then timed once per round for `rounds()`
    rounds, and its median kept. `others` (name -> call: the unfused path) are timed first in
    each round and keep their medians under their names, after the candidates' keys; one that
    raises is not a candidate to reject: its error propagates. Timed one after another, each
    once, a candidate's time carries the clock of its moment (the GPU boosts, then settles at
    what its power cap allows): on the H100 the first candidate timed for LLaMA's cross-entropy
    backward read 1.39 ms and all 19 after it 1.47-1.85 ms (session 19), and the 1.20x that
    session 35's timing found for another config of GPT-2's did not show in the case's own
    time. In rounds, a drift falls on every candidate alike. The wall seconds of "builds",
    "checks" and "timing" (`PHASES`) are added to `phases`; why each rejected key was, to
    `rejected`. Each candidate is called as the graph will call it (`_as_dispatched`), followed by
    the dense copies of the outputs in `dense`."""
    phases = {} if phases is None else phases
    rejected = {} if rejected is None else rejected
    start = time.monotonic()
    spec = built.spec
    orders = tile_orders()
    candidates = shortlist(spec, problem)
    jobs = {cfg.label: _submit(spec, cfg) for cfg in candidates}
    start = _spent(phases, "builds", start)
    inputs = candidate_inputs(built, problem, device)
    want = reference.run(spec, inputs)
    start = _spent(phases, "checks", start)
    timings: dict[str, float] = {}
    checked: dict[str, Callable[[], object]] = {}
    for label, job in jobs.items():
        try:
            if isinstance(job, Exception):
                raise job
            kernel = launch.Kernel(spec, launch.load(job.result()))
        except Exception as e:  # noqa: BLE001 - a failed candidate is just not chosen
            _reject(spec, label, e, rejected)
            timings.update({timing_key(label, order): math.inf for order in orders})
            continue
        finally:
            start = _spent(phases, "builds", start)
        for order in orders:
            key = timing_key(label, order)
            try:
                ordered = _as_dispatched(spec, kernel.ordered(order), dense)
                if not _close(ordered(inputs), want):
                    raise ValueError("its outputs differ from the reference path")
                checked[key] = lambda ordered=ordered: ordered(inputs)
            except Exception as e:  # noqa: BLE001
                _reject(spec, key, e, rejected)
                timings[key] = math.inf
        start = _spent(phases, "checks", start)
    others = others or {}
    runs = {**others, **checked}
    samples: dict[str, list[float]] = {key: [] for key in runs}
    for _ in range(rounds()):
        for key, run in runs.items():
            if key in timings:  # it failed in an earlier round
                continue
            try:
                samples[key].append(timer(run))
            except Exception as e:  # noqa: BLE001
                if key in others:
                    raise
                _reject(spec, key, e, rejected)
                timings[key] = math.inf
    for key, times in samples.items():
        timings.setdefault(key, statistics.median(times))
    _spent(phases, "timing", start)
    keys = [timing_key(c.label, o) for c in candidates for o in orders] + list(others)
    return {key: timings[key] for key in keys}


def _reject(spec: ir.KernelSpec, key: str, e: Exception, rejected: dict[str, str]) -> None:
    """Record why candidate `key` was rejected (and log it at `EVT_DEBUG=1`)."""
    why = first_line(e)
    rejected[key] = why
    debug.log(1, f"autotune {spec.name}: config {key} rejected: {why}")


def _as_dispatched(spec: ir.KernelSpec, kernel: launch.Kernel, dense: Sequence[int] = ()) -> Callable:
    """`kernel` called as the graph calls it: `dispatch.run` first copies the aux tensors TMA
    cannot read as they are into padded rows (`guards.copy_into_rows`: ViT's 197 x 197 bool mask),
    and the graph then copies the outputs in `dense` out of their padded rows
    (`dense_outputs`), so a candidate is checked on, and timed with, the copies its region's
    launches make. Called on the inputs as they are, every candidate of ViT's attention scores
    failed its guards, and max-autotune left the region unfused for want of any (session 44)."""

    def call(inputs):
        outs = kernel(guards.copy_into_rows(spec, inputs) or inputs)
        return [o.contiguous() if i in dense else o for i, o in enumerate(outs)]

    return call


def dense_outputs(region, built) -> tuple[int, ...]:
    """The outputs the graph copies out of padded rows after each launch
    (`contain_padded_outputs.copied_outputs`). Timed without those copies, max-autotune fused
    ViT's attention scores as the graph's output (the kernel 0.052 ms, the unfused path
    0.083 ms; H200, session 45), and the graph then ran 0.089 ms with the copy."""
    return tuple(copied_outputs(region, built))


def _submit(spec: ir.KernelSpec, cfg: TileConfig):
    """The build job of `spec` at `cfg`, or the exception that kept it from being planned (a
    config its epilogue cannot render): that candidate is rejected, not the region."""
    try:
        return build.prefetch(spec, cfg, compile_fn=dispatch.COMPILE_FN)
    except Exception as e:  # noqa: BLE001
        return e


def candidate_inputs(built, problem, device: str = "cuda") -> list[torch.Tensor]:
    """Random inputs laid out as the graph's, the GEMM's two operands scaled by K^-1/4 each so
    its accumulator has unit variance, as a layer's pre-activations roughly do. Unscaled, it
    has K^1/2 (28 at K = 768): exp() in a softmax or cross-entropy epilogue then overflows at
    the largest elements, where a kernel's inf next to the reference's 3e38 rejected every
    config of GPT-2's and BERT's cross-entropy backward on the H100."""
    inputs = [random_like(n.meta["val"], device) for n in built.inputs]
    scale = float(problem[2]) ** -0.25
    for operand in (built.spec.gemm.a, built.spec.gemm.b):
        if inputs[operand.input].is_floating_point():
            inputs[operand.input].mul_(scale)
    return inputs


NO_CANDIDATE = "no candidate config ran"  # `choose`'s reason where every candidate failed


def choose(timings: dict[str, float], unfused_ms: float | None) -> Decision:
    """The fastest config and tile order, fused only if it beats the unfused path (when that was
    measured); a tie goes to the key timed first (evt's order before the others)."""
    best = min(timings, key=timings.__getitem__) if timings else None
    if best is None or math.isinf(timings[best]):
        return Decision(False, None, None, unfused_ms, timings, NO_CANDIDATE)
    config, order = split_key(best)
    label = "" if order == EVT_ORDER else order.label
    fuse = unfused_ms is None or timings[best] < unfused_ms
    reason = "faster than unfused" if fuse else "slower than unfused"
    return Decision(fuse, config, timings[best], unfused_ms, timings, reason, tile_order=label)


def _close(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor]) -> bool:
    for g, w in zip(got, want, strict=True):
        g, w = g.float(), w.float()
        ok = torch.isfinite(g) == torch.isfinite(w)
        err = (g - w).abs().nan_to_num(0.0).max().item()
        scale = w.abs().nan_to_num(0.0).max().clamp_min(1.0).item()
        if not bool(ok.all()) or err > 0.05 * scale:
            return False
    return True


# --- the decision cache -------------------------------------------------------------------------


def decision_key(spec: ir.KernelSpec, problem, dense: Sequence[int] = ()) -> str:
    """The decision's cache key: the region, the problem, the GPU, evt's and torch's versions,
    and the outputs the graph copies to dense rows (`dense_outputs`; none: the key as before)."""
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    versions = f"evt {evt.__version__} ({source_hash()}), torch {torch.__version__}, schema {SCHEMA}"
    parts = (dispatch.identity(spec), repr(tuple(problem)), gpu, versions)
    if dense:
        parts += (f"dense copies of outputs {tuple(dense)}",)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _path(key: str) -> Path:
    return kernel_cache.root() / "autotune" / f"{key}.json"


def load(key: str) -> Decision | None:
    try:
        data = json.loads(_path(key).read_text())
        data["timings"] = {k: math.inf if v is None else v for k, v in data["timings"].items()}
        data["dense_copies"] = tuple(data.get("dense_copies", ()))
        return Decision(**data)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None  # missing or unreadable: measure again


def store(key: str, decision: Decision) -> None:
    path = _path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    data = asdict(decision)
    data["timings"] = {k: (v if math.isfinite(v) else None) for k, v in data["timings"].items()}
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)  # atomic: a reader sees the old file or the new one
