// BatchNorm1d's batch statistics in an SM90 epilogue: evt::Sm90ColumnStatistics, a statistic of
// each column over M (and L) into N-vectors, finished by evt_statistics.h's `finish_all` like the
// other deferred nodes. Its own header: kernels without it keep their sources (and cache keys).
#pragma once

#include "evt_statistics.h"

namespace evt {

namespace detail {

// `p` from the lane `mask` away (xor), every float of it (any Partial of whole floats)
template <class Partial>
CUTLASS_DEVICE Partial shuffle_xor(Partial p, int mask) {
  static_assert(sizeof(Partial) % sizeof(float) == 0);
  Partial out;
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < int(sizeof(Partial) / sizeof(float)); ++i) {
    reinterpret_cast<float*>(&out)[i] =
        __shfl_xor_sync(0xFFFFFFFF, reinterpret_cast<float const*>(&p)[i], mask);
  }
  return out;
}

}  // namespace detail

// Per-column statistic over M and L (BatchNorm's batch mean and var of a Linear's output):
// Stat::kOutputs N-vectors, any of them skipped with a null pointer. Stat is a WelfordStat (the
// fast path builds its Partial {count, mean, M2, non-finite sum}). Per epilogue subtile, each
// thread reduces its elements into one partial per column it holds, then the lanes that share
// columns exchange halves of them (CUTLASS's swap shuffle: after log2(lanes) steps each lane holds
// the warp's partial of 1/lanes of the columns), kept in registers across the tile (a few per
// subtile column strip). At the tile's end the warps in M meet in this node's shared memory,
// are combined in warp order, and the tile's partial of each column goes to
// `partials[l][m_tile][n]` (N padded to whole tiles); the finishing job (`finish_all`) combines
// each column's L x M-tile partials in a fixed order: the same bits on every run.
template <class Stat, class CtaTileShapeMNK, class ElementOutput,
          class StrideMNL = cute::Stride<cute::_0, cute::_1, cute::_0>>
struct Sm90ColumnStatistics {
  using Partial = typename Stat::Partial;
  static constexpr int kTileM = decltype(cute::size<0>(CtaTileShapeMNK{}))::value;
  static constexpr int kTileN = decltype(cute::size<1>(CtaTileShapeMNK{}))::value;
  static constexpr int kMaxWarpsM = 8;  // two consumer warp groups' warps, all split along M

  struct SharedStorage {
    alignas(16) Partial warps[kMaxWarpsM * kTileN];  // [warp in M][column of the tile]
  };

  struct Arguments {
    ElementOutput* ptr_0 = nullptr;  // output 0 of the statistic (Welford: mean)
    ElementOutput* ptr_1 = nullptr;  // output 1 (Welford: var)
    StrideMNL dOut = {};
    void* partials = nullptr;  // partials_bytes(M, N, L) of the launcher's workspace
  };

  using Params = Arguments;

  CUTLASS_HOST_DEVICE static int64_t padded_cols(int N) {
    return int64_t(cute::ceil_div(N, int(kTileN))) * kTileN;
  }
  CUTLASS_HOST_DEVICE static int tiles(int M, int L) { return cute::ceil_div(M, int(kTileM)) * L; }

  static size_t partials_bytes(int M, int N, int L) {
    size_t bytes = size_t(tiles(M, L)) * size_t(padded_cols(N)) * sizeof(Partial);
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

  using FinishJob = detail::FinishJob<Stat, ElementOutput>;
  static FinishJob finish_job(Arguments const& args, int M, int N, int L);

  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return false; }

  CUTLASS_HOST_DEVICE Sm90ColumnStatistics() {}
  CUTLASS_HOST_DEVICE Sm90ColumnStatistics(Params const& params, SharedStorage const& shared)
      : params(params), smem(const_cast<Partial*>(shared.warps)) {}

  Params params;
  Partial* smem = nullptr;

  template <class... Args>
  CUTLASS_DEVICE auto get_producer_load_callbacks(cutlass::epilogue::fusion::ProducerLoadArgs<Args...> const&) {
    return cutlass::epilogue::fusion::EmptyProducerLoadCallbacks{};
  }

