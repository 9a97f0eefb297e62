// Host-side helpers shared by every generated evt launcher (no libtorch, no host synchronization).
#pragma once

#include <array>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/device_kernel.h"
#include "cutlass/kernel_hardware_info.h"

namespace evt::launch {

// Return codes of evt_<name>_run besides 0 (success) and a positive (int)cutlass::Status from
// Gemm::initialize or Gemm::run.
enum ReturnCode : int {
  kCannotImplement = -1,    // Gemm::can_implement rejected the problem (shape or alignment)
  kStrideMismatch = -2,     // a stride contradicts a static (unit or zero) stride of the kernel
  kWorkspaceTooSmall = -3,  // workspace_bytes < evt_<name>_workspace(M, N, K, L, tile_order)
  kNoDevice = -4,           // the current device or its SM count could not be queried
  kFinishFailed = -5,       // a statistic's finishing kernel failed to launch
  kBadTileOrder = -6,       // a tile order outside raster 0-2, swizzle 0 (evt's), 1, 2, 4, 8
};

// Programmatic dependent launches (PDL), EVT_PDL (read once per library):
//   0  none: every kernel waits for the one before it on the stream to end;
//   1  (default) a region's finishing kernel (evt::finish_all) starts during its GEMM's last
//      tiles and waits in griddepcontrol.wait for the GEMM to complete;
//   2  also the GEMM itself, after whatever kernel precedes it on the stream: its prologue
//      (barriers, descriptors, the tile scheduler) overlaps that kernel's end, and its load
//      warps wait in griddepcontrol.wait before they touch global memory (CUTLASS's grid
//      dependency control, compiled into every evt kernel); opt-in: tested and timed on an
//      H200 (session 40), it gained 0-1 us a call at 55-300 us, so 1 stays the default.
inline int pdl_level() {
  static int const level = [] {
    char const* value = std::getenv("EVT_PDL");
    return value == nullptr ? 1 : (value[0] == '0' ? 0 : (value[0] == '2' ? 2 : 1));
  }();
  return level;
}

// Whether the GEMM launches as a programmatic dependent launch: EVT_PDL=2, and a main loop of
// at least one k-block (the consumer warps reach global memory only through data the load
// warp brought after its wait; with K = 0 they would not wait for anything), and the kernel
// compiled with the grid dependency control (else nothing in it waits).
inline bool gemm_launch_is_programmatic(int K) {
#if defined(CUTLASS_ENABLE_GDC_FOR_SM90)
  return K > 0 && pdl_level() >= 2;
#else
  (void)K;
  return false;
#endif
}

template <class T>
inline T const* in_ptr(void const* const* ptrs, int i) {
  return ptrs ? static_cast<T const*>(ptrs[i]) : nullptr;
}

template <class T>
inline T* out_ptr(void* const* ptrs, int i) {
  return ptrs ? static_cast<T*>(ptrs[i]) : nullptr;
}

// A scalar load's 0-d tensor (Sm90ScalarBroadcast): a device pointer the kernel reads, or a value
// in host memory (a CPU scalar beside CUDA operands, as eager takes one; its first stride in the
// ABI is kHostScalar, evt.runtime.guards.HOST_SCALAR) the launcher reads now and passes by value.
constexpr int64_t kHostScalar = 1;

inline bool host_scalar(void const* const* ptrs, int64_t const* strides, int strides_at) {
  return ptrs && strides && strides[strides_at] == kHostScalar;
}

template <class T>
inline T scalar_value(void const* const* ptrs, int64_t const* strides, int i, int strides_at) {
  return host_scalar(ptrs, strides, strides_at) ? *static_cast<T const*>(ptrs[i]) : T(0);
}

template <class T>
inline T const* scalar_ptr(void const* const* ptrs, int64_t const* strides, int i, int strides_at) {
  return host_scalar(ptrs, strides, strides_at) ? nullptr : in_ptr<T>(ptrs, i);
}

// A launch's key holds a host scalar's value in its pointer's place (the value is in the kernel's
// parameters, which the memo keeps per key; the kHostScalar stride tells it from a pointer).
template <class T, size_t N>
inline void key_host_scalar(std::array<int64_t, N>& key, void const* const* ptrs,
                            int64_t const* strides, int i, int strides_at) {
  if (host_scalar(ptrs, strides, strides_at)) {
    int64_t bits = 0;
    std::memcpy(&bits, ptrs[i], sizeof(T));
    key[9 + i] = bits;  // after launch_key's 9 scalars
  }
}

// The 3 strides of tensor i (a nested batch: 4), or none (the workspace query).
inline int64_t const* strides_of(int64_t const* strides, int i, int per_tensor = 3) {
  return strides ? strides + per_tensor * i : nullptr;
}

// Copy the caller's stride `s` into one mode of a CuTe stride. A static mode (cute::_1 or
// cute::_0, which cute::get returns by value) keeps its value, which the caller's must equal
// where the mode's extent is above 1.
template <class Mode>
inline bool load_mode(int64_t s, int extent, Mode&& mode) {
  using Static = cute::remove_cvref_t<Mode>;
  if constexpr (cute::is_static<Static>::value) {
    return extent <= 1 || s == int64_t(Static::value);
  } else {
    mode = s;
    return true;
  }
}

// Copy the caller's 3 strides into a CuTe stride (load_mode per mode). No strides leaves the
// defaults.
template <class Stride>
inline bool load_stride(int64_t const* s, int e0, int e1, int e2, Stride& out) {
  if (s == nullptr) {
    return true;
  }
  bool ok = load_mode(s[0], e0, cute::get<0>(out));
  ok = load_mode(s[1], e1, cute::get<1>(out)) && ok;
  return load_mode(s[2], e2, cute::get<2>(out)) && ok;
}

// A nested batch L = (L1, L2): the caller's 4 strides (M|N, K|N, L1, L2) into a CuTe stride whose
// third mode is a pair, as load_stride does for 3. A stride with one L mode (a statistic's
// [L1 * L2, M] outputs, indexed by the flat l1 * L2 + l2) takes the L2 stride, which the L1
// stride must be L2 times.
template <class Stride>
inline bool load_stride(int64_t const* s, int e0, int e1, int l1, int l2, Stride& out) {
  if (s == nullptr) {
    return true;
  }
  bool ok = load_mode(s[0], e0, cute::get<0>(out));
  ok = load_mode(s[1], e1, cute::get<1>(out)) && ok;
  if constexpr (cute::is_tuple<cute::remove_cvref_t<decltype(cute::get<2>(out))>>::value) {
    ok = load_mode(s[2], l1, cute::get<2, 0>(out)) && ok;
    return load_mode(s[3], l2, cute::get<2, 1>(out)) && ok;
  } else {
    ok = (l1 <= 1 || s[2] == int64_t(l2) * s[3]) && ok;
    return load_mode(s[3], l1 * l2, cute::get<2>(out)) && ok;
  }
}

// The current device and its SM count (cached per device); the count is 0 when unavailable.
inline cutlass::KernelHardwareInfo hardware_info() {
  static std::atomic<int> cache[64];
  cutlass::KernelHardwareInfo info;
  info.sm_count = 0;
  if (cudaGetDevice(&info.device_id) != cudaSuccess || info.device_id < 0 ||
      info.device_id >= 64) {
    return info;
  }
  int count = cache[info.device_id].load(std::memory_order_relaxed);
  if (count == 0 && cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount,
                                           info.device_id) == cudaSuccess) {
    cache[info.device_id].store(count, std::memory_order_relaxed);
  }
  info.sm_count = count;
  return info;
}

