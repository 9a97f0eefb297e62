"""Seeded inputs for a fuzzed spec, laid out as its majors and transposes say.

The GEMM is exact: A holds {-1, 0, 1}, B {-1, 0, 1} times a power of two chosen from K, so every
fp32 sum is exact in any order and the kernel's accumulator equals the reference's bit for bit
(a comparison of the accumulator never flips). Its standard deviation is 0.25-0.35, which keeps
it inside `facts.ACC` = [-4, 4] (11 standard deviations). Aux loads and broadcasts are uniform in
`facts.LOAD` = [-2, 2], rounded to their dtype; bool masks are about half true.

A spec with a nested batch gets `NESTED_BATCH` = (L1, L2) batches laid out as attention has its
heads: an operand or a per-batch aux tensor is an [L1, L2, rows, cols] view cut from a larger
tensor, [L1, outer, slots, L2, inner + pad] (a qkv projection: `slots` tensors side by side, each
batch's rows padded), with the batch modes moved in front, so its two batch strides are not one
flat stride; or a flat [L1 * L2, rows, cols] tensor, its rows padded too. At least one operand is
such a view (the kernel takes (L1, L2) from it). Pads are whole 16-byte vectors and the storage
around the views is NaN (True for bool), so a kernel that reads a wrong stride reads poison.
Aux loads read by every batch are [M, N] (or [1, M, N]); row and column broadcasts are vectors
every batch reads, as without a batch. The layout choices come from a stream of the seed's own.
A batched spec without a nested batch gets `FLAT_BATCH` contiguous batches.
"""

from __future__ import annotations

import math
import random

import torch

from evt import ir

NESTED_BATCH = (2, 3)  # (L1, L2) of a spec with a nested batch
FLAT_BATCH = (3,)  # L of a batched spec without one


def make_inputs(spec: ir.KernelSpec, M: int, N: int, K: int, seed: int,
                device: str = "cpu", batch: tuple[int, ...] | None = None,
                normal: bool = False) -> list[torch.Tensor]:  # fmt: skip
    """Random inputs of `spec` at M x N x K (`batch`: the batch dimensions of a batched spec,
    else small ones). `normal`: the GEMM's operands drawn as a layer's are (A ~ N(0, 1), B ~
    N(0, 1/K)) instead of exactly: inputs to time kernels on, not to check them (ternary
    operands draw less power, and the H100 ran long GEMMs on them up to 25% faster, cuBLAS's
    too, and in another order of tile configs: session 20)."""
    gen = torch.Generator().manual_seed(seed)
    g = spec.gemm
    if batch is None:
        batch = NESTED_BATCH if g.nested else FLAT_BATCH if g.batched else ()
    operand = _Heads(random.Random(f"{seed}/layout"), device) if g.nested else _matrix
    scale = K**-0.5 if normal else 2.0 ** -math.ceil(math.log2(math.sqrt(4 * K / 9) / 0.35))
    draw = _normal if normal else _ternary
    out: list[torch.Tensor | None] = [None] * spec.num_inputs
    a = draw(gen, (*batch, M, K))
    out[g.a.input] = operand(a, "mk".index(g.a.major), g.dtype, g.a.transposed)
    b = draw(gen, (*batch, K, N)) * scale
    out[g.b.input] = operand(b, "kn".index(g.b.major), g.dtype, g.b.transposed)
    for n in spec.nodes:
        if isinstance(n, ir.AuxLoad):
            shape = (M, N) if n.broadcast_l or not batch else (*batch, M, N)
            out[n.input] = operand(_values(gen, shape, n.dtype), "mn".index(n.major), n.dtype)
        elif isinstance(n, ir.RowBroadcast):
            out[n.input] = _values(gen, (N,), n.dtype)
        elif isinstance(n, ir.ColBroadcast):
            out[n.input] = _values(gen, (M, 1), n.dtype)
    assert all(t is not None for t in out)
    return [t.to(device) for t in out]  # type: ignore[union-attr]


def _ternary(gen: torch.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.randint(-1, 2, shape, generator=gen).float()


def _normal(gen: torch.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.randn(shape, generator=gen)


def _values(gen: torch.Generator, shape: tuple[int, ...], dtype: str) -> torch.Tensor:
    if dtype == "b8":
        return torch.rand(shape, generator=gen) < 0.5
    return (torch.rand(shape, generator=gen) * 4 - 2).to(ir.torch_dtype(dtype))


def _matrix(logical: torch.Tensor, unit: int, dtype: str, transposed: bool = False) -> torch.Tensor:
    """`logical` ([L,] rows x cols) stored so that dimension `unit` of its rows and cols has
    unit stride, passed transposed when `transposed`."""
    t = logical.to(ir.torch_dtype(dtype))
    t = t.contiguous() if unit == 1 else t.mT.contiguous().mT
    return t.mT if transposed else t


class _Heads:
    """Lays out the logical [L1, L2, rows, cols] tensors of one nested spec (see the module's
    docstring), A and B first: at least one of them a view, whose (L1, L2) the kernel takes;
    an [M, N] tensor every batch reads as [M, N] or [1, M, N], its rows padded."""

    def __init__(self, rng: random.Random, device: str):
        self.rng, self.device = rng, device
        self.forms = list(rng.choice(((True, True), (True, False), (False, True))))  # A, B

    def __call__(self, logical: torch.Tensor, unit: int, dtype: str,
                 transposed: bool = False) -> torch.Tensor:  # fmt: skip
        if logical.dim() == 2:
            t = self._flat(logical.unsqueeze(0), unit, dtype)
            return t if self.rng.random() < 0.3 else t.squeeze(0)
        if self.forms.pop(0) if self.forms else self.rng.random() < 0.7:
            t = self._view(logical, unit, dtype)
        else:
            t = self._flat(logical.flatten(0, 1), unit, dtype)
        return t.mT if transposed else t

    def _pad(self, dtype: str) -> int:
        """0, 1 or 2 whole 16-byte vectors of `dtype` elements (1 or 2 most often)."""
        return self.rng.choice((0, 1, 1, 2)) * 16 // ir.torch_dtype(dtype).itemsize

    def _storage(self, shape: tuple[int, ...], dtype: str) -> torch.Tensor:
        poison = True if dtype == "b8" else math.nan
        return torch.full(shape, poison, dtype=ir.torch_dtype(dtype), device=self.device)

    def _view(self, logical: torch.Tensor, unit: int, dtype: str) -> torch.Tensor:
        """An [L1, L2, rows, cols] view of a projection [L1, outer, slots, L2, inner + pad]
        (inner: the unit-stride dimension `unit` of the rows and cols), at a random slot."""
        l1, l2, *rc = logical.shape
        inner, outer = rc[unit], rc[1 - unit]
        slots = self.rng.choice((1, 3))
        big = self._storage((l1, outer, slots, l2, inner + self._pad(dtype)), dtype)
        t = big[:, :, self.rng.randrange(slots), :, :inner].transpose(1, 2)  # L1, L2, outer, inner
        t = t if unit == 1 else t.mT
        return t.copy_(logical)

    def _flat(self, logical: torch.Tensor, unit: int, dtype: str) -> torch.Tensor:
        """`logical` [L, rows, cols] stored with unit stride along `unit`, its inner rows padded."""
        batch, *rc = logical.shape
        inner, outer = rc[unit], rc[1 - unit]
        t = self._storage((batch, outer, inner + self._pad(dtype)), dtype)[..., :inner]
        t = t if unit == 1 else t.mT
        return t.copy_(logical)
