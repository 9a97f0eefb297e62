// The hot path of `evt::fused_gemm` in C++ (built and loaded by evt/runtime/fast.py).
//
// A region's first launch, and any launch with a new input layout, runs in Python
// (evt/runtime/dispatch.py: guards, tile config, build, fallback), which then hands this library
// the launch's plan: the kernel's run function and, for that exact input layout (sizes, strides,
// dtypes, device, 16-byte alignment), the ABI's strides and sizes, the tile order, the outputs'
// shapes and dtypes and the workspace size. Later calls with the same spec and layout allocate the outputs and call
// the kernel's launcher from here, without Python, ctypes or guards. Anything else (no plan for
// the spec or the layout, EVT_VERIFY or EVT_INJECT set, a non-zero return code) goes to
// `evt::fused_gemm_slow`, the Python path, which decides, launches, warns and falls back as before.
//
// Built with -DEVT_FAST_CUDA it serves the CUDA dispatch key on the current CUDA stream; without,
// the CPU key with a null stream (tests drive it with a fake kernel library on CPU tensors).

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#ifdef EVT_FAST_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace {

// evt_<name>_run of a kernel library (evt/templates/gemm_sm90.cu.j2): M, N, K, L (a nested batch:
// L1, L2), then the tile order.
using RunFlat = int (*)(void const* const*, int64_t const*, void* const*, int64_t const*, int, int,
                        int, int, int, void*, size_t, void*);
using RunNested = int (*)(void const* const*, int64_t const*, void* const*, int64_t const*, int,
                          int, int, int, int, int, void*, size_t, void*);

constexpr size_t kMaxTensors = 64;       // inputs or outputs of one kernel
constexpr size_t kMaxPlansPerSpec = 64;  // input layouts remembered per spec (dynamic shapes)

struct Output {
  std::vector<int64_t> sizes, strides;
  c10::ScalarType dtype;
  int64_t storage = 0;  // elements to allocate where the rows are padded (ir.padded_storage), else 0
};

struct Plan {
  std::vector<int64_t> layout;  // what `layout_of` says about the inputs
  std::vector<int64_t> input_strides, output_strides, abi;  // abi: M, N, K, L (or L1, L2)
  std::vector<Output> outputs;
  int64_t workspace_bytes = 0;
  int tile_order = 0;  // raster + 4 * swizzle (evt.runtime.launch.TileOrder)
  // (input, row pitch) of each aux input TMA cannot read as it is: copied into rows of that
  // pitch before the launch (evt.runtime.guards.copy_into_rows)
  std::vector<int64_t> pads;
};

struct Entry {
  int64_t id = 0;  // registration order: Python names the region behind it
  void* run = nullptr;
  bool nested = false;
  std::vector<Plan> plans;
  std::atomic<int64_t> launches{0};
  // the launches made while `timing` was on, and their host time (ns): the whole C++ call
  // (outputs, workspace, pads, launcher) and the kernel's launcher alone (evt_<name>_run: its
  // parameters, the CUDA launch)
  std::atomic<int64_t> timed_launches{0}, host_ns{0}, launcher_ns{0};
};

std::shared_mutex mutex;
std::unordered_map<std::string, std::unique_ptr<Entry>> registry;
std::vector<Entry*> by_id;
std::atomic<bool> enabled{true};
// Time each call (Entry::host_ns, launcher_ns)? Off unless asked (`fast.timed()`): the four clock
// reads cost 0.7-1.5 us of a 15-20 us call (H100 hosts, session 28, scripts/host_overhead.py).
std::atomic<bool> timing{false};

// Everything the Python guards read about the inputs (evt.runtime.launch.fingerprint).
void layout_of(at::TensorList inputs, std::vector<int64_t>& out) {
  out.clear();
  out.push_back(static_cast<int64_t>(inputs.size()));
  for (at::Tensor const& t : inputs) {
    out.push_back(t.dim());
    for (int64_t s : t.sizes()) out.push_back(s);
    for (int64_t s : t.strides()) out.push_back(s);
    out.push_back(static_cast<int64_t>(t.scalar_type()));
    out.push_back(static_cast<int64_t>(t.device().type()));
    out.push_back(t.device().index());
    out.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16));
  }
}

bool env_set(char const* name, bool zero_means_off) {
  char const* v = std::getenv(name);
  return v != nullptr && (!zero_means_off || (*v != '\0' && std::strcmp(v, "0") != 0));
}

void* current_stream(c10::Device device) {
#ifdef EVT_FAST_CUDA
  return c10::cuda::getCurrentCUDAStream(device.index()).stream();
#else
  (void)device;
  return nullptr;
#endif
}

using Clock = std::chrono::steady_clock;

int64_t ns_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

