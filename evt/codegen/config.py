"""Tile configurations of the SM90 GEMM: CTA tile, cluster, and mainloop/epilogue schedule, and
the heuristic that ranks them for a region at a problem shape.

`default_config(spec)` is the shape-blind choice (a kernel built before any shape is known);
`heuristic(spec, M, N, K, L)` ranks `CANDIDATES` with a small cost model: the persistent grid's
waves of output tiles (wave quantization), the main loop's efficiency per tile shape, and the
epilogue's cost (bytes it moves per tile, its special functions), hidden behind the next tile's
main loop by ping-pong but not by cooperative schedules. `benchmarks/config_sweep.py` is the
exhaustive sweep it is judged against.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, replace

from evt.codegen import op_costs, wave_traffic
from evt.errors import CodegenError
from evt.ir import (
    COMPUTE_OPS,
    REDUCTIONS,
    ROW_STATISTICS,
    AuxLoad,
    AuxStore,
    ColumnWelfordStats,
    KernelSpec,
    RowBroadcast,
    SoftmaxStats,
    row_pitch,
)

# schedule -> (mainloop kernel schedule, epilogue schedule, tile M granule)
SCHEDULES = {
    "cooperative": (
        "cutlass::gemm::KernelTmaWarpSpecializedCooperative",
        "cutlass::epilogue::TmaWarpSpecializedCooperative",
        128,
    ),
    "pingpong": (
        "cutlass::gemm::KernelTmaWarpSpecializedPingpong",
        "cutlass::epilogue::TmaWarpSpecialized",
        64,
    ),
}
SMEM_BYTES = 232448  # SM90 shared memory per block (227 KiB)
# scheduler -> CUTLASS's tile scheduler tag. "persistent": each CTA loops over whole output
# tiles (a partial last wave costs a whole one); "streamk": the tiles of the last waves are cut
# along K and spread evenly over the SMs, the CTA finishing a tile adding its peers' partial
# accumulators (fp32, in the workspace, in a fixed order: deterministic) before running the
# epilogue once. Cooperative kernels only (CUTLASS's ping-pong kernel rejects it).
SCHEDULERS = {
    "persistent": "cutlass::gemm::PersistentScheduler",
    "streamk": "cutlass::gemm::StreamKScheduler",
}


@dataclass(frozen=True, repr=False)
class TileConfig:
    tile_m: int = 128
    tile_n: int = 256
    tile_k: int = 64
    cluster_m: int = 1
    cluster_n: int = 1
    schedule: str = "cooperative"
    epi_n: int = 0  # the epilogue subtile's N (its M is the schedule's: 128 / 64); 0: CUTLASS's (32)
    scheduler: str = "persistent"
    # Shared-memory stages of the aux loads (the epilogue's source); 0: CUTLASS's, min(subtiles, 4)
    epi_stages_c: int = 0
    # Aux stores straight from registers to global memory (CUTLASS's Sm90AuxStore with 0 stages)
    # instead of through shared memory and a TMA store: no shared memory, no barrier or TMA wait
    # per subtile, each thread's fragment stored by itself. Not a candidate: an experiment of
    # `config_sweep.py --configs ..._da` until measured.
    direct_aux: bool = False
    # Every output (D and the aux stores) straight from registers, `store_align` elements per
    # store (1, 2, 4 or 8), instead of through shared memory and a TMA store (0). Not a
    # candidate: TMA needs each row to start on a 16-byte boundary, and outputs whose N is not a
    # multiple of 16 bytes (ViT's 197 x 197 attention scores) now get padded rows
    # (`ir.row_pitch`), which TMA stores 4.0-4.7x faster than these on the H100 (session 18).
    store_align: int = 0
    # TMA stores into padded rows (`ir.row_pitch`) where an output's N is not a multiple of 16
    # bytes: CUTLASS's `can_implement` checks the extent N against TMA's unit, these kernels
    # check it rounded up to 16 elements (the padded rows hold the vector a row ends in, which
    # TMA writes whole: `ir.padded_storage`). The heuristic sets it at such an N only
    # (`pads_rows`), so every other kernel keeps its source and its key.
    pad_rows: bool = False
    # Aux loads straight from global memory into registers (`evt::Sm90AuxLoadRegisters`,
    # evt_register_loads.inc), `register_loads` subtiles in flight (1: each subtile's loads at
    # its start; 2: one subtile ahead, ...), instead of through shared memory by the producer
    # warp's TMA (0): no shared memory, no barrier per subtile. Not a candidate: on the H100
    # (session 23, benchmarks/results/2026-11-27-H100-session23/) the exact GELU's backward ran
    # at 0.44-0.53 / 0.55-0.64 / 0.56-0.66 of the bare GEMM with 1 / 2 / 3 subtiles in flight
    # against 0.75-0.83 through TMA; LayerNorm statistics and the fp32 residual at K = 3072 at
    # -11% to +9% of TMA at the same tile, never above the best TMA config beyond noise. ptxas
    # emits each subtile's proxy fence before its TMA store as MEMBAR.ALL.CTA +
    # FENCE.VIEW.ASYNC.S, and the MEMBAR waits for every load in flight: no load outlives the
    # subtile it was issued in.
    register_loads: int = 0
    # CUTLASS's epilogue collective with a store loop without its per-subtile proxy fence
    # (MEMBAR.ALL.CTA), named barriers and TMA store (`evt::Sm90FenceFreeEpilogue`,
    # evt_fence_free.inc): for kernels with every output from registers (`store_align`) and
    # every aux tensor loaded into registers (`register_loads`), no reduction. Not a candidate:
    # correct, but on the H100 (session 23) bias + ReLU stored so ran at 0.78-0.87 of the bare
    # GEMM against 0.92-1.07 through TMA at K <= 1024, the GELU's backward at 0.54-0.65 against
    # 0.77-0.81: the per-thread global stores and loads cost more than the shared-memory stages
    # and the fences they avoid.
    fence_free: bool = False
    # Shared-memory stages of D and the aux stores, TMA stores in flight (0: CUTLASS's,
    # min(subtiles, 2)). Not a candidate: an experiment of `config_sweep.py --configs ..._sd4`.
    epi_stages_d: int = 0
    # Aux loads through CUTLASS's shared-memory stages, with the whole tile's aux data first
    # prefetched into L2 when the producer warp starts the tile (`evt::Sm90AuxLoadPrefetch`,
    # evt_aux_prefetch.inc). Not a candidate: on the H100 (session 24,
    # benchmarks/results/2026-11-27-H100-session24/) the GELU's backward, the fp32 residual and
    # LayerNorm statistics ran from 4% slower to 3% faster with it (128x128 ping-pong: 0-4%
    # slower; 128x256 cooperative, not their best config: -4% to +3%), never above the best
    # config without it: the loads' DRAM latency is not what their epilogues wait for.
    aux_prefetch: bool = False
    # Aux loads through CUTLASS's shared-memory stages whose TMA loads ask L2 to evict their lines
    # first (`evt::Sm90AuxLoadEvictFirst`, evt_aux_evict_first.inc): an aux tile is read once,
    # the main loop's operand panels again by the wave's other tiles. Not a candidate: on the
    # H100 (session 33, benchmarks/results/2026-11-28-H100-session33/) the LLaMA step's six
    # regions ran 0-13% slower with it (two rounds), and Nsight Compute saw the SwiGLU dgrad's
    # DRAM traffic and L2 hit rate unchanged (739 MB, 72.3%): its aux lines are not what evicts
    # the operands. Kept as a config-sweep experiment (`_ef`).
    aux_evict_first: bool = False
    # Every output (D and the aux stores) through a shared-memory stage as for a TMA store, then
    # copied to global memory by the epilogue's threads, consecutive threads along the row, each
    # element predicated on the bounds (`evt::Sm90AuxStoreStaged`, evt_staged_store.inc): any N,
    # dense rows where TMA needs 16-byte ones (ViT's 197 x 197 scores; an LM head at an odd
    # vocabulary). Not a candidate: correct on an H200, but its element-by-element copy ran at
    # 0.22-0.25 of the bare GEMM where TMA's store reached 0.78-0.84 (session 45): a config-sweep
    # experiment (`_ss`).
    staged_stores: bool = False

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise CodegenError(f"unknown schedule {self.schedule!r}: use one of {list(SCHEDULES)}")
        if self.scheduler not in SCHEDULERS:
            raise CodegenError(f"unknown tile scheduler {self.scheduler!r}: use one of "
                               f"{list(SCHEDULERS)}")  # fmt: skip
        if self.scheduler == "streamk" and self.schedule != "cooperative":
            raise CodegenError(f"{self.schedule} kernels have no stream-K scheduler in CUTLASS: "
                               "use schedule='cooperative'")  # fmt: skip
        granule = SCHEDULES[self.schedule][2]
        ok = self.tile_m % granule == 0 and self.tile_n % 16 == 0 and self.tile_k % 16 == 0
        ok = ok and self.tile_m <= 256 and self.tile_n <= 256
        if not ok or self.cluster_m * self.cluster_n not in (1, 2, 4):
            raise CodegenError(
                f"unsupported {self}: tile M must be a multiple of {granule} for {self.schedule}, "
                "tile N and K multiples of 16, tiles at most 256, cluster of 1, 2 or 4 CTAs"
            )
        if self.epi_stages_c not in (0, 1, 2, 3, 4):
            raise CodegenError(f"unsupported {self}: the epilogue's source stages are 1 to 4 "
                               "(0: CUTLASS's choice)")  # fmt: skip
        if not 0 <= self.epi_stages_d <= 8:
            raise CodegenError(f"unsupported {self}: the epilogue's store stages are 1 to 8 "
                               "(0: CUTLASS's choice)")  # fmt: skip
        if not 0 <= self.register_loads <= 8:
            raise CodegenError(f"unsupported {self}: aux loads into registers keep 1 to 8 subtiles "
                               "in flight (0: through shared memory by TMA)")  # fmt: skip
        if self.aux_evict_first and (self.register_loads or self.aux_prefetch):
            raise CodegenError(f"unsupported {self}: aux loads with L2's evict-first hint "
                               "(aux_evict_first) are TMA loads without a prefetch, not "
                               "register_loads or aux_prefetch")  # fmt: skip
        if self.aux_prefetch and self.register_loads:
            raise CodegenError(f"unsupported {self}: aux loads go into registers (register_loads) "
                               "or through shared memory with an L2 prefetch (aux_prefetch)")  # fmt: skip
        if self.staged_stores and (self.store_align or self.direct_aux or self.pad_rows):
            raise CodegenError(f"unsupported {self}: staged stores (_ss) store every output "
                               "through shared memory at any N: not with register stores "
                               "(_sa, _da) or TMA's padded rows (_pr)")  # fmt: skip
        if self.store_align not in (0, 1, 2, 4, 8):
            raise CodegenError(f"unsupported {self}: outputs are stored from registers 1, 2, 4 or "
                               "8 elements at a time (0: through shared memory by TMA)")  # fmt: skip
        if self.epi_n and (self.epi_n % 16 or self.tile_n % self.epi_n or self.tile_m < self.epi_m):
            raise CodegenError(f"unsupported {self}: the epilogue tile's N must be a multiple of "
                               "16 dividing tile N, and tile M at least the schedule's "
                               f"epilogue M ({self.epi_m})")  # fmt: skip

    def __repr__(self) -> str:
        """Every field, except those added after kernels were cached (`_LATE_FIELDS`) while they
        hold their defaults: a cache key hashes this text, so kernels built before a field
        existed keep their keys."""
        fields = [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)]
        shown = [f"{k}={v!r}" for k, v in fields if not (k in _LATE_FIELDS and v == _DEFAULTS[k])]
        return f"TileConfig({', '.join(shown)})"

    @property
    def epi_m(self) -> int:
        """The epilogue subtile's M: CUTLASS fixes it per schedule (its tile M granule: the rows
        its math warp groups cover together)."""
        return SCHEDULES[self.schedule][2]

    @property
    def epilogue_tile(self) -> tuple[int, int]:
        """(M, N) of the epilogue subtile the kernel iterates over (CUTLASS's choice when
        `epi_n` is 0)."""
        n = self.epi_n or math.gcd(32, self.tile_n)
        return min(self.epi_m, self.tile_m), n

    @property
    def label(self) -> str:
        return (
            f"{self.tile_m}x{self.tile_n}x{self.tile_k}"
            f"_c{self.cluster_m}x{self.cluster_n}_{self.schedule}"
            + (f"_e{self.epi_n}" if self.epi_n else "")
            + ("_sk" if self.scheduler == "streamk" else "")
            + (f"_sc{self.epi_stages_c}" if self.epi_stages_c else "")
            + ("_da" if self.direct_aux else "")
            + (f"_sa{self.store_align}" if self.store_align else "")
            + ("_pr" if self.pad_rows else "")
            + (f"_rl{self.register_loads}" if self.register_loads else "")
            + ("_ff" if self.fence_free else "")
            + (f"_sd{self.epi_stages_d}" if self.epi_stages_d else "")
            + ("_pf" if self.aux_prefetch else "")
            + ("_ef" if self.aux_evict_first else "")
            + ("_ss" if self.staged_stores else "")
        )

    @classmethod
    def from_label(cls, label: str) -> TileConfig:
        """The config whose `label` is `label` (e.g. 128x128x64_c2x1_pingpong_e64_sc2)."""
        m = _LABEL.fullmatch(label)
        if m is None:
            raise CodegenError(f"{label!r} is not a tile config label: write TMxTNxTK_cCMxCN_"
                               f"SCHEDULE[_eN][_sk][_scS][_da][_saA][_pr][_rlR][_ff][_sdD][_pf][_ef][_ss], e.g. 128x128x64_c2x1_pingpong")  # fmt: skip
        tm, tn, tk, cm, cn, schedule, epi_n, sk, sc, da, sa, pr, rl, ff, sd, pf, ef, ss = m.groups()
        return cls(int(tm), int(tn), int(tk), int(cm), int(cn), schedule, int(epi_n or 0),
                   "streamk" if sk else "persistent", int(sc or 0), bool(da), int(sa or 0),
                   bool(pr), int(rl or 0), bool(ff), int(sd or 0), bool(pf), bool(ef),
                   bool(ss))  # fmt: skip


_LATE_FIELDS = ("store_align", "pad_rows", "register_loads", "fence_free", "epi_stages_d",
                "aux_prefetch", "aux_evict_first", "staged_stores")
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TileConfig)}
_LABEL = re.compile(
    r"(\d+)x(\d+)x(\d+)_c(\d+)x(\d+)_([a-z]+)(?:_e(\d+))?(_sk)?(?:_sc(\d+))?(_da)?(?:_sa(\d+))?(_pr)?(?:_rl(\d+))?(_ff)?(?:_sd(\d+))?(_pf)?(_ef)?(_ss)?"
)

PINGPONG = TileConfig(64, 256, 64, schedule="pingpong")


FALLBACK_TILES = (TileConfig(128, 128, 64), TileConfig(128, 64, 64))

# What `heuristic` chooses from (and `benchmarks/config_sweep.py` sweeps).
CANDIDATES = (
    TileConfig(128, 256, 64),
    TileConfig(128, 256, 64, cluster_m=2),
    TileConfig(128, 192, 64),
    TileConfig(256, 128, 64),
    TileConfig(256, 128, 64, cluster_m=2),
    TileConfig(128, 128, 64),
    TileConfig(128, 128, 64, cluster_m=2),
    TileConfig(128, 128, 64, schedule="pingpong"),
    TileConfig(128, 128, 64, cluster_n=2, schedule="pingpong"),
    TileConfig(64, 256, 64, schedule="pingpong"),
    TileConfig(128, 64, 64),
    TileConfig(128, 256, 64, scheduler="streamk"),
    TileConfig(128, 128, 64, scheduler="streamk"),
)


def default_config(spec: KernelSpec) -> TileConfig:
    """128x256x64 cooperative while the epilogue's shared memory leaves it 3 mainloop stages;
    else the first narrower tile that keeps 2 (CUTLASS's minimum: the fuzzer found epilogues with
    several fp32 aux tensors that leave 128x128 only one), preferring one that keeps 3
    (`stage_tier`)."""
    wide = TileConfig(staged_stores=spec.dense_rows)  # dense rows: any N, which is not known yet
    tiles = (wide, *(replace(c, staged_stores=spec.dense_rows) for c in FALLBACK_TILES))
    usable = [c for c in tiles if mainloop_stages(spec, c) >= (3 if c == wide else 2)]
    if usable:
        return min(usable, key=lambda c: stage_tier(spec, c))  # the first of the best tier
    raise CodegenError(
        f"kernel {spec.name}: its epilogue's shared memory leaves no tile 2 mainloop stages; "
        "the region runs unfused"
    )


# A main loop with fewer stages than this loses to the same tile with fewer aux-load stages
# (`source_stages`).
_WANTED_STAGES = 5


def source_stages(spec: KernelSpec, cfg: TileConfig) -> TileConfig:
    """`cfg` with fewer shared-memory stages for the aux loads where CUTLASS's (min(subtiles, 4))
    leave the main loop under `_WANTED_STAGES` and fewer give it more: the most aux-load stages
    that reach the main loop's best count (at least 2). On the H100 (session 14,
    `config_sweep_source_stages.json`), LayerNorm's statistics with a bf16 residual at
    8192x1024x4096 ran at 0.82 of the bare GEMM with 128x256 tiles and 2 aux stages (4 main-loop
    stages) against 0.77 with CUTLASS's 4 (3 main-loop stages); an fp32 residual at 0.79 against
    0.49 (3 main-loop stages against 2), at 128x192 0.76-0.77 against 0.65-0.67, at 128x128
    cooperative 0.69-0.77 against 0.63-0.70 (5 against 4). Where the main loop kept 5 or more
    (128x128 ping-pong), fewer aux stages won as often as they lost (+-5%)."""
    if cfg.epi_stages_c or not any(isinstance(n, AuxLoad) for n in spec.nodes):
        return cfg
    default = mainloop_stages(spec, cfg)
    if default >= _WANTED_STAGES:
        return cfg
    fewer = [replace(cfg, epi_stages_c=c) for c in range(min(epilogue_subtiles(cfg), 4) - 1, 1, -1)]
    best = max(fewer, key=lambda c: mainloop_stages(spec, c), default=cfg)  # the first: most stages
    return best if mainloop_stages(spec, best) > default else cfg


def epilogue_subtiles(cfg: TileConfig) -> int:
    """How many epilogue subtiles a CTA tile has (CUTLASS's aux-load stages: at most 4 of them)."""
    epi_m, epi_n = cfg.epilogue_tile
    return (cfg.tile_m // epi_m) * (cfg.tile_n // epi_n)


def fits(spec: KernelSpec, cfg: TileConfig) -> bool:
    """Whether the epilogue's shared memory leaves `cfg` at least 2 mainloop stages (and, for
    stream-K, whether the batch is flat: CUTLASS's stream-K scheduler takes one L mode; for a
    fence-free epilogue, whether nothing goes through shared memory: `fence_free_reason`)."""
    if cfg.scheduler == "streamk" and spec.gemm.nested:
        return False
    if fence_free_reason(spec, cfg):
        return False
    if cfg.epilogue_tile[1] < 32 and any(isinstance(n, ColumnWelfordStats) for n in spec.nodes):
        return False  # its swap shuffle gives each of 8 lanes a column of the subtile's 32
    return mainloop_stages(spec, cfg) >= 2


def fence_free_reason(spec: KernelSpec, cfg: TileConfig) -> str | None:
    """Why `spec` cannot take `cfg`'s fence-free epilogue, else None (also where `cfg` has none):
    such a kernel has nothing in shared memory between subtiles, so every output is stored from
    registers, every aux tensor loaded into registers, and no reduction runs."""
    if not cfg.fence_free:
        return None
    if not cfg.store_align:
        return (f"kernel {spec.name}: a fence-free epilogue ({cfg.label}) stores its outputs from "
                "registers: give the config store_align (_saN)")  # fmt: skip
    if any(isinstance(n, AuxLoad) for n in spec.nodes) and not cfg.register_loads:
        return (f"kernel {spec.name}: a fence-free epilogue ({cfg.label}) loads its aux tensors "
                "into registers: give the config register_loads (_rlN)")  # fmt: skip
    if node := next((n for n in spec.nodes if isinstance(n, REDUCTIONS)), None):
        return (f"node {node.name}: reductions go through shared memory between the subtiles' "
                f"barriers, which a fence-free epilogue ({cfg.label}) has not: use a config "
                "without _ff")  # fmt: skip
    return None


SM_COUNT = 132  # H100 SXM / H200: the persistent grid's width
# Main-loop throughput per tile shape and schedule, relative to 128x256 cooperative (narrow
# tiles re-read more operands per FLOP; 2x1 clusters never won on the swept shapes). Fitted with
# the constants below by a grid search against every committed sweep
# (`benchmarks/heuristic_score.py`), last in session 13. 256x128's since session 55: it ran 3-9%
# behind 128x256 in the data gradient's layout at K >= 3072 (H200, `2026-11-22-H200/
# config_sweep.json`), level with it at K <= 768; 0.96 breaks their tie toward the wide tile
# unless the epilogue favours the tall one (reductions over M, `epilogue_parts`).
_MAINLOOP = {
    (128, 256, "cooperative"): 1.0, (256, 128, "cooperative"): 0.96,
    (128, 192, "cooperative"): 0.9,
    (128, 128, "cooperative"): 0.9, (128, 128, "pingpong"): 0.9,
    (64, 256, "pingpong"): 0.85, (128, 64, "cooperative"): 0.75,
}  # fmt: skip
_SPECIAL = {"exp", "log", "gelu_tanh", "gelu_tanh_backward", "silu", "silu_backward", "sigmoid",
            "tanh", "rsqrt"}  # fmt: skip
# the exact GELU, each of its forms (ops sharing its reference): 12-20 FP32 instructions and 1
# (the 16-bit forms') or 2 SFU an element
_ERF = {op for op, c in COMPUTE_OPS.items() if c.reference in ("gelu", "gelu_backward")}
# Epilogue cost per 128x256 tile, in k-blocks of main loop: storing D, aux tensors read and
# written (per 2 bytes an element), special functions and reductions; plus a fixed cost per tile
# whatever its area ("tile": filling the pipeline, the epilogue's barriers), which makes the
# widest tile win where K is one k-block (attention's scores: 128x256 cooperative ran at 0.93-0.95
# of the bare GEMM on the H100, 128x128 at 0.81-0.91). A cooperative tile's epilogue follows its
# main loop; a ping-pong warp group runs its tile's epilogue alone (its arithmetic
# `_PINGPONG_EPILOGUE` times slower per area) while the other group's main loop runs. Session
# 13's grid search (with the ping-pong model corrected: a CTA's two warp groups share the SM's
# tensor cores, they do not double its throughput) scores 0.994 of the measured best in geomean
# over the 62 swept cases, 0.944 at worst (0.980 / 0.86 before, over the 60 without attention's).
_COST = {"load": 4.0, "store": 5.0, "special": 1.1, "reduction": 2.0, "d": 4.0, "tile": 1.0,
         "instruction": 0.065}  # fmt: skip
# "instruction": each ALU instruction an element of the other compute nodes (`op_costs`), about
# a special function's cost over its instructions (libm's tanhf: 1.1 over 17). Since session 64:
# a degree-32 polynomial (66 instructions) had ranked 128x128 ping-pong first at K <= 512, where
# max-autotune timed 128x256 cooperative 1.4-1.6x faster (H200, `2026-12-01-H200-session64/`);
# no region of the suite, the steps or the nn catalog changed its config, and
# `benchmarks/heuristic_score.py` scores the same.
_PINGPONG_EPILOGUE = 3.0
# The same for the compute nodes' instructions (`estimate`'s `per_instruction`): fitted with
# `evt.codegen.profit.PER_INSTRUCTION` on `benchmarks/epilogue_arithmetic.py`'s timings
_PINGPONG_INSTRUCTIONS = 1.5
# (k-blocks, exponent): an epilogue's instructions cost their whole `per_instruction` up to that
# many k-blocks of main loop, (k0 / k) ** exponent of it beyond: at K >= 2048 the arithmetic of
# tanh(tanh(tanh(x))) and of a degree-32 polynomial cost 128x256 cooperative tiles no more
# than a few percent over the ReLU's (H200, session 64). Fitted with `PER_INSTRUCTION`
# (`benchmarks/epilogue_arithmetic.py --score`: 87 of 91 timed decisions right; 91 of 91 since
# session 65 timed its K >= 2048 cases again, in turn)
_INSTRUCTIONS_EXPOSED = (16, 0.3)
# Stream-K, in tiles' time: each tile's work costs `_STREAMK_SLOWER` of the persistent kernel's
# (its scheduler's bookkeeping), and a grid not whole waves pays `_STREAMK_FIXUP` more (peers'
# fp32 partials written to and read back from the workspace on the finishing CTAs' critical
# path). Fitted on the H100 sweep of 5 patterns x 3-4 shapes (benchmarks/results/
# 2026-11-22-H100-session11/config_sweep_streamk.json): 0.1-0.9 tiles for grids of 1.4-4.5 waves,
# 0.5-2.5 tiles at 6-18 waves; it beat the persistent kernel at the same tile only where the
# last wave was under about half full, and lost to a narrower persistent tile everywhere, small
# grids included (`config_sweep_small_grids.json`: 1024-4096 rows, 19-192 tiles, 8 cases:
# CUTLASS's decomposition heuristic split little there, 128x64 persistent tiles won).
_STREAMK_SLOWER = 1.06
_STREAMK_FIXUP = 0.5
# The share of the shorter of (main loop, epilogue) ping-pong still pays (its warp groups hand
# the tensor cores over at barriers; the epilogue's TMA stores compete for shared memory).
_OVERLAP_LEFT = 0.3


def heuristic(spec: KernelSpec, M: int, N: int, K: int, L: int = 1) -> list[TileConfig]:
    """`CANDIDATES` that fit `spec`, best first, for an M x N x K (x L) problem (none: the
    epilogue leaves no candidate 2 mainloop stages). Statistics over N with a special function
    (softmax's and cross-entropy's exp) take 128x128 ping-pong with a 1x2 cluster first at
    K <= 1024 and ping-pong without one last (`_special_statistics_tier`). The exact GELU ranked
    ping-pong last too until its epilogue got cheaper in session 13, after which ping-pong won
    it at K <= 1024. Stream-K tiles rank by `estimate`: first only where the last wave is mostly
    empty. Each config takes its aux loads' stages from `source_stages`. A config whose waves
    would outrun DRAM whatever swizzle evt launches it with (`wave_traffic.outruns`) ranks after
    the others of its stage tier.
    `benchmarks/heuristic_score.py` scores this against every committed sweep: 0.993 of the
    measured best in geomean over 131 cases, 0.926 at worst (session 55)."""
    candidates = CANDIDATES
    if pads_rows(spec, N):  # outputs TMA cannot store as they are: padded rows, or dense ones
        candidates = [any_row_length(spec, c) for c in CANDIDATES]
    candidates = [epilogue_subtile(spec, c, K) for c in candidates]
    fitting = [source_stages(spec, c) for c in candidates if fits(spec, c)]
    size = element_bytes(spec.gemm.dtype)
    return sorted(fitting, key=lambda c: (stage_tier(spec, c),
                                          wave_traffic.outruns(c, M, N, K, L, SM_COUNT, size),
                                          *unrestricted_key(spec, c, M, N, K, L)))  # fmt: skip


# Epilogue subtile N for a problem whose K is one k-block, where the epilogue is all the kernel
# does (attention's scores: K = 64): CUTLASS's 32 pays a fence, two barriers and a TMA store per
# 128 x 32 subtile. On the H100 (session 23, `benchmarks/results/2026-11-27-H100-session23/`)
# 128x256 cooperative with 64-wide subtiles ran the causal scores at 0.99-1.01 of cuBLAS's bmm
# against 0.91-0.92 at GPT-2's shape and 0.96-0.97 against 0.93-0.94 at BERT's; at K = 768 it
# changed nothing measurable (session 22: +1%).
_ONE_K_BLOCK_EPILOGUE_N = 64


def epilogue_subtile(spec: KernelSpec, cfg: TileConfig, K: int) -> TileConfig:
    """`cfg` with `_ONE_K_BLOCK_EPILOGUE_N`-wide epilogue subtiles where K fits one k-block, the
    tile is cooperative and wide enough (ping-pong's subtiles take the other warp group's shared
    memory too) and the wider stages leave the main loop its 2; else `cfg`."""
    n = _ONE_K_BLOCK_EPILOGUE_N
    if cfg.epi_n or K > cfg.tile_k or cfg.schedule != "cooperative" or cfg.tile_n % n or cfg.tile_n <= n:
        return cfg
    wide = replace(cfg, epi_n=n)
    return wide if fits(spec, wide) else cfg


def pads_rows(spec: KernelSpec, N: int) -> bool:
    """Whether some [L,] M, N output (D, an aux store) has rows TMA cannot store as they are
    at this N (`ir.row_pitch` pads them), so the kernel needs `TileConfig.pad_rows` (or, for a
    spec with dense rows, `staged_stores`: `any_row_length`)."""
    dtypes = [spec.d_dtype, *(n.dtype for n in spec.nodes if isinstance(n, AuxStore))]
    return any(row_pitch(N, d) != N for d in dtypes)


def any_row_length(spec: KernelSpec, cfg: TileConfig) -> TileConfig:
    """`cfg` storing rows of any length: into padded rows through TMA (`pad_rows`), or where the
    spec's rows are dense (`KernelSpec.dense_rows`) by the epilogue's threads (`staged_stores`)."""
    return replace(cfg, staged_stores=True) if spec.dense_rows else replace(cfg, pad_rows=True)


def unrestricted_key(spec: KernelSpec, cfg: TileConfig, M: int, N: int, K: int, L: int = 1,
                     balanced: bool = False):
    """The heuristic's order without `stage_tier`: `_special_statistics_tier` (statistics with a
    special function), then the estimate (`evt.codegen.profit` weighs the tier against it)."""
    return _special_statistics_tier(spec, cfg, K), estimate(spec, cfg, M, N, K, L, balanced)


# The largest K at which statistics with a special function take ping-pong with an N cluster first.
PINGPONG_CLUSTER_STATISTICS_MAX_K = 1024


def _special_statistics_tier(spec: KernelSpec, cfg: TileConfig, K: int) -> int:
    """For statistics over N with a special function (softmax's exp, a cross-entropy's log):
    0 for ping-pong with a 1x2 cluster at K <= `PINGPONG_CLUSTER_STATISTICS_MAX_K`, 2 for the
    other ping-pong configs, 1 for the rest (the estimate ranks within a tier); 1 for every
    config of any other epilogue. Session 16's H100 sweep
    (`config_sweep_pingpong_clusters.json`, softmax statistics and the cross-entropy forward):
    128x128 ping-pong ran at 0.67-0.71 of the bare GEMM at K = 1024 and 4096 (0.83-0.88 at
    K = 768); with a 1x2 cluster (two CTAs sharing A's tile) at 0.86-0.91 at K <= 1024, ahead
    of the cooperative 128x256 (0.78-0.84; 256x128 timed within 2% of it before session 13),
    and at 0.85 at K = 4096, behind it (0.99-1.01; ping-pong stays last above K = 1024, as
    sessions 13-15 ranked it everywhere). LayerNorm's statistics (Welford: no special function)
    and, since session 13, the exact GELU are left to the estimate (ping-pong won both at
    K <= 1024)."""
    special = any(isinstance(n, SoftmaxStats) or getattr(n, "op", None) in _SPECIAL
                  for n in spec.nodes)  # fmt: skip
    if not (special and _has_statistic(spec)) or cfg.schedule != "pingpong":
        return 1
    return 0 if cfg.cluster_n > 1 and K <= PINGPONG_CLUSTER_STATISTICS_MAX_K else 2


def stage_tier(spec: KernelSpec, cfg: TileConfig) -> int:
    """0 where the epilogue's shared memory leaves the main loop 3 or more stages, 1 where it
    leaves 2: two stages cannot hide the loads. On the H100 (scripts/spec_ablation.py,
    `benchmarks/results/2026-11-22-H100-session10/`), LayerNorm's backward (an fp32 aux tensor,
    fp32 D, two row and two column reductions) left 128x256 and 256x128 two stages and ran there
    in 148-163 us against 84-107 us at 128x128 and 128x64 (8192x768x3072), 1677-2008 us
    against 929-1519 us at 8192x768x50304.

    (Until session 10 a tier here ranked tiles by row reduction: CUTLASS's tile reduction
    indexed registers at run time at 128x128 and ptxas moved the epilogue's state to local
    memory, 2-3x slower; `evt::Sm90RowReductionDeferred` now unrolls those loops and no
    candidate uses local memory.)"""
    return int(mainloop_stages(spec, cfg) < 3)


def estimate(spec: KernelSpec, cfg: TileConfig, M: int, N: int, K: int, L: int = 1,
             balanced: bool = False, per_instruction: float | None = None) -> float:
    """A relative time of `spec` under `cfg` (the unit: one 128x256x64 k-block of math).
    A persistent kernel runs whole tiles, so a partial last wave costs a whole one; a stream-K
    kernel spreads the tiles' work evenly over the SMs and pays a fixup per tile it cuts;
    `balanced` spreads the work past the first wave at no cost, as cuBLAS's stream-K and
    split-K kernels do (`evt.codegen.profit`'s model of the unfused GEMM).

    `per_instruction` (k-blocks a 128x256 tile per instruction an element): the absolute model
    of `evt.codegen.profit`, where every compute node costs its instructions
    (`op_costs.epilogue_instructions`), overlapping the epilogue's memory traffic, instead of a
    special function's flat `_COST["special"]`, so a function written out in many nodes costs
    what they do. The ranking keeps the flat costs it was fitted with."""
    tiles = math.ceil(M / cfg.tile_m) * math.ceil(N / cfg.tile_n) * max(L, 1)
    area = cfg.tile_m * cfg.tile_n / (128 * 256)
    if balanced:
        waves = max(tiles / SM_COUNT, 1.0)
    elif cfg.scheduler == "streamk":
        waves = tiles / SM_COUNT * _STREAMK_SLOWER + (_STREAMK_FIXUP if tiles % SM_COUNT else 0.0)
    else:
        waves = math.ceil(tiles / SM_COUNT)
    mainloop = area * math.ceil(K / cfg.tile_k) / _MAINLOOP[(cfg.tile_m, cfg.tile_n, cfg.schedule)]
    memory, arithmetic = epilogue_parts(spec, cfg, flat_specials=per_instruction is None)
    memory += _COST["d"] * element_bytes(spec.d_dtype) / 2 * register_store_factor(cfg, spec.d_dtype)
    if cfg.store_align:  # the aux stores' extra cost from registers
        memory += sum(_COST["store"] * element_bytes(n.dtype) / 2 * (register_store_factor(cfg, n.dtype) - 1)
                      for n in spec.nodes if isinstance(n, AuxStore))  # fmt: skip
    if per_instruction is not None:
        # the compute nodes' instructions issue while the epilogue's loads and stores are in
        # flight: what the tile's traffic leaves unhidden counts; less of it the longer the
        # main loop (`_INSTRUCTIONS_EXPOSED`)
        slower = _PINGPONG_INSTRUCTIONS if cfg.schedule == "pingpong" else 1.0
        k_blocks = math.ceil(K / cfg.tile_k)
        exposed = min(1.0, (_INSTRUCTIONS_EXPOSED[0] / k_blocks) ** _INSTRUCTIONS_EXPOSED[1])
        memory = max(memory, per_instruction * op_costs.epilogue_instructions(spec) * slower * exposed)
    if cfg.schedule == "pingpong":
        # The two math warp groups take turns on the SM's tensor cores and, in the same order,
        # on the epilogue (CUTLASS orders both by one barrier): one group's epilogue runs during
        # the other's main loop, so a tile costs the longer of the two, plus what the hand-over
        # leaves unhidden. The epilogue is one warp group's alone: its arithmetic takes
        # `_PINGPONG_EPILOGUE` times a cooperative tile's per area, its memory traffic as long.
        epilogue = area * (memory + arithmetic * _PINGPONG_EPILOGUE)
        per_tile = max(mainloop, epilogue) + _OVERLAP_LEFT * min(mainloop, epilogue)
    else:
        per_tile = mainloop + area * (memory + arithmetic)
    cluster = 1.02 if cfg.cluster_m * cfg.cluster_n > 1 else 1.0
    return waves * (per_tile + _COST["tile"]) * cluster


# Elements a thread holds side by side in a row of the accumulators (WGMMA's layout: 2 columns
# of every 8): the widest register store, whatever the alignment allows (CUTLASS's 0-stage
# Sm90AuxStore takes the smaller of the two).
_ACCUMULATOR_RUN = 2


def register_store_factor(cfg: TileConfig, dtype: str) -> float:
    """How many times a TMA store's time an output of `dtype` takes when stored from registers
    (`cfg.store_align` elements a store, at most `_ACCUMULATOR_RUN`; 1 through TMA): 16 bytes
    over the bytes one store writes. A warp's register store writes a few bytes in each of 8
    rows, so every 32-byte sector is written piecewise by several instructions. Calibrated on
    H100 measurements of session 18: ViT's 768 x 197 x 197 x 64 attention scores, bf16 stored
    one element at a time (factor 8), ran in 232 us fused against 156 us for cuBLAS's bare GEMM
    (207 us with Inductor's scaling kernel); GPT-2's and BERT's (aligned) scores so stored ran
    4.0-4.7x slower than through TMA at every tile config swept (the model: 5.7x); aux stores
    from registers two bf16 at a time (`direct_aux`, factor 4) ran the exact GELU with its
    pre-activation stored at 0.51-0.80 of the bare GEMM against 0.73-0.91 through TMA."""
    if not cfg.store_align:
        return 1.0
    size = element_bytes(dtype)
    return 16 / (min(cfg.store_align, _ACCUMULATOR_RUN, 16 // size) * size)


def _has_statistic(spec: KernelSpec) -> bool:
    return any(isinstance(n, ROW_STATISTICS) for n in spec.nodes)


def epilogue_cost(spec: KernelSpec) -> float:
    """The epilogue of one 128x256 cooperative tile beyond storing D, in k-blocks of main loop
    (`epilogue_parts` summed)."""
    return sum(epilogue_parts(spec))


def epilogue_parts(spec: KernelSpec, cfg: TileConfig | None = None,
                   flat_specials: bool = True) -> tuple[float, float]:
    """(memory, arithmetic) of one 128x256 cooperative tile's epilogue beyond storing D, in
    k-blocks of main loop: aux tensors read and written (per 2 bytes an element), then special
    functions (erf, exp, tanh) and reductions. A ping-pong warp group alone runs the arithmetic
    slower (half the warps issue it) but moves memory as fast. With `cfg`, a reduction over M (a
    bias gradient, BatchNorm's column statistics) costs partly per column of each tile, whatever
    its rows (the lanes' shuffles, the warps' combine through shared memory, the tile's
    partials): per element it scales with the square root of 128 / `cfg.tile_m`, 0.71 for a
    256-row tile (fitted, `benchmarks/heuristic_score.py`: 0.993 of the measured best over 131
    swept cases, 0.926 at worst; scaling it with 128 / `tile_m` itself put 256x128 first where
    ping-pong hides the epilogue, at K >= 512). On the H200 (session 55,
    `config_sweep_reductions_over_m.json`, N >= 256), 256x128 tiles took 0.50-0.96 of 128x256
    ones' time beyond the bare GEMM for such epilogues, 1.04-1.15 for the same epilogue without
    the reduction; up to 1.24x faster in all (BatchNorm's statistics at 131072x256x128).
    Fitted on `benchmarks/config_sweep.py`.

    Without `flat_specials` the special functions cost nothing here: `estimate`'s
    `per_instruction` counts every compute node's instructions instead."""
    memory = arithmetic = 0.0
    for n in spec.nodes:
        if isinstance(n, AuxLoad):
            memory += _COST["load"] * element_bytes(n.dtype) / 2
        elif isinstance(n, AuxStore):
            memory += _COST["store"] * element_bytes(n.dtype) / 2
        elif getattr(n, "op", None) in _SPECIAL | _ERF:
            if not flat_specials:
                continue
            arithmetic += _COST["special"]
        elif n.kind == "compute" and flat_specials:
            arithmetic += _COST["instruction"] * op_costs.INSTRUCTIONS.get(n.op, (0, 0))[0]
        elif n.kind in OVER_M and cfg is not None:
            arithmetic += _COST["reduction"] * math.sqrt(128 / cfg.tile_m)
        elif n.kind in (*OVER_M, "col_reduction", "scalar_reduction", "softmax_stats", "welford"):
            arithmetic += _COST["reduction"]
    return memory, arithmetic


# the reductions over M, to one value per column (`epilogue_parts`)
OVER_M = ("row_reduction", "column_welford")


def mainloop_stages(spec: KernelSpec, cfg: TileConfig) -> int:
    """An estimate of what StageCountAutoCarveout leaves for the mainloop."""
    epi_m, epi_n = cfg.epilogue_tile
    epi_tiles = epilogue_subtiles(cfg)
    stages_c, stages_d = cfg.epi_stages_c or min(epi_tiles, 4), cfg.epi_stages_d or min(epi_tiles, 2)
    # D's stages: CUTLASS's collective keeps them for a void D too (in the root's element type),
    # so a D stored from registers (`store_align`) takes them as well, and staged stores take
    # them beside the root's own (`evt::Sm90AuxStoreStaged`); aux stores from registers take none
    epi_bytes = epi_m * epi_n * stages_d * element_bytes(spec.d_dtype) * (2 if cfg.staged_stores else 1)
    for n in spec.nodes:
        if isinstance(n, AuxLoad) and not cfg.register_loads:
            epi_bytes += epi_m * epi_n * stages_c * element_bytes(n.dtype)
        elif isinstance(n, AuxStore) and not (cfg.direct_aux or cfg.store_align):
            epi_bytes += epi_m * epi_n * stages_d * element_bytes(n.dtype)
        elif isinstance(n, RowBroadcast):
            epi_bytes += cfg.tile_n * element_bytes(n.dtype)
        elif isinstance(n, ColumnWelfordStats):  # its warps' partials: 8 x tile N x 16 bytes
            epi_bytes += 8 * cfg.tile_n * 16
    stage_bytes = (cfg.tile_m + cfg.tile_n) * cfg.tile_k * element_bytes(spec.gemm.dtype) + 32
    return (SMEM_BYTES - epi_bytes - 1024) // stage_bytes


def element_bytes(dtype: str) -> int:
    """The bytes of one element of an IR dtype ("bf16", "f16", "f32", "b8")."""
    return {"bf16": 2, "f16": 2, "f32": 4, "b8": 1}[dtype]
