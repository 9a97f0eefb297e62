"""Small torch modules that, between them, reach every EVT node kind and every compute op of
`evt.ir` through the whole pipeline (capture, passes, partition, lowering): the CPU tier checks
the union and the reference execution against eager (`test_node_coverage.py`), the GPU tier runs
the same modules with real kernels (`test_gpu_node_coverage.py`).

Each case is a module, its inputs (`dim`-wide rows) and the node kinds and compute ops its regions
must hold, forward and backward together. The loss is `(out * probe).sum()` with a random probe
(`tests.graphs.train_compare`), so the incoming gradient is a fresh tensor and the backward's
epilogues (an activation's derivative, bias gradients as row reductions) land in the dgrad GEMMs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from evt.bench.models import SwiGLU
from tests.graphs import Arith, LinearStatistics


class Sandwich(nn.Module):
    """fc2(fn(fc1(x))): `fn` joins fc1's epilogue, its derivative fc2's dgrad, with fc1's bias
    gradient (a sum over M, `row_reduction`)."""

    def __init__(self, fn: Callable, dim: int, hidden: int):
        super().__init__()
        self.fc1, self.fc2, self.fn = nn.Linear(dim, hidden), nn.Linear(hidden, dim), fn

    def forward(self, x):
        return self.fc2(self.fn(self.fc1(x)))


class RowScaled(nn.Module):
    """A GEMM scaled per row by an M-vector computed outside it (`col_broadcast`; RMSNorm's
    scale applied after the projection), a `!=` mask, and in the backward a sum over N
    (`col_reduction`, the scale's gradient)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden, bias=False), nn.Linear(hidden, dim)

    def forward(self, x):
        scale = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)
        y = self.fc1(x) * scale
        return self.fc2(torch.where(y != 0, y, 1.0))


def gelu_written(y: torch.Tensor) -> torch.Tensor:
    """HF's `NewGELUActivation` (GPT-2's `gelu_new`): the tanh GELU in ops."""
    return 0.5 * y * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * torch.pow(y, 3.0))))


@dataclass(frozen=True)
class Case:
    build: Callable[[int, int], nn.Module]  # (rows, dim) -> module
    inputs: Callable[[int, int], list[torch.Tensor]]  # (rows, dim) -> inputs
    kinds: frozenset[str]
    ops: frozenset[str]
    # the float32 step's error against eager: a value eager rounds to 16 bits and the epilogue
    # keeps in float32 (as Inductor does) differs by that rounding
    tolerance: float = 1e-4


