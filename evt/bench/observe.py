"""What a baseline did besides producing numbers: warnings, and for evt its regions, kernel
builds, launches and fallbacks. Recorded in each result's `notes`, so a table cell can be
explained (e.g. "evt formed 2 regions but ran 0 kernels")."""

from __future__ import annotations

import collections
import contextlib
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

MAX_WARNINGS = 8


@contextlib.contextmanager
def warnings_seen(notes: dict) -> Iterator[None]:
    """Record the distinct warning messages raised inside (trimmed) into `notes["warnings"]`."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            seen = list(dict.fromkeys(str(w.message).strip()[:500] for w in caught))
            if seen:
                notes["warnings"] = seen[:MAX_WARNINGS]


def _cache_entries(root: Path) -> set[str]:
    from evt.runtime import cache

    return {p.name for p in root.iterdir() if cache.is_entry(p)}


@contextlib.contextmanager
def evt_regions(notes: dict) -> Iterator[None]:
    """Record the regions evt formed in the graphs compiled inside (one compile: the cold one)."""
    from evt import backend

    reports: list = []
    backend._listeners.append(reports.append)
    try:
        yield
    finally:
        backend._listeners.remove(reports.append)
        regions = [r for g in reports for r in g.regions]
        notes["regions"] = [f"{r.side} {r.anchor} + {', '.join(r.fused)}" for r in regions]
        notes["region_names"] = sorted({r.name for r in regions})
        notes["unfused_gemms"] = sum(g.unfused_gemms for g in reports)


@contextlib.contextmanager
def evt_runtime(notes: dict) -> Iterator[None]:
    """Record kernels built into evt's cache, kernel launches, the tile config and tile order
    of each kernel at each new problem it planned a launch for, and, for the regions (named by
    `evt_regions` inside) that never launched a kernel, why they fell back."""
    from evt.runtime import cache, dispatch

    launches = collections.Counter(dispatch.launches())
    built = _cache_entries(cache.root())
    planned = set(dispatch.planned())
    try:
        yield
    finally:
        after = collections.Counter(dispatch.launches()) - launches
        notes["kernels"] = sorted(v for k, v in dispatch.planned().items() if k not in planned)
        reasons = getattr(dispatch, "FALLBACKS", {})
        notes["kernels_built"] = len(_cache_entries(cache.root()) - built)
        notes["kernel_launches"] = sum(after.values())
        names = notes.get("region_names", [])
        notes["fallbacks"] = {n: reasons[n] for n in names if n in reasons and not after[n]}


@contextlib.contextmanager
def evt_autotune(notes: dict) -> Iterator[None]:
    """Record max-autotune's decisions made inside (`evt.runtime.autotune.outcome`: the
    heuristic's pick, the config the timing chose and its rank in the heuristic's order, both
    times, the unfused path's) into `notes["autotune"]`; nothing in evt's default mode."""
    from evt.runtime import autotune

    seen: list[dict] = []
    autotune._listeners.append(seen.append)
    try:
        yield
    finally:
        autotune._listeners.remove(seen.append)
        if seen:
            notes["autotune"] = seen


def region_host_us(run: Callable[[], object]) -> float | None:
    """The C++ launch path's host time per region call over `run()`, timed (`fast.timed`): its
    own part (outputs, workspace, the kernel's launcher; the op's dispatch from Python comes on
    top). A pass of its own: the clock reads cost host time the timed passes must not carry."""
    from evt.runtime import fast

    with fast.timed():
        before = fast.host_times()
        run()
        return host_us_per_call(fast.host_times_since(before).values())


def host_us_per_call(spent) -> float | None:
    """Mean host us per call of the C++ launch path over regions' `fast.HostTime`s (None: no
    call took it)."""
    calls = sum(t.launches for t in spent)
    return round(sum(t.call_ns for t in spent) / calls / 1e3, 1) if calls else None
