"""Build every evt kernel a stage will need, in parallel, before anything is timed.

Kernels are keyed on dtypes, layouts and the epilogue tree, never on shapes, so each case is
captured at its tiny CPU size (`evt.explain`, the reference path runs it) and the regions it
reports are handed to the build pool at once. Without this, each case's first call would wait
for its own nvcc, one after another, and a stage of 20 kernels would spend 15 minutes compiling.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable

import torch

from evt.bench import ops, steps
from evt.bench.workload import Case


def prebuild(cases: Iterable[Case], dtype: torch.dtype, log: Callable[[str], None]) -> int:
    """Start (and wait for) every kernel build; returns how many distinct kernels were asked."""
    import evt
    from evt.runtime import build

    small = {c.name: c for c in ops.cases(small=True) + steps.cases(small=True)}
    futures = {}
    for case in cases:
        tiny = small.get(case.name)
        if tiny is None:
            continue
        try:
            w = (ops if tiny.kind == "op" else steps).build(tiny, dtype, "cpu")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                report = evt.explain(w.target, *w.make_inputs(0))
        except Exception as e:  # noqa: BLE001 - the case itself will report what fails
            log(f"[evt] prebuild: could not capture {case.name}: {type(e).__name__}: {e}")
            continue
        for r in report.regions:
            job = build.plan(r.spec)
            futures.setdefault(job.key, build.submit(job))
    log(f"[evt] prebuilding {len(futures)} kernels in parallel")
    for f in futures.values():
        try:
            f.result()
        except Exception as e:  # noqa: BLE001 - the case's own run reports the failure
            log(f"[evt] prebuild: a kernel failed to build: {str(e).splitlines()[0][:200]}")
    return len(futures)
