"""Measure one stage in this process: for each case, build the workload once (inputs, float64
reference, FLOPs), then for each of the stage's baselines: build (compile, timing the first call
cold and warm), check the result against the reference, and only if it is right, time it.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

from evt.bench import check, clocks, in_turn, measure, observe, ops, steps
from evt.bench.baselines import BASELINES, Baseline
from evt.bench.env import now
from evt.bench.plan import Item, Plan, pending
from evt.bench.store import Store, new_record
from evt.bench.workload import Case, Workload, dtype_name, nbytes, outputs, to_reference

MAX_ERROR_CHARS = 4000
# readings of an op case's host time per call, their median recorded (`measure.host_ms_median`)
HOST_READINGS = 5


@dataclass
class CaseState:
    """A case's workload, input sets, reference outputs and counts, shared by its baselines."""

    case: Case
    workload: Workload
    input_sets: list[tuple]
    reference: tuple
    flops: int
    bytes: int | None
    tolerance: float
    dtype: torch.dtype

    @classmethod
    def build(cls, case: Case, dtype: torch.dtype, device: str) -> CaseState:
        w = (ops if case.kind == "op" else steps).build(case, dtype, device)
        first = w.make_inputs(0)
        with FlopCounterMode(display=False) as counter:
            eager_out = outputs(w.eager(*first))
        size = nbytes(first) + nbytes(eager_out) if case.kind == "op" else None
        n = measure.input_set_count(size or 0, measure.l2_bytes(device))
        sets = [first] + [w.make_inputs(seed) for seed in range(1, n)]
        ref = outputs(w.reference(first))
        tol = check.tolerance(eager_out, ref, dtype)
        return cls(case, w, sets, ref, counter.get_total_flops(), size, tol, dtype)

    def expected(self, b: Baseline) -> tuple[tuple, float]:
        """The reference outputs and tolerance for what `b` computes (the bare GEMM for mm)."""
        if not b.gemm_only:
            return self.reference, self.tolerance
        ref = outputs(self.workload.gemm(*to_reference(self.input_sets[0])))
        return ref, check.TOLERANCE[self.dtype]


