"""What evt did to a graph: the regions it formed, what each fused, what it saves."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.fx import Node

from evt import ir


@dataclass(frozen=True)
class RegionReport:
    name: str
    side: str  # "forward" | "backward"
    anchor: str  # the GEMM's aten op, e.g. "aten.mm"
    fused: list[str]  # aten ops fused into the epilogue, in graph order
    bytes_saved: int  # global-memory bytes the fusion avoids (estimate from shapes)
    spec: ir.KernelSpec
    saved_for_backward: int = 0  # bytes of this forward kernel's outputs that the backward reads


@dataclass
class GraphReport:
    regions: list[RegionReport] = field(default_factory=list)
    unfused_gemms: int = 0
    fallbacks: list[str] = field(default_factory=list)  # regions left unfused, with the reason
    drawing: object | None = None  # a pydot graph of the partition, when asked for
    unfused: list[tuple[str, str, str]] = field(default_factory=list)  # (GEMM, side, why)


def op_name(node: Node) -> str:
    """'aten.gelu' for torch.ops.aten.gelu.default."""
    t = node.target
    name = getattr(t, "name", lambda: str(t))()
    return name.split(".")[0].replace("::", ".")


def size_hint(x, fallback: int = 4096) -> int:
    """A concrete value for a possibly symbolic size, without adding a guard."""
    if isinstance(x, int):
        return x
    from torch.fx.experimental import symbolic_shapes as ss

    hint = getattr(ss, "optimization_hint", None) or getattr(ss, "hint_int", None)
    try:
        return int(hint(x, fallback=fallback)) if hint else fallback
    except Exception:  # noqa: BLE001 - an unbacked size: any positive guess will do
        return fallback


def nbytes(node: Node) -> int:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return 0
    numel = 1
    for d in val.shape:
        numel *= size_hint(d)
    return numel * val.element_size()


def bytes_saved(nodes: tuple[Node, ...], inputs: list[Node], outputs: list[Node]) -> int:
    """Unfused traffic (each node reads its inputs and writes its output) minus fused traffic
    (the region reads its inputs once and writes its outputs once)."""
    unfused = sum(nbytes(n) + sum(nbytes(a) for a in n.all_input_nodes) for n in nodes)
    fused = sum(nbytes(n) for n in inputs) + sum(nbytes(n) for n in outputs)
    return max(unfused - fused, 0)


def saved_for_backward(outputs: list[Node]) -> int:
    """Bytes of forward values that backward nodes read: activation memory the step keeps."""
    from evt.graph.annotate_sides import side

    return sum(nbytes(n) for n in outputs if any(side(u) == "backward" for u in n.users))


def format_table(
    regions: list[RegionReport], unfused_gemms: int, unfused: list | None = None
) -> str:
    rows = [("kernel", "side", "anchor", "fused", "bytes saved", "kept for bwd")]
    rows += [
        (r.name, r.side, r.anchor, ", ".join(r.fused), f"{r.bytes_saved:,}",
         f"{r.saved_for_backward:,}" if r.side == "forward" else "")
        for r in regions
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(f"{len(regions)} fused regions, {unfused_gemms} GEMMs left unfused")
    lines += [f"  unfused {name} ({side}): {why}" for name, side, why in unfused or []]
    return "\n".join(lines)
