"""The EVT IR: what one fused kernel computes, independent of FX and of C++.

A `KernelSpec` is one GEMM main loop plus an epilogue DAG. It is produced from an FX region
(`evt.codegen.tree`), rendered to CUTLASS C++ (`evt.codegen.emit`), interpreted in pure torch
(`evt.runtime.reference`), and serialized to JSON so that it can travel inside the graph as the
string argument of the `evt::fused_gemm` custom op (a fresh process can then rebuild everything
from the graph alone).

Conventions (CUTLASS 3.x):
- The GEMM computes acc[l, m, n] = sum_k A[l, m, k] * B[l, k, n] in fp32.
- Each kernel input is a tensor passed at run time; `Operand.transposed` says the logical operand
  is the last-two-dims transpose of the tensor passed (a `permute`/`t` folded away, no copy).
- `major` is the logical dimension with unit stride: A is "k" or "m", B is "k" or "n", an aux
  tensor [L, M, N] is "n" or "m". It is a static property of the kernel (the layout tag); the
  other strides are run-time arguments.
- Row* nodes are N-vectors (broadcast along M), Col* nodes are M-vectors (broadcast along N).
- Epilogue nodes are listed in topological order and refer to each other by name. `d` names the
  node whose value is stored as D (output 0); each writer (`WRITERS`: an `AuxStore`, a reduction
  or a statistic) writes one or two more outputs and passes its argument's value on to its
  readers.
- Reductions and statistics are deterministic: fp32 partials per CTA tile, combined in a fixed
  order (no float atomics), rounded once to the output's dtype.
- Masks: a comparison computes 1.0 or 0.0 in fp32; a bool tensor is loaded and stored as bytes
  (dtype "b8", CUTLASS `uint8_t`), the layout torch uses for bool.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import torch

from evt.errors import CodegenError

# dtype name -> (torch dtype, CUTLASS element type)
DTYPES: dict[str, tuple[torch.dtype, str]] = {
    "bf16": (torch.bfloat16, "cutlass::bfloat16_t"),
    "f16": (torch.float16, "cutlass::half_t"),
    "f32": (torch.float32, "float"),
    "b8": (torch.bool, "uint8_t"),  # masks: one byte per element, 0 or 1
}
DTYPE_NAMES: dict[torch.dtype, str] = {t: name for name, (t, _) in DTYPES.items()}


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES[dtype]


def torch_dtype(name: str) -> torch.dtype:
    return DTYPES[name][0]


def has_strides(t: torch.Tensor, strides: tuple) -> bool:
    """Whether `t` has `strides` where they matter (a mode of extent 1 may have any)."""
    return all(n == 1 or a == b for n, a, b in zip(t.shape, t.stride(), strides, strict=True))


def padded_storage(shape: tuple, strides: tuple) -> int:
    """Elements to allocate for an output whose rows are padded (`row_pitch`), 0 for any other:
    whole padded rows, the last one's pad included. A TMA store writes whole 16-byte vectors,
    so the vector a row ends in is written pad and all (the H100 wrote the pad of 197-element
    bf16 rows); an allocation of just the tensor's extent would end inside the last vector."""
    if len(shape) < 2 or strides[-2] <= shape[-1]:
        return 0
    rows = 1
    for d in shape[:-1]:
        rows *= d
    return rows * strides[-2]


