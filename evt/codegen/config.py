"""Tile configurations of the SM90 GEMM: CTA tile, cluster, and mainloop/epilogue schedule."""

from __future__ import annotations

import math
from dataclasses import dataclass

from evt.errors import CodegenError
from evt.ir import AuxLoad, AuxStore, KernelSpec, RowBroadcast

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


@dataclass(frozen=True)
class TileConfig:
    tile_m: int = 128
    tile_n: int = 256
    tile_k: int = 64
    cluster_m: int = 1
    cluster_n: int = 1
    schedule: str = "cooperative"

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise CodegenError(f"unknown schedule {self.schedule!r}: use one of {list(SCHEDULES)}")
        granule = SCHEDULES[self.schedule][2]
        ok = self.tile_m % granule == 0 and self.tile_n % 16 == 0 and self.tile_k % 16 == 0
        ok = ok and self.tile_m <= 256 and self.tile_n <= 256
        if not ok or self.cluster_m * self.cluster_n not in (1, 2, 4):
            raise CodegenError(
                f"unsupported {self}: tile M must be a multiple of {granule} for {self.schedule}, "
                "tile N and K multiples of 16, tiles at most 256, cluster of 1, 2 or 4 CTAs"
            )

    @property
    def label(self) -> str:
        return (
            f"{self.tile_m}x{self.tile_n}x{self.tile_k}"
            f"_c{self.cluster_m}x{self.cluster_n}_{self.schedule}"
        )


PINGPONG = TileConfig(64, 256, 64, schedule="pingpong")


FALLBACK_TILES = (TileConfig(128, 128, 64), TileConfig(128, 64, 64))


def default_config(spec: KernelSpec) -> TileConfig:
    """128x256x64 cooperative while the epilogue's shared memory leaves it 3 mainloop stages;
    else the first narrower tile that keeps 2 (CUTLASS's minimum: the fuzzer found epilogues with
    several fp32 aux tensors that leave 128x128 only one)."""
    wide = TileConfig()
    if mainloop_stages(spec, wide) >= 3:
        return wide
    for cfg in FALLBACK_TILES:
        if mainloop_stages(spec, cfg) >= 2:
            return cfg
    raise CodegenError(
        f"kernel {spec.name}: its epilogue's shared memory leaves no tile 2 mainloop stages; "
        "the region runs unfused"
    )


def mainloop_stages(spec: KernelSpec, cfg: TileConfig) -> int:
    """An estimate of what StageCountAutoCarveout leaves for the mainloop."""
    coop = cfg.schedule == "cooperative"
    epi_m, epi_n = min(128 if coop else 64, cfg.tile_m), math.gcd(32, cfg.tile_n)
    epi_tiles = (cfg.tile_m // epi_m) * (cfg.tile_n // epi_n)
    stages_c, stages_d = min(epi_tiles, 4), min(epi_tiles, 2)
    epi_bytes = epi_m * epi_n * stages_d * _bytes(spec.d_dtype)
    for n in spec.nodes:
        if isinstance(n, AuxLoad):
            epi_bytes += epi_m * epi_n * stages_c * _bytes(n.dtype)
        elif isinstance(n, AuxStore):
            epi_bytes += epi_m * epi_n * stages_d * _bytes(n.dtype)
        elif isinstance(n, RowBroadcast):
            epi_bytes += cfg.tile_n * _bytes(n.dtype)
    stage_bytes = (cfg.tile_m + cfg.tile_n) * cfg.tile_k * _bytes(spec.gemm.dtype) + 32
    return (SMEM_BYTES - epi_bytes - 1024) // stage_bytes


def _bytes(dtype: str) -> int:
    return {"bf16": 2, "f16": 2, "f32": 4, "b8": 1}[dtype]
