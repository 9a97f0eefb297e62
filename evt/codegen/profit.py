"""Default mode's profitability check: does a region's fused kernel beat cuBLAS plus Inductor?

Two things make a fused kernel slower than the GEMM alone besides its epilogue's own work: the
epilogue's shared memory can leave the widest tiles too few main-loop stages
(`config.stage_tier`: LayerNorm's backward, with an fp32 aux tensor and an fp32 D, runs at
128x128), and evt's persistent kernels run whole tiles, so a partial last wave costs a whole
one, where cuBLAS's stream-K and split-K kernels spread it over the SMs. At the LM head's dgrad
(8192 x 768 x 50304: 192 tiles of 128x256 on 132 SMs) both hit: on an H100 the kernel with
LayerNorm's backward took 985 us at 128x128 where cuBLAS took 790 us and Inductor's
LayerNorm-backward kernels ~40 us.

The wave model's absolute memory costs are too rough to weigh a whole epilogue against
Inductor's kernel (the activation epilogues it would call slow run 1.07-1.8x torch.compile), so
the check puts the same epilogue traffic on both sides: before a region is lowered, `predict`
compares, with `config.estimate` at the region's problem shape,
- the fused kernel at the heuristic's first config, whole waves, its compute nodes costing their
  instructions (`op_costs`, `PER_INSTRUCTION`), against
- the same epilogue's traffic at the best config ignoring the stage tier, its partial wave
  spread over the SMs (a stand-in for cuBLAS and the epilogue's memory traffic, wherever it
  runs), plus the time Inductor's kernels take for the memory traffic the fusion saves
  (`trim_for_inductor.inductor_savings`), less the bytes of the dense copies the graph will
  make of the kernel's padded outputs (`contain_padded_outputs.copied_outputs`), and one more
  launch. The epilogue's arithmetic costs nothing there while Inductor's kernel, with every SM's
  lanes and warps, moves its bytes for longer than it computes; only its excess counts
  (`inductor_arithmetic_us`).
Arithmetic is what the fused kernel cannot hide where K is small: a cooperative tile computes
its epilogue after its main loop, a ping-pong warp group beside the other's with half the
warps. The tanh GELU written out in ~25 nodes with libm's tanhf (GPT-2's `gelu_new` in float32)
fused at 0.88x the unfused path at 8192 x 4096 x 1024 (session 63) where the native one ran at
1.27x. `benchmarks/epilogue_arithmetic.py` times such epilogues (13 of them at 7 shapes on an
H200, session 64): the constants below and `config._INSTRUCTIONS_EXPOSED` make 87 of its 91
decisions right (`--score`; the old check fused all 91, 26 of them slower), all 91 with the
K >= 2048 cases timed again in turn (session 65: the four misses, timed once each, had read
5-11% slower fused; in turn they were level or faster).
The region stays unfused where the fused kernel is predicted slower by more than `MARGIN`.
max-autotune measures instead (`evt.runtime.autotune`). `EVT_PROFIT=0` turns the check off;
`RegionReport.predicted` keeps each fused region's prediction either way.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from evt.codegen.config import TileConfig, element_bytes, estimate, heuristic, unrestricted_key
from evt.codegen.op_costs import epilogue_instructions
from evt.ir import AuxLoad, AuxStore, KernelSpec

# One 128x256x64 k-block on one SM at cuBLAS's speed (H100: 8192 x 768 x 50304 in 793 us is
# 150,915 k-blocks over 132 SMs: 0.69 us each) and HBM bandwidth as achieved (H100 3.35 TB/s
# peak; ~3.0 in Inductor's streaming kernels). The H200's faster memory makes saved bytes
# worth less: this errs toward keeping regions there.
UNIT_US = 0.69
BYTES_PER_US = 3.0e6
LAUNCH_US = 3.0  # one more kernel on the unfused path (Inductor's), on the GPU's timeline
MARGIN = 0.05  # of the unfused path's time: the model is rough; near-ties stay fused
# One ALU instruction an element of a 128x256 tile's epilogue, in k-blocks: 32768 elements over
# an SM's 128 lanes are 256 issue cycles, 0.2 of a k-block's ~1260 at full issue; an epilogue's
# dependent chains in 8 warps issue slower (`benchmarks/epilogue_arithmetic.py`).
PER_INSTRUCTION = 0.4
# Instructions an element Inductor's pointwise kernel issues over the GPU per microsecond: 132
# SMs x 128 lanes at ~1.8 GHz, at half rate (fitted; libdevice's functions take other paths
# than evt's functors)
INDUCTOR_INSTRUCTIONS_PER_US = 132 * 128 * 1800 * 0.5


class Prediction(NamedTuple):
    fused_us: float
    unfused_us: float
    config: TileConfig  # the fused kernel's (the heuristic's first, unless `predict` was given one)


def enabled() -> bool:
    return os.environ.get("EVT_PROFIT", "1") != "0"


def predict(spec: KernelSpec, problem, saved_bytes: int, config: TileConfig | None = None) -> Prediction | None:
    """What `spec`'s fused kernel (at `config`, else the heuristic's first) and the unfused path
    take at `problem` = (M, N, K, L), in microseconds, as the module's doc models them; None
    where the shape is unknown or no tile fits the epilogue (the build reports that)."""
    if problem is None or min(problem) <= 0:
        return None
    ranked = heuristic(spec, *problem)
    if not ranked:
        return None
    config = config or ranked[0]
    free = min(ranked, key=lambda c: unrestricted_key(spec, c, *problem, balanced=True))
    fused = estimate(spec, config, *problem, per_instruction=PER_INSTRUCTION) * UNIT_US
    unrestricted = estimate(spec, free, *problem, balanced=True, per_instruction=0.0) * UNIT_US
    excess = inductor_arithmetic_us(spec, problem, saved_bytes)
    return Prediction(fused, unrestricted + saved_bytes / BYTES_PER_US + LAUNCH_US + excess, config)


def inductor_arithmetic_us(spec: KernelSpec, problem, saved_bytes: int) -> float:
    """How much longer Inductor's kernel computes `spec`'s epilogue than it moves its bytes (what
    the fusion saves, and the outputs and aux tensors both paths move): 0 where memory-bound."""
    m, n, _, batch = problem
    elements = m * n * max(batch, 1)
    sizes = [element_bytes(spec.d_dtype)] + [element_bytes(x.dtype) for x in spec.nodes
                                             if isinstance(x, AuxLoad | AuxStore)]  # fmt: skip
    memory = (saved_bytes + elements * sum(sizes)) / BYTES_PER_US
    return max(elements * epilogue_instructions(spec) / INDUCTOR_INSTRUCTIONS_PER_US - memory, 0.0)


def slower_reason(prediction: Prediction | None, problem) -> str | None:
    """Why the fused kernel should not replace the unfused path, by `prediction`, else None
    (None too where the check is off or there is no prediction)."""
    if not enabled() or prediction is None or prediction.fused_us <= prediction.unfused_us * (1 + MARGIN):
        return None
    fused, unfused, config = prediction
    return (f"predicted slower fused ({fused:.0f} us at {config.label}) than cuBLAS + "
            f"Inductor ({unfused:.0f} us) at (M, N, K, L) = {tuple(problem)}: the tile its "
            "epilogue leaves, a partial last wave run whole, or arithmetic the GEMM cannot hide "
            "costs more than the fusion saves (EVT_PROFIT=0 keeps it)")  # fmt: skip
