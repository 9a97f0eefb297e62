"""What one kernel launch costs the host, by launch API, kernel parameter size and runtime linkage.

In a training step evt's CUTLASS kernels took ~14 us of host time per launch (`cudaLaunchKernel`,
torch.profiler, session 28) against ~8 us for cuBLAS's and ~7 us for Triton's. Their parameters
are large (2304 bytes for `mlp_fc1_forward`: TMA descriptors), they ask for ~200 KB of dynamic
shared memory, and each kernel library links its own static CUDA runtime. This builds a trivial
kernel with P-byte parameters into two libraries (static and shared cudart) and times, per launch
(host time, median of batches, the queue drained between batches):
  - `<<<>>>` (what CUTLASS's `kernel_launch` does at cluster 1x1),
  - `cudaLaunchKernelEx` with no attributes,
  - `cuLaunchKernel` on the driver API (the function from `cudaGetFuncBySymbol`, as Triton and
    cuBLAS launch),
at P = 64 .. 4096 bytes, with and without 200 KB of dynamic shared memory, with hot caches
(launches back to back) and cold ones (64 MB written before each launch).

    python scripts/launch_cost.py   # on the GPU machine (needs nvcc)
"""

from __future__ import annotations

import ctypes
import subprocess
import tempfile
from pathlib import Path

import torch

SOURCE = r"""
#include <cuda.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

template <int N> struct alignas(64) Params { unsigned char bytes[N]; };

template <int N>
__global__ void __launch_bounds__(384) tiny(__grid_constant__ Params<N> const p) {
  if (p.bytes[threadIdx.x % N] == 251 && blockIdx.x > (1u << 30)) asm volatile("trap;");
}

using Clock = std::chrono::steady_clock;

// cold: before each timed launch, write 64 MB of host memory (the CPU's caches hold none of the
// launch path's code or data any more, as between launches inside a training step)
template <int N>
double time_one(int api, int smem, int iters, cudaStream_t stream, bool cold) {
  static Params<N> params{};
  void const* fn = (void const*)&tiny<N>;
  if (smem > (48 << 10)) cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  CUfunction cu = nullptr;
  cudaGetFuncBySymbol(&cu, fn);
  using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                unsigned, unsigned, CUstream, void**, void**);
  static LaunchFn cu_launch = nullptr;
  cudaDriverEntryPointQueryResult found;
  if (cu_launch == nullptr)
    cudaGetDriverEntryPointByVersion("cuLaunchKernel", (void**)&cu_launch, 12000, cudaEnableDefault,
                                     &found);
  void* args[] = {&params};
  std::vector<double> per;
  static std::vector<unsigned char> thrash(64 << 20);
  int const batch_size = cold ? 1 : 32;
  for (int batch = 0; batch < iters / batch_size; ++batch) {
    cudaStreamSynchronize(stream);
    if (cold) std::memset(thrash.data(), batch, thrash.size());
    auto t0 = Clock::now();
    for (int i = 0; i < batch_size; ++i) {
      if (api == 0) {
        tiny<N><<<132, 384, smem, stream>>>(params);
      } else if (api == 1) {
        cudaLaunchConfig_t c{};
        c.gridDim = dim3(132); c.blockDim = dim3(384); c.dynamicSmemBytes = smem; c.stream = stream;
        cudaLaunchKernelExC(&c, fn, args);
      } else {
        cu_launch(cu, 132, 1, 1, 384, 1, 1, smem, (CUstream)stream, args, nullptr);
      }
    }
    per.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
                  batch_size);
  }
  cudaStreamSynchronize(stream);
  if (cudaGetLastError() != cudaSuccess) return -1;
  std::sort(per.begin(), per.end());
  return per[per.size() / 2];
}

extern "C" double launch_us(int api, int bytes, int smem, int iters, void* stream, int cold) {
  cudaStream_t s = (cudaStream_t)stream;
  switch (bytes) {
    case 64: return time_one<64>(api, smem, iters, s, cold);
    case 1024: return time_one<1024>(api, smem, iters, s, cold);
    case 2304: return time_one<2304>(api, smem, iters, s, cold);
    case 4096: return time_one<4096>(api, smem, iters, s, cold);
  }
  return -2;
}
"""

APIS = ["<<<>>>", "cudaLaunchKernelEx", "cuLaunchKernel"]
SIZES = [64, 1024, 2304, 4096]


def build(folder: Path, cudart: str) -> ctypes.CDLL:
    src = folder / "launch_cost.cu"
    src.write_text(SOURCE)
    out = folder / f"launch_cost_{cudart}.so"
    subprocess.run(["nvcc", "-O2", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a",
                    f"--cudart={cudart}", "-shared", "-Xcompiler=-fPIC", "-o", str(out),
                    str(src)], check=True)  # fmt: skip
    lib = ctypes.CDLL(str(out))
    lib.launch_us.restype = ctypes.c_double
    lib.launch_us.argtypes = [ctypes.c_int] * 4 + [ctypes.c_void_p, ctypes.c_int]
    return lib


def main() -> None:
    torch.cuda.init()
    stream = torch.cuda.current_stream().cuda_stream
    with tempfile.TemporaryDirectory() as tmp:
        libs = {c: build(Path(tmp), c) for c in ("static", "shared")}
        for cold in (0, 1):
            print("\nhost us per launch, grid 132 x 384 threads: "
                  + ("one launch after 64 MB written (cold caches), median of 256" if cold
                     else "median of 32-launch batches (hot caches)"))  # fmt: skip
            print(f"{'cudart':7s} {'API':19s} {'smem KB':>7s} "
                  + " ".join(f"{s:>7d}B" for s in SIZES))  # fmt: skip
            for cudart, lib in libs.items():
                for api, name in enumerate(APIS):
                    for smem in (0, 200 << 10):
                        lib.launch_us(api, 64, smem, 256, stream, 0)  # warm up
                        row = [lib.launch_us(api, s, smem, 256 if cold else 4096, stream, cold)
                               for s in SIZES]  # fmt: skip
                        print(f"{cudart:7s} {name:19s} {smem >> 10:7d} "
                              + " ".join(f"{t:8.2f}" for t in row))  # fmt: skip


if __name__ == "__main__":
    main()
