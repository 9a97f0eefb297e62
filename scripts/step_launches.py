"""CUDA launches evt's regions make per benchmark training step: a capture on the meta device
(no GPU, no kernel built) through `evt.explain`, counting for each region its GEMM and the
kernel that finishes its deferred nodes (per-row statistics, reductions over M: their partials
are combined after the GEMM). Since session 29 one kernel finishes all of a region's deferred
nodes (`evt::finish_all`); before, each had its own. Prints per step: regions, regions with
deferred nodes, deferred nodes, and the launches both ways.

    python scripts/step_launches.py [--steps step/bert,step/gpt2] [--batch-div 8]
"""

from __future__ import annotations

import argparse
import warnings

import torch

import evt
from evt.bench import steps
from evt.bench.plan import add_step_options, step_cases
from evt.codegen.emit import DEFERRED


def count(case) -> tuple[int, int, int]:
    """(regions, regions with deferred nodes, deferred nodes) of one step's capture."""
    w = steps.build(case, torch.bfloat16, "meta")
    report = evt.explain(w.target, *w.make_inputs(0))
    deferred = [sum(isinstance(n, DEFERRED) for n in r.spec.nodes) for r in report.regions]
    return len(deferred), sum(d > 0 for d in deferred), sum(deferred)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_step_options(ap)
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    print("| step | regions | with deferred nodes | deferred nodes | launches, one finishing "
          "kernel per node | launches, one per region |\n|---|---|---|---|---|---|")  # fmt: skip
    for case in step_cases(a.steps, a.batch_div):
        regions, with_deferred, deferred = count(case)
        print(f"| {case.name} | {regions} | {with_deferred} | {deferred} | {regions + deferred} "
              f"| {regions + with_deferred} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
