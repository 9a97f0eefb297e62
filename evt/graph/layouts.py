"""Layout facts about FX values: how a GEMM operand or an epilogue input can be read.

Shared by the partitioner (may this join a region?) and the tree builder (which EVT load node?).
"""

from __future__ import annotations

import torch

from evt.graph.fold_gemm_operands import GEMM, GemmOperands

GEMM_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
LOAD_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.bool)  # bool: full masks only


def operand_major(val: torch.Tensor, transposed: bool, rows: str, cols: str) -> str | None:
    """Which logical dimension of a 2-D operand has unit stride ('rows' or 'cols' name), if any."""
    if val.dim() != 2:
        return None
    s_rows, s_cols = val.stride()[::-1] if transposed else val.stride()
    if s_cols == 1:
        return cols
    if s_rows == 1:
        return rows
    return None


def gemm_majors(g: GemmOperands) -> tuple[str, str] | None:
    """(A major, B major) for a GEMM whose operands TMA can read, else None."""
    a = operand_major(g.a.meta["val"], g.a_transposed, "m", "k")
    b = operand_major(g.b.meta["val"], g.b_transposed, "k", "n")
    return None if a is None or b is None else (a, b)


def load_kind(val: torch.Tensor, m: int, n: int) -> str | None:
    """How an external tensor broadcasts into an [m, n] epilogue: an EVT load kind, or None."""
    if not isinstance(val, torch.Tensor) or val.dtype not in LOAD_DTYPES:
        return None
    shape, stride = tuple(val.shape), val.stride()
    if shape == (m, n):
        return "aux_load" if 1 in (stride[1], stride[0]) else None
    if val.dtype == torch.bool:
        return None
    if shape in ((n,), (1, n)) and (n == 1 or stride[-1] == 1):
        return "row_broadcast"
    if shape == (m, 1) and (m == 1 or stride[0] == 1):
        return "col_broadcast"
    return None


def aux_major(val: torch.Tensor) -> str:
    return "n" if val.stride(-1) == 1 else "m"


def gemm_shape(node: torch.fx.Node) -> tuple[int, int] | None:
    """[M, N] of an eligible GEMM anchor, else None (not a GEMM, odd dtype or layout)."""
    g = node.meta.get(GEMM)
    val = node.meta.get("val")
    if g is None or val is None or val.dim() != 2 or val.dtype not in GEMM_DTYPES:
        return None
    if gemm_majors(g) is None:
        return None
    m, n = val.shape
    if g.bias is not None and load_kind(g.bias.meta.get("val"), m, n) is None:
        return None
    return m, n
