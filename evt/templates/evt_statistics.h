// Deterministic statistics for evt's epilogues: SM90 EVT nodes that reduce the visited value per
// row (over N, into M-vectors) or over the whole problem (into one value), without float atomics.
//
// Each CTA reduces its tile into one partial per row (or one per tile), written to a workspace
// slot of its own. Per-row statistics and reductions over M (CUTLASS's Sm90RowReduction writing
// partials: Sm90RowReductionDeferred) are finished after the GEMM, all of a region's by one small
// kernel (`finish_all`); the scalar one by the last CTA (an atomic tile counter, as CUTLASS's
// Sm90ColReduction<..., FinalReduction=true>). Either combines the partials in a fixed order and
// writes the outputs: the result is the same on every run, whatever the CTA schedule.
//
// A statistic is a small policy: `Partial` (registers and workspace), `identity()`,
// `push_subtile` (the elements a thread holds of one epilogue subtile into its row partials),
// `combine` (two partials, left before right), `shuffle_down` and `finish` (the outputs). Pushing
// a whole subtile at once keeps the per-element work free of branches and of serial dependencies
// (an online softmax element by element waits on a branch and an exp per element).
#pragma once

#include <cmath>
#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/fusion/sm90_visitor_store_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp"
#include "cutlass/numeric_conversion.h"
#include "cutlass/workspace.h"
#include "evt_functors.h"
#include "evt_launch.h"

namespace evt {

// 0: compile only the paths an interior tile of finite values runs (no bounds or finiteness
// checks): for counting their instructions (scripts/sass_count.py --fast-path), never for use.
#ifndef EVT_STATISTICS_CHECKED_PATHS
#define EVT_STATISTICS_CHECKED_PATHS 1
#endif

namespace detail {

// The flat batch index of a tile's batch coordinate: `l` itself, or for a nested batch
// L = (L1, L2) the row-major l1 * L2 + l2, the order of the [L1 * L2, M] outputs and of the
// finishing job's batches.
template <class Coord, class Shape>
CUTLASS_HOST_DEVICE int64_t flat_batch(Coord const& l, Shape const& L) {
  if constexpr (cute::is_tuple<Coord>::value) {
    return int64_t(cute::get<0>(l)) * int64_t(cute::get<1>(L)) + int64_t(cute::get<1>(l));
  } else {
    return int64_t(l);
  }
}

// Whether a tile's elements may skip their bounds checks (two compares each): the tile lies wholly
// inside the problem (its last coordinate is below the residue), or the checked paths are compiled
// out (EVT_STATISTICS_CHECKED_PATHS=0, for counting instructions).
template <int TileM, int TileN, class Residue>
CUTLASS_DEVICE bool tile_inside(Residue const& residue) {
  return !EVT_STATISTICS_CHECKED_PATHS ||
         cute::elem_less(cute::make_coord(TileM - 1, TileN - 1), residue);
}

}  // namespace detail

CUTLASS_DEVICE bool is_inf(float x) { return fabsf(x) == INFINITY; }

// Online softmax: m = max x and s = sum exp(x - m), over one row. Partials (m_i, s_i) combine as
// m = max m_i, s = sum s_i * exp(m_i - m). With ZeroInfMax the shift is 0 where m is +-inf
// (logsumexp's decomposition). Infinite and NaN rows come out as torch computes them.
template <bool ZeroInfMax>
struct SoftmaxStat {
  struct alignas(8) Partial {
    float m;
    float s;
  };
  static constexpr int kOutputs = 2;  // max, sum

  CUTLASS_DEVICE static Partial identity() { return {-INFINITY, 0.f}; }

  // rows(i): the partial of element i's row (aliased: stride 0 along N); xs(i) its value; valid(i)
  // whether it lies inside the problem. Three passes: the rows' new maxima (branch-free), each
  // row's sum rescaled to its new maximum once, then one exp per element (independent of each
  // other). -inf elements add nothing (a row of only -inf keeps sum 0); NaN wins the max.
  template <class Rows, class Xs, class Valid>
  CUTLASS_DEVICE static void push_subtile(Rows&& rows, Xs const& xs, Valid const& valid) {
    using namespace cute;
    Tensor mx = make_tensor_like<float>(rows);
    Tensor rows_flt = filter_zeros(rows);
    Tensor mx_flt = filter_zeros(mx);
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < size(rows_flt); ++j) {
      mx_flt(j) = rows_flt(j).m;
    }
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(xs); ++i) {
      mx(i) = max_nan(mx(i), valid(i) ? xs(i) : -INFINITY);
    }
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < size(rows_flt); ++j) {
      Partial& p = rows_flt(j);
      if (mx_flt(j) != p.m) {  // a new maximum (or NaN): the sum so far, rescaled to it
        p.s = p.s == 0.f ? 0.f : p.s * exp_approx(p.m - mx_flt(j));
        p.m = mx_flt(j);
      }
    }
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(xs); ++i) {
      Partial& p = rows(i);
      float e = exp_approx(xs(i) - p.m);
      p.s += (valid(i) && xs(i) != -INFINITY) ? e : 0.f;
    }
  }

  CUTLASS_DEVICE static Partial combine(Partial a, Partial b) {
    float m = max_nan(a.m, b.m);
    float sa = a.s == 0.f ? 0.f : a.s * exp_approx(a.m - m);  // an empty partial adds nothing
    float sb = b.s == 0.f ? 0.f : b.s * exp_approx(b.m - m);
    return {m, sa + sb};
  }

  CUTLASS_DEVICE static Partial shuffle_down(Partial p, int delta) {
    return {__shfl_down_sync(0xFFFFFFFF, p.m, delta), __shfl_down_sync(0xFFFFFFFF, p.s, delta)};
  }

  CUTLASS_DEVICE static cutlass::Array<float, kOutputs> finish(Partial p) {
    cutlass::Array<float, kOutputs> out;
    out[0] = p.m;
    if (is_inf(p.m)) {  // torch: exp(x - m) has inf - inf = NaN; logsumexp shifts by 0 instead
      out[1] = ZeroInfMax ? (p.m > 0.f ? INFINITY : 0.f) : NAN;
    } else {
      out[1] = p.s;
    }
    return out;
  }
};

// Welford: count, mean and M2 = sum (x - mean)^2 of the finite elements, partials combined with
// Chan's formula, plus the plain sum of the others (+-inf, NaN), which then decides: torch's mean
// is that sum (inf, -inf or NaN) and its var NaN. Outputs mean and M2 / max(count - Correction, 0)
// (torch.var_mean's var with that correction). Divisions by counts go through the SFU's
// reciprocal (1 ulp): an IEEE division is ~10 instructions and a branch to a slow path.
template <int Correction>
struct WelfordStat {
  struct alignas(16) Partial {
    float n;
    float mean;
    float m2;
    float nonfinite;  // sum of the non-finite elements; 0 while there are none
  };
  static constexpr int kOutputs = 2;  // mean, var