// The persistent tile scheduler's swizzle where a launch leaves it to evt (tile order swizzle
// 0, the default): 2 for one GEMM (L = 1) at K <= 1024, else CUTLASS's 1. H100, session 15
// (benchmarks/results/2026-11-23-H100-session15/config_sweep_tile_orders.json and suite_swizzle/):
// at K = 768-1024 swizzle 2 ran bias + ReLU 11-28% and the tanh GELU 6-13% faster at 128x128
// ping-pong, softmax and cross-entropy statistics 0-4%; at K = 3072-4096 it moved them -4% to
// +4%, and batched attention scores (K = 64) lost 2-4%. CUTLASS rounds both tile counts up to a
// multiple of swizzle x cluster: where that adds a wave (ViT's 12608 rows: 99 x 24 tiles of
// 128x128, 18 waves, to 100 x 24) it stays 1; the exact GELU lost 4% there.
inline int auto_swizzle(int64_t M, int64_t N, int64_t K, int64_t L, int tile_m, int tile_n,
                        int cluster_m, int cluster_n, int sm_count) {
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  int64_t const tm = ceil_div(M, tile_m), tn = ceil_div(N, tile_n);
  if (K > 1024 || L != 1 || tm < 2 || tn < 2 || sm_count <= 0) {
    return 1;
  }
  int64_t const padded =
      ceil_div(tm, 2 * cluster_m) * 2 * cluster_m * ceil_div(tn, 2 * cluster_n) * 2 * cluster_n;
  return ceil_div(padded, sm_count) > ceil_div(tm * tn, sm_count) ? 1 : 2;
}

