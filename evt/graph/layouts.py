"""Layout facts about FX values: how a GEMM operand or an epilogue input can be read.

Shared by the partitioner (may this join a region?) and the tree builder (which EVT load node?).
A region's shape is [M, N], or [L, M, N] for a batched GEMM (`bmm`); its loads are full tensors
(in a batched region also one [M, N] tensor read by every batch) and N- or M-vectors broadcast
over the rest.
"""

from __future__ import annotations

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from evt.graph.fold_gemm_operands import GEMM, GemmOperands
from evt.graph.sizes import same_shape, same_size

GEMM_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
LOAD_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.bool)  # bool: full masks only


def operand_major(
    val: torch.Tensor, transposed: bool, rows: str, cols: str, dim: int = 2
) -> str | None:
    """Which logical dimension of a `dim`-D operand ([L,] rows, cols; a nested batch [L1, L2,
    rows, cols]) has unit stride, if any."""
    if val.dim() != dim:
        return None
    s_rows, s_cols = val.stride()[-2:][::-1] if transposed else val.stride()[-2:]
    if s_cols == 1:
        return cols
    if s_rows == 1:
        return rows
    return None


def gemm_majors(g: GemmOperands) -> tuple[str, str] | None:
    """(A major, B major) for a GEMM whose operands TMA can read, else None. An operand
    expanded over a plain batch (L stride 0: `bmm(x.expand(E, -1, -1), w)`, `addbmm`'s backward)
    is read as it is: the TMA descriptor's L stride is 0, every batch reading the same rows (on
    an H200, session 51). Not in a nested batch, which `read_heads_in_place` makes from real
    strides only (the launch guards refuse a zero there)."""
    va, vb = g.a.meta["val"], g.b.meta["val"]
    if g.nested and any(expanded_batch(v) for v in (va, vb)):
        return None
    dim = 3 if g.batched else 2
    a = operand_major(va, g.a_transposed, "m", "k", 4 if g.nested and va.dim() == 4 else dim)
    b = operand_major(vb, g.b_transposed, "k", "n", 4 if g.nested and vb.dim() == 4 else dim)
    return None if a is None or b is None else (a, b)


def expanded_batch(val: torch.Tensor) -> bool:
    """Whether a batch mode (every mode before the last two) of `val` is expanded: stride 0
    over more than one element."""
    return any(val.shape[i] > 1 and val.stride(i) == 0 for i in range(val.dim() - 2))


def load_kind(val: torch.Tensor, *dims: int) -> str | None:
    """How an external tensor broadcasts into an [m, n] or [l, m, n] epilogue (`dims`): an EVT
    load kind, or None."""
    if not isinstance(val, torch.Tensor) or val.dtype not in LOAD_DTYPES:
        return None
    if val.dim() == 0:  # one value for every element (`ScalarLoad`)
        return "scalar_load" if val.dtype != torch.bool else None  # (on the host: by value)
    m, n = dims[-2:]
    shape, stride = tuple(val.shape), val.stride()
    one = lambda d: same_size(d, 1)  # noqa: E731
    if same_shape(shape, dims) or (len(dims) == 3 and same_shape(shape, (m, n))):
        if one(stride[-1]) or one(n):  # N-major: as it is, or a copy with padded rows at launch
            return "aux_load"  # (`guards.copy_into_rows`: ViT's 197 x 197 bool mask)
        return "aux_load" if one(stride[-2]) and tma_aligned(val) else None
    if val.dtype == torch.bool:
        return None
    if (same_shape(shape, (n,)) or same_shape(shape, (1, n))) and (one(n) or one(stride[-1])):
        return "row_broadcast"
    if same_shape(shape, (m, 1)) and (one(m) or one(stride[0])):
        return "col_broadcast"
    return None


def tma_aligned(val: torch.Tensor) -> bool:
    """Whether TMA can read this aux tensor: its rows (the unit-stride extent) and its other
    strides whole 16-byte multiples. Decided only for CUDA values ("meta" stands for CUDA), and
    for symbolic sizes only where the shape environment proves a row or stride misaligned for
    every size (`[s0, 10]` fp32 rows of 40 bytes); elsewhere the reference path runs, or the
    launch guard decides."""
    from evt.runtime.guards import ALIGN

    if not (isinstance(val, torch.Tensor) and val.device.type in ("cuda", "meta")):
        return True
    sizes, strides = tuple(val.shape), tuple(val.stride())
    unit = val.dim() - 1 if same_size(strides[-1], 1) else val.dim() - 2
    item = val.element_size()

    def misaligned(x) -> bool:
        return statically_known_true(x * item % ALIGN != 0)

    if misaligned(sizes[unit]):
        return False
    return not any(misaligned(st) for i, (sz, st) in enumerate(zip(sizes, strides))
                   if i != unit and not same_size(sz, 1))  # fmt: skip


def aux_major(val: torch.Tensor) -> str:
    return "n" if val.stride(-1) == 1 else "m"


def why_not_anchor(node: torch.fx.Node) -> str | None:
    """Why a GEMM cannot anchor a region (for reports), or None if it can."""
    g, val = node.meta.get(GEMM), node.meta.get("val")
    if g is None or val is None or val.dim() != (3 if g.batched else 2):
        return "not a plain 2-D (or batched 3-D) GEMM"
    if val.dtype not in GEMM_DTYPES:
        return f"dtype {val.dtype}"
    if gemm_majors(g) is None:
        return ("an operand has no unit-stride dimension (e.g. an expanded gradient), or is "
                "expanded over a nested batch")  # fmt: skip
    if operand := unreadable_operand(g):
        v = (g.a if operand == "A" else g.b).meta["val"]
        return (f"TMA cannot read its operand {operand} ({list(v.shape)} {v.dtype}, strides "
                f"{tuple(v.stride())}): a row or stride is not a whole 16 bytes (e.g. a LoRA rank "
                "of 4 in bf16)")  # fmt: skip
    if g.bias is not None and load_kind(g.bias.meta.get("val"), *val.shape) is None:
        return "its bias cannot be read as a row/column vector or aux tensor"
    return None


def unreadable_operand(g: GemmOperands) -> str | None:
    """"A" or "B" where that operand's rows (its unit-stride extent) or other strides are not
    whole 16-byte multiples, which TMA needs (the launch guards refuse it: the region would never
    run its kernel), decided for CUDA values with static sizes; else None."""
    for name, node in (("A", g.a), ("B", g.b)):
        if not tma_aligned(node.meta["val"]):
            return name
    return None


def gemm_shape(node: torch.fx.Node) -> tuple[int, ...] | None:
    """[M, N] (or [L, M, N], batched) of an eligible GEMM anchor, else None (`why_not_anchor`
    gives the reason)."""
    if why_not_anchor(node) is not None:
        return None
    return tuple(node.meta["val"].shape)