  CUTLASS_DEVICE static Partial identity() { return {0.f, 0.f, 0.f, 0.f}; }

  // The subtile's elements of each row as one partial (count and sum, the mean, then M2 about
  // it: one reciprocal per row, not per element), combined into the row's running partial.
  // Every element is summed first without a finiteness check (3 float instructions an element
  // where the subtile lies inside the problem); a row whose sum is not finite holds an inf or a
  // NaN (or overflowed), and only then is the subtile pushed again element by element
  // (`push_checked`).
  template <class Rows, class Xs, class Valid>
  CUTLASS_DEVICE static void push_subtile(Rows&& rows, Xs const& xs, Valid const& valid) {
    using namespace cute;
    auto part = empty_partials(rows);  // mean holds the sum until it is divided
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(xs); ++i) {
      if (valid(i)) {
        part(i).n += 1.f;
        part(i).mean += xs(i);
      }
    }
    bool finite = true;
    Tensor part_flt = filter_zeros(part);
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < size(part_flt); ++j) {
      finite &= fabsf(part_flt(j).mean) < INFINITY;
    }
    if (EVT_STATISTICS_CHECKED_PATHS && !finite) {
      push_checked(rows, xs, valid);
      return;
    }
    mean_and_m2(part, xs, valid);
    combine_into(rows, part);
  }

  // One identity Partial per row of `rows` (a register tensor of its layout)
  template <class Rows>
  CUTLASS_DEVICE static auto empty_partials(Rows const& rows) {
    auto part = cute::make_tensor_like<Partial>(rows);
    auto part_flt = cute::filter_zeros(part);
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < cute::size(part_flt); ++j) {
      part_flt(j) = identity();
    }
    return part;
  }

  // Each row's subtile partial into the row's running partial
  template <class Rows, class Part>
  CUTLASS_DEVICE static void combine_into(Rows&& rows, Part& part) {
    auto rows_flt = cute::filter_zeros(rows);
    auto part_flt = cute::filter_zeros(part);
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < cute::size(rows_flt); ++j) {
      rows_flt(j) = combine(rows_flt(j), part_flt(j));
    }
  }

  // part's sums divided into means, then M2 about them over the elements `keep` accepts
  template <class Part, class Xs, class Keep>
  CUTLASS_DEVICE static void mean_and_m2(Part& part, Xs const& xs, Keep const& keep) {
    using namespace cute;
    Tensor part_flt = filter_zeros(part);
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < size(part_flt); ++j) {
      float n = part_flt(j).n;
      part_flt(j).mean = n > 0.f ? part_flt(j).mean * rcp_approx(n) : 0.f;
    }
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(xs); ++i) {
      float d = xs(i) - part(i).mean;
      if (keep(i)) {
        part(i).m2 = fmaf(d, d, part(i).m2);
      }
    }
  }

  // The subtile with a non-finite element: finite and non-finite elements apart.
  template <class Rows, class Xs, class Valid>
  CUTLASS_DEVICE static void push_checked(Rows&& rows, Xs const& xs, Valid const& valid) {
    using namespace cute;
    auto part = empty_partials(rows);
    auto keep = [&](int i) { return valid(i) && fabsf(xs(i)) < INFINITY; };  // false for NaN too
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(xs); ++i) {
      float x = xs(i);
      part(i).n += keep(i) ? 1.f : 0.f;
      part(i).mean += keep(i) ? x : 0.f;
      part(i).nonfinite += (valid(i) && !keep(i)) ? x : 0.f;
    }
    mean_and_m2(part, xs, keep);
    combine_into(rows, part);
  }

  // Branch-free (selects): an empty side adds nothing but its non-finite sum.
  CUTLASS_DEVICE static Partial combine(Partial a, Partial b) {
    float nonfinite = a.nonfinite + b.nonfinite;
    float n = a.n + b.n;
    float delta = b.mean - a.mean;
    float wb = b.n * rcp_approx(n);
    Partial both{n, fmaf(delta, wb, a.mean), a.m2 + b.m2 + delta * delta * a.n * wb, nonfinite};
    Partial only_a{a.n, a.mean, a.m2, nonfinite};
    Partial only_b{b.n, b.mean, b.m2, nonfinite};
    return b.n == 0.f ? only_a : (a.n == 0.f ? only_b : both);
  }

  CUTLASS_DEVICE static Partial shuffle_down(Partial p, int delta) {
    return {__shfl_down_sync(0xFFFFFFFF, p.n, delta), __shfl_down_sync(0xFFFFFFFF, p.mean, delta),
            __shfl_down_sync(0xFFFFFFFF, p.m2, delta),
            __shfl_down_sync(0xFFFFFFFF, p.nonfinite, delta)};
  }

  CUTLASS_DEVICE static cutlass::Array<float, kOutputs> finish(Partial p) {
    cutlass::Array<float, kOutputs> out;
    if (p.nonfinite != 0.f) {  // inf, -inf or NaN (NaN != 0 too)
      out[0] = p.nonfinite;
      out[1] = NAN;
    } else {
      out[0] = p.mean;
      out[1] = p.m2 / fmaxf(p.n - float(Correction), 0.f);
    }
    return out;
  }
};

// A plain sum or max (NaN-propagating, like torch.amax): the statistic of column reductions
// (Sm90RowStatistics, one output) and of Sm90ScalarStatistic.
template <bool Max>
struct ReduceStat {
  using Partial = float;
  static constexpr int kOutputs = 1;

  CUTLASS_DEVICE static Partial identity() { return Max ? -INFINITY : 0.f; }
  CUTLASS_DEVICE static void push(Partial& p, float x) { p = Max ? max_nan(p, x) : p + x; }
  template <class Rows, class Xs, class Valid>
  CUTLASS_DEVICE static void push_subtile(Rows&& rows, Xs const& xs, Valid const& valid) {
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < cute::size(xs); ++i) {
      if (valid(i)) {
        push(rows(i), xs(i));
      }
    }
  }
  CUTLASS_DEVICE static Partial combine(Partial a, Partial b) { return Max ? max_nan(a, b) : a + b; }
  CUTLASS_DEVICE static Partial shuffle_down(Partial p, int delta) {
    return __shfl_down_sync(0xFFFFFFFF, p, delta);
  }
  CUTLASS_DEVICE static cutlass::Array<float, kOutputs> finish(Partial p) {
    cutlass::Array<float, kOutputs> out;
    out[0] = p;
    return out;
  }
};

namespace detail {

template <class T>
CUTLASS_DEVICE T load_cg(T const* p) {  // another kernel wrote it: read through L2
  static_assert(sizeof(T) % sizeof(float) == 0);
  T out;
  if constexpr (sizeof(T) == sizeof(float4)) {
    *reinterpret_cast<float4*>(&out) = __ldcg(reinterpret_cast<float4 const*>(p));
  } else if constexpr (sizeof(T) == sizeof(float2)) {
    *reinterpret_cast<float2*>(&out) = __ldcg(reinterpret_cast<float2 const*>(p));
  } else {
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < int(sizeof(T) / sizeof(float)); ++i) {
      reinterpret_cast<float*>(&out)[i] = __ldcg(reinterpret_cast<float const*>(p) + i);
    }
  }
  return out;
}