// Raise a kernel's dynamic shared-memory limit once per device. Gemm::initialize would call
// cudaFuncSetAttribute on every launch: a driver round trip each time, on the training step's path.
template <class Kernel>
inline cudaError_t configure_shared_memory_once(int device, int bytes) {
  static std::atomic<int> done[64];
  if (bytes < (48 << 10) || device < 0 || device >= 64 ||
      done[device].load(std::memory_order_acquire)) {
    return cudaSuccess;
  }
  cudaError_t err = cudaFuncSetAttribute(cutlass::device_kernel<Kernel>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess) {
    done[device].store(1, std::memory_order_release);
  } else {
    cudaGetLastError();  // clear the error bit
  }
  return err;
}

// The key of a launch: everything the kernel parameters are built from (device, tile order,
// problem shape, workspace, pointers and S strides each of NI inputs and NO outputs; a nested batch
// L = (L1, L2) has S = 4 and passes L1 as L).
template <int NI, int NO, int S = 3>
using LaunchKey = std::array<int64_t, 9 + (S + 1) * (NI + NO)>;

template <int NI, int NO, int S = 3>
inline LaunchKey<NI, NO, S> launch_key(void const* const* inputs, int64_t const* input_strides,
                                       void* const* outputs, int64_t const* output_strides,
                                       int M, int N, int K, int L, void* workspace,
                                       size_t workspace_bytes, int device, int tile_order,
                                       int L2 = 1) {
  LaunchKey<NI, NO, S> key{};
  int i = 0;
  for (int64_t v : {int64_t(device), int64_t(tile_order), int64_t(M), int64_t(N), int64_t(K),
                    int64_t(L), int64_t(L2), reinterpret_cast<int64_t>(workspace),
                    int64_t(workspace_bytes)}) {
    key[i++] = v;
  }
  for (int t = 0; t < NI; ++t) {
    key[i++] = reinterpret_cast<int64_t>(inputs[t]);
  }
  for (int t = 0; t < S * NI; ++t) {
    key[i++] = input_strides[t];
  }
  for (int t = 0; t < NO; ++t) {
    key[i++] = reinterpret_cast<int64_t>(outputs[t]);
  }
  for (int t = 0; t < S * NO; ++t) {
    key[i++] = output_strides[t];
  }
  return key;
}

// The launches of one kernel (per host thread) by launch key, the most recent `Ways`. A training
// step repeats its launches with the same pointers (torch's caching allocator hands the same
// blocks back), once per layer where layers share a kernel, and building the parameters (TMA
// descriptors, tile scheduler) is most of the launcher's host time. Keys are told apart by a hash
// first; the oldest entry goes when all `Ways` are taken.
template <class Launch, class Key, int Ways = 64>
class LaunchMemo {
 public:
  LaunchMemo() {  // reserved up front: an entry never moves (insert returns its address)
    entries_.reserve(Ways);
    hashes_.reserve(Ways);
  }

  Launch* find(Key const& key) {
    uint64_t const h = hash(key);
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (hashes_[i] == h && entries_[i].first == key) {
        return &entries_[i].second;
      }
    }
    return nullptr;
  }

  Launch* insert(Key const& key, Launch const& launch) {
    size_t slot = entries_.size();
    if (slot < Ways) {
      entries_.emplace_back(key, launch);
      hashes_.push_back(hash(key));
    } else {
      slot = next_;
      next_ = (next_ + 1) % Ways;
      entries_[slot] = {key, launch};
      hashes_[slot] = hash(key);
    }
    return &entries_[slot].second;
  }

 private:
  static uint64_t hash(Key const& key) {  // FNV-1a over the key's words
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : key) {
      h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    }
    return h;
  }

  std::vector<std::pair<Key, Launch>> entries_;
  std::vector<uint64_t> hashes_;
  size_t next_ = 0;  // the oldest entry once all Ways are taken
};

}  // namespace evt::launch