def row_pitch(n: int, dtype: str) -> int:
    """The row stride, in elements, of a freshly allocated [L,] M, N output: N itself where its
    rows are whole 16-byte vectors (TMA's unit), else N rounded up to whole 32-byte sectors
    (ViT's 197 bf16 attention scores: 208). The tensor is [L,] M, N with these strides, as
    Inductor's padded buffers are; nothing reads the pad. On the H100 ViT's scores stored into
    rows of 400 bytes (16-byte multiples, not 32) took 113 us, into rows of 416 bytes 89 us (448:
    92, 512: 97; `scripts/padded_rows_timing.py`, session 19)."""
    size = torch_dtype(dtype).itemsize
    if n * size % 16 == 0:
        return n
    per = 32 // size
    return -(-n // per) * per


# ---------------------------------------------------------------------------------------------
# GEMM
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Operand:
    input: int  # index into the kernel's tensor inputs
    transposed: bool  # logical operand = input.transpose(-1, -2)
    major: str  # A: "k" | "m"; B: "k" | "n"


@dataclass(frozen=True)
class Gemm:
    a: Operand  # logical [L, M, K]
    b: Operand  # logical [L, K, N]
    dtype: str  # operand dtype; accumulation is always fp32
    batched: bool = False  # inputs carry a leading batch dimension L
    # a batched GEMM whose batch is two modes L = L1 x L2, each with its own stride (attention's
    # [B, H] heads read in place from a [B, S, H, D] projection): batched inputs are passed as
    # [L1, L2, rows, cols] (or [L1 * L2, rows, cols]); outputs stay [L1 * L2, M, N], contiguous
    nested: bool = False


# ---------------------------------------------------------------------------------------------
# Epilogue nodes
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AccFetch:
    kind: ClassVar[str] = "acc"
    name: str


@dataclass(frozen=True)
class AuxLoad:
    """A full [L, M, N] tensor, read through TMA (CUTLASS `Sm90AuxLoad`). With `broadcast_l` the
    input is one [M, N] tensor read by every batch (a static L stride of 0, e.g. a causal mask)."""

    kind: ClassVar[str] = "aux_load"
    name: str
    input: int
    dtype: str
    major: str  # "n" (row-major) | "m"
    broadcast_l: bool = False


@dataclass(frozen=True)
class RowBroadcast:
    """An N-vector broadcast along M, e.g. a Linear bias (CUTLASS `Sm90RowBroadcast`)."""

    kind: ClassVar[str] = "row_broadcast"
    name: str
    input: int
    dtype: str


@dataclass(frozen=True)
class ColBroadcast:
    """An M-vector broadcast along N (CUTLASS `Sm90ColBroadcast`)."""

    kind: ClassVar[str] = "col_broadcast"
    name: str
    input: int
    dtype: str


@dataclass(frozen=True)
class ScalarLoad:
    """A 0-d tensor input, the same value everywhere (CUTLASS `Sm90ScalarBroadcast` reading it
    through `scalar_ptrs` in each tile's epilogue): a learnable scalar (CLIP's logit scale), or a
    Python float Dynamo turned into a graph input under dynamic shapes (GPT-2's sqrt(2 / pi))."""

    kind: ClassVar[str] = "scalar_load"
    name: str
    input: int
    dtype: str


@dataclass(frozen=True)
class ScalarBroadcast:
    """A compile-time constant (CUTLASS `Sm90ScalarBroadcast`, value baked into the arguments)."""

    kind: ClassVar[str] = "scalar"
    name: str
    value: float


@dataclass(frozen=True)
class Compute:
    """An elementwise op from `COMPUTE_OPS`, computed in fp32 (CUTLASS `Sm90Compute`).

    `dtype` is the element type the result is rounded to: "f32" (no rounding) unless the graph
    asked for a cast."""

    kind: ClassVar[str] = "compute"
    name: str
    op: str
    args: tuple[str, ...]
    dtype: str = "f32"


@dataclass(frozen=True)
class AuxStore:
    """Stores its argument as kernel output `output` and passes the value through."""

    kind: ClassVar[str] = "aux_store"
    name: str
    arg: str
    output: int
    dtype: str
    major: str = "n"


REDUCE_OPS = ("sum", "max")  # max: NaN-propagating, like torch.amax


@dataclass(frozen=True)
class _Reduction:
    """Reduces its argument (`op`: sum or max) into kernel output `output`, accumulated in fp32
    and rounded once to `dtype`; passes its argument through. Subclasses say over which modes."""

    name: str
    arg: str
    output: int
    dtype: str
    keepdim: bool = False
    op: str = "sum"


@dataclass(frozen=True)
class RowReduction(_Reduction):
    """Over M (and L) into an N-vector shaped [N] or, with `keepdim`, [1, N] (CUTLASS
    `Sm90RowReduction`, e.g. a Linear's bias gradient)."""

    kind: ClassVar[str] = "row_reduction"


@dataclass(frozen=True)
class ColReduction(_Reduction):
    """Over N into an M-vector per batch: [M] ([L, M] batched), or with `keepdim` [M, 1]
    ([L, M, 1]) (CUTLASS `Sm90ColReduction`, its deterministic final reduction)."""

    kind: ClassVar[str] = "col_reduction"


@dataclass(frozen=True)
class ScalarReduction(_Reduction):
    """Over L, M and N into one value: shape [] or, with `keepdim`, all ones (evt's
    `Sm90ScalarStatistic`: per-tile partials combined in a fixed order; CUTLASS's
    Sm90ScalarReduction is atomic only)."""

    kind: ClassVar[str] = "scalar_reduction"


@dataclass(frozen=True)
class SoftmaxStats:
    """Softmax's statistics of each row over N, in one pass (online softmax): m = max x and
    s = sum exp(x - m), or with `zero_inf_max` (logsumexp) shifted by 0 where m is +-inf.
    Outputs `max_output` (m) and/or `sum_output` (s), M-vectors shaped as a ColReduction's
    (evt's `Sm90RowStatistics<SoftmaxStat>`: (m_i, s_i) per N tile, combined as m = max m_i,
    s = sum s_i exp(m_i - m)). Passes its argument through."""

    kind: ClassVar[str] = "softmax_stats"
    name: str
    arg: str
    dtype: str
    max_output: int | None = None
    sum_output: int | None = None
    keepdim: tuple[bool, bool] = (False, False)  # per output: max, sum
    zero_inf_max: bool = False


@dataclass(frozen=True)
class _Welford:
    """A mean and a var of one value in one pass: `mean_output` and/or `var_output`
    (M2 / (count - correction)), (count, mean, M2) partials combined with Chan's formula.
    Passes its argument through."""

    name: str
    arg: str
    dtype: str
    mean_output: int | None = None
    var_output: int | None = None
    keepdim: tuple[bool, bool] = (False, False)  # per output: mean, var
    correction: int = 0


@dataclass(frozen=True)
class WelfordStats(_Welford):
    """LayerNorm's statistics of each row over N, M-vectors shaped as a ColReduction's (evt's
    `Sm90RowStatistics<WelfordStat>`: partials per N tile)."""

    kind: ClassVar[str] = "welford"


@dataclass(frozen=True)
class ColumnWelfordStats(_Welford):
    """BatchNorm's batch statistics of each column over M (and L), N-vectors shaped as a
    RowReduction's: [N] or, with `keepdim`, [1, N] (evt's `Sm90ColumnStatistics<WelfordStat>`:
    partials per M tile, combined in a fixed order)."""

    kind: ClassVar[str] = "column_welford"


Node = (
    AccFetch | AuxLoad | RowBroadcast | ColBroadcast | ScalarLoad | ScalarBroadcast | Compute
    | AuxStore | RowReduction | ColReduction | ScalarReduction | SoftmaxStats | WelfordStats
    | ColumnWelfordStats
)  # fmt: skip
NODE_TYPES: dict[str, type] = {
    cls.kind: cls
    for cls in (
        AccFetch, AuxLoad, RowBroadcast, ColBroadcast, ScalarLoad, ScalarBroadcast, Compute,
        AuxStore, RowReduction, ColReduction, ScalarReduction, SoftmaxStats, WelfordStats,
        ColumnWelfordStats,
    )
}  # fmt: skip
LOADS = (AuxLoad, RowBroadcast, ColBroadcast, ScalarLoad)  # nodes that read a kernel input
LOAD_KINDS = tuple(cls.kind for cls in LOADS)
REDUCTIONS = (
    RowReduction, ColReduction, ScalarReduction, SoftmaxStats, WelfordStats, ColumnWelfordStats,
)  # fmt: skip
TWO_OUTPUT_STATISTICS = (SoftmaxStats, WelfordStats, ColumnWelfordStats)  # each output optional
# the reductions a kernel with a nested batch (L = L1 x L2) cannot have yet: over M and L (an
# N-vector; the epilogue rules make none of a batched value); M-vectors (column reductions and
# statistics over N) and reductions over everything it can, their partials and outputs indexed by
# the flat batch l1 * L2 + l2 (evt_statistics.h: flat_batch)
NOT_NESTED = (RowReduction, ColumnWelfordStats)
# per-row statistics over N: evt's Sm90RowStatistics, finished by a kernel after the GEMM
ROW_STATISTICS = (ColReduction, SoftmaxStats, WelfordStats)
WRITERS = (AuxStore, *REDUCTIONS)  # write outputs, pass their argument through
Writer = (
    AuxStore | RowReduction | ColReduction | ScalarReduction | SoftmaxStats | WelfordStats
    | ColumnWelfordStats
)  # fmt: skip


@dataclass(frozen=True)
class Output:
    """One kernel output besides D: its index, the writer, and its shape's kind."""

    index: int
    node: Writer
    dtype: str
    vector: str  # "full" [L,] M, N | "row" an N-vector | "col" an M-vector | "scalar"
    keepdim: bool


def writes(node: Node) -> list[Output]:
    """The outputs `node` writes (none for a non-writer), in the order of its fields."""
    if isinstance(node, AuxStore):
        return [Output(node.output, node, node.dtype, "full", False)]
    if isinstance(node, (RowReduction, ColReduction, ScalarReduction)):
        vector = {"row_reduction": "row", "col_reduction": "col"}.get(node.kind, "scalar")
        return [Output(node.output, node, node.dtype, vector, node.keepdim)]
    if isinstance(node, TWO_OUTPUT_STATISTICS):
        vector = "row" if isinstance(node, ColumnWelfordStats) else "col"
        return [Output(i, node, node.dtype, vector, keep)
                for i, keep in zip(stat_outputs(node), node.keepdim) if i is not None]  # fmt: skip
    return []


OUTPUT_FIELDS = ("output", "max_output", "sum_output", "mean_output", "var_output")


def renumber_outputs(nodes: Sequence[Node]) -> tuple[tuple[Node, ...], dict[int, int]]:
    """`nodes` with their outputs numbered 1, 2, ... in their old order (after some were
    dropped), and the old -> new index of each (D's 0 included)."""
    old = sorted(o.index for n in nodes for o in writes(n))
    renumber = {0: 0, **{i: k for k, i in enumerate(old, start=1)}}
    out = tuple(
        dataclasses.replace(n, **{f: renumber[getattr(n, f)] for f in OUTPUT_FIELDS
                                  if getattr(n, f, None) is not None})  # fmt: skip
        for n in nodes
    )
    return out, renumber


def stat_outputs(node: SoftmaxStats | WelfordStats | ColumnWelfordStats) -> tuple[int | None, int | None]:
    """A statistic's two optional outputs in the kernel's order (softmax: max, sum; Welford:
    mean, var)."""
    if isinstance(node, SoftmaxStats):
        return (node.max_output, node.sum_output)
    return (node.mean_output, node.var_output)


@dataclass(frozen=True)
class ComputeOp:
    """One row of the compute-op table: arity, the CUTLASS functor, the fp32 torch reference."""

    arity: int
    functor: str  # a `template <class T> class` usable as Sm90Compute's ComputeFn
    reference: str  # name of the function in evt.runtime.reference.COMPUTE_REFERENCE


COMPUTE_OPS: dict[str, ComputeOp] = {
    "identity": ComputeOp(1, "cutlass::epilogue::thread::Identity", "identity"),
    "add": ComputeOp(2, "cutlass::plus", "add"),
    "sub": ComputeOp(2, "cutlass::minus", "sub"),
    "mul": ComputeOp(2, "cutlass::multiplies", "mul"),
    "div": ComputeOp(2, "cutlass::divides", "div"),
    "neg": ComputeOp(1, "cutlass::negate", "neg"),
    "cube": ComputeOp(1, "evt::Cube", "cube"),  # pow(x, 3), as ATen's x * x * x
    "relu": ComputeOp(1, "cutlass::epilogue::thread::ReLu", "relu"),
    "gelu": ComputeOp(1, "evt::Gelu", "gelu"),  # through erfc: no cancellation in the tail
    # the same where the graph rounds the GELU's result to bf16 / fp16: a cheaper form whose
    # relative error is 3.6% / 7.8% of that rounding's (evt_functors.h, gelu_16_bit)
    "gelu_for_bf16": ComputeOp(1, "evt::GeluForBf16", "gelu"),
    "gelu_for_f16": ComputeOp(1, "evt::GeluForF16", "gelu"),
    "gelu_tanh": ComputeOp(1, "evt::GeluTanh", "gelu_tanh"),
    # grad * d/dz gelu(z): CUTLASS's dGELU is the tanh form, so exact GELU has its own functor.
    "gelu_backward": ComputeOp(2, "evt::GeluBackward", "gelu_backward"),
    "gelu_tanh_backward": ComputeOp(2, "evt::GeluTanhBackward", "gelu_tanh_backward"),
    # evt's SiLU and sigmoid take the SFU's exp and reciprocal (CUTLASS's: expf and a division)
    "silu": ComputeOp(1, "evt::Silu", "silu"),
    "silu_backward": ComputeOp(2, "evt::SiluBackward", "silu_backward"),  # (grad, x)
    # (grad, x, sigmoid(x)): where a region shares sigmoid(x) (evt.codegen.tree.share_sigmoids)
    "silu_backward_sigmoid": ComputeOp(3, "evt::SiluBackwardFromSigmoid", "silu_backward_sigmoid"),
    "sigmoid": ComputeOp(1, "evt::Sigmoid", "sigmoid"),
    "sigmoid_backward": ComputeOp(2, "evt::SigmoidBackward", "sigmoid_backward"),  # (grad, y)
    # CUTLASS's Tanh is tanh.approx.f32 (relative error ~2^-11): evt's uses tanhf
    "tanh": ComputeOp(1, "evt::Tanh", "tanh"),
    "tanh_backward": ComputeOp(2, "evt::TanhBackward", "tanh_backward"),  # (grad, y)
    # ReLU's backward: (grad, x, threshold) -> x <= threshold ? 0 : grad
    "threshold_backward": ComputeOp(3, "evt::ThresholdBackward", "threshold_backward"),
    "maximum": ComputeOp(2, "evt::Maximum", "maximum"),  # NaN-propagating, like torch
    "minimum": ComputeOp(2, "evt::Minimum", "minimum"),
    "exp": ComputeOp(1, "evt::Exp", "exp"),
    "log": ComputeOp(1, "evt::Log", "log"),
    "rsqrt": ComputeOp(1, "evt::Rsqrt", "rsqrt"),
    # comparisons give 1.0 or 0.0; where(cond, a, b) picks a where cond is not 0
    "gt": ComputeOp(2, "evt::Greater", "gt"),
    "ge": ComputeOp(2, "evt::GreaterEqual", "ge"),
    "lt": ComputeOp(2, "evt::Less", "lt"),
    "le": ComputeOp(2, "evt::LessEqual", "le"),
    "eq": ComputeOp(2, "evt::Equal", "eq"),
    "ne": ComputeOp(2, "evt::NotEqual", "ne"),
    "where": ComputeOp(3, "evt::Where", "where"),
}
MASK_OPS = ("gt", "ge", "lt", "le", "eq", "ne", "where")  # may produce a bool tensor


# ---------------------------------------------------------------------------------------------
# The kernel
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelSpec:
    name: str  # sanitized C identifier, unique within a graph
    gemm: Gemm
    nodes: tuple[Node, ...]  # topological order
    d: str  # name of the node stored as D (output 0)
    d_dtype: str
    num_inputs: int
    # D's and the aux stores' rows dense at any N (`row_pitch` not applied): the kernel stores
    # them with its threads (`TileConfig.staged_stores`) where TMA cannot, and no reader needs a
    # dense copy (`evt.codegen.tree.dense_rows`: `EVT_STAGED_STORES=1`)
    dense_rows: bool = False

    def __post_init__(self):
        # nodes refer to each other by name: a repeated one would make its readers take whichever
        # came last (a baddbmm with both alpha and beta once read beta's product twice)
        counts = collections.Counter(n.name for n in self.nodes)
        if repeated := sorted(name for name, k in counts.items() if k > 1):
            raise CodegenError(f"kernel {self.name}: node names {repeated} repeat; each IR node "
                               "needs its own (evt.codegen.tree names them after their FX nodes)")  # fmt: skip

    def pitch(self, n: int, dtype: str) -> int:
        """The row stride, in elements, of a freshly allocated [L,] M, N output of `dtype`."""
        return n if self.dense_rows else row_pitch(n, dtype)

    def outputs(self) -> list[Output]:
        """Outputs 1, 2, ... (D is output 0), in output order."""
        return sorted((o for n in self.nodes for o in writes(n)), key=lambda o: o.index)

    def output_nodes(self) -> list[Writer]:
        """The node writing each of outputs 1, 2, ..., in output order (a statistic's node once
        per output it writes)."""
        return [o.node for o in self.outputs()]

    @property
    def num_outputs(self) -> int:
        return 1 + len(self.outputs())

    def output_dtypes(self) -> list[str]:
        return [self.d_dtype] + [o.dtype for o in self.outputs()]

    def output_shapes(self, m, n, l) -> list[tuple]:  # noqa: E741
        """Each output's shape for the problem (M, N, L): D and aux stores [L,] M, N; a row
        reduction [N] or [1, N]; an M-vector [L,] M or [L,] M, 1; a scalar [] or all ones."""
        batch = (l,) if self.gemm.batched else ()
        full = (*batch, m, n)
        shapes: list[tuple] = [full]
        for o in self.outputs():
            if o.vector == "row":
                shapes.append((1, n) if o.keepdim else (n,))
            elif o.vector == "col":
                shapes.append((*batch, m, 1) if o.keepdim else (*batch, m))
            elif o.vector == "scalar":
                shapes.append((1,) * len(full) if o.keepdim else ())
            else:
                shapes.append(full)
        return shapes

    def output_strides(self, m, n, l2=1) -> tuple[int, ...]:
        """The (M, N, L) strides of each freshly allocated output: D and aux stores [L,] M, N
        row-major with rows `pitch` elements apart; stride 0 along the modes a vector or a
        scalar is reduced over. A nested batch (L = L1 x L2) has (M, N, L1, L2) strides: the
        outputs are the same [L1 * L2, ...] tensors."""
        def full(dtype: str) -> tuple:
            p = self.pitch(n, dtype)
            if self.gemm.nested:
                return (p, 1, l2 * m * p, m * p)
            return (p, 1, m * p if self.gemm.batched else 0)

        by_kind: dict[str, tuple]
        if self.gemm.nested:
            by_kind = {"row": (0, 1, 0, 0), "col": (1, 0, l2 * m, m), "scalar": (0, 0, 0, 0)}
        else:
            by_kind = {"row": (0, 1, 0), "col": (1, 0, m if self.gemm.batched else 0),
                       "scalar": (0, 0, 0)}  # fmt: skip
        per_output = [full(self.d_dtype)] + [
            full(o.dtype) if o.vector == "full" else by_kind[o.vector] for o in self.outputs()
        ]
        return tuple(s for strides in per_output for s in strides)

    def output_layouts(self, m, n, l) -> list[tuple[tuple, tuple]]:  # noqa: E741
        """(shape, torch strides) of each freshly allocated output, as the kernel, the fake
        implementation and the reference path all allocate it: contiguous but for the rows of
        D and the aux stores, `pitch` elements apart."""
        layouts = []
        kinds = ["full"] + [o.vector for o in self.outputs()]
        for shape, dtype, kind in zip(self.output_shapes(m, n, l), self.output_dtypes(), kinds):
            strides = list(torch._prims_common.make_contiguous_strides_for(shape))
            if kind == "full":  # [L,] M, N
                strides[-2] = self.pitch(n, dtype)
                if len(shape) == 3:
                    strides[0] = m * strides[-2]
            layouts.append((tuple(shape), tuple(strides)))
        return layouts

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def signature(self) -> str:
        """The static properties of the kernel, everything but its name: the build cache key."""
        return to_json(dataclasses.replace(self, name="k"))


# newer fields: absent at their default, so older specs keep their JSON (and their kernels)
OMIT_IF_DEFAULT = {"broadcast_l": False, "op": "sum"}


def _node_to_dict(node: Node) -> dict:
    d = {"kind": node.kind, **dataclasses.asdict(node)}
    return {k: v for k, v in d.items() if not (k in OMIT_IF_DEFAULT and v == OMIT_IF_DEFAULT[k])}


def _node_from_dict(d: dict) -> Node:
    d = dict(d)
    cls = NODE_TYPES[d.pop("kind")]
    if "args" in d:
        d["args"] = tuple(d["args"])
    if cls in TWO_OUTPUT_STATISTICS and "keepdim" in d:  # older JSON: one bool for both
        k = d["keepdim"]
        d["keepdim"] = (bool(k), bool(k)) if isinstance(k, bool) else tuple(k)
    return cls(**d)


def _gemm_to_dict(gemm: Gemm) -> dict:
    d = dataclasses.asdict(gemm)
    return d if gemm.nested else {k: v for k, v in d.items() if k != "nested"}


def to_json(spec: KernelSpec) -> str:
    body = {
        "name": spec.name,
        "gemm": _gemm_to_dict(spec.gemm),
        "nodes": [_node_to_dict(n) for n in spec.nodes],
        "d": spec.d,
        "d_dtype": spec.d_dtype,
        "num_inputs": spec.num_inputs,
    }
    if spec.dense_rows:  # absent by default: other specs keep their JSON (and their kernels)
        body["dense_rows"] = True
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


@lru_cache(maxsize=4096)
def from_json(text: str) -> KernelSpec:
    body = json.loads(text)
    g = body["gemm"]
    gemm = Gemm(
        Operand(**g["a"]), Operand(**g["b"]), g["dtype"], g["batched"], g.get("nested", False)
    )
    nodes = tuple(_node_from_dict(n) for n in body["nodes"])
    return KernelSpec(body["name"], gemm, nodes, body["d"], body["d_dtype"], body["num_inputs"],
                      body.get("dense_rows", False))


def users(spec: KernelSpec) -> dict[str, list[str]]:
    """Node name -> names of the nodes that read it (the D store is not a node)."""
    out: dict[str, list[str]] = {n.name: [] for n in spec.nodes}
    for n in spec.nodes:
        for a in node_args(n):
            out[a].append(n.name)
    return out


def node_args(node: Node) -> tuple[str, ...]:
    if isinstance(node, Compute):
        return node.args
    if isinstance(node, WRITERS):
        return (node.arg,)
    return ()


def format_tree(spec: KernelSpec) -> str:
    """A readable text form of the epilogue DAG (what `evt dump` writes as `<kernel>.tree.txt`)."""
    g = spec.gemm
    lines = [
        f"kernel {spec.name}",
        f"  gemm  A=in{g.a.input}{'ᵀ' if g.a.transposed else ''} ({g.a.major}-major) "
        f"B=in{g.b.input}{'ᵀ' if g.b.transposed else ''} ({g.b.major}-major) "
        f"{g.dtype}, fp32 accumulate{_batch_text(g)}",
    ]
    for n in spec.nodes:
        lines.append("  " + _format_node(n))
    lines.append(f"  D = {spec.d} -> out0 ({spec.d_dtype})")
    return "\n".join(lines) + "\n"


def _batch_text(g: Gemm) -> str:
    if g.nested:
        return ", batched over L = L1 x L2 (two batch strides)"
    return ", batched" if g.batched else ""


def _format_node(n: Node) -> str:
    if isinstance(n, AccFetch):
        return f"{n.name} = AccFetch()"
    if isinstance(n, AuxLoad):
        every = ", every batch" if n.broadcast_l else ""
        return f"{n.name} = AuxLoad(in{n.input}, {n.dtype}, {n.major}-major{every})"
    if isinstance(n, (RowBroadcast, ColBroadcast, ScalarLoad)):
        return f"{n.name} = {type(n).__name__}(in{n.input}, {n.dtype})"
    if isinstance(n, ScalarBroadcast):
        return f"{n.name} = ScalarBroadcast({n.value!r})"
    if isinstance(n, Compute):
        return f"{n.name} = Compute({n.op}; {', '.join(n.args)}) -> {n.dtype}"
    if isinstance(n, RowReduction):
        shape = "[1, N]" if n.keepdim else "[N]"
        return f"{n.name} = RowReduction({n.op} over M; {n.arg}) -> out{n.output} ({n.dtype}, {shape})"
    if isinstance(n, ColReduction):
        shape = "[M, 1]" if n.keepdim else "[M]"
        return f"{n.name} = ColReduction({n.op} over N; {n.arg}) -> out{n.output} ({n.dtype}, {shape})"
    if isinstance(n, ScalarReduction):
        return f"{n.name} = ScalarReduction({n.op} over L, M, N; {n.arg}) -> out{n.output} ({n.dtype})"
    if isinstance(n, TWO_OUTPUT_STATISTICS):
        return _format_stats(n)
    return f"{n.name} = AuxStore({n.arg}) -> out{n.output} ({n.dtype})"


def _format_stats(n: SoftmaxStats | WelfordStats | ColumnWelfordStats) -> str:
    names = ("max", "sum") if isinstance(n, SoftmaxStats) else ("mean", "var")
    written = [(what, i, keep) for what, i, keep in zip(names, stat_outputs(n), n.keepdim)
               if i is not None]  # fmt: skip
    over_m = isinstance(n, ColumnWelfordStats)
    shape = {(True, True): "[1, N]", (True, False): "[N]", (False, True): "[M, 1]", (False, False): "[M]"}
    shapes = {shape[over_m, keep] for _, _, keep in written}
    each = len(shapes) > 1  # the outputs' shapes differ: each says its own
    outs = [f"{what} -> out{i}" + (f" {shape[over_m, keep]}" if each else "")
            for what, i, keep in written]  # fmt: skip
    if isinstance(n, SoftmaxStats):
        what = "max, sum exp(x - max)" + (", +-inf max as 0" if n.zero_inf_max else "")
    else:
        what = f"Welford mean, var (correction {n.correction})"
    tail = n.dtype if each else f"{n.dtype}, {shapes.pop()}"
    over = "M" if over_m else "N"
    return f"{n.name} = {type(n).__name__}({what} over {over}; {n.arg}): {'; '.join(outs)} ({tail})"