// identity, then combine(x[0]), ..., combine(x[count - 1]) of x[t] = column[t * stride]: always in
// this order (deterministic), with the loads issued kBatch at a time (a long row of N tiles is
// otherwise one L2 round trip per tile, serially: ~0.3 ms for 400 tiles).
template <class Stat>
CUTLASS_DEVICE typename Stat::Partial combine_in_order(typename Stat::Partial const* column,
                                                      int64_t stride, int count) {
  constexpr int kBatch = 8;
  typename Stat::Partial p = Stat::identity();
  int t = 0;
  for (; t + kBatch <= count; t += kBatch) {
    typename Stat::Partial batch[kBatch];
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < kBatch; ++j) {
      batch[j] = load_cg(column + (t + j) * stride);
    }
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < kBatch; ++j) {
      p = Stat::combine(p, batch[j]);
    }
  }
  for (; t < count; ++t) {
    p = Stat::combine(p, load_cg(column + t * stride));
  }
  return p;
}

// The last of `expected` arrivals at `counter` learns it is last (all epilogue threads call this).
template <class STensor, class SyncFn>
CUTLASS_DEVICE bool arrive_last(STensor&& smem_buffer, SyncFn const& sync_fn, int* counter,
                                int expected, int thread_idx) {
  __threadfence();  // this CTA's partials are visible before the counter moves
  sync_fn();
  int* prev = reinterpret_cast<int*>(cute::raw_pointer_cast(smem_buffer.data()));
  if (thread_idx == 0) {
    *prev = atomicAdd(counter, 1);
  }
  sync_fn();
  bool last = *prev == expected - 1;
  sync_fn();  // the buffer is D's next smem stage: done reading before it is written
  return last;
}

// Finishing blocks: kFinishRows x kFinishSplits threads (finish_rows).
constexpr int kFinishRows = 32;
constexpr int kFinishSplits = 8;

// One finishing job: `valid` rows (per batch) of `tiles` partials each, partial t of row r at
// partials[(l * tiles + t) * rows + r], finished into out_0/out_1[r + l * stride_l]. A
// statistic over N has M's rows; a reduction over M has N's columns as its rows and its L x
// M-tile partials as one batch. Built on the host by each deferred node's `finish_job`.
template <class Stat_, class ElementOutput_>
struct FinishJob {
  using Stat = Stat_;
  using ElementOutput = ElementOutput_;
  typename Stat::Partial const* partials = nullptr;
  int64_t rows = 0;  // the partials' stride between tiles (rows padded to whole tiles)
  int tiles = 0;
  int valid = 0;
  int batches = 1;
  ElementOutput* out_0 = nullptr;
  ElementOutput* out_1 = nullptr;
  int64_t stride_l = 0;

  CUTLASS_HOST_DEVICE int blocks_per_batch() const {
    return (valid + kFinishRows - 1) / kFinishRows;
  }
  CUTLASS_HOST_DEVICE int blocks() const { return blocks_per_batch() * batches; }
};

}  // namespace detail

// Per-row statistic over N: Stat::kOutputs M-vectors ([L, M], M contiguous), any of them may be
// skipped with a null pointer. Each CTA writes one Partial per row of its tile into
// `partials[l][n][row]` (a buffer of `partials_bytes` the launcher carves from its workspace);
// its finishing job (`finish_all`, after the GEMM on the same stream) combines each row's
// partials in a fixed order and writes the outputs. (Finishing inside the GEMM took a fence and
// an atomic round trip on every tile's critical path: 10-40% of an LM head's time.) Every row of
// an epilogue tile must sit in one warp (true of SM90 wgmma epilogues).
template <class Stat, class CtaTileShapeMNK, class ElementOutput,
          class StrideMNL = cute::Stride<cute::_1, cute::_0, int64_t>>
struct Sm90RowStatistics {
  using Partial = typename Stat::Partial;
  static_assert(cute::is_static_v<decltype(cute::take<0, 2>(StrideMNL{}))>);
  static_assert(cute::take<0, 2>(StrideMNL{}) == cute::Stride<cute::_1, cute::_0>{});
  static constexpr int kTileM = decltype(cute::size<0>(CtaTileShapeMNK{}))::value;
  static constexpr int kTileN = decltype(cute::size<1>(CtaTileShapeMNK{}))::value;

  struct SharedStorage {};

  struct Arguments {
    ElementOutput* ptr_0 = nullptr;  // output 0 of the statistic (softmax: max; Welford: mean)
    ElementOutput* ptr_1 = nullptr;  // output 1 (softmax: sum of exp; Welford: var)
    StrideMNL dOut = {};
    void* partials = nullptr;  // partials_bytes(M, N, L) of the launcher's workspace
  };

  using Params = Arguments;

  // rows padded to whole M tiles: partials[l][n][row]
  CUTLASS_HOST_DEVICE static int64_t padded_rows(int M) {
    return int64_t(cute::ceil_div(M, int(kTileM))) * kTileM;
  }

