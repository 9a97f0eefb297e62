"""Seeded inputs for a fuzzed spec, laid out as its majors and transposes say.

The GEMM is exact: A holds {-1, 0, 1}, B {-1, 0, 1} times a power of two chosen from K, so every
fp32 sum is exact in any order and the kernel's accumulator equals the reference's bit for bit
(a comparison of the accumulator never flips). Its standard deviation is 0.25-0.35, which keeps
it inside `facts.ACC` = [-4, 4] (11 standard deviations). Aux loads and broadcasts are uniform in
`facts.LOAD` = [-2, 2], rounded to their dtype; bool masks are about half true.
"""

from __future__ import annotations

import math

import torch

from evt import ir


def make_inputs(spec: ir.KernelSpec, M: int, N: int, K: int, seed: int,
                device: str = "cpu") -> list[torch.Tensor]:  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    g = spec.gemm
    scale = 2.0 ** -math.ceil(math.log2(math.sqrt(4 * K / 9) / 0.35))
    out: list[torch.Tensor | None] = [None] * spec.num_inputs
    out[g.a.input] = _matrix(_ternary(gen, M, K), "mk".index(g.a.major), g.dtype, g.a.transposed)
    b = _ternary(gen, K, N) * scale
    out[g.b.input] = _matrix(b, "kn".index(g.b.major), g.dtype, g.b.transposed)
    for n in spec.nodes:
        if isinstance(n, ir.AuxLoad):
            out[n.input] = _matrix(_values(gen, (M, N), n.dtype), "mn".index(n.major), n.dtype)
        elif isinstance(n, ir.RowBroadcast):
            out[n.input] = _values(gen, (N,), n.dtype)
        elif isinstance(n, ir.ColBroadcast):
            out[n.input] = _values(gen, (M, 1), n.dtype)
    assert all(t is not None for t in out)
    return [t.to(device) for t in out]  # type: ignore[union-attr]


def _ternary(gen: torch.Generator, rows: int, cols: int) -> torch.Tensor:
    return torch.randint(-1, 2, (rows, cols), generator=gen).float()


def _values(gen: torch.Generator, shape: tuple[int, ...], dtype: str) -> torch.Tensor:
    if dtype == "b8":
        return torch.rand(shape, generator=gen) < 0.5
    return (torch.rand(shape, generator=gen) * 4 - 2).to(ir.torch_dtype(dtype))


def _matrix(logical: torch.Tensor, unit: int, dtype: str, transposed: bool = False) -> torch.Tensor:
    """`logical` (rows x cols) stored so that dimension `unit` has unit stride, passed
    transposed when `transposed`."""
    t = logical.to(ir.torch_dtype(dtype))
    t = t.contiguous() if unit == 1 else t.t().contiguous().t()
    return t.t() if transposed else t