// Launch `plan`'s kernel on `inputs`; false (nothing enqueued) when its launcher refuses.
bool launch(Entry& e, Plan const& plan, at::TensorList inputs, std::vector<at::Tensor>& outs,
            bool timed) {
  c10::Device device = inputs[0].device();  // the first not in host memory (a CPU scalar may be
  for (at::Tensor const& t : inputs) {       // a scalar load's, passed by value)
    if (!t.device().is_cpu()) {
      device = t.device();
      break;
    }
  }
  c10::DeviceGuard guard(device);
  auto const options = at::TensorOptions().device(device);
  outs.reserve(plan.outputs.size());
  for (Output const& o : plan.outputs) {
    outs.push_back(o.storage > 0
                       ? at::empty_strided({o.storage}, {1}, options.dtype(o.dtype))
                             .as_strided(o.sizes, o.strides)
                       : at::empty_strided(o.sizes, o.strides, options.dtype(o.dtype)));
  }
  at::Tensor workspace;
  if (plan.workspace_bytes > 0) {
    workspace = at::empty_strided({plan.workspace_bytes}, {1}, options.dtype(at::kByte));
  }
  void const* in[kMaxTensors];
  void* out[kMaxTensors];
  for (size_t i = 0; i < inputs.size(); ++i) in[i] = inputs[i].data_ptr();
  std::vector<at::Tensor> copies;  // alive until the launch is enqueued (stream-ordered frees)
  for (size_t k = 0; k + 1 < plan.pads.size(); k += 2) {
    at::Tensor const& t = inputs[plan.pads[k]];
    int64_t const pitch = plan.pads[k + 1];
    std::vector<int64_t> sizes = t.sizes().vec(), strides(sizes.size(), 1);
    int64_t rows = 1;
    for (size_t d = sizes.size() - 1; d-- > 0;) {
      strides[d] = d + 1 == sizes.size() - 1 ? pitch : strides[d + 1] * sizes[d + 1];
      rows *= sizes[d];
    }
    // whole padded rows, the last one's too (TMA may read the 16-byte vector a row ends in)
    at::Tensor copy = at::empty_strided({rows * pitch}, {1}, t.options()).as_strided(sizes, strides);
    copy.copy_(t);
    in[plan.pads[k]] = copy.data_ptr();
    copies.push_back(std::move(copy));
  }
  for (size_t i = 0; i < outs.size(); ++i) out[i] = outs[i].data_ptr();
  void* ws = workspace.defined() ? workspace.data_ptr() : nullptr;
  auto const ws_bytes = static_cast<size_t>(plan.workspace_bytes);
  auto const& a = plan.abi;
  auto const t0 = timed ? Clock::now() : Clock::time_point{};
  int rc;
  if (e.nested) {
    rc = reinterpret_cast<RunNested>(e.run)(in, plan.input_strides.data(), out,
                                            plan.output_strides.data(), a[0], a[1], a[2], a[3],
                                            a[4], plan.tile_order, ws, ws_bytes,
                                            current_stream(device));
  } else {
    rc = reinterpret_cast<RunFlat>(e.run)(in, plan.input_strides.data(), out,
                                          plan.output_strides.data(), a[0], a[1], a[2], a[3],
                                          plan.tile_order, ws, ws_bytes, current_stream(device));
  }
  if (timed) e.launcher_ns.fetch_add(ns_since(t0), std::memory_order_relaxed);
  return rc == 0;
}

std::vector<at::Tensor> slow_path(c10::string_view spec, at::TensorList inputs) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("evt::fused_gemm_slow", "")
                       .typed<std::vector<at::Tensor>(c10::string_view, at::TensorList)>();
  return op.call(spec, inputs);
}

std::vector<at::Tensor> fused_gemm(c10::string_view spec, at::TensorList inputs) {
  if (enabled.load(std::memory_order_relaxed) && !inputs.empty() &&
      !env_set("EVT_VERIFY", true) && !env_set("EVT_INJECT", false)) {
    bool const timed = timing.load(std::memory_order_relaxed);
    auto const t0 = timed ? Clock::now() : Clock::time_point{};
    thread_local std::string key;
    thread_local std::vector<int64_t> layout;
    key.assign(spec.data(), spec.size());
    layout_of(inputs, layout);
    std::shared_lock lock(mutex);
    auto it = registry.find(key);
    if (it != registry.end()) {
      Entry& e = *it->second;
      for (Plan const& plan : e.plans) {
        if (plan.layout != layout) continue;
        std::vector<at::Tensor> outs;
        if (launch(e, plan, inputs, outs, timed)) {
          e.launches.fetch_add(1, std::memory_order_relaxed);
          if (timed) {
            e.timed_launches.fetch_add(1, std::memory_order_relaxed);
            e.host_ns.fetch_add(ns_since(t0), std::memory_order_relaxed);
          }
          return outs;
        }
        break;  // the Python path launches again, and warns and falls back if it must
      }
    }
  }
  return slow_path(spec, inputs);
}