  static size_t partials_bytes(int M, int N, int L) {
    size_t bytes = size_t(padded_rows(M)) * size_t(cute::ceil_div(N, int(kTileN))) * size_t(L) *
                   sizeof(Partial);
    return cutlass::round_nearest(bytes, size_t(256));
  }

  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }

  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*,
                                              cudaStream_t, cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.partials != nullptr;
  }

  // The finishing step's job (host, for `finish_all`): combine the partials the GEMM wrote.
  using FinishJob = detail::FinishJob<Stat, ElementOutput>;
  static FinishJob finish_job(Arguments const& args, int M, int N, int L);

  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return false; }

  CUTLASS_HOST_DEVICE Sm90RowStatistics() {}
  CUTLASS_HOST_DEVICE Sm90RowStatistics(Params const& params, SharedStorage const&) : params(params) {}

  Params params;

  template <class... Args>
  CUTLASS_DEVICE auto get_producer_load_callbacks(cutlass::epilogue::fusion::ProducerLoadArgs<Args...> const&) {
    return cutlass::epilogue::fusion::EmptyProducerLoadCallbacks{};
  }

  template <class RowTensor, class BufTensor, class SlotTensor, class CoordTensor,
            class ThrCoordTensor, class Residue, class ThrResidue, class LaneLayout, class TiledCopy>
  struct ConsumerStoreCallbacks : cutlass::epilogue::fusion::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE ConsumerStoreCallbacks(RowTensor tCrRow, BufTensor tCrBuf, SlotTensor tCgSlot,
                                          CoordTensor cD, ThrCoordTensor tCcD, Residue residue_cD,
                                          ThrResidue residue_tCcD, LaneLayout lane_layout_MN,
                                          bool is_reduced_lane)
        : tCrRow(tCrRow), tCrBuf(tCrBuf), tCgSlot(tCgSlot), cD(cD), tCcD(tCcD),
          residue_cD(residue_cD), residue_tCcD(residue_tCcD), lane_layout_MN(lane_layout_MN),
          is_reduced_lane(is_reduced_lane) {}

    RowTensor tCrRow;    // (CPY,CPY_M,CPY_N,EPI_M,EPI_N): one Partial per row, stride 0 along N
    BufTensor tCrBuf;    // (CPY,CPY_M,CPY_N): the visited values of the current subtile
    SlotTensor tCgSlot;  // the same partition of this tile's workspace slot (gmem, stride 0 along N)
    CoordTensor cD;
    ThrCoordTensor tCcD;
    Residue residue_cD;
    ThrResidue residue_tCcD;
    LaneLayout lane_layout_MN;
    bool is_reduced_lane;

    template <typename ElementAccumulator, typename ElementInput, int FragmentSize>
    CUTLASS_DEVICE auto visit(cutlass::Array<ElementAccumulator, FragmentSize> const&, int epi_v,
                              int, int, cutlass::Array<ElementInput, FragmentSize> const& frg_input) {
      cutlass::NumericArrayConverter<float, ElementInput, FragmentSize> convert;
      cutlass::Array<float, FragmentSize> x = convert(frg_input);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentSize; ++i) {
        tCrBuf(epi_v * FragmentSize + i) = x[i];  // pushed in reduce(), once the subtile is whole
      }
      return frg_input;
    }

    template <class STensor, class SyncFn, class VTensor>
    CUTLASS_DEVICE void reduce(STensor&&, SyncFn const&, int epi_m, int epi_n,
                               bool is_last_iteration, VTensor) {
      using namespace cute;
      Tensor tCcD_mn = tCcD(_, _, _, epi_m, epi_n);
      // A tile inside the problem pushes without a bounds check per element
      if (detail::tile_inside<kTileM, kTileN>(residue_cD)) {
        Stat::push_subtile(tCrRow(_, _, _, epi_m, epi_n), tCrBuf, [](int) { return true; });
      } else {
        Stat::push_subtile(tCrRow(_, _, _, epi_m, epi_n), tCrBuf,
                           [&](int i) { return elem_less(tCcD_mn(i), residue_tCcD); });
      }
      if (!is_last_iteration || !elem_less(cD(_0{}, _0{}), residue_cD)) {
        return;  // not done yet, or a CTA of a cluster that is wholly out of bounds
      }
      // 1. Combine the lanes that share a row (a fixed butterfly-free tree: deterministic)
      Tensor tCrRow_flt = filter_zeros(tCrRow);
      CUTLASS_PRAGMA_UNROLL
      for (int cols = size<1>(lane_layout_MN) / 2; cols > 0; cols /= 2) {
        int delta = lane_layout_MN(_0{}, cols);
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(tCrRow_flt); ++i) {
          tCrRow_flt(i) = Stat::combine(tCrRow_flt(i), Stat::shuffle_down(tCrRow_flt(i), delta));
        }
      }
      // 2. This tile's partial of each row into its slot: partials[l][n][row]. The slot is
      // partitioned like the registers (tCcD's coordinates are relative to this thread's first
      // element, so they cannot address rows of the tile).
      if (is_reduced_lane) {
        Tensor tCgSlot_flt = filter_zeros(tCgSlot);
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(tCrRow_flt); ++i) {
          tCgSlot_flt(i) = tCrRow_flt(i);
        }
      }
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(
      cutlass::epilogue::fusion::ConsumerStoreArgs<Args...> const& args) {
    using namespace cute;
    // which lanes and warps of the epilogue's copy share a row (as Sm90ColReduction)
    Layout ref_layout_MN = [&]() {
      auto mn_shape = shape(typename decltype(args.tiled_copy)::Tiler_MN{});
      if constexpr (ReferenceSrc) {
        return right_inverse(args.tiled_copy.get_layoutS_TV()).with_shape(mn_shape);
      } else {
        return right_inverse(args.tiled_copy.get_layoutD_TV()).with_shape(mn_shape);
      }
    }();
    using W = Int<decltype(args.tiled_copy)::TiledNumThr::value / cutlass::NumThreadsPerWarp>;
    Layout tv2lane = Layout<Shape<Int<cutlass::NumThreadsPerWarp>, W, _1>, Stride<_1, _0, _0>>{};
    Layout ref2lane = composition(tv2lane, ref_layout_MN);
    Layout lane_layout_MN = make_layout(filter(get<0>(ref2lane)), filter(get<1>(ref2lane)));
    Layout inv_lane_layout_MN = right_inverse(lane_layout_MN);
    auto lane_mn = idx2crd(inv_lane_layout_MN(cutlass::canonical_lane_idx()), shape(lane_layout_MN));
    Layout tv2warp = Layout<Shape<Int<cutlass::NumThreadsPerWarp>, W, _1>, Stride<_0, _1, _0>>{};
    Layout ref2warp = composition(tv2warp, ref_layout_MN);
    Layout warp_layout_MN = make_layout(filter(get<0>(ref2warp)), filter(get<1>(ref2warp)));
    static_assert(decltype(size<1>(warp_layout_MN))::value == 1,
                  "evt row statistics: the rows of an epilogue tile must each lie in one warp");

    // one register Partial per row this thread holds: a (CTA_M, CTA_N) layout of stride (1, 0)
    Tensor gRow = make_tensor(make_gmem_ptr(static_cast<Partial*>(nullptr)),
                              make_layout(take<0, 2>(args.tile_shape_mnk), Stride<_1, _0>{}));
    Tensor tCgRow = cutlass::epilogue::fusion::sm90_partition_for_epilogue<ReferenceSrc>(
        gRow, args.epi_tile, args.tiled_copy, args.thread_idx);
    Tensor tCrRow = make_tensor_like<Partial>(tCgRow);
    fill(tCrRow, Stat::identity());
    Tensor tCrBuf = make_tensor<float>(shape(tCgRow(_, _, _, _0{}, _0{})));

    auto [M, N, K, L] = args.problem_shape_mnkl;
    auto [m, n, k, l] = args.tile_coord_mnkl;
    // this tile's slot: partials[l][n][m * CTA_M + row]
    Partial* slot = static_cast<Partial*>(params.partials) +
                    (detail::flat_batch(l, L) * ceil_div(int(N), int(kTileN)) + int(n)) *
                        padded_rows(int(M)) +
                    int64_t(m) * kTileM;
    Tensor gSlot = make_tensor(make_gmem_ptr(slot),
                               make_layout(take<0, 2>(args.tile_shape_mnk), Stride<_1, _0>{}));
    Tensor tCgSlot = cutlass::epilogue::fusion::sm90_partition_for_epilogue<ReferenceSrc>(
        gSlot, args.epi_tile, args.tiled_copy, args.thread_idx);
    return ConsumerStoreCallbacks<decltype(tCrRow), decltype(tCrBuf), decltype(tCgSlot),
                                  decltype(args.cD), decltype(args.tCcD),
                                  decltype(args.residue_cD), decltype(args.residue_tCcD),
                                  decltype(lane_layout_MN), decltype(args.tiled_copy)>(
        tCrRow, tCrBuf, tCgSlot, args.cD, args.tCcD, args.residue_cD, args.residue_tCcD,
        lane_layout_MN, get<1>(lane_mn) == 0);
  }
};