  template <int kEpiM, int kEpiN, class ColTensor, class BufTensor, class SColTensor, class CoordTensor,
            class ThrCoordTensor, class Residue, class ThrResidue, class LaneLayout, class TiledCopy>
  struct ConsumerStoreCallbacks : cutlass::epilogue::fusion::EmptyConsumerStoreCallbacks {
    static constexpr int kLanesM = decltype(cute::size<0>(LaneLayout{}))::value;
    // the distinct columns a thread holds in one subtile, and how many it keeps after the swap
    static constexpr int kCols = decltype(cute::size(cute::filter_zeros(ColTensor{})))::value;
    static_assert(kCols % kLanesM == 0,
                  "evt column statistics: an epilogue subtile too narrow for its lanes (N >= 32)");
    static constexpr int kOwned = kCols / kLanesM;
    static constexpr int kThreads = TiledCopy::TiledNumThr::value;

    CUTLASS_DEVICE ConsumerStoreCallbacks(ColTensor tCrCol, BufTensor tCrBuf, SColTensor tCsCol,
                                          CoordTensor cD, ThrCoordTensor tCcD, Residue residue_cD,
                                          ThrResidue residue_tCcD, LaneLayout lane_layout_MN,
                                          int lane_m, Partial* smem, Partial* slot, int thread_idx)
        : tCrCol(tCrCol), tCrBuf(tCrBuf), tCsCol(tCsCol), cD(cD), tCcD(tCcD),
          residue_cD(residue_cD), residue_tCcD(residue_tCcD), lane_layout_MN(lane_layout_MN),
          lane_m(lane_m), smem(smem), slot(slot), thread_idx(thread_idx) {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kOwned * kEpiN; ++i) {
        owned[i] = Stat::identity();
      }
    }

    ColTensor tCrCol;    // (CPY,CPY_M,CPY_N): one Partial per column of a subtile, stride 0 along M
    BufTensor tCrBuf;    // (CPY,CPY_M,CPY_N): the visited values of the current subtile
    SColTensor tCsCol;   // the same partition of this warp's row of the shared buffer
    CoordTensor cD;
    ThrCoordTensor tCcD;
    Residue residue_cD;
    ThrResidue residue_tCcD;
    LaneLayout lane_layout_MN;
    int lane_m;
    Partial* smem;
    Partial* slot;  // this tile's row of partials: slot[column of the tile]
    int thread_idx;
    Partial owned[kOwned * kEpiN];  // [epi_n][k]: the warp's partials of this lane's columns

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