def error_text(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + " [...]"


def fresh_inductor_cache() -> contextlib.AbstractContextManager:
    from torch._inductor import utils

    return (getattr(utils, "fresh_cache", None) or utils.fresh_inductor_cache)()


def base_record(item: Item, dtype: torch.dtype, device: str, **fields) -> dict:
    return new_record(item, dtype_name(dtype), timer=measure.timer_name(device), **fields)


def build_impl(b: Baseline, s: CaseState, device: str, rec: dict, notes: dict) -> Callable:
    if not b.compiled:
        return b.build(s.workload, device)
    make = lambda: b.build(s.workload, device)  # noqa: E731
    torch._dynamo.reset()
    with b.observe_compile(notes):
        rec["compile_cold_s"], _, _ = measure.first_call_s(make, s.input_sets[0], device)
    torch._dynamo.reset()  # Inductor's caches stay: the second compile is the warm one
    rec["compile_warm_s"], impl, _ = measure.first_call_s(make, s.input_sets[0], device)
    return impl


def measure_item(b: Baseline, s: CaseState, device: str, rec: dict, notes: dict) -> None:
    if not b.timed:
        in_turn.measure_pair(s, device, rec)
        return
    impl = build_impl(b, s, device, rec, notes)
    verdict = check.compare(impl(*s.input_sets[0]), *s.expected(b))
    rec.update(rel_err=verdict.errors, tolerance=verdict.tolerance)
    if not verdict.ok:
        rec.update(status="wrong", error=verdict.why)
        return
    with clocks.window(device) as seen:
        ms = measure.time_ms(measure.rotating(impl, s.input_sets), device)
    rec.update(status="ok", time_ms=ms, flops=s.flops, bytes=s.bytes, input_sets=len(s.input_sets))
    rec["sm_mhz"] = seen.get("sm_mhz")
    rec["tflops"] = s.flops / (ms * 1e9) if s.flops else None
    rec["gbps"] = s.bytes / (ms * 1e6) if s.bytes else None
    if device.startswith("cuda"):
        readings = HOST_READINGS if s.case.kind == "op" else 1  # a step's 50 calls take seconds
        rec["host_ms"] = measure.host_ms_median(measure.rotating(impl, s.input_sets), device, readings)
        if b.is_evt:
            notes["host_us_per_region_call"] = observe.region_host_us(
                lambda: measure.host_ms(measure.rotating(impl, s.input_sets), device)
            )
        graph_item(impl, s, device, rec)
    if s.case.kind == "step":
        s.workload.release()  # the peak is above parameters and inputs, without old gradients
        rec["peak_mem_bytes"] = measure.peak_memory(lambda: impl(*s.input_sets[0]), device)


def graph_item(impl: Callable, s: CaseState, device: str, rec: dict) -> None:
    """The same calls replayed from CUDA graphs: the GPU's time without the host's."""
    try:
        with clocks.window(device) as seen:
            ms = measure.graph_time_ms(impl, s.input_sets, device)
    except Exception as e:  # noqa: BLE001 - recorded; the eager-launch time stands
        rec["graph_error"] = error_text(e)
        return
    rec["graph_ms"] = ms
    rec.update(graph_sm_mhz=seen.get("sm_mhz"), graph_power_w=seen.get("power_w"),
               clock_events=seen.get("events"))  # fmt: skip
    rec["graph_tflops"] = s.flops / (ms * 1e9) if s.flops else None


def run_item(item: Item, s: CaseState, device: str, dtype: torch.dtype) -> dict:
    b, rec, notes = BASELINES[item.baseline], base_record(item, dtype, device), {}
    if b.is_evt:
        from evt.runtime import dispatch

        dispatch.reset()  # tile configs chosen at this case's shapes, as in a fresh process
    cache = fresh_inductor_cache() if b.compiled else contextlib.nullcontext()
    try:
        with cache, b.observe(notes):
            measure_item(b, s, device, rec, notes)
    except Exception as e:  # noqa: BLE001 - any failure is this baseline's result: n/a
        rec.update(status="n/a", error=error_text(e))
    finally:
        if b.compiled:
            torch._dynamo.reset()
    if rec.get("status") == "ok" and notes.get("fallbacks"):
        # regions ran through the reference path: that time is not evt's, say so, keep it out
        why = "; ".join(f"{k}: {v}" for k, v in notes["fallbacks"].items())
        rec.update(status="fallback", error=f"regions ran unfused, not timed as evt: {why}")
    rec.update(notes=notes, finished=now())
    return rec


def summary(rec: dict) -> str:
    head = f"[{rec['stage']}] {rec['case']:28} {rec['baseline']:16} {rec['status']:6}"
    if rec["status"] != "ok":
        return f"{head} {(rec['error'] or '').splitlines()[0][:160]}"
    if rec.get("in_turn") is not None:
        first, second = list(rec["in_turn"])
        ratios = [in_turn.ratio(rec, f) for f in ("time_ms", "host_ms", "graph_ms")]
        as_run, host, graphs = (f"{r:.3f}" if r else "—" for r in ratios)
        won = in_turn.rounds_faster(rec, "time_ms")
        rounds = f"; {first} faster in {won[0]} of {won[1]} rounds (p {won[2]:.2g})" if won else ""
        return (f"{head} {first} / {second}: as run {as_run}, host {host}, graphs {graphs} "
                f"(medians, in turn){rounds}")  # fmt: skip
    rate = f" {rec['tflops']:7.1f} TFLOP/s" if rec.get("tflops") else ""
    comp = rec.get("compile_cold_s")
    comp = f"  compile {comp:.1f} s cold, {rec['compile_warm_s']:.1f} s warm" if comp else ""
    return f"{head} {rec['time_ms']:9.4f} ms{rate}{comp}"


def run_stage(
    plan: Plan,
    stage: str,
    store: Store,
    device: str,
    dtype: torch.dtype,
    log: Callable[[str], None] = print,
    beat: Callable[..., None] = lambda *a: None,
    deadline: float | None = None,
) -> None:
    """Measure the stage's pending items. `beat(phase, case, baseline)` says what is running
    (the parent process watches it); past `deadline` (time.monotonic()) nothing new starts and
    the rest is recorded "skipped" (stage time limit). Items an earlier call's time limit
    stopped (`outlasted_s`) run after the others, the shortest first, and only where more time
    is left than they ran then: the others are recorded "skipped" (needs more time than was
    left) and the stage ends sooner."""
    todo = pending(plan, store.results, stage)
    if not todo:
        return
    probe(store, stage, "host_probe_us", device)
    try:
        measure_stage(plan, stage, store, device, dtype, todo, log, beat, deadline)
    finally:  # the same probe after the stage's items: did this process's host slow down?
        probe(store, stage, "host_probe_end_us", device)


def probe(store: Store, stage: str, field: str, device: str) -> None:
    """Record this process's host probe (`measure.host_probe_us`) as the stage run's `field`
    (a child restarted after a crash records its own); a probe that fails records nothing and
    never hides the stage's own error."""
    with contextlib.suppress(Exception):  # a broken CUDA context: the stage's items report it
        store.stage_run(stage, **{field: round(measure.host_probe_us(device), 2)})


def measure_stage(plan: Plan, stage: str, store: Store, device: str, dtype: torch.dtype,
                  todo: list[Item], log, beat, deadline: float | None) -> None:  # fmt: skip
    """`run_stage`'s pending items `todo`, measured case by case (its doc)."""
    if stage in ("evt", "in-turn") and device.startswith("cuda"):
        beat("prebuild")
        prebuild_all(todo, store, dtype, log, device, stage)
    needs = {i.key: (store.record(*i.key) or {}).get("outlasted_s") or 0.0 for i in todo}
    cases = list(dict.fromkeys(i.case for i in todo))
    cases.sort(key=lambda c: max(needs[i.key] for i in todo if i.case == c))  # stable
    for case in cases:
        items = [i for i in todo if i.case == case]
        items = [i for i in items if not outlasts(i, needs[i.key], deadline, store, log)]
        if not items:
            continue
        if out_of_time(deadline, pending(plan, store.results, stage), store, log):
            return
        beat("case", case.name)
        try:
            state = CaseState.build(case, dtype, device)
        except Exception as e:  # noqa: BLE001 - no workload: every baseline of the case is n/a
            why = f"building the workload or its reference failed: {error_text(e)}"
            for item in items:
                store.add(base_record(item, dtype, device, status="n/a", error=why, finished=now()))
                log(summary(store.results[-1]))
            continue
        for item in items:
            if out_of_time(deadline, pending(plan, store.results, stage), store, log):
                return
            if outlasts(item, needs[item.key], deadline, store, log):  # the case's others took it
                continue
            beat("item", case.name, item.baseline)
            store.add(run_item(item, state, device, dtype))
            beat("case", case.name)  # the item's clock stops here
            log(summary(store.results[-1]))
        del state
        gc.collect()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()


def outlasts(item: Item, need_s: float, deadline: float | None, store: Store, log) -> bool:
    """Whether `item` ran `need_s` in an earlier call before a time limit stopped it and less
    than that is left before `deadline`: then it is recorded "skipped" and not started."""
    if not need_s or deadline is None:
        return False
    left = deadline - time.monotonic()
    if left >= need_s:
        return False
    why = (f"not started: an earlier call's time limit stopped it after {need_s:.0f} s, and "
           f"{max(left, 0):.0f} s were left")  # fmt: skip
    store.mark([item], "skipped", why, skip="outlasts")
    log(f"[{item.stage}] {item.case.name} / {item.baseline}: {why}")
    return True


def out_of_time(deadline: float | None, left: list[Item], store: Store, log) -> bool:
    if deadline is None or time.monotonic() < deadline or not left:
        return False
    store.mark(left, "skipped", "not reached before the stage's time limit", skip="time")
    log(f"[{left[0].stage}] time limit: {len(left)} not measured (stage time limit)")
    return True


def prebuild_all(
    todo: list[Item], store: Store, dtype: torch.dtype, log, device: str, stage: str = "evt"
) -> None:
    """evt's kernels for every pending case, built in parallel before anything is timed; the
    time is the stage's (kept apart from each case's compile time)."""
    from evt.bench.prebuild import prebuild

    t0 = time.monotonic()
    n = prebuild(dict.fromkeys(i.case for i in todo), dtype, log, device)
    store.stage_run(stage, prebuild_s=round(time.monotonic() - t0, 1), prebuild_kernels=n)