namespace detail {

// fn(Int<Half>), fn(Int<Half / 2>), ..., fn(Int<1>): a halving loop NVVM always unrolls.
template <int Half, class Fn>
CUTLASS_DEVICE void for_each_halving(Fn&& fn) {
  if constexpr (Half > 0) {
    fn(cute::Int<Half>{});
    for_each_halving<Half / 2>(fn);
  }
}

// The finishing step of the deferred nodes: block `block` of a job (blocks_per_batch() per
// batch, batch-major) takes kFinishRows rows of one batch; thread (r, c) combines the tiles
// [c * chunk, (c + 1) * chunk) of row r in order (a warp reads 32 consecutive rows of one tile:
// coalesced), then thread (r, 0) combines the kFinishSplits chunks in order and writes the
// outputs. Fixed order throughout: the same bits on every run.
template <class Job>
CUTLASS_DEVICE void finish_rows(Job const& job, int block) {
  using Stat = typename Job::Stat;
  using Partial = typename Stat::Partial;
  __shared__ Partial chunk_partials[kFinishSplits][kFinishRows];
  int const per_batch = job.blocks_per_batch();
  int const l = block / per_batch;
  int r = threadIdx.x % kFinishRows;
  int c = threadIdx.x / kFinishRows;
  int row = (block - l * per_batch) * kFinishRows + r;
  int chunk = (job.tiles + kFinishSplits - 1) / kFinishSplits;
  int first = c * chunk;
  int count = max(0, min(job.tiles - first, chunk));
  Partial p = Stat::identity();
  if (row < job.valid) {
    p = combine_in_order<Stat>(job.partials + (int64_t(l) * job.tiles + first) * job.rows + row,
                               job.rows, count);
  }
  chunk_partials[c][r] = p;
  __syncthreads();
  if (c != 0 || row >= job.valid) {
    return;
  }
  CUTLASS_PRAGMA_UNROLL
  for (int k = 1; k < kFinishSplits; ++k) {
    p = Stat::combine(p, chunk_partials[k][r]);
  }
  cutlass::Array<float, Stat::kOutputs> value = Stat::finish(p);
  cutlass::NumericConverter<typename Job::ElementOutput, float> convert;
  if (job.out_0 != nullptr) {
    job.out_0[row + l * job.stride_l] = convert(value[0]);
  }
  if constexpr (Stat::kOutputs > 1) {
    if (job.out_1 != nullptr) {
      job.out_1[row + l * job.stride_l] = convert(value[1]);
    }
  }
}

// The jobs' blocks in order: job I takes the `block`s left after jobs 0..I-1 took theirs
// (compile-time recursion: each job's code is its own, no indexing into the tuple at run time).
template <int I, class Jobs>
CUTLASS_DEVICE void finish_job_at(Jobs const& jobs, int block) {
  if constexpr (I < int(cute::tuple_size<Jobs>::value)) {
    auto const& job = cute::get<I>(jobs);
    int const n = job.blocks();
    if (block < n) {
      finish_rows(job, block);
    } else {
      finish_job_at<I + 1>(jobs, block - n);
    }
  }
}

// Waits until the grid this one depends on (the GEMM) has completed and its writes are visible:
// a programmatic dependent launch starts this grid's blocks before that. Launched the plain way,
// it returns at once.
CUTLASS_DEVICE void wait_for_prerequisite_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

template <class... Jobs>
__global__ void __launch_bounds__(kFinishRows * kFinishSplits)
finish_all_kernel(__grid_constant__ cute::tuple<Jobs...> const jobs) {
  wait_for_prerequisite_grid();
  finish_job_at<0>(jobs, int(blockIdx.x));
}

}  // namespace detail

// Every deferred node's finishing job in one kernel, launched after the GEMM on the same stream:
// a region with statistics and reductions over M (LayerNorm's backward: four) pays one launch
// for all of them. Each block runs one job's rows; the jobs touch disjoint outputs.
//
// A programmatic dependent launch (PDL; EVT_PDL >= 1, evt::launch::pdl_level): the GEMM
// (compiled with CUTLASS_ENABLE_GDC_FOR_SM90) signals `griddepcontrol.launch_dependents` as each
// CTA starts its last tile, so this kernel's launch and block scheduling overlap the GEMM's last
// wave instead of following its end; its blocks wait in `griddepcontrol.wait` for the GEMM to
// complete (wait_for_prerequisite_grid) before reading a partial. Stream capture records it
// as a programmatic edge of the CUDA graph.
template <class... Jobs>
cudaError_t finish_all(cudaStream_t stream, Jobs const&... jobs) {
  int const blocks = (0 + ... + jobs.blocks());
  if (blocks == 0) {
    return cudaSuccess;
  }
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(detail::kFinishRows * detail::kFinishSplits);
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = launch::pdl_level() >= 1 ? 1 : 0;
  return cudaLaunchKernelEx(&config, detail::finish_all_kernel<Jobs...>, cute::make_tuple(jobs...));
}

template <class Stat, class CtaTileShapeMNK, class ElementOutput, class StrideMNL>
auto Sm90RowStatistics<Stat, CtaTileShapeMNK, ElementOutput, StrideMNL>::finish_job(
    Arguments const& args, int M, int N, int L) -> FinishJob {
  FinishJob job;
  job.partials = static_cast<Partial const*>(args.partials);
  job.rows = padded_rows(M);
  job.tiles = cute::ceil_div(N, int(kTileN));
  job.valid = M;
  job.batches = L;
  job.out_0 = args.ptr_0;
  job.out_1 = args.ptr_1;
  job.stride_l = cute::get<2>(args.dOut);
  return job;
}

// A sum or max over M and L into an N-vector (a Linear's bias gradient): CUTLASS's
// Sm90RowReduction reduces each CTA tile over its rows (registers, shuffles, shared memory) and,
// with FinalReduction=false, writes one fp32 partial per column into `partials[l][m_tile][n]`
// (N padded to whole tiles); its finishing job (`finish_all`, after the GEMM on the same
// stream) sums each column's L x M-tile partials in a fixed order (N's columns as its rows).
// CUTLASS's own final reduction has the last CTA of each N tile read the partials one dependent
// load at a time after a fence and an atomic counter: on an H100, deferring it took LayerNorm's
// backward (two row reductions, 8192x768x3072) from 269 to 220 us at 128x128 and from 161 to
// 110 us at 128x64 (scripts/spec_ablation.py).
template <template <class> class ReduceFn, class Stat, class CtaTileShapeMNK, class ElementOutput,
          class StrideMNL = cute::Stride<cute::_0, cute::_1, cute::_0>>