    // The fast path, for a subtile wholly inside the problem: every column holds kRows of this
    // thread's elements and every lane's partials have the same count, so a partial is its
    // (mean, M2) alone (its count known at compile time) and two of them combine with Chan's
    // formula for equal counts, mean = (a + b) / 2, M2 = M2_a + M2_b + (b - a)^2 n / 2: no
    // reciprocal, two floats a shuffle, and the same bits in either order (no select for it).
    // An inf or a NaN (or an overflow) makes some lane's result not finite: then it returns
    // false and the warp redoes the subtile on the checked path, as one (the shuffles are
    // warp-wide).
    CUTLASS_DEVICE bool subtile_fast(Partial (&v)[kCols]) {
      using namespace cute;
      constexpr int kRows = decltype(size(BufTensor{}))::value / kCols;
      Tensor mean = make_tensor_like<float>(tCrCol);  // aliased as tCrCol: one per column
      Tensor m2 = make_tensor_like<float>(tCrCol);
      Tensor mean_flt = filter_zeros(mean);
      Tensor m2_flt = filter_zeros(m2);
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kCols; ++j) {
        mean_flt(j) = 0.f;
        m2_flt(j) = 0.f;
      }
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(tCrBuf); ++i) {
        mean(i) += tCrBuf(i);
      }
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kCols; ++j) {
        mean_flt(j) *= 1.f / kRows;
      }
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(tCrBuf); ++i) {
        float d = tCrBuf(i) - mean(i);
        m2(i) = fmaf(d, d, m2(i));
      }
      float mv[kCols], qv[kCols];
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kCols; ++j) {
        mv[j] = mean_flt(j);
        qv[j] = m2_flt(j);
      }
      auto lanes = lane_layout_MN;
      detail::for_each_halving<kLanesM / 2>([&](auto half) {
        constexpr int kHalf = decltype(half)::value;
        constexpr float kHalfCount = 0.5f * kRows * (kLanesM / (2 * kHalf));  // n / 2 each side
        bool upper = (lane_m & kHalf) != 0;
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < kHalf * kOwned; ++j) {
          int k = j + kHalf * kOwned;
          float keep_m = upper ? mv[k] : mv[j], keep_q = upper ? qv[k] : qv[j];
          float got_m = __shfl_xor_sync(0xFFFFFFFF, upper ? mv[j] : mv[k], lanes(kHalf, _0{}));
          float got_q = __shfl_xor_sync(0xFFFFFFFF, upper ? qv[j] : qv[k], lanes(kHalf, _0{}));
          float d = got_m - keep_m;
          mv[j] = 0.5f * (keep_m + got_m);
          qv[j] = fmaf(d * d, kHalfCount, keep_q + got_q);
        }
      });
      bool finite = true;
      CUTLASS_PRAGMA_UNROLL
      for (int k = 0; k < kOwned; ++k) {
        finite &= fabsf(mv[k]) < INFINITY && fabsf(qv[k]) < INFINITY;  // false for NaN too
        v[k] = Partial{float(kRows * kLanesM), mv[k], qv[k], 0.f};
      }
      return __all_sync(0xFFFFFFFF, finite);
    }

    // The checked path: the statistic's own push (bounds, infinities and NaN as torch has
    // them), then the swap shuffle of whole partials, combined with Chan's general formula.
    CUTLASS_DEVICE void subtile_checked(Partial (&v)[kCols], int epi_m, int epi_n) {
      using namespace cute;
      Tensor cols_flt = filter_zeros(tCrCol);
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kCols; ++j) {
        cols_flt(j) = Stat::identity();
      }
      Tensor tCcD_mn = tCcD(_, _, _, epi_m, epi_n);
      Stat::push_subtile(tCrCol, tCrBuf, [&](int i) { return elem_less(tCcD_mn(i), residue_tCcD); });
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kCols; ++j) {
        v[j] = cols_flt(j);
      }
      // at each step the lanes apart by `half` in M exchange half of their columns' partials,
      // each keeping the half its bit selects, combined lower rows first; afterwards lane_m
      // holds chunk lane_m (kOwned columns) of the warp's partials (CUTLASS's swap shuffle)
      auto lanes = lane_layout_MN;
      detail::for_each_halving<kLanesM / 2>([&](auto half) {
        constexpr int kHalf = decltype(half)::value;
        bool upper = (lane_m & kHalf) != 0;
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < kHalf * kOwned; ++j) {
          Partial lo = v[j];
          Partial hi = v[j + kHalf * kOwned];
          Partial got = detail::shuffle_xor(upper ? lo : hi, lanes(kHalf, _0{}));
          v[j] = upper ? Stat::combine(got, hi) : Stat::combine(lo, got);
        }
      });
    }

    template <class STensor, class SyncFn, class VTensor>
    CUTLASS_DEVICE void reduce(STensor&&, SyncFn const& sync_fn, int epi_m, int epi_n,
                               bool is_last_iteration, VTensor) {
      using namespace cute;
      Partial v[kCols];  // after the swap shuffle: v[0, kOwned) are this lane's columns
      // A tile inside the problem whose warp holds only finite values (the common case) takes
      // the fast path; a residue tile or a warp with an inf or a NaN, the checked one.
      bool fast = detail::tile_inside<kTileM, kTileN>(residue_cD) && subtile_fast(v);
      if (!fast) {
        subtile_checked(v, epi_m, epi_n);
      }
      CUTLASS_PRAGMA_UNROLL
      for (int k = 0; k < kOwned; ++k) {  // one subtile in M: nothing to combine with yet
        Partial& o = owned[epi_n * kOwned + k];
        o = kEpiM == 1 ? v[k] : Stat::combine(o, v[k]);
      }
      if (!is_last_iteration || !elem_less(cD(_0{}, _0{}), residue_cD)) {
        return;  // not done yet, or a CTA of a cluster that is wholly out of bounds
      }
      // the warps in M meet in shared memory (each its row, `tCsCol`), combined in warp order
      // into this tile's partials
      CUTLASS_PRAGMA_UNROLL
      for (int e = 0; e < kEpiN; ++e) {
        Tensor dst = logical_divide(filter(tCsCol(_, _, _, 0, e)), Int<kOwned>{});  // (kOwned, lanes)
        CUTLASS_PRAGMA_UNROLL
        for (int k = 0; k < kOwned; ++k) {
          dst(k, lane_m) = owned[e * kOwned + k];
        }
      }
      sync_fn();
      constexpr int kWarpsM = kThreads / cutlass::NumThreadsPerWarp;
      for (int col = thread_idx; col < kTileN; col += kThreads) {
        Partial p = smem[col];
        CUTLASS_PRAGMA_UNROLL
        for (int w = 1; w < kWarpsM; ++w) {
          p = Stat::combine(p, smem[w * kTileN + col]);
        }
        slot[col] = p;
      }
      sync_fn();  // the buffer is the next tile's
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(
      cutlass::epilogue::fusion::ConsumerStoreArgs<Args...> const& args) {
    using namespace cute;
    // which lanes and warps of the epilogue's copy share a column (as CUTLASS's Sm90RowReduction)
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
                  "evt column statistics: the epilogue's warps must split M only");
    static_assert(W::value <= kMaxWarpsM, "evt column statistics: more warps than its buffer");
    auto warp_mn = idx2crd(right_inverse(warp_layout_MN)(args.thread_idx / cutlass::NumThreadsPerWarp),
                           shape(warp_layout_MN));

    // one register Partial per column this thread holds: a (CTA_M, CTA_N) layout of stride (0, 1)
    auto col_layout = make_layout(take<0, 2>(args.tile_shape_mnk), Stride<_0, _1>{});
    Tensor gCol = make_tensor(make_gmem_ptr(static_cast<Partial*>(nullptr)), col_layout);
    Tensor tCgCol = cutlass::epilogue::fusion::sm90_partition_for_epilogue<ReferenceSrc>(
        gCol, args.epi_tile, args.tiled_copy, args.thread_idx);
    Tensor tCrCol = make_tensor_like<Partial>(tCgCol(_, _, _, _0{}, _0{}));
    Tensor tCrBuf = make_tensor<float>(shape(tCgCol(_, _, _, _0{}, _0{})));
    Tensor sCol = make_tensor(make_smem_ptr(smem + int(get<0>(warp_mn)) * kTileN), col_layout);
    Tensor tCsCol = cutlass::epilogue::fusion::sm90_partition_for_epilogue<ReferenceSrc>(
        sCol, args.epi_tile, args.tiled_copy, args.thread_idx);

    auto [M, N, K, L] = args.problem_shape_mnkl;
    auto [m, n, k, l] = args.tile_coord_mnkl;
    // this tile's partials: partials[l][m][n * CTA_N + column]
    int64_t tile = detail::flat_batch(l, L) * cute::ceil_div(int(M), int(kTileM)) + int64_t(m);
    Partial* slot = static_cast<Partial*>(params.partials) + tile * padded_cols(int(N)) +
                    int64_t(n) * kTileN;
    constexpr int kEpiM = decltype(size<3>(tCgCol))::value;
    constexpr int kEpiN = decltype(size<4>(tCgCol))::value;
    return ConsumerStoreCallbacks<kEpiM, kEpiN, decltype(tCrCol), decltype(tCrBuf), decltype(tCsCol),
                                  decltype(args.cD), decltype(args.tCcD),
                                  decltype(args.residue_cD), decltype(args.residue_tCcD),
                                  decltype(lane_layout_MN), decltype(args.tiled_copy)>(
        tCrCol, tCrBuf, tCsCol, args.cD, args.tCcD, args.residue_cD, args.residue_tCcD,
        lane_layout_MN, int(get<0>(lane_mn)), smem, slot, args.thread_idx);
  }
};

template <class Stat, class CtaTileShapeMNK, class ElementOutput, class StrideMNL>
auto Sm90ColumnStatistics<Stat, CtaTileShapeMNK, ElementOutput, StrideMNL>::finish_job(
    Arguments const& args, int M, int N, int L) -> FinishJob {
  FinishJob job;  // columns play the statistics' rows; all L x M tiles are one batch
  job.partials = static_cast<Partial const*>(args.partials);
  job.rows = padded_cols(N);
  job.tiles = tiles(M, L);
  job.valid = N;
  job.batches = 1;
  job.out_0 = args.ptr_0;
  job.out_1 = args.ptr_1;
  return job;
}

}  // namespace evt
