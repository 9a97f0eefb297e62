"""Build every evt kernel a stage will need, in parallel, before anything is timed.

Each case is captured at its real sizes, so each region's tile config is chosen for the shapes
the case will run, exactly as in the case's own run: the dispatch state is reset before each
capture here and before each evt measurement (`runner.run_item`), so every case picks its configs
as a fresh process would. The kernels are handed to the build pool at once; without this each
case's first call would wait for its own nvcc, one after another.

On CUDA the capture runs on the device itself with every region on its reference path
(`dispatch.reference_only`): the graphs are the run's own. A "meta" capture (shapes only, the
default off CUDA and in the CPU tests) traces some losses differently: torch 2.11's AOTAutograd
on meta tensors gives mse_loss a gradient for its target (which requires none) and
cross_entropy none for its input, so the loss regions' specs differed from the run's and their
kernels were built again at the first call (scripts/prebuild_check.py shows such differences).
Meta also lays a convolution's result out contiguously where cuDNN returns it channels-last, so
a meta capture keeps pointwise convolutions as convolutions (`pointwise_convs_as_mm` needs the
GPU's layouts): their GEMMs' kernels are built by the CUDA capture, or from a CPU one.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator

import torch

from evt.bench import ops, steps
from evt.bench.workload import Case


def jobs(
    cases: Iterable[Case],
    dtype: torch.dtype,
    log: Callable[[str], None],
    device: str = "meta",
    configs: Callable | None = None,
) -> Iterator[tuple[str, object]]:
    """(case name, `build.Job`) for every kernel the cases' regions need, each case captured on
    `device` as it comes (no compiler runs here): `prebuild` submits them as they are yielded.
    `configs(spec, problem)`: the tile configs to build each region at (default: the one the
    run picks, `dispatch.config_for`); a config a region cannot take is skipped with a line in
    the log."""
    import evt
    from evt.errors import CodegenError
    from evt.runtime import build, dispatch

    for case in cases:
        try:
            w = (ops if case.kind == "op" else steps).build(case, dtype, device)
            dispatch.reset()
            with warnings.catch_warnings(), dispatch.reference_only():
                warnings.simplefilter("ignore")
                report = evt.explain(w.target, *w.make_inputs(0))
            w.release()
        except Exception as e:  # noqa: BLE001 - the case itself will report what fails
            log(f"[evt] prebuild: could not capture {case.name}: {type(e).__name__}: {e}")
            continue
        for spec, problem in report.kernels():
            for config in configs(spec, problem) if configs else [dispatch.config_for(spec, problem)]:
                try:
                    yield case.name, build.plan(spec, config)
                except CodegenError as e:
                    log(f"[evt] prebuild: {case.name} at {config.label}: {str(e).splitlines()[0][:160]}")
    dispatch.reset()


def prebuild(
    cases: Iterable[Case],
    dtype: torch.dtype,
    log: Callable[[str], None],
    device: str = "meta",
    configs: Callable | None = None,
) -> int:
    """Start (and wait for) every kernel build, each case captured on `device` ("cuda": the
    run's own graphs; "meta": shapes only); returns how many distinct kernels were asked.
    `configs`: as `jobs` takes it (scripts/kernel_pack.py asks for other configs)."""
    from evt.runtime import build

    futures = {}
    for _, job in jobs(cases, dtype, log, device, configs):
        futures.setdefault(job.key, build.submit(job))  # builds start while later cases capture
    log(f"[evt] prebuilding {len(futures)} kernels in parallel")
    for f in futures.values():
        try:
            f.result()
        except Exception as e:  # noqa: BLE001 - the case's own run reports the failure
            log(f"[evt] prebuild: a kernel failed to build: {str(e).splitlines()[0][:200]}")
    return len(futures)