struct Sm90RowReductionDeferred
    : cutlass::epilogue::fusion::Sm90RowReduction<
          ReduceFn, ReduceFn, ReduceFn, 0, CtaTileShapeMNK, float, float,
          cutlass::FloatRoundStyle::round_to_nearest, StrideMNL, 4, true, false> {
  using Base = cutlass::epilogue::fusion::Sm90RowReduction<
      ReduceFn, ReduceFn, ReduceFn, 0, CtaTileShapeMNK, float, float,
      cutlass::FloatRoundStyle::round_to_nearest, StrideMNL, 4, true, false>;
  static constexpr int kTileM = decltype(cute::size<0>(CtaTileShapeMNK{}))::value;
  static constexpr int kTileN = decltype(cute::size<1>(CtaTileShapeMNK{}))::value;

  struct Arguments {
    ElementOutput* ptr = nullptr;  // the N-vector
    float identity = 0.f;  // the launcher passes the op's (Stat::identity is device code)
    StrideMNL dRow = {};
    void* partials = nullptr;  // partials_bytes(M, N, L) of the launcher's workspace
  };

  CUTLASS_HOST_DEVICE static int64_t padded_cols(int N) {
    return int64_t(cute::ceil_div(N, int(kTileN))) * kTileN;
  }
  CUTLASS_HOST_DEVICE static int tiles(int M, int L) { return cute::ceil_div(M, int(kTileM)) * L; }

  static size_t partials_bytes(int M, int N, int L) {
    size_t bytes = size_t(tiles(M, L)) * size_t(padded_cols(N)) * sizeof(float);
    return cutlass::round_nearest(bytes, size_t(256));
  }

  template <class ProblemShape>
  static typename Base::Params to_underlying_arguments(ProblemShape const& problem,
                                                       Arguments const& args, void* workspace) {
    return Base::to_underlying_arguments(
        problem, typename Base::Arguments{args.partials, args.identity, args.dRow}, workspace);
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*,
                                              cudaStream_t, cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.partials != nullptr;
  }

  // The finishing step's job (host, for `finish_all`): sum the partials the GEMM wrote.
  using FinishJob = detail::FinishJob<Stat, ElementOutput>;
  static FinishJob finish_job(Arguments const& args, int M, int N, int L);

  // CUTLASS's tile reduction with every loop over registers unrolled at compile time. Its
  // shuffle halves a count at run time (`for (m = ...; m > 0; m /= 2) for (r < m)`) and its
  // shared-memory step does the same over warps; where NVVM cannot unroll those (128x128 tiles:
  // two lanes' columns per warp), registers are indexed at run time and the whole callback
  // state moves to local memory (a 1392-byte stack for LayerNorm's backward, 2-3x slower
  // epilogues on the H100). Same partials, same layout; warps are summed in order.
  template <class ArgsTuple>
  struct ConsumerStoreCallbacks : Base::template ConsumerStoreCallbacks<ArgsTuple> {
    using Parent = typename Base::template ConsumerStoreCallbacks<ArgsTuple>;
    using Parent::Parent;

    // CUTLASS's swap shuffle over the (values, M) fragment, its halving loop unrolled: at each
    // step each half of the lanes keeps half of the values and takes the other half's share.
    template <int Half, class Frg, class LaneLayout, class Reduce>
    CUTLASS_DEVICE static void swap_shuffle(Frg& frg, int lane_m, LaneLayout const& lanes,
                                            Reduce const& reduce) {
      using Fragment = cute::remove_cvref_t<decltype(frg(0))>;
      detail::for_each_halving<Half>([&](auto half) {
        constexpr int kHalf = decltype(half)::value;
        CUTLASS_PRAGMA_UNROLL
        for (int r = 0; r < kHalf; ++r) {
          auto frg_a = frg(cute::_, r);
          auto frg_b = frg(cute::_, r + kHalf);
          CUTLASS_PRAGMA_UNROLL
          for (int v = 0; v < cute::size(frg_a); ++v) {
            if (not(lane_m & kHalf)) {
              cutlass::swap(frg_a(v), frg_b(v));
            }
            uint64_t shuffled = reinterpret_cast<uint64_t&>(frg_a(v));
            shuffled = __shfl_xor_sync(0xFFFFFFFF, shuffled, lanes(half, cute::_0{}));
            frg_a(v) = reduce(frg_b(v), reinterpret_cast<Fragment&>(shuffled));
          }
        }
      });
    }

    // CUTLASS's visit checks every element against the problem's bounds (two compares each); a
    // tile inside the problem adds its values unchecked, as the statistics push theirs: the same
    // additions in the same order, so the same partials.
    template <typename ElementAccumulator, typename ElementInput, int FragmentSize>
    CUTLASS_DEVICE auto visit(cutlass::Array<ElementAccumulator, FragmentSize> const& frg_acc,
                              int epi_v, int epi_m, int epi_n,
                              cutlass::Array<ElementInput, FragmentSize> const& frg_input) {
      using namespace cute;
      auto const& residue_cRow = get<12>(this->args_tuple);
      if (not detail::tile_inside<kTileM, kTileN>(residue_cRow) || this->params.ptr_row == nullptr) {
        return Parent::visit(frg_acc, epi_v, epi_m, epi_n, frg_input);
      }
      Tensor tCrRow_mn = get<1>(this->args_tuple)(_, _, _, epi_m, epi_n);
      ReduceFn<float> reduce_input{};
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentSize; ++i) {
        float& partial = tCrRow_mn(epi_v * FragmentSize + i);
        partial = reduce_input(partial, float(frg_input[i]));
      }
      return frg_input;
    }

    template <class STensor, class SyncFn, class VTensor>
    CUTLASS_DEVICE void reduce(STensor&& smem_buffer, SyncFn const& sync_fn, int epi_m, int epi_n,
                               bool is_last_iteration, VTensor visit_results) {
      using namespace cute;
      if (not is_last_iteration) {
        return;
      }
      auto& [ref_src, tCrRow, tCcRow, gRow_l, cRow, gBuf_ml, sBuf_layout, lane_layout_MN, lane_mn,
             warp_layout_MN, warp_mn, tile_coord_mnkl, residue_cRow, residue_tCcRow, epi_tile,
             tiled_copy, thread_idx] = this->args_tuple;
      auto [m, n, k, l] = tile_coord_mnkl;
      constexpr bool ReferenceSrc = decltype(ref_src)::value;
      if (not elem_less(cRow(_0{}, _0{}), residue_cRow)) {
        return;  // a CTA wholly outside the problem (in a partly outside cluster)
      }
      int lane_m = get<0>(lane_mn);

      // 1. Across the lanes of a warp that hold the same columns
      using FragmentShuffle = cutlass::Array<float, 2>;
      Tensor tCrRow_frg = recast<FragmentShuffle>(filter(tCrRow));
      ReduceFn<FragmentShuffle> reduce_shuffle{};  // sum or max, as the node asks
      constexpr int kLanesM = decltype(size<0>(lane_layout_MN))::value;
      constexpr int kPerLaneM = decltype(size(tCrRow_frg))::value / kLanesM;
      if constexpr (kPerLaneM > 0) {
        Tensor tCrRow_frg_ = logical_divide(tCrRow_frg, Int<kPerLaneM>{});  // (kPerLaneM, M)
        swap_shuffle<decltype(size<1>(tCrRow_frg_))::value / 2>(tCrRow_frg_, lane_m,
                                                                lane_layout_MN, reduce_shuffle);
      } else {
        auto lanes = lane_layout_MN;  // (a lambda cannot capture a structured binding in C++17)
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(tCrRow_frg); ++i) {
          detail::for_each_halving<kLanesM / 2>([&](auto rows) {
            uint64_t shuffled = reinterpret_cast<uint64_t&>(tCrRow_frg(i));
            shuffled = __shfl_down_sync(0xFFFFFFFF, shuffled, lanes(rows, _0{}));
            tCrRow_frg(i) = reduce_shuffle(tCrRow_frg(i), reinterpret_cast<FragmentShuffle&>(shuffled));
          });
        }
      }

      // 2. Across the warps that hold the same columns: through shared memory when there are
      // several in M, into this M tile's row of partials
      Tensor tCrRow_flt = filter(tCrRow);
      constexpr int kFltPerLaneM = decltype(size(tCrRow_flt))::value / kLanesM;
      if constexpr (decltype(size<0>(warp_layout_MN))::value <= 1) {
        Tensor tCgBuf = cutlass::epilogue::fusion::sm90_partition_for_epilogue<ReferenceSrc>(gBuf_ml(_, _, m, l), epi_tile,
                                                                  tiled_copy, thread_idx);
        if constexpr (kPerLaneM > 0) {
          Tensor tCgBuf_flt_ = logical_divide(filter(tCgBuf), Int<kFltPerLaneM>{});
          copy_aligned(logical_divide(tCrRow_flt, Int<kFltPerLaneM>{})(_, _0{}), tCgBuf_flt_(_, lane_m));
        } else if (lane_m == 0) {
          copy_aligned(tCrRow, tCgBuf);
        }
        sync_fn();
      } else {
        Tensor sBuf = make_tensor(make_smem_ptr<float>(raw_pointer_cast(smem_buffer.data())), sBuf_layout);
        static_assert(decltype(cosize(sBuf.layout()))::value * sizeof(float) <=
                          decltype(cosize(smem_buffer.layout()))::value *
                              sizeof(typename cute::remove_cvref_t<STensor>::value_type),
                      "smem reduction buffer not large enough, use a larger epilogue tile");
        sync_fn();
        Tensor tCsBuf = cutlass::epilogue::fusion::sm90_partition_for_epilogue<ReferenceSrc>(sBuf(_, _, get<0>(warp_mn)), epi_tile,
                                                                  tiled_copy, thread_idx);
        if constexpr (kPerLaneM > 0) {
          Tensor tCsBuf_flt_ = logical_divide(filter(tCsBuf), Int<kFltPerLaneM>{});
          copy_aligned(logical_divide(tCrRow_flt, Int<kFltPerLaneM>{})(_, _0{}), tCsBuf_flt_(_, lane_m));
        } else if (lane_m == 0) {
          copy_aligned(tCrRow, tCsBuf);
        }
        sync_fn();

        Tensor sBuf_flt = filter_zeros(sBuf);
        Tensor gBuf_flt = filter(gBuf_ml(_, _, m, l));
        constexpr int kCols = decltype(size<1>(sBuf_flt))::value;
        constexpr int kWarpsM = decltype(size<0>(warp_layout_MN))::value;
        for (int col = thread_idx; col < kCols; col += size(tiled_copy)) {
          float sum = sBuf_flt(0, col, 0);
          CUTLASS_PRAGMA_UNROLL
          for (int w = 1; w < kWarpsM; ++w) {
            sum = ReduceFn<float>{}(sum, sBuf_flt(0, col, w));
          }
          gBuf_flt(col) = sum;
        }
        sync_fn();
      }
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(
      cutlass::epilogue::fusion::ConsumerStoreArgs<Args...> const& args) {
    auto base = Base::template get_consumer_store_callbacks<ReferenceSrc>(args);
    return ConsumerStoreCallbacks<decltype(base.args_tuple)>(cute::move(base.args_tuple), this->params);
  }

  using Base::Base;
};

