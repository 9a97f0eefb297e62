"""The compile-time benchmarks' pure parts (no compiler runs): `benchmarks/compile_time.py` and
`benchmarks/nvrtc_compile.py`, so template changes cannot silently break them."""

from __future__ import annotations

from benchmarks import compile_time, nvrtc_compile
from evt.codegen.emit import render
from tests import specs


def test_device_source_keeps_the_kernel_and_drops_the_launcher():
    source = render(specs.mlp_fc1_forward())
    dev = nvrtc_compile.device_source(source)
    assert "using GemmKernel = " in dev and "EVT_EXPORT" not in dev and "make_arguments" not in dev
    assert "#include <" not in dev and "evt_launch.h" not in dev and '"cute/tensor.hpp"' in dev
    assert dev.rstrip().endswith("}  // namespace") and dev.count("namespace {") == 1
    explicit = nvrtc_compile.device_source(source, instantiate=True)
    params = "CUTLASS_GRID_CONSTANT GemmKernel::Params const"
    assert explicit.endswith(f"template __global__ void {nvrtc_compile.KERNEL}({params});\n")


def test_nvrtc_options_name_the_shim_and_every_include(tmp_path):
    opts = nvrtc_compile.nvrtc_options(tmp_path / "shim.h")
    assert "-arch=sm_90a" in opts and f"--pre-include={tmp_path / 'shim.h'}" in opts
    assert any(o.endswith("cccl") for o in opts) and any("cutlass" in o for o in opts)


def test_host_variants_touch_only_the_host_level():
    flags = ["-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-O3", "-DNDEBUG"]
    assert compile_time.VARIANTS["host_O1"](flags) == [*flags[:2], "-O1", flags[3]]
    assert compile_time.VARIANTS["cxx20"](flags)[1] == "-std=c++20"


def test_the_nvrtc_shim_lets_nvrtc_bind_a_const_cute_tuple(tmp_path):
    """CUTLASS 4.2's Sm90RowBroadcast binds a const cute::tuple (`auto const& [a, b, c] = ...`):
    without the shim's tuple_size<const T> NVRTC takes it for an aggregate ("too many
    identifiers"). Runs where libnvrtc loads (the nvidia-cuda-nvrtc wheel), a few seconds."""
    import pytest

    nvrtc = pytest.importorskip("cuda.bindings.nvrtc")
    try:
        nvrtc.nvrtcVersion()
    except Exception as e:  # noqa: BLE001 - cuda.pathfinder's error when libnvrtc is absent
        pytest.skip(f"no libnvrtc: {type(e).__name__}")
    (tmp_path / "shim.h").write_text(nvrtc_compile.STD_SHIM)
    cu = tmp_path / "bind.cu"
    cu.write_text("#include <cute/tensor.hpp>\n__global__ void k(long* out) {\n"
                  "  auto const t = cute::make_tuple(cute::Int<0>{}, cute::Int<1>{}, 3L);\n"
                  "  auto const& [a, b, c] = t;\n  out[0] = a + b + c;\n}\n")  # fmt: skip
    options = [o.encode() for o in nvrtc_compile.nvrtc_options(tmp_path / "shim.h")]
    _, prog = nvrtc.nvrtcCreateProgram(cu.read_bytes(), b"bind.cu", 0, [], [])
    result = nvrtc.nvrtcCompileProgram(prog, len(options), options)
    _, size = nvrtc.nvrtcGetProgramLogSize(prog)
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, log)
    assert result[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS, log.decode(errors="replace")[-2000:]


def test_parse_sass_keeps_each_kernel_functions_instructions_apart():
    """A deferred reduction's library holds the GEMM and its finishing job: their SASS counts
    (scripts/sass_count.py) must not add up into one kernel's."""
    listing = """
\tcode for sm_90a
\t\tFunction : _ZN3evt6detail17finish_all_kernelEv
\t.headerflags\t@"EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                    /* 0x00000a00ff017b82 */
                                                                               /* 0x000fe20000000800 */
        /*0010*/              @!P0 FADD R2, R2, R3 ;                            /* 0x0000000302028221 */
\t\t..........

\t\tFunction : _ZN7cutlass13device_kernelEv
        /*0000*/                   MUFU.TANH R4, R5 ;                         /* 0x0000000500047308 */
"""
    functions = compile_time.parse_sass(listing)
    assert functions == {"_ZN3evt6detail17finish_all_kernelEv": ["LDC R1, c[0x0][0x28]", "@!P0 FADD R2, R2, R3"],
                         "_ZN7cutlass13device_kernelEv": ["MUFU.TANH R4, R5"]}  # fmt: skip
    assert compile_time.parse_sass("no listing") is None
