"""A picture of a partition: the joint graph, one colour per region, forward and backward shaded,
GEMMs marked, edges labelled with the bytes they carry. Written as Graphviz `.dot` (pydot), then
rendered to SVG and PNG by Graphviz's `dot` (Debian: `apt-get install graphviz`); without `dot` the
`.dot` file is still written and the caller is told why no picture came out.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pydot
from torch.fx import Graph, Node

from evt.graph.annotate_sides import side
from evt.graph.fold_gemm_operands import GEMM
from evt.partition.region import Region
from evt.report import nbytes

PALETTE = ["#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69",
           "#fccde5", "#bc80bd", "#ccebc5", "#ffed6f", "#d9d9d9"]
SIDE_SHADE = {"forward": "#f4f4f4", "backward": "#dcdcdc"}


def human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def to_dot(graph: Graph, regions: list[Region], title: str = "evt partition") -> pydot.Dot:
    dot = pydot.Dot(graph_type="digraph", label=title, rankdir="TB", fontname="Helvetica")
    owner = {n: i for i, r in enumerate(regions) for n in r.nodes}
    sides = {s: pydot.Cluster(s, label=s, style="filled", color=SIDE_SHADE[s]) for s in SIDE_SHADE}
    clusters = {}
    for i, r in enumerate(regions):
        clusters[i] = pydot.Cluster(f"region{i}", label=f"region {i} ({r.anchor.name})",
                                    style="filled", color=PALETTE[i % len(PALETTE)])
        sides[r.side].add_subgraph(clusters[i])
    for node in graph.nodes:
        if node.op == "output":
            continue
        target = clusters.get(owner.get(node), sides[side(node)])
        target.add_node(_node(node))
    for s in sides.values():
        dot.add_subgraph(s)
    for node in graph.nodes:
        for a in node.all_input_nodes:
            if node.op != "output":
                dot.add_edge(pydot.Edge(_id(a), _id(node), label=human(nbytes(a)), fontsize="9"))
    return dot


def _id(node: Node) -> str:
    return f"n_{node.name}"


def _node(node: Node) -> pydot.Node:
    label = node.name if node.op == "placeholder" else f"{node.name}\\n{_op(node)}"
    if GEMM in node.meta:
        return pydot.Node(_id(node), label=label, shape="box", style="bold,filled",
                          fillcolor="white", penwidth="3")
    shape = "ellipse" if node.op == "placeholder" else "box"
    return pydot.Node(_id(node), label=label, shape=shape, style="filled", fillcolor="white")


def _op(node: Node) -> str:
    return str(getattr(node.target, "__name__", node.target)).split(".")[0]


def write(dot: pydot.Dot, stem: Path) -> list[Path]:
    """Write `stem.dot`, and `stem.svg` + `stem.png` when Graphviz's `dot` is installed."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    written = [stem.with_suffix(".dot")]
    written[0].write_text(dot.to_string())
    if shutil.which("dot") is None:
        raise FileNotFoundError(
            f"wrote {written[0]}, but no picture: Graphviz's `dot` is not installed "
            "(Debian/Ubuntu: apt-get install graphviz; conda: conda install graphviz)"
        )
    for fmt in ("svg", "png"):
        path = stem.with_suffix(f".{fmt}")
        dot.write(str(path), format=fmt)
        written.append(path)
    return written