template <template <class> class ReduceFn, class Stat, class CtaTileShapeMNK, class ElementOutput,
          class StrideMNL>
auto Sm90RowReductionDeferred<ReduceFn, Stat, CtaTileShapeMNK, ElementOutput, StrideMNL>::finish_job(
    Arguments const& args, int M, int N, int L) -> FinishJob {
  FinishJob job;  // columns play the statistics' rows; all L x M tiles are one batch
  job.partials = static_cast<float const*>(args.partials);
  job.rows = padded_cols(N);
  job.tiles = tiles(M, L);
  job.valid = N;
  job.batches = 1;
  job.out_0 = args.ptr;
  return job;
}

// A sum or max over the whole problem (M, N and L) into one value. Each CTA reduces its tile
// (threads, then a fixed tree over a warp's lanes, then the warps in order) into one workspace
// slot; the last tile's CTA combines the slots in order with one warp.
template <class Stat, class CtaTileShapeMNK, class ElementOutput>
struct Sm90ScalarStatistic {
  using Partial = typename Stat::Partial;
  static_assert(Stat::kOutputs == 1);
  static constexpr int kTileM = decltype(cute::size<0>(CtaTileShapeMNK{}))::value;
  static constexpr int kTileN = decltype(cute::size<1>(CtaTileShapeMNK{}))::value;

  struct SharedStorage {};

  struct Arguments {
    ElementOutput* ptr = nullptr;
  };

  struct Params {
    Arguments args;
    Partial* partials = nullptr;
    int* counter = nullptr;
  };

  template <class ProblemShape>
  static int num_tiles(ProblemShape const& problem_shape) {
    auto [M, N, K, L] = cute::append<4>(problem_shape, 1);
    auto [tile_M, tile_N, tile_K] = CtaTileShapeMNK{};
    return int(cute::ceil_div(M, tile_M) * cute::ceil_div(N, tile_N) * cute::size(L));
  }

