"""NVRTC against nvcc for one generated kernel's device code (no GPU needed: sm_90a to a cubin).

The launcher's host code cannot go through NVRTC, so the kernel's translation unit is cut before
its launcher section, host-only headers are dropped, and `cutlass::device_kernel<GemmKernel>` is
named for NVRTC to instantiate. Three builds, one at a time, each under `/usr/bin/time -v`:

    nvcc .so      what evt runs today (device + host launcher, one shared library)
    nvcc -cubin   the device-only source, device code only (cicc + ptxas)
    nvrtc         the device-only source through cuda.bindings.nvrtc (needs libnvrtc, e.g. the
                  nvidia-cuda-nvrtc wheel that CUDA builds of torch depend on)

    python -m benchmarks.nvrtc_compile [--spec mlp_fc1_forward] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

# CUTLASS 4.2 names a few std:: traits that NVRTC (no host standard library) lacks
STD_SHIM = """#pragma once
#include <cuda/std/type_traits>
namespace std {
using cuda::std::is_pointer_v;
using cuda::std::void_t;
// A structured binding of a const cute::tuple (CUTLASS 4.2's Sm90RowBroadcast binds its stride)
// looks up std::tuple_size<const E>: libstdc++ forwards that to tuple_size<E>, cute's NVRTC
// declarations do not, and NVRTC then decomposes the tuple as an aggregate ("too many
// identifiers", NVRTC 13.0 and 13.5).
template <class... _Tp>
struct tuple_size;
template <decltype(sizeof(0)) _Ip, class... _Tp>
struct tuple_element;
template <class _Tp>
struct tuple_size<const _Tp> : tuple_size<_Tp> {};
template <decltype(sizeof(0)) _Ip, class _Tp>
struct tuple_element<_Ip, const _Tp> {
  using type = const typename tuple_element<_Ip, _Tp>::type;
};
}  // namespace std
"""
HOST_ONLY = ("#include <", '#include "evt_launch.h"', "using namespace evt::launch", "#define EVT_")
KERNEL = "cutlass::device_kernel<GemmKernel>"


def device_source(source: str, instantiate: bool = False) -> str:
    """The kernel's types without the launcher: what NVRTC (device code only) can compile. NVRTC
    instantiates the kernel by name; nvcc needs `instantiate` (an explicit instantiation)."""
    head = source[: source.index("// Launcher")]
    kept = [ln for ln in head.splitlines() if not ln.startswith(HOST_ONLY)]
    params = "CUTLASS_GRID_CONSTANT GemmKernel::Params const"
    tail = f"template __global__ void {KERNEL}({params});\n" if instantiate else ""
    return "\n".join(kept) + "\n}  // namespace\n" + tail


def nvrtc_options(shim: Path) -> list[str]:
    import cuda.pathfinder

    from evt.codegen import nvcc

    cuda_include = Path(
        cuda.pathfinder.find_nvidia_header_directory("cudart") or "/usr/local/cuda/include"
    )
    includes = [*(f[2:] for f in nvcc.nvcc_flags() if f.startswith("-I")),
                cuda_include, cuda_include / "cccl"]  # fmt: skip
    # NVRTC 13.0 has no --expt-relaxed-constexpr
    return ["-arch=sm_90a", "-std=c++17", "--device-as-default-execution-space", "-DNDEBUG",
            f"--pre-include={shim}", *(f"-I{p}" for p in includes)]  # fmt: skip


def compile_nvrtc(cu: Path, cubin: Path, options: list[str]) -> str:
    """Compile `cu` with NVRTC into `cubin`; the log. Raises RuntimeError on failure."""
    from cuda.bindings import nvrtc

    def check(result):
        err, *rest = result if isinstance(result, tuple) else (result,)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"nvrtc: {err}")
        return rest[0] if len(rest) == 1 else rest

    prog = check(nvrtc.nvrtcCreateProgram(cu.read_bytes(), cu.name.encode(), 0, [], []))
    check(nvrtc.nvrtcAddNameExpression(prog, KERNEL.encode()))
    result = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
    log = b" " * check(nvrtc.nvrtcGetProgramLogSize(prog))
    check(nvrtc.nvrtcGetProgramLog(prog, log))
    text = log.decode(errors="replace").rstrip("\0 ")
    if result[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        errors = [ln for ln in text.splitlines() if ": error" in ln][:5]
        raise RuntimeError(f"nvrtc failed: {result[0]}\n" + "\n".join(errors or [text[-3000:]]))
    data = b" " * check(nvrtc.nvrtcGetCUBINSize(prog))
    check(nvrtc.nvrtcGetCUBIN(prog, data))
    cubin.write_bytes(data)
    return text


def timed(cmd: list[str]) -> dict:
    start = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    wall = time.perf_counter() - start
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    cpu = re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", proc.stderr)
    return {"ok": proc.returncode == 0, "wall_s": round(wall, 1), "c7510": "C7510" in proc.stderr,
            "cpu_s": round(sum(map(float, cpu)), 1),
            "peak_rss_gb": round(int(rss[1]) / 2**20, 2) if rss else None,
            "log": proc.stdout[-2000:] + proc.stderr[-3000:]}  # fmt: skip


def main() -> None:
    from benchmarks.compile_time import sass
    from evt.codegen import nvcc
    from evt.codegen.emit import render
    from tests import specs

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--spec", default="mlp_fc1_forward", choices=sorted(specs.ALL))
    p.add_argument("--out", default="nvrtc-compile")
    p.add_argument("--json", help="also write the runs (times, memory, SASS verdicts) here")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    full, dev, dev_nvcc = out / "kernel.cu", out / "kernel_device.cu", out / "kernel_device_nvcc.cu"
    full.write_text(render(specs.ALL[args.spec]()))
    dev.write_text(device_source(full.read_text()))
    dev_nvcc.write_text(device_source(full.read_text(), instantiate=True))
    (out / "nvrtc_std_shim.h").write_text(STD_SHIM)
    flags = [f for f in nvcc.nvcc_flags() if not f.startswith(("-shared", "-Xcompiler"))]
    runs = {
        "nvcc .so": timed(nvcc.nvcc_command(full, out / "kernel.so")),
        "nvcc -cubin": timed(
            [nvcc.nvcc_path(), *flags, "-cubin", "-o", str(out / "nvcc.cubin"), str(dev_nvcc)]
        ),  # fmt: skip
        "nvrtc": timed(
            [
                sys.executable,
                __file__,
                "--nvrtc",
                str(dev),
                str(out / "nvrtc.cubin"),
                *nvrtc_options(out / "nvrtc_std_shim.h"),
            ]
        ),  # fmt: skip
    }
    for name, r in runs.items():
        print(f"{name:12s} ok={r['ok']} wall {r['wall_s']:6.1f} s  cpu {r['cpu_s']:6.1f} s  "
              f"{r['peak_rss_gb']} GB  "
              f"C7510={r['c7510']}")  # fmt: skip
        if not r["ok"]:
            print(r["log"])
    if runs["nvrtc"]["ok"] and runs["nvcc .so"]["ok"]:
        code = {
            name: sass(out / f)
            for name, f in (
                ("nvrtc", "nvrtc.cubin"),
                ("nvcc -cubin", "nvcc.cubin"),
                ("nvcc .so", "kernel.so"),
            )
        }
        for name in ("nvrtc", "nvcc -cubin"):
            same = (
                "unknown"
                if None in (code[name], code["nvcc .so"])
                else code[name] == code["nvcc .so"]
            )
            print(f"{name} SASS identical to the nvcc .so kernel's: {same}")  # fmt: skip
            runs[name]["sass_identical_to_nvcc_so"] = same
    if args.json:
        record = {"spec": args.spec, "nvcc": nvcc.nvcc_version(), "nvrtc": nvrtc_version(),
                  "runs": {k: {f: v for f, v in r.items() if f != "log"} for k, r in runs.items()}}  # fmt: skip
        Path(args.json).write_text(json.dumps(record, indent=1))


def nvrtc_version() -> str | None:
    try:
        from cuda.bindings import nvrtc

        _, major, minor = nvrtc.nvrtcVersion()
        return f"{major}.{minor}"
    except Exception:  # noqa: BLE001 - no libnvrtc: the run says so
        return None


if __name__ == "__main__":
    if sys.argv[1:2] == ["--nvrtc"]:  # the timed child: NVRTC only, no torch or evt imports
        print(compile_nvrtc(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:]))
    else:
        main()