// Python's side: remember a launch that just succeeded (see the file's comment).
int64_t remember(c10::string_view spec, int64_t run, bool nested, at::TensorList inputs,
                 at::TensorList outputs, c10::IntArrayRef input_strides,
                 c10::IntArrayRef output_strides, c10::IntArrayRef abi, int64_t tile_order,
                 int64_t workspace_bytes, c10::IntArrayRef pads) {
  TORCH_CHECK(run != 0, "evt_fast.remember: no run function");
  TORCH_CHECK(!inputs.empty() && inputs.size() <= kMaxTensors && outputs.size() <= kMaxTensors,
              "evt_fast.remember: ", inputs.size(), " inputs and ", outputs.size(),
              " outputs (at most ", kMaxTensors, " each)");
  TORCH_CHECK(abi.size() == (nested ? 5u : 4u), "evt_fast.remember: ", abi.size(),
              " problem sizes for a ", nested ? "nested" : "flat", " batch");
  Plan plan;
  layout_of(inputs, plan.layout);
  plan.input_strides.assign(input_strides.begin(), input_strides.end());
  plan.output_strides.assign(output_strides.begin(), output_strides.end());
  plan.abi.assign(abi.begin(), abi.end());
  plan.workspace_bytes = workspace_bytes;
  plan.tile_order = static_cast<int>(tile_order);
  TORCH_CHECK(pads.size() % 2 == 0, "evt_fast.remember: pads are (input, row pitch) pairs");
  for (size_t k = 0; k < pads.size(); k += 2) {
    TORCH_CHECK(pads[k] >= 0 && pads[k] < static_cast<int64_t>(inputs.size()) && inputs[pads[k]].dim() >= 2 &&
                    pads[k + 1] >= inputs[pads[k]].size(-1),
                "evt_fast.remember: pad (", pads[k], ", ", pads[k + 1], ") does not fit the inputs");
  }
  plan.pads.assign(pads.begin(), pads.end());
  for (at::Tensor const& o : outputs) {
    // fresh outputs: contiguous, or rows padded with the whole storage (evt.runtime.launch.allocate)
    TORCH_CHECK(o.storage_offset() == 0, "evt_fast.remember: outputs are fresh tensors");
    int64_t const storage = static_cast<int64_t>(o.storage().nbytes()) / o.element_size();
    plan.outputs.push_back({o.sizes().vec(), o.strides().vec(), o.scalar_type(),
                            storage > o.numel() ? storage : 0});
  }
  std::unique_lock lock(mutex);
  auto& slot = registry[std::string(spec)];
  if (!slot) {
    slot = std::make_unique<Entry>();
    slot->id = static_cast<int64_t>(by_id.size());
    slot->run = reinterpret_cast<void*>(run);
    slot->nested = nested;
    by_id.push_back(slot.get());
  }
  TORCH_CHECK(slot->run == reinterpret_cast<void*>(run) && slot->nested == nested,
              "evt_fast.remember: one spec, two kernels");
  bool known = false;
  for (Plan const& p : slot->plans) known = known || p.layout == plan.layout;
  if (!known && slot->plans.size() < kMaxPlansPerSpec) slot->plans.push_back(std::move(plan));
  return slot->id;
}

// Launches per registration id since the last `forget_all`.
std::vector<int64_t> launch_counts() {
  std::shared_lock lock(mutex);
  std::vector<int64_t> out;
  for (Entry const* e : by_id) out.push_back(e->launches.load(std::memory_order_relaxed));
  return out;
}

// Per registration id: launches timed (`set_timing`), host ns of those C++ calls, host ns of
// them in the kernels' launchers.
std::vector<int64_t> launch_times() {
  std::shared_lock lock(mutex);
  std::vector<int64_t> out;
  for (Entry const* e : by_id) {
    out.push_back(e->timed_launches.load(std::memory_order_relaxed));
    out.push_back(e->host_ns.load(std::memory_order_relaxed));
    out.push_back(e->launcher_ns.load(std::memory_order_relaxed));
  }
  return out;
}

void forget_all() {
  std::unique_lock lock(mutex);
  registry.clear();
  by_id.clear();
}

void set_enabled(bool on) { enabled.store(on, std::memory_order_relaxed); }

bool set_timing(bool on) { return timing.exchange(on, std::memory_order_relaxed); }

}  // namespace

TORCH_LIBRARY(evt_fast, m) {
  m.def("remember(str spec, int run, bool nested, Tensor[] inputs, Tensor[] outputs, "
        "int[] input_strides, int[] output_strides, int[] abi, int tile_order, "
        "int workspace_bytes, int[] pads) -> int",
        &remember);
  m.def("launch_counts() -> int[]", &launch_counts);
  m.def("launch_times() -> int[]", &launch_times);
  m.def("forget_all() -> ()", &forget_all);
  m.def("set_enabled(bool on) -> ()", &set_enabled);
  m.def("set_timing(bool on) -> bool", &set_timing);
}

#ifdef EVT_FAST_CUDA
TORCH_LIBRARY_IMPL(evt, CUDA, m) { m.impl("fused_gemm", &fused_gemm); }
#else
TORCH_LIBRARY_IMPL(evt, CPU, m) { m.impl("fused_gemm", &fused_gemm); }
#endif
