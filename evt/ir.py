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
  node whose value is stored as D (output 0); each `AuxStore` and each `RowReduction` writes one
  more output. Both pass their argument's value on to their readers.
- Masks: a comparison computes 1.0 or 0.0 in fp32; a bool tensor is loaded and stored as bytes
  (dtype "b8", CUTLASS `uint8_t`), the layout torch uses for bool.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import torch

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


@dataclass(frozen=True)
class RowReduction:
    """Sums its argument over M (and L) into an N-vector, kernel output `output`: accumulated in
    fp32, rounded once to `dtype`, shaped [N] or, with `keepdim`, [1, N] (CUTLASS
    `Sm90RowReduction`, e.g. a Linear's bias gradient). Passes its argument's value through."""

    kind: ClassVar[str] = "row_reduction"
    name: str
    arg: str
    output: int
    dtype: str
    keepdim: bool = False


Node = (
    AccFetch | AuxLoad | RowBroadcast | ColBroadcast | ScalarBroadcast | Compute | AuxStore
    | RowReduction
)  # fmt: skip
NODE_TYPES: dict[str, type] = {
    cls.kind: cls
    for cls in (
        AccFetch, AuxLoad, RowBroadcast, ColBroadcast, ScalarBroadcast, Compute, AuxStore,
        RowReduction,
    )
}  # fmt: skip
LOAD_KINDS = ("aux_load", "row_broadcast", "col_broadcast")


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
    "relu": ComputeOp(1, "cutlass::epilogue::thread::ReLu", "relu"),
    "gelu": ComputeOp(1, "cutlass::epilogue::thread::GELU", "gelu"),
    "gelu_tanh": ComputeOp(1, "cutlass::epilogue::thread::GELU_taylor", "gelu_tanh"),
    # grad * d/dz gelu(z): CUTLASS's dGELU is the tanh form, so exact GELU has its own functor.
    "gelu_backward": ComputeOp(2, "evt::GeluBackward", "gelu_backward"),
    "gelu_tanh_backward": ComputeOp(2, "evt::GeluTanhBackward", "gelu_tanh_backward"),
    "silu": ComputeOp(1, "cutlass::epilogue::thread::SiLu", "silu"),
    "silu_backward": ComputeOp(2, "evt::SiluBackward", "silu_backward"),  # (grad, x)
    "sigmoid": ComputeOp(1, "cutlass::epilogue::thread::Sigmoid", "sigmoid"),
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

    def output_nodes(self) -> list[AuxStore | RowReduction]:
        """The nodes that write outputs 1, 2, ..., in output order."""
        outs = [n for n in self.nodes if isinstance(n, (AuxStore, RowReduction))]
        return sorted(outs, key=lambda n: n.output)

    @property
    def num_outputs(self) -> int:
        return 1 + len(self.output_nodes())

    def output_dtypes(self) -> list[str]:
        return [self.d_dtype] + [n.dtype for n in self.output_nodes()]

    def output_shapes(self, m, n, l) -> list[tuple]:  # noqa: E741
        """Each output's shape for the problem (M, N, L): D and aux stores [L,] M, N; a row
        reduction [N] or [1, N]."""
        full = (l, m, n) if self.gemm.batched else (m, n)
        shapes: list[tuple] = [full]
        for o in self.output_nodes():
            if isinstance(o, RowReduction):
                shapes.append((1, n) if o.keepdim else (n,))
            else:
                shapes.append(full)
        return shapes

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def signature(self) -> str:
        """The static properties of the kernel, everything but its name: the build cache key."""
        return to_json(dataclasses.replace(self, name="k"))


OMIT_IF_FALSE = ("broadcast_l",)  # newer flags: absent when off, so older specs keep their JSON


def _node_to_dict(node: Node) -> dict:
    d = {"kind": node.kind, **dataclasses.asdict(node)}
    return {k: v for k, v in d.items() if not (k in OMIT_IF_FALSE and v is False)}


def _node_from_dict(d: dict) -> Node:
    d = dict(d)
    cls = NODE_TYPES[d.pop("kind")]
    if "args" in d:
        d["args"] = tuple(d["args"])
    return cls(**d)


def to_json(spec: KernelSpec) -> str:
    body = {
        "name": spec.name,
        "gemm": dataclasses.asdict(spec.gemm),
        "nodes": [_node_to_dict(n) for n in spec.nodes],
        "d": spec.d,
        "d_dtype": spec.d_dtype,
        "num_inputs": spec.num_inputs,
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


@lru_cache(maxsize=4096)
def from_json(text: str) -> KernelSpec:
    body = json.loads(text)
    g = body["gemm"]
    gemm = Gemm(Operand(**g["a"]), Operand(**g["b"]), g["dtype"], g["batched"])
    nodes = tuple(_node_from_dict(n) for n in body["nodes"])
    return KernelSpec(body["name"], gemm, nodes, body["d"], body["d_dtype"], body["num_inputs"])


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
    if isinstance(node, (AuxStore, RowReduction)):
        return (node.arg,)
    return ()


def format_tree(spec: KernelSpec) -> str:
    """A readable text form of the epilogue DAG (what `evt dump` writes as `<kernel>.tree.txt`)."""
    g = spec.gemm
    lines = [
        f"kernel {spec.name}",
        f"  gemm  A=in{g.a.input}{'ᵀ' if g.a.transposed else ''} ({g.a.major}-major) "
        f"B=in{g.b.input}{'ᵀ' if g.b.transposed else ''} ({g.b.major}-major) "
        f"{g.dtype}, fp32 accumulate{', batched' if g.batched else ''}",
    ]
    for n in spec.nodes:
        lines.append("  " + _format_node(n))
    lines.append(f"  D = {spec.d} -> out0 ({spec.d_dtype})")
    return "\n".join(lines) + "\n"


def _format_node(n: Node) -> str:
    if isinstance(n, AccFetch):
        return f"{n.name} = AccFetch()"
    if isinstance(n, AuxLoad):
        every = ", every batch" if n.broadcast_l else ""
        return f"{n.name} = AuxLoad(in{n.input}, {n.dtype}, {n.major}-major{every})"
    if isinstance(n, (RowBroadcast, ColBroadcast)):
        return f"{n.name} = {type(n).__name__}(in{n.input}, {n.dtype})"
    if isinstance(n, ScalarBroadcast):
        return f"{n.name} = ScalarBroadcast({n.value!r})"
    if isinstance(n, Compute):
        return f"{n.name} = Compute({n.op}; {', '.join(n.args)}) -> {n.dtype}"
    if isinstance(n, RowReduction):
        shape = "[1, N]" if n.keepdim else "[N]"
        return f"{n.name} = RowReduction(sum over M; {n.arg}) -> out{n.output} ({n.dtype}, {shape})"
    return f"{n.name} = AuxStore({n.arg}) -> out{n.output} ({n.dtype})"
