"""The swizzle and raster order for grids whose waves read more operand bytes than they need.

CUTLASS's persistent scheduler walks the output tiles along its raster order's major mode
(`PersistentTileSchedulerSm90`: along N where the grid has at least as many tiles along M as
along N, else along M), `swizzle` tiles of the minor mode at a time. One wave of the grid (a CTA
per SM) therefore reads, for every k-block, the A rows and B columns of the tiles it spans:
`span` = rows + columns. Where the major mode has many tiles, that is one or two tile rows of one
operand and the whole of the other, and with K >= 4096 a wave's operands no longer stay in L2
between the CTAs that share them: each wave re-reads them from DRAM. The DRAM traffic per FLOP
of the whole GEMM is then about waves x span x element bytes / (2 M N), whatever K is.

Session 20 (`benchmarks/results/2026-11-26-H100-session20/`), bias + ReLU / GELU at GPT-J's
8192 x 16384 x 4096 with 128x256 tiles (64 x 64 of them): in CUTLASS's order (along N, swizzle 1:
4.0e-3 bytes per FLOP by this count) the H100 ran them at 0.79-0.87 of cuBLAS, with swizzle 4
(2.1e-3) at 0.89-0.98; on an H200 along M or with swizzle 4 or 8 (2.1e-3 and less) gained 11-15%,
256x128 tiles (walked along M, 2.1e-3) 3%, and the down projection (8192 x 4096 x 16384, 1.3e-3)
less than the runs' spread. By the same count session 15's slow raster orders were the ones past
the limit (BERT's down projection along M: 4.1e-3, 0.61 of cuBLAS; 1.5e-3 and 0.91 along N). The
H100 serves ~4e-3 bytes per FLOP at its GEMM speed (3.35 TB/s, ~800 TFLOP/s): past `LIMIT` the
waves' reads outrun it. Session 31 (`benchmarks/results/2026-11-27-H100-session31/`) moved
`LIMIT` from 3e-3 to 2.5e-3: SwiGLU's up projection at TinyLlama's 8192 x 5632 x 2048 in 128x128
ping-pong tiles (2.9e-3) ran at 0.70 of cuBLAS, with swizzle 4 (2.3e-3) at 0.81, its dgrad at
0.65 and 0.72; 128x256 tiles at LLaMA-7B's 8192 x 11008 x 4096 (2.7e-3) at 0.76 and 0.81.

`swizzle` returns 0 (evt's compiled choice, `auto_swizzle` in evt/templates/evt_launch.h: 2 for
one GEMM at K <= 1024, else 1) except where K > 1024 and the compiled choice's traffic is past
`LIMIT`: there the swizzle of 2, 4, 8 that brings it under with the fewest waves, the one that
reads least of those, the largest where two read the same (CUTLASS rounds both tile counts up
to a multiple of swizzle x cluster, which may add waves: at most `EXTRA_WAVES` of them are taken. Until session 31 none was: 128x128
ping-pong at LLaMA-7B's up projection, 4.0e-3 in 42 waves, ran at 0.60 of cuBLAS in CUTLASS's
order and 0.79 with swizzle 4 in 43, the dgrad at 0.58 and 0.76). Until session 67 the smallest
was taken. On an H200 (`benchmarks/results/2026-12-01-H200-session67/`) swizzle 8, in the same
waves as 4 and reading less (1.3e-3 against 2.1e-3 bytes per FLOP at GPT-J's up projection in
128x256 tiles, 1.5e-3 against 2.2e-3 at LLaMA-7B's and LLaMA-3's in 128x128 ping-pong ones), ran
0.4-3.9% faster than 4 in 10 of 10 comparisons timed in turn over 11 rounds (the up projections
with bias + ReLU, bias + GELU with its pre-activation stored, SwiGLU and its dgrad, fused and
bare), and in another call over 5 rounds 1.4-2.9% faster in four of six, within 0.4% in two. In the same
sweeps a raster order named outright (along M or N, swizzle 1-8) took 0.982-1.020x the time of
CUTLASS's own order at its best swizzle, over 22 kernels and problems (GPT-J's, the LLaMAs', the
projection head's, fused and bare), though this count gives the other order 0.47-0.81 of the
bytes at six of them: under `LIMIT` the waves' reads are served either way, so the raster rule
below still takes no swizzle into account. Where two swizzles read the same (a wave of 66
clusters of 1x2 128x128 ping-pong tiles spans 17 tile rows and 8 columns at 4, 9 and 16 at 8),
session 68 timed 8 faster than 4 in 5 of 6 (+0.1 to +2.6% at GPT-J's up projection with four
epilogues and LLaMA-3's SwiGLU, 7 rounds in turn; its dgrad 0.2% slower), so the larger is
taken. Stream-K kernels (their scheduler
decomposes K, not this walk) and batched GEMMs keep 0. Where no swizzle can (`outruns`), the
tile-config heuristic ranks the config after those whose waves do not outrun DRAM.

Ping-pong kernels with 128-wide tiles take swizzle 2 at K > 1024 where the traffic is under
the limit, on grids of at least `PINGPONG_COLUMNS` tile columns (and where it adds at most
`EXTRA_WAVES`): this model does not see what they gain, measured on the LLaMA step's own regions
(session 31, `sweep_orders_llama_step.json`, fractions of cuBLAS): RMSNorm's statistics after
the attention's output projection (8192 x 2048 x 2048, 1.5e-3 bytes per FLOP) 0.76 in
CUTLASS's order, 0.87 with swizzle 2; the MLP's down projection with the residual and the loss,
and RMSNorm's backward (8192 x 2048 x 5632) 0.74 -> 0.80 and 0.75 -> 0.81; with swizzle 2 SwiGLU's
grids gained 7-18% too (4 gains more there and is what the traffic rule takes); session 15's
sweep (`config_sweep_tile_orders.json`) had LLaMA's head (4096 x 32000 x 4096, 250 columns)
4-5% faster with swizzle 2 than 1 (softmax statistics, cross-entropy), and the grids of 6-8
columns at K > 1024 (BERT's and GPT-2's: 8192 x 1024 x 4096, 8192 x 768 x 3072) 0-4% slower,
so those keep the compiled order. Cooperative 128x256 and 256x128 tiles moved by -5% to +2%
with swizzle 2 at session 31's grids (GPT-J's up projection, session 20: +2% to +8%), so they
keep it too.

Cooperative 128x256 tiles take swizzle 4 at K >= `LONG_K` and K >= 2 N (a down projection) on
grids of at least `PINGPONG_COLUMNS` tile columns (where it adds at most `EXTRA_WAVES`), the
traffic rule aside. This model counts more traffic for them with it (1.25e-3 -> 1.34e-3 bytes
per FLOP), yet at the down projections of GPT-J (8192 x 4096 x 16384) and LLaMA-7B (8192 x 4096 x 11008), 64 x 16
tiles, bias + ReLU, bias + tanh GELU and bias + GELU with its pre-activation stored ran 0.9-2.9%
faster with it (2.3% on average, six cases; on an H200, session 50, `config_sweep.py
--tile-orders`, three runs at GPT-J's, one at LLaMA's), and 8 gained as much; the up projections
(K = 4096) vary too much between orders for a rule beyond the traffic one (swizzle 8 gained 1-2%
at GPT-J's 64 x 64 tiles and lost 3-4% at LLaMA's 64 x 43).

CUTLASS's raster heuristic counts tiles, not bytes: at 4096 x 8192 in 128x256 tiles (32 x 32)
it walks along N, and each wave reads all of B (8192 columns) where along M it would read all
of A (4096 rows): 2.1e-3 bytes per FLOP against 1.3e-3, both under `LIMIT`. On an H200
(session 65, `benchmarks/results/2026-12-01-H200-session65/`) along M ran 5-9% faster there,
bare or with bias and ReLU, with or without a 2x1 or 1x2 cluster; where the other order reads
more (8192 x 4096 x 4096: along M 2.1e-3 against 1.3e-3) CUTLASS's ran 2-6% faster; where both
read the same (256x128 tiles at 4096 x 8192) they were within 1%. Timed in turn at five shapes
(K = 2048 and 4096), all 26 kernels this rule sends the other way ran 1.01-1.10x faster (1.05x
in geomean), the others 0.98-1.03x between the same two runs. So `raster_order` takes the other
order for cooperative kernels at K > 1024 where its waves, without a swizzle, read less than
`RASTER_SHARE` of what CUTLASS's read at the swizzle this module gives them (session 15's walk
along M at 8192 x 768 x 3072 in 128x256 tiles, 2.9e-3 against 2.0e-3, ran 14-16% slower on the
H100; with swizzle 4 this count gives it 1.7e-3, not measured, so a swizzle does not count for
it). Ping-pong kernels keep CUTLASS's: no flip of theirs was measured. At K <= 1024 the other
order ran within 2% either way (4096 x 8192 and 6144 x 8192, K = 768 and 1024): a wave's
operands stay in L2, and the rule, as the swizzle's, keeps to K > 1024 (`_applies`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # evt.codegen.config ranks its candidates with `outruns`
    from evt.codegen.config import TileConfig

LIMIT = 2.5e-3  # DRAM bytes per FLOP a wave may read (H100: ~4e-3 at its GEMM speed)
# The share of waves a swizzle's rounding may add (a wave in 20): less than what the traffic it
# saves costs
EXTRA_WAVES = 0.05
# 128-wide ping-pong tiles take swizzle 2 at K > 1024 on grids of at least this many tile columns
PINGPONG_COLUMNS = 16
# cooperative 128x256 tiles take swizzle 4 at K >= this on grids of that many tile columns
LONG_K = 8192
SWIZZLES = (2, 4, 8)
# evt launches the raster order CUTLASS does not choose where that order's waves read less than
# this share of the bytes CUTLASS's read (`raster_order`)
RASTER_SHARE = 0.9


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _grid(cfg: TileConfig, M: int, N: int, swizzle: int) -> tuple[int, int, int]:
    """(swizzle, tiles along M, tiles along N) as CUTLASS's scheduler takes them: the swizzle
    capped by the tile counts (`get_log_swizzle_size`: 8 needs both >= 6, 4 >= 3, 2 >= 2), both
    counts rounded up to a multiple of swizzle x cluster."""
    blocks_m, blocks_n = _ceil_div(M, cfg.tile_m), _ceil_div(N, cfg.tile_n)
    small = min(blocks_m, blocks_n)
    s = next((size for size, needs in ((8, 6), (4, 3), (2, 2)) if swizzle >= size and small >= needs), 1)
    return (s, _ceil_div(blocks_m, s * cfg.cluster_m) * s * cfg.cluster_m,
            _ceil_div(blocks_n, s * cfg.cluster_n) * s * cfg.cluster_n)  # fmt: skip


def traffic(cfg: TileConfig, M: int, N: int, swizzle: int, sm_count: int, raster: int = 0,
            elem_bytes: int = 2) -> float:
    """DRAM bytes per FLOP the waves of `cfg`'s persistent grid read at M x N (any K), in tile
    order `raster`:`swizzle` (raster 0: CUTLASS's heuristic; swizzle as CUTLASS takes it)."""
    cm, cn = cfg.cluster_m, cfg.cluster_n
    s, blocks_m, blocks_n = _grid(cfg, M, N, swizzle)
    along_n = raster == 2 or (raster == 0 and not blocks_n > blocks_m)
    # in clusters: (count, rows or columns each) of the major mode, then the minor one
    major, major_size = (blocks_n // cn, cfg.tile_n * cn) if along_n else (blocks_m // cm, cfg.tile_m * cm)
    minor, minor_size = (blocks_m // cm, cfg.tile_m * cm) if along_n else (blocks_n // cn, cfg.tile_n * cn)
    wave = max(1, sm_count // (cm * cn))  # clusters resident at once
    span = (min(minor, _ceil_div(wave, s * major) * s) * minor_size
            + min(major, _ceil_div(wave, s)) * major_size)  # fmt: skip
    return _waves(blocks_m, blocks_n, sm_count) * span * elem_bytes / (2 * M * N)


def cutlass_along_n(cfg: TileConfig, M: int, N: int) -> bool:
    """Whether CUTLASS's raster heuristic walks `cfg`'s grid at M x N along N: where it has at
    least as many tiles along M as along N."""
    _, blocks_m, blocks_n = _grid(cfg, M, N, 1)
    return not blocks_n > blocks_m


def _launched_traffic(cfg: TileConfig, M: int, N: int, K: int, L: int, sm_count: int, raster: int,
                      elem_bytes: int) -> float:  # fmt: skip
    """`traffic` in raster order `raster` at the swizzle `swizzle` launches it with."""
    s = swizzle(cfg, M, N, K, L, sm_count, raster, elem_bytes) or 1  # K > 1024: compiled 1
    return traffic(cfg, M, N, s, sm_count, raster, elem_bytes)


def raster_order(cfg: TileConfig, M: int, N: int, K: int, L: int, sm_count: int,
                 elem_bytes: int = 2) -> int:
    """The raster order evt launches `cfg`'s kernel in at (M, N, K, L) when asked for its own
    choice: 0 (CUTLASS's heuristic) unless the other order's waves, without a swizzle, read less
    than `RASTER_SHARE` of what CUTLASS's do at the swizzle `swizzle` gives them (module doc);
    then that order, 1 (along M) or 2 (along N). Cooperative kernels only: what ping-pong ones
    gain was not measured."""
    if not _applies(cfg, M, N, K, L, sm_count) or cfg.schedule != "cooperative":
        return 0
    other = 1 if cutlass_along_n(cfg, M, N) else 2
    cutlass = _launched_traffic(cfg, M, N, K, L, sm_count, 0, elem_bytes)
    return other if traffic(cfg, M, N, 1, sm_count, other, elem_bytes) < RASTER_SHARE * cutlass else 0


def launch_order(cfg: TileConfig, M: int, N: int, K: int, L: int, sm_count: int, raster: int = 0,
                 elem_bytes: int = 2) -> tuple[int, int, str]:  # fmt: skip
    """(raster, swizzle, why) of a launch of `cfg`'s kernel at (M, N, K, L) asked for in raster
    order `raster` (0: evt's choice, `raster_order`) and evt's swizzle (`swizzle`, with the
    raster order taken); 0 for what the kernel's compiled choice is, `why` empty where both are."""
    r = raster or raster_order(cfg, M, N, K, L, sm_count, elem_bytes)
    s = swizzle(cfg, M, N, K, L, sm_count, r, elem_bytes)
    why = []
    if r and not raster:
        cutlass = _launched_traffic(cfg, M, N, K, L, sm_count, 0, elem_bytes)
        ours = traffic(cfg, M, N, s or 1, sm_count, r, elem_bytes)  # at the swizzle taken
        why.append(f"raster along {'M' if r == 1 else 'N'}: its waves read {ours:.1e} operand "
                   f"bytes per FLOP from DRAM, {cutlass:.1e} in CUTLASS's order")  # fmt: skip
    if s:
        why.append(f"swizzle {s}: {reason(cfg, M, N, s, sm_count, r, elem_bytes)}")
    return r, s, "; ".join(why)


def _waves(blocks_m: int, blocks_n: int, sm_count: int) -> int:
    return _ceil_div(blocks_m * blocks_n, max(1, sm_count))


def _swizzled_waves(cfg: TileConfig, M: int, N: int, swizzle: int, sm_count: int) -> int:
    """The waves of `cfg`'s grid at M x N, its tile counts rounded up for `swizzle`."""
    return _waves(*_grid(cfg, M, N, swizzle)[1:], sm_count)


def swizzle(cfg: TileConfig, M: int, N: int, K: int, L: int, sm_count: int, raster: int = 0,
            elem_bytes: int = 2) -> int:
    """The swizzle evt launches `cfg`'s kernel with at (M, N, K, L): 0 (the compiled choice)
    unless the waves' traffic says otherwise (of the swizzles that bring it under `LIMIT`, the
    fewest waves, then the least traffic, then the largest), or a wide ping-pong grid takes 2
    (module doc)."""
    if not _applies(cfg, M, N, K, L, sm_count):
        return 0
    waves = _swizzled_waves(cfg, M, N, 1, sm_count)
    if traffic(cfg, M, N, 1, sm_count, raster, elem_bytes) > LIMIT:
        fixes = [(_swizzled_waves(cfg, M, N, s, sm_count), t, s) for s in SWIZZLES
                 if (t := traffic(cfg, M, N, s, sm_count, raster, elem_bytes)) <= LIMIT]
        # rounding the grid up may add a few waves
        fixes = [fix for fix in fixes if fix[0] <= waves * (1 + EXTRA_WAVES)]
        if fixes:  # the fewest waves, then the least traffic, then the largest swizzle
            return min(fixes, key=lambda fix: (fix[0], fix[1], -fix[2]))[2]
    if long_k(cfg, M, N, K, L, sm_count):
        return 4
    return 2 if wide_pingpong(cfg, M, N, K, L, sm_count) else 0


def reason(cfg: TileConfig, M: int, N: int, s: int, sm_count: int, raster: int = 0,
           elem_bytes: int = 2) -> str:
    """Why `swizzle` gave `cfg` the swizzle `s` (not 0) at M x N (`EVT_DEBUG`'s log, `evt dump`'s
    summary)."""
    before = traffic(cfg, M, N, 1, sm_count, raster, elem_bytes)
    if before > LIMIT and traffic(cfg, M, N, s, sm_count, raster, elem_bytes) <= LIMIT:
        return f"its waves would read {before:.1e} operand bytes per FLOP from DRAM in the compiled order"
    if cfg.schedule == "cooperative":
        return (f"cooperative {cfg.tile_m}x{cfg.tile_n} tiles at K >= {LONG_K} and K >= 2 N, "
                f"{PINGPONG_COLUMNS} or more tile columns")  # fmt: skip
    return f"a ping-pong grid of {PINGPONG_COLUMNS} or more tile columns"


def wide_pingpong(cfg: TileConfig, M: int, N: int, K: int, L: int, sm_count: int) -> bool:
    """Whether `cfg` takes swizzle 2 as a ping-pong kernel with 128-wide tiles on a grid of at
    least `PINGPONG_COLUMNS` tile columns at K > 1024 (module doc), the traffic rule aside."""
    if not (_applies(cfg, M, N, K, L, sm_count) and cfg.schedule == "pingpong" and cfg.tile_n == 128):
        return False
    return _wide_grid(cfg, M, N, 2, sm_count)


def long_k(cfg: TileConfig, M: int, N: int, K: int, L: int, sm_count: int) -> bool:
    """Whether `cfg` takes swizzle 4 as cooperative 128x256 tiles (no cluster) at K >= `LONG_K`
    and K >= 2 N on a grid of at least `PINGPONG_COLUMNS` tile columns (module doc), the traffic
    rule aside. Measured only on 64 x 16 tile grids (K 11008 and 16384)."""
    if not (_applies(cfg, M, N, K, L, sm_count) and K >= max(LONG_K, 2 * N) and cfg.schedule == "cooperative"
            and (cfg.tile_m, cfg.tile_n, cfg.cluster_m, cfg.cluster_n) == (128, 256, 1, 1)):  # fmt: skip
        return False
    return _wide_grid(cfg, M, N, 4, sm_count)


def _wide_grid(cfg: TileConfig, M: int, N: int, s: int, sm_count: int) -> bool:
    """Whether `cfg`'s grid has at least `PINGPONG_COLUMNS` tile columns and swizzle `s` adds at
    most `EXTRA_WAVES` to its waves (the shape rules' common test)."""
    _, blocks_m, blocks_n = _grid(cfg, M, N, 1)
    waves = _waves(blocks_m, blocks_n, sm_count)
    return (blocks_n >= PINGPONG_COLUMNS
            and _swizzled_waves(cfg, M, N, s, sm_count) <= waves * (1 + EXTRA_WAVES))  # fmt: skip


def outruns(cfg: TileConfig, M: int, N: int, K: int, L: int, sm_count: int,
            elem_bytes: int = 2) -> bool:
    """Whether `cfg`'s waves outrun DRAM at (M, N, K, L) in the order evt launches it, the
    swizzle `swizzle` picks included (none does where each one's rounding adds more than
    `EXTRA_WAVES`: 128x64 tiles at LLaMA's head, 4.1e-3 bytes per FLOP). `config.heuristic`
    ranks such configs after the others: at GPT-J's up projection 256x128 tiles (2.1e-3 as they
    are) ran 621 TFLOP/s on the H100 (session 20, call 7) where 128x256 ran 575 in CUTLASS's
    order (call 1) and 683 with swizzle 4 (call 7)."""
    if not _applies(cfg, M, N, K, L, sm_count):
        return False
    raster = raster_order(cfg, M, N, K, L, sm_count, elem_bytes)
    return _launched_traffic(cfg, M, N, K, L, sm_count, raster, elem_bytes) > LIMIT


def _applies(cfg: TileConfig, M: int, N: int, K: int, L: int, sm_count: int) -> bool:
    """Where the rule applies: one GEMM (L = 1) at K > 1024, a persistent (not stream-K) grid."""
    return cfg.scheduler != "streamk" and L == 1 and K > 1024 and M > 0 and N > 0 and sm_count > 0
