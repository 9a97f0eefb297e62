// Host-side helpers shared by every generated evt launcher (no libtorch, no host synchronization).
#pragma once

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

}  // namespace evt::launch
