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
    problem: tuple[int, int, int, int] | None = None  # (M, N, K, L) the graph's shapes give, if known
    # the default mode's profitability check's (fused, unfused) microseconds (evt.codegen.profit),
    # where it ran: static shapes on CUDA, not max-autotune (which measures)
    predicted: tuple[float, float] | None = None
    # what the check predicted from: ((M, N, K, L), the global-memory bytes the fusion saves
    # against Inductor's kernels less the dense copies of padded outputs), where it ran
    judged_on: tuple[tuple[int, int, int, int] | None, int] | None = None

    @property
    def gemm(self) -> str:
        """The anchor GEMM's FX node name, e.g. "addmm_3" (its accumulator is "<gemm>_acc")."""
        acc = next(n.name for n in self.spec.nodes if isinstance(n, ir.AccFetch))
        return acc.removesuffix("_acc")


@dataclass
class GraphReport:
    regions: list[RegionReport] = field(default_factory=list)
    unfused_gemms: int = 0
    fallbacks: list[str] = field(default_factory=list)  # regions left unfused, with the reason
    drawing: object | None = None  # a pydot graph of the partition, when asked for
    unfused: list[tuple[str, str, str]] = field(default_factory=list)  # (GEMM, side, why)
    # region -> (spec, problem) of the kernel that runs instead once AOTAutograd has split the
    # graph and `prune_unused_outputs` dropped the aux stores nothing reads (`note_pruned`)
    pruned: dict[str, tuple[ir.KernelSpec, tuple | None]] = field(default_factory=dict)

    def kernels(self) -> list[tuple[ir.KernelSpec, tuple | None]]:
        """(spec, problem) of each kernel the graph launches: a region's own, or its pruned
        form (what to build ahead of a run: the GPU tests' fixtures, `evt.bench.prebuild`)."""
        return [self.pruned.get(r.name, (r.spec, r.problem)) for r in self.regions]


def note_pruned(reports: list[GraphReport]):
    """A `prune_unused_outputs.LISTENERS` entry that records each pruned kernel in the report
    of the graph whose region it prunes (found by its spec: the forward's calls are pruned as
    it compiles, the backward's when it first runs, after other graphs may have compiled)."""

    def listen(original: ir.KernelSpec, spec: ir.KernelSpec, problem: tuple | None) -> None:
        for g in reversed(reports):
            if any(r.spec is original for r in g.regions):
                g.pruned[original.name] = (spec, problem)
                return

    return listen


def op_name(node: Node) -> str:
    """'aten.gelu' for torch.ops.aten.gelu.default."""
    t = node.target
    name = getattr(t, "name", lambda: str(t))()
    return name.split(".")[0].replace("::", ".")


def size_hint(x, fallback: int = 4096) -> int:
    """A concrete value for a possibly symbolic size, without adding a guard."""
    if isinstance(x, int):
        return x
    # a SymInt's own hint (torch 2.11's hint_int warns that it is deprecated; 2.13 renamed it)
    hint = getattr(getattr(x, "node", None), "hint", None)
    try:
        return int(hint) if hint is not None else fallback
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


def short_op(op: str) -> str:
    """'gelu' for 'aten.gelu'."""
    return op.rsplit(".", 1)[-1]


def op_list(ops: list[str]) -> str:
    """'mul, where, convert_element_type x2': graph order, repeats counted."""
    counts = dict.fromkeys(short_op(op) for op in ops)  # ordered set
    for op in counts:
        counts[op] = sum(short_op(o) == op for o in ops)
    return ", ".join(op if n == 1 else f"{op} x{n}" for op, n in counts.items())


@dataclass(frozen=True)
class SideCoverage:
    """One side of a step: its GEMMs, those anchoring a kernel and what those fuse."""

    side: str  # "forward" | "backward"
    fused: list[RegionReport]
    unfused: list[tuple[str, str]]  # (GEMM, why no region anchors it)

    @property
    def gemms(self) -> int:
        return len(self.fused) + len(self.unfused)

    @property
    def fused_ops(self) -> int:
        """Ops fused into the GEMMs' epilogues, all kernels together."""
        return sum(len(r.fused) for r in self.fused)


def coverage(regions: list[RegionReport], unfused: list[tuple[str, str, str]]) -> list[SideCoverage]:
    """Forward, then backward (a side without GEMMs is left out)."""
    out = []
    for s in ("forward", "backward"):
        # a kernel of the GEMM's own side named first (SwiGLU's gate: the up projection's)
        read_by = {n.name: r.name for r in sorted(regions, key=lambda r: r.side == s)
                   for n in r.spec.nodes if n.kind in ir.LOAD_KINDS}  # fmt: skip
        mine = SideCoverage(s, [r for r in regions if r.side == s],
                            [(g, _why(g, why, read_by)) for g, side, why in unfused if side == s])  # fmt: skip
        if mine.gemms:
            out.append(mine)
    return out


def _why(gemm: str, why: str, read_by: dict[str, str]) -> str:
    """The pipeline's reason, or, where another kernel's epilogue loads the GEMM's result, that."""
    if gemm in read_by:
        return f"its result is an input of {read_by[gemm]}'s epilogue (one GEMM per kernel)"
    return why


def _epilogue_text(r: RegionReport) -> str:
    if r.fused:
        return op_list(r.fused)
    if r.spec.gemm.nested:  # evt/partition/free_head_copies.py
        return "(none: reads its heads in place, freeing their copy)"
    return "(none: the GEMM alone)"


def format_table(
    regions: list[RegionReport], unfused_gemms: int, unfused: list | None = None
) -> str:
    """Per side, one row per GEMM: the kernel it anchors and the ops fused into its epilogue,
    or why it stayed unfused."""
    lines: list[str] = []
    for c in coverage(regions, unfused or []):
        lines.append(
            f"{c.side}: {c.gemms} GEMMs, {len(c.fused)} fused ({c.fused_ops} ops in their "
            f"epilogues), {len(c.unfused)} unfused"
        )
        rows = [("  GEMM", "kernel", "fused into its epilogue", "bytes saved", "kept for bwd")]
        rows += [
            ("  " + r.gemm, r.name, _epilogue_text(r),
             f"{r.bytes_saved:,}", f"{r.saved_for_backward:,}")
            for r in c.fused
        ]  # fmt: skip
        rows += [("  " + g, "-", f"unfused: {why}", "", "") for g, why in c.unfused]
        forward = c.side == "forward"  # only forward kernels keep values for the backward
        lines += _columns([row if forward else row[:-1] for row in rows])
    lines.append(f"{len(regions)} fused regions, {unfused_gemms} GEMMs left unfused")
    return "\n".join(lines)


def _columns(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows as aligned columns, a rule under the first; a long last text column runs on."""
    body = [r for r in rows if not r[2].startswith("unfused: ")]
    widths = [max(len(row[i]) for row in body) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  " + "  ".join("-" * w for w in widths)[2:])
    return lines