  template <class ProblemShape>
  static size_t partials_bytes(ProblemShape const& problem_shape) {
    return cutlass::round_nearest(size_t(num_tiles(problem_shape)) * sizeof(Partial),
                                  cutlass::MinWorkspaceAlignment);
  }

  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const& problem_shape, Arguments const&) {
    return partials_bytes(problem_shape) + sizeof(int);
  }

  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const& problem_shape, Arguments const&,
                                              void* workspace, cudaStream_t stream,
                                              cutlass::CudaHostAdapter* cuda_adapter = nullptr) {
    uint8_t* counter = static_cast<uint8_t*>(workspace) + partials_bytes(problem_shape);
    return cutlass::zero_workspace(counter, sizeof(int), stream, cuda_adapter);
  }

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape,
                                                  Arguments const& args, void* workspace) {
    uint8_t* base = static_cast<uint8_t*>(workspace);
    return {args, reinterpret_cast<Partial*>(base),
            reinterpret_cast<int*>(base ? base + partials_bytes(problem_shape) : nullptr)};
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const&) {
    return true;
  }

  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return false; }

  CUTLASS_HOST_DEVICE Sm90ScalarStatistic() {}
  CUTLASS_HOST_DEVICE Sm90ScalarStatistic(Params const& params, SharedStorage const&) : params(params) {}

  Params params;

  template <class... Args>
  CUTLASS_DEVICE auto get_producer_load_callbacks(cutlass::epilogue::fusion::ProducerLoadArgs<Args...> const&) {
    return cutlass::epilogue::fusion::EmptyProducerLoadCallbacks{};
  }

  template <class CoordTensor, class ThrCoordTensor, class Residue, class ThrResidue, class TiledCopy>
  struct ConsumerStoreCallbacks : cutlass::epilogue::fusion::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE ConsumerStoreCallbacks(Params const& params, CoordTensor cD, ThrCoordTensor tCcD,
                                          Residue residue_cD, ThrResidue residue_tCcD, TiledCopy,
                                          int thread_idx, int tile, int tiles)
        : params(params), cD(cD), tCcD(tCcD), residue_cD(residue_cD), residue_tCcD(residue_tCcD),
          thread_idx(thread_idx), tile(tile), tiles(tiles) {}

    Params const& params;
    CoordTensor cD;
    ThrCoordTensor tCcD;
    Residue residue_cD;
    ThrResidue residue_tCcD;
    int thread_idx;
    int tile;   // this tile's slot
    int tiles;  // slots in all
    Partial value = Stat::identity();
    bool do_final = false;

    static constexpr int kNumThreads = TiledCopy::TiledNumThr::value;
    static constexpr int kWarps = kNumThreads / cutlass::NumThreadsPerWarp;

    template <typename ElementAccumulator, typename ElementInput, int FragmentSize>
    CUTLASS_DEVICE auto visit(cutlass::Array<ElementAccumulator, FragmentSize> const&, int epi_v,
                              int epi_m, int epi_n,
                              cutlass::Array<ElementInput, FragmentSize> const& frg_input) {
      using namespace cute;
      cutlass::NumericArrayConverter<float, ElementInput, FragmentSize> convert;
      cutlass::Array<float, FragmentSize> x = convert(frg_input);
      // A tile inside the problem pushes without a bounds check per element
      if (detail::tile_inside<kTileM, kTileN>(residue_cD)) {
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < FragmentSize; ++i) {
          Stat::push(value, x[i]);
        }
        return frg_input;
      }
      Tensor tCcD_mn = tCcD(_, _, _, epi_m, epi_n);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentSize; ++i) {
        if (elem_less(tCcD_mn(epi_v * FragmentSize + i), residue_tCcD)) {
          Stat::push(value, x[i]);
        }
      }
      return frg_input;
    }

    template <class STensor, class SyncFn, class VTensor>
    CUTLASS_DEVICE void reduce(STensor&& smem_buffer, SyncFn const& sync_fn, int, int,
                               bool is_last_iteration, VTensor) {
      using namespace cute;
      if (!is_last_iteration || !elem_less(cD(_0{}, _0{}), residue_cD)) {
        return;
      }
      CUTLASS_PRAGMA_UNROLL
      for (int delta = cutlass::NumThreadsPerWarp / 2; delta > 0; delta /= 2) {
        value = Stat::combine(value, Stat::shuffle_down(value, delta));
      }
      Partial* warps = reinterpret_cast<Partial*>(raw_pointer_cast(smem_buffer.data()));
      sync_fn();
      if (thread_idx % cutlass::NumThreadsPerWarp == 0) {
        warps[thread_idx / cutlass::NumThreadsPerWarp] = value;
      }
      sync_fn();
      if (thread_idx == 0) {
        Partial t = warps[0];
        CUTLASS_PRAGMA_UNROLL
        for (int w = 1; w < kWarps; ++w) {
          t = Stat::combine(t, warps[w]);
        }
        params.partials[tile] = t;
      }
      do_final = detail::arrive_last(smem_buffer, sync_fn, params.counter, tiles, thread_idx);
    }

    CUTLASS_DEVICE void end() {
      if (!do_final || thread_idx >= cutlass::NumThreadsPerWarp) {
        return;
      }
      int mine = (tiles - thread_idx + cutlass::NumThreadsPerWarp - 1) / cutlass::NumThreadsPerWarp;
      Partial p = detail::combine_in_order<Stat>(params.partials + thread_idx,
                                                 cutlass::NumThreadsPerWarp, mine);
      CUTLASS_PRAGMA_UNROLL
      for (int delta = cutlass::NumThreadsPerWarp / 2; delta > 0; delta /= 2) {
        p = Stat::combine(p, Stat::shuffle_down(p, delta));
      }
      if (thread_idx == 0 && params.args.ptr != nullptr) {
        *params.args.ptr = cutlass::NumericConverter<ElementOutput, float>{}(Stat::finish(p)[0]);
      }
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(
      cutlass::epilogue::fusion::ConsumerStoreArgs<Args...> const& args) {
    auto [M, N, K, L] = args.problem_shape_mnkl;
    auto [m, n, k, l] = args.tile_coord_mnkl;
    int tiles_m = cute::ceil_div(int(M), int(cute::size<0>(CtaTileShapeMNK{})));
    int tiles_n = cute::ceil_div(int(N), int(cute::size<1>(CtaTileShapeMNK{})));
    int tile = (int(detail::flat_batch(l, L)) * tiles_n + int(n)) * tiles_m + int(m);
    return ConsumerStoreCallbacks<decltype(args.cD), decltype(args.tCcD), decltype(args.residue_cD),
                                  decltype(args.residue_tCcD), decltype(args.tiled_copy)>(
        params, args.cD, args.tCcD, args.residue_cD, args.residue_tCcD, args.tiled_copy,
        args.thread_idx, tile, tiles_m * tiles_n * int(cute::size(L)));
  }
};

}  // namespace evt
