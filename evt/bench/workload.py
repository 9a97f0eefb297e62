"""What the harness measures: a `Case` (cheap to list and plan) builds a `Workload` (tensors).

A workload is the plain eager computation plus what the baselines need from it: the thing a
compiler compiles (`target`: a function for a GEMM pattern, the model-with-loss for a training
step), how to turn the compiled target back into a callable (`wrap`), the bare GEMM (speed of
light) and the peers' hand-fused variants.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def dtype_name(dtype: torch.dtype) -> str:
    return next(k for k, v in DTYPES.items() if v == dtype)


@dataclass(frozen=True)
class Case:
    name: str  # "<group>/<shape>", e.g. "bias_gelu/gpt2"
    kind: str  # "op" (GEMM+epilogue pattern) or "step" (training step)
    group: str  # the pattern or model name
    shape: str  # which model the shape comes from
    dims: tuple[int, ...]  # (M, N, K) for GEMMs, (B, H, S, D) for attention, model sizes for steps
    doc: str
    variants: frozenset[str] = frozenset()  # baselines with a hand-fused version (cublaslt, sdpa)


@dataclass
class Workload:
    eager: Callable  # callable(*inputs) -> outputs: the computation as written
    target: Callable  # what a compiled baseline compiles
    wrap: Callable[[Callable], Callable]  # compiled target -> callable(*inputs) -> outputs
    make_inputs: Callable[[int], tuple]  # seed -> a fresh random input set (never zeros)
    reference: Callable[[tuple], tuple]  # the same inputs -> float64 (or float32) outputs
    gemm: Callable | None = None  # the GEMM(s) alone, for the speed-of-light column
    variants: dict[str, Callable] = field(default_factory=dict)
    release: Callable[[], None] = lambda: None  # drop what a call left behind (gradients)


def outputs(value) -> tuple[torch.Tensor | None, ...]:
    """A function's result as a flat tuple of tensors (None for a missing gradient)."""
    if value is None or isinstance(value, torch.Tensor):
        return (value,)
    return tuple(t for v in value for t in outputs(v))


def to_reference(inputs: tuple) -> tuple:
    """Floating-point inputs as float64 copies (keeping requires_grad), the rest as they are."""

    def convert(t):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            return t
        return t.detach().double().requires_grad_(t.requires_grad)

    return tuple(convert(t) for t in inputs)


def generator(device: str, seed: int) -> torch.Generator | None:
    """A seeded generator on `device`; None on "meta" (shapes only: the prebuild's capture)."""
    if torch.device(device).type == "meta":
        return None
    return torch.Generator(device).manual_seed(seed)


def randn(shape, dtype, device, gen: torch.Generator | None, scale: float = 1.0) -> torch.Tensor:
    """Normal random values (drawn in fp32, then cast): never zeros, never a constant."""
    t = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    return t.mul_(scale).to(dtype)


def nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def tiny(dims: tuple[int, ...]) -> tuple[int, ...]:
    """The CPU-test version of a shape: every size divided by 64, at least 4."""
    return tuple(max(4, d // 64) for d in dims)
