// Host-side helpers shared by every generated evt launcher (no libtorch, no host synchronization).
#pragma once

#include <array>

#include <atomic>
#include <cstdint>

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
  kWorkspaceTooSmall = -3,  // workspace_bytes < evt_<name>_workspace(M, N, K, L)
  kNoDevice = -4,           // the current device or its SM count could not be queried
  kFinishFailed = -5,       // a statistic's finishing kernel failed to launch
};

template <class T>
inline T const* in_ptr(void const* const* ptrs, int i) {
  return ptrs ? static_cast<T const*>(ptrs[i]) : nullptr;
}

template <class T>
inline T* out_ptr(void* const* ptrs, int i) {
  return ptrs ? static_cast<T*>(ptrs[i]) : nullptr;
}

// The 3 strides of tensor i, or none (the workspace query).
inline int64_t const* strides_of(int64_t const* strides, int i) {
  return strides ? strides + 3 * i : nullptr;
}

// Copy the caller's 3 strides into a CuTe stride. A static mode (cute::_1 or cute::_0) keeps its
// value, which the caller's must equal wherever that mode's extent is above 1. No strides leaves
// the defaults.
template <class Stride>
inline bool load_stride(int64_t const* s, int e0, int e1, int e2, Stride& out) {
  if (s == nullptr) {
    return true;
  }
  int const extent[3] = {e0, e1, e2};
  bool ok = true;
  cute::for_each(cute::make_seq<3>{}, [&](auto i) {
    constexpr int I = decltype(i)::value;
    using Mode = cute::remove_cvref_t<decltype(cute::get<I>(out))>;
    if constexpr (cute::is_static<Mode>::value) {
      ok = ok && (extent[I] <= 1 || s[I] == int64_t(Mode::value));
    } else {
      cute::get<I>(out) = s[I];
    }
  });
  return ok;
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

// The key of a launch: everything the kernel parameters are built from (device, problem shape,
// workspace, pointers and strides of NI inputs and NO outputs).
template <int NI, int NO>
using LaunchKey = std::array<int64_t, 7 + 4 * (NI + NO)>;

template <int NI, int NO>
inline LaunchKey<NI, NO> launch_key(void const* const* inputs, int64_t const* input_strides,
                                    void* const* outputs, int64_t const* output_strides, int M,
                                    int N, int K, int L, void* workspace, size_t workspace_bytes,
                                    int device) {
  LaunchKey<NI, NO> key{};
  int i = 0;
  for (int64_t v : {int64_t(device), int64_t(M), int64_t(N), int64_t(K), int64_t(L),
                    reinterpret_cast<int64_t>(workspace), int64_t(workspace_bytes)}) {
    key[i++] = v;
  }
  for (int t = 0; t < NI; ++t) {
    key[i++] = reinterpret_cast<int64_t>(inputs[t]);
  }
  for (int t = 0; t < 3 * NI; ++t) {
    key[i++] = input_strides[t];
  }
  for (int t = 0; t < NO; ++t) {
    key[i++] = reinterpret_cast<int64_t>(outputs[t]);
  }
  for (int t = 0; t < 3 * NO; ++t) {
    key[i++] = output_strides[t];
  }
  return key;
}

// The kernel parameters of the last few launches (per host thread). A training step repeats its
// launches with the same pointers (torch's caching allocator hands the same blocks back), and
// building the parameters (TMA descriptors, tile scheduler) is most of the launcher's host time.
template <class Params, class Key, int Ways = 4>
class ParamsMemo {
 public:
  Params* find(Key const& key) {
    for (int i = 0; i < count_; ++i) {
      if (keys_[i] == key) {
        return &params_[i];
      }
    }
    return nullptr;
  }

  void insert(Key const& key, Params const& params) {
    keys_[next_] = key;
    params_[next_] = params;
    next_ = (next_ + 1) % Ways;
    count_ = count_ < Ways ? count_ + 1 : Ways;
  }

 private:
  std::array<Key, Ways> keys_{};
  std::array<Params, Ways> params_{};
  int next_ = 0;
  int count_ = 0;
};

}  // namespace evt::launch
