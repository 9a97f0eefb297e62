"""How evt's compile time grows with a model's depth: GPT-2 (its real widths, batch 8 x 1024)
with 1, 4, 12, ... layers, captured on the meta device (no GPU, no kernel built), the time of
`evt.explain` (tracing, evt's passes, the ILP partition) and the ILP's statistics per depth. A
residual stream links each layer's residual GEMMs through their epilogues into one part, solved
in windows (`evt.partition.components`); before session 26 it was one ILP component whose
variables grew with the square of the depth (past EVT_ILP_TIME_LIMIT at 48 layers: greedy).
Set EVT_CACHE_DIR to an empty folder for a cold solve cache.

    python scripts/deep_compile.py [--layers 1,4,12,24,48]
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch

import evt
from evt import examples
from evt.partition import ilp
from evt.runtime import dispatch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", default="1,4,12,24,48")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    for layers in map(int, a.layers.split(",")):
        z = examples.Sizes(vocab=50304, seq=1024, dim=768, heads=12, hidden=3072, layers=layers, batch=8)
        model = examples.GPT2(z).to("meta", torch.bfloat16)
        args = examples.gpt2_inputs(z, "meta")
        ilp.LAST_STATS.clear()
        start = time.perf_counter()
        with dispatch.reference_only():
            report = evt.explain(lambda *xs, model=model: model(*xs).backward(), *args)
        took = time.perf_counter() - start
        print(f"{layers:3d} layers: explain {took:6.1f} s, {len(report.regions)} regions", flush=True)
        for stats in ilp.LAST_STATS:
            print(f"            ILP: {stats}", flush=True)


if __name__ == "__main__":
    main()
