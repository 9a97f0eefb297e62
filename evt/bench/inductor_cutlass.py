"""Pointing Inductor's own CUTLASS backend at the nvidia-cutlass wheel.

Inductor wants `config.cutlass.cutlass_dir` (older releases: `config.cuda.cutlass_dir`) to be a
CUTLASS checkout: `python/{cutlass_library,cutlass_cppgen,pycute}`, `include/` and
`tools/{util,library}/`. The wheel ships all of them (`cutlass_library/source/...`), so a folder
of symlinks into it is a checkout as far as Inductor can tell.

The baseline restricts GEMMs to CUTLASS (`max_autotune_gemm_backends="CUTLASS"`, no silent ATen
pick), enables its EVT epilogue fusion, keeps only kernels with a TMA epilogue (`cutlass_tma_only`:
its EVT fusion renders on no other kind, "Non-TMA epilogue visitor tree is not supported") and
profiles `PROFILING_CONFIGS` kernels per GEMM, the first ones by name. That is weaker than torch's
default (every config profiled: hundreds of nvcc builds per GEMM, hours per case); measured on
H200, one case with 4 configs took 92 s to compile. So it runs on `CASES` only: the BERT-Large FFN
shape's forward epilogues (bias+ReLU, which cuBLASLt also has; the fp32 residual), GELU's backward
in the dgrad GEMM, and the MLP training step built from them. An option this torch's Inductor
does not know is left out with a warning (recorded in the result's notes).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import tempfile
import warnings
from pathlib import Path

PROFILING_CONFIGS = 4
CASES = ("bias_relu/bert", "dgrad_gelu/bert", "residual_scale_cast/bert", "step/mlp")
DOC = (
    "Inductor's CUTLASS backend: GEMMs through CUTLASS only, EVT epilogue fusion on, TMA-epilogue "
    f"kernels only, {PROFILING_CONFIGS} configs profiled per GEMM (**weaker than torch's default, "
    "which profiles every config**: hundreds of nvcc builds per GEMM); "
    f"`cutlass_dir` made of symlinks into the nvidia-cutlass wheel; on {', '.join(CASES)} only"
)


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"{name} is not installed (pip install nvidia-cutlass)")
    return Path(next(iter(spec.submodule_search_locations)))


def checkout_links() -> dict[str, Path]:
    """Checkout-relative path -> where it lives in the installed wheel."""
    lib = _package_dir("cutlass_library")
    src = lib / "source"
    return {
        "python/cutlass_library": lib,
        "python/cutlass_cppgen": _package_dir("cutlass_cppgen"),
        "python/pycute": _package_dir("pycute"),
        "include": src / "include",
        "tools": src / "tools",
    }


def cutlass_dir(root: Path | None = None) -> Path:
    """A folder laid out like a CUTLASS checkout, made of symlinks into the wheel (idempotent)."""
    version = importlib.metadata.version("nvidia-cutlass")
    root = root or Path(tempfile.gettempdir()) / f"evt-bench-cutlass-{version}"
    for rel, target in checkout_links().items():
        if not target.exists():
            raise FileNotFoundError(f"nvidia-cutlass {version} lacks {target}")
        link = root / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() and link.resolve() != target.resolve():
            link.unlink()
        if not link.is_symlink():
            link.symlink_to(target, target_is_directory=True)
    return root


def options(root: Path | None = None) -> dict:
    """`torch.compile(options=...)` for Inductor's CUTLASS backend on this torch version."""
    from torch._inductor import config

    known = config.get_config_copy()
    ns = next((n for n in ("cutlass", "cuda") if f"{n}.cutlass_dir" in known), None)
    if ns is None:
        raise RuntimeError("this torch's Inductor config has no cutlass.cutlass_dir nor cuda.*")
    opts = {
        "max_autotune": True,
        "max_autotune_gemm_backends": "CUTLASS",
        f"{ns}.cutlass_dir": str(cutlass_dir(root)),
        f"{ns}.cutlass_max_profiling_configs": PROFILING_CONFIGS,
        f"{ns}.cutlass_epilogue_fusion_enabled": True,
        f"{ns}.cutlass_tma_only": True,
        "triton.cudagraphs": False,
    }
    unknown = [k for k in opts if k not in known]
    if unknown:
        warnings.warn(f"this torch's Inductor has no {', '.join(unknown)}: left out", stacklevel=2)
    return {k: v for k, v in opts.items() if k not in unknown}
