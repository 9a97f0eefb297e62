"""Default mode's profitability check: does a region's fused kernel beat cuBLAS plus Inductor?

Two things make a fused kernel slower than the GEMM alone besides its epilogue's own work: the
epilogue's shared memory can leave the widest tiles too few main-loop stages
(`config.stage_tier`: LayerNorm's backward, with an fp32 aux tensor and an fp32 D, runs at
128x128), and evt's persistent kernels run whole tiles, so a partial last wave costs a whole
one, where cuBLAS's stream-K and split-K kernels spread it over the SMs. At the LM head's dgrad
(8192 x 768 x 50304: 192 tiles of 128x256 on 132 SMs) both hit: on an H100 the kernel with
LayerNorm's backward took 985 us at 128x128 where cuBLAS took 790 us and Inductor's
LayerNorm-backward kernels ~40 us.

The wave model's absolute epilogue costs are too rough to weigh a whole epilogue against
Inductor's kernel (the activation epilogues it would call slow run 1.07-1.8x torch.compile), so
the check puts the same epilogue on both sides: before a region is lowered, `slower_reason`
compares, with `config.estimate` at the region's problem shape,
- the fused kernel at the heuristic's first config, whole waves, against
- the same epilogue at the best config ignoring the stage tier, its partial wave spread over the
  SMs (a stand-in for cuBLAS and the epilogue's work, wherever it runs), plus the time
  Inductor's kernels take for the memory traffic the fusion saves
  (`trim_for_inductor.inductor_savings`), less the bytes of the dense copies the graph will
  make of the kernel's padded outputs (`contain_padded_outputs.copied_outputs`), and one more
  launch.
The region stays unfused where the fused kernel is predicted slower by more than `MARGIN`;
where its tiles fill the waves and nothing restricts the tile, it always stays. max-autotune
measures instead (`evt.runtime.autotune`). `EVT_PROFIT=0` turns the check off.
"""

from __future__ import annotations

import os

from evt.codegen.config import estimate, heuristic, unrestricted_key
from evt.ir import KernelSpec

# One 128x256x64 k-block on one SM at cuBLAS's speed (H100: 8192 x 768 x 50304 in 793 us is
# 150,915 k-blocks over 132 SMs: 0.69 us each) and HBM bandwidth as achieved (H100 3.35 TB/s
# peak; ~3.0 in Inductor's streaming kernels). The H200's faster memory makes saved bytes
# worth less: this errs toward keeping regions there.
UNIT_US = 0.69
BYTES_PER_US = 3.0e6
LAUNCH_US = 3.0  # one more kernel on the unfused path (Inductor's), on the GPU's timeline
MARGIN = 0.05  # of the unfused path's time: the model is rough; near-ties stay fused


def enabled() -> bool:
    return os.environ.get("EVT_PROFIT", "1") != "0"


def times_us(spec: KernelSpec, problem: tuple[int, int, int, int], saved_bytes: int):
    """(fused, unfused) predicted microseconds of `spec` at `problem` = (M, N, K, L) as the
    module's doc models them, or None where no tile fits the epilogue (the build reports
    that)."""
    predicted = _predict(spec, problem, saved_bytes)
    return None if predicted is None else predicted[:2]


def _predict(spec: KernelSpec, problem, saved_bytes: int):
    """(fused us, unfused us, the fused kernel's config), or None where no tile fits."""
    ranked = heuristic(spec, *problem)
    if not ranked:
        return None
    free = min(ranked, key=lambda c: unrestricted_key(spec, c, *problem, balanced=True))
    fused = estimate(spec, ranked[0], *problem) * UNIT_US
    unrestricted = estimate(spec, free, *problem, balanced=True) * UNIT_US
    return fused, unrestricted + saved_bytes / BYTES_PER_US + LAUNCH_US, ranked[0]


def slower_reason(spec: KernelSpec, problem, saved_bytes: int) -> str | None:
    """Why `spec`'s fused kernel should not replace the unfused path at `problem`, else None
    (None too where the check is off or the shape is unknown)."""
    if not enabled() or problem is None or min(problem) <= 0:
        return None
    predicted = _predict(spec, problem, saved_bytes)
    if predicted is None or predicted[0] <= predicted[1] * (1 + MARGIN):
        return None
    fused, unfused, config = predicted
    return (f"predicted slower fused ({fused:.0f} us at {config.label}) than cuBLAS + "
            f"Inductor ({unfused:.0f} us) at (M, N, K, L) = {tuple(problem)}: the tile its "
            "epilogue leaves, or a partial last wave run whole, costs more than the fusion saves "
            "(EVT_PROFIT=0 keeps it)")  # fmt: skip