class LearnedScale(nn.Module):
    """fc2(fc1(x) * s), s a learned 0-d scalar: the epilogue reads it through its pointer
    (`scalar_load`), forward and in fc2's dgrad."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)
        self.scale = nn.Parameter(torch.tensor(0.7))

    def forward(self, x):
        return self.fc2(self.fc1(x) * self.scale)


def _rows(rows: int, dim: int) -> list[torch.Tensor]:
    return [torch.randn(rows, dim)]


def _sandwich(fn: Callable, ops: set[str], kinds: set[str] = frozenset(), tolerance=1e-4) -> Case:
    return Case(lambda r, d: Sandwich(fn, d, 2 * d), _rows,
                frozenset({"acc", "row_broadcast", "row_reduction", *kinds}), frozenset(ops),
                tolerance)  # fmt: skip


CASES: dict[str, Case] = {
    "gelu": _sandwich(F.gelu, {"gelu", "gelu_backward"}),
    # a GELU the graph computes in a 16-bit dtype: the cheaper normal tails of evt_functors.h
    "gelu_bf16": _sandwich(lambda y: F.gelu(y.bfloat16()).to(y.dtype), {"gelu_for_bf16", "gelu_backward"},
                           tolerance=2e-2),
    "gelu_f16": _sandwich(lambda y: F.gelu(y.half()).to(y.dtype), {"gelu_for_f16", "gelu_backward"},
                          tolerance=4e-3),
    "gelu_tanh": _sandwich(lambda y: F.gelu(y, approximate="tanh"), {"gelu_tanh", "gelu_tanh_backward"}),
    # HF GPT-2's `gelu_new`, the tanh GELU written out in ops: pow(y, 3) is a cube. In float32
    # (the GPU tier's bf16 included), where it stays written out (`tanh_gelu_to_native`)
    "gelu_written": _sandwich(lambda y: gelu_written(y.float()).to(y.dtype), {"cube", "tanh", "tanh_backward"}),
    "relu": _sandwich(F.relu, {"relu", "threshold_backward"}),
    "silu": _sandwich(F.silu, {"silu", "silu_backward"}),
    "sigmoid": _sandwich(torch.sigmoid, {"sigmoid", "sigmoid_backward"}),
    # LLaMA's MLP: its dgrad computes silu_backward and silu of one gate from one shared sigmoid
    "swiglu": Case(lambda r, d: SwiGLU(d, 2 * d), _rows, frozenset({"acc", "aux_load", "aux_store"}),
                   frozenset({"silu", "sigmoid", "silu_backward_sigmoid", "mul"})),
    "tanh": _sandwich(torch.tanh, {"tanh", "tanh_backward"}),
    "exp": _sandwich(torch.exp, {"exp", "mul"}),
    "log": _sandwich(lambda y: torch.log(y * y + 1), {"log", "div"}, {"aux_store", "scalar"}),
    "rsqrt": _sandwich(lambda y: torch.rsqrt(y * y + 1), {"rsqrt"}, {"aux_store", "scalar"}),
    "clamp": _sandwich(lambda y: y.clamp(-1, 1), {"ge", "le", "where"}, {"aux_store"}),
    "leaky_max": _sandwich(lambda y: torch.maximum(y, 0.1 * y), {"maximum", "gt", "lt", "eq", "where"}),
    "leaky_min": _sandwich(lambda y: torch.minimum(y, 0.1 * y), {"minimum", "gt", "lt", "eq"}),
    "arith": Case(lambda r, d: Arith(d, d), lambda r, d: [torch.randn(r, d), torch.randn(r, d)],
                  # its division by a number is a multiply by the float32 reciprocal (as eager's)
                  frozenset({"acc", "aux_load", "scalar"}), frozenset({"mul", "sub", "neg", "add"})),
    "learned_scale": Case(lambda r, d: LearnedScale(d, 2 * d), _rows,
                          frozenset({"acc", "row_broadcast", "scalar_load"}), frozenset({"mul"})),
    "row_scaled": Case(lambda r, d: RowScaled(d, 2 * d), _rows,
                       frozenset({"col_broadcast", "col_reduction", "aux_store"}), frozenset({"ne", "where"})),
    "softmax": Case(lambda r, d: LinearStatistics("softmax", d, 2 * d, r), _rows,
                    frozenset({"softmax_stats"}), frozenset()),
    "layer_norm": Case(lambda r, d: LinearStatistics("layer_norm", d, 2 * d, r), _rows,
                       frozenset({"welford", "aux_load"}), frozenset()),
    "batch_norm": Case(lambda r, d: LinearStatistics("batch_norm", d, 2 * d, r), _rows,
                       frozenset({"column_welford"}), frozenset()),
    "reductions": Case(lambda r, d: LinearStatistics("reductions", d, 2 * d, r), _rows,
                       frozenset({"col_reduction", "scalar_reduction"}), frozenset()),
}  # fmt: skip
# casts are not compute nodes: a cast (`identity`) becomes the dtype of the node it rounds (an
# identity node only where that node cannot round: the accumulator, as in gelu_bf16)
NOT_A_NODE = frozenset({"identity"})


@pytest.fixture(scope="module", autouse=True)
def untrimmed():
    """Imported by the catalog's tests: the regions as the partitioner picks them, since the
    catalog is about what a kernel can compute; whether Inductor runs an op with less traffic
    (`EVT_TRIM`) is tested elsewhere. (The clamp's comparison masks, read only by Inductor's
    `logical_and`, would go back to Inductor.)"""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVT_TRIM", "0")
        yield
