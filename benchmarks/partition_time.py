"""How long the ILP partitioner takes on real joint graphs: one BERT-style layer and a 12-layer
stack, cold (empty solution cache) and cached (the same graph again). Targets (issue: ILP
partitioner): under 5 s cold per distinct layer, under 50 ms cached.

    python benchmarks/partition_time.py [--layers 12] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn as nn

from evt.examples import BertLayer
from evt.graph.annotate_sides import annotate_sides
from evt.graph.capture import capture_joint
from evt.graph.fold_gemm_operands import fold_gemm_operands
from evt.graph.sink_views import sink_views
from evt.partition import greedy, ilp, solve_cache, validate


def joint_graph(layers: int):
    model = nn.Sequential(*[BertLayer() for _ in range(layers)])
    x = torch.randn(2, 64, 256, requires_grad=True)
    graph = capture_joint(lambda x: model(x).sum(), x)
    return fold_gemm_operands(sink_views(annotate_sides(graph)))


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def measure(layers: int) -> dict:
    graph = joint_graph(layers)
    solve_cache.clear()
    regions, cold = timed(lambda: ilp.partition(graph))
    stats = ilp.LAST_STATS[-1]
    _, cached = timed(lambda: ilp.partition(graph))
    base, greedy_s = timed(lambda: greedy.partition(graph))
    validate(graph, regions)
    return {
        "layers": layers,
        "nodes": len(graph.nodes),
        "regions": len(regions),
        "greedy_regions": len(base),
        "components": stats.components,
        "solved": stats.components - stats.cache_hits,
        "cold_s": cold,
        "cached_s": cached,
        "greedy_s": greedy_s,
        "variables": stats.variables,
        "constraints": stats.constraints,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--json")
    args = p.parse_args()
    rows = [measure(1), measure(args.layers)]
    for r in rows:
        print(
            f"{r['layers']:>2} layer(s): {r['nodes']} nodes, {r['regions']} regions "
            f"(greedy {r['greedy_regions']}), {r['components']} components, {r['solved']} "
            f"solved; cold {r['cold_s']:.3f} s, cached {1e3 * r['cached_s']:.1f} ms, "
            f"greedy {r['greedy_s']:.3f} s"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
