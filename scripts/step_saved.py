"""What each benchmark training step saves for its backward, evt against AOTAutograd's own
min-cut (`aot_eager`): a capture on the meta device (no GPU, no kernel built; evt's regions run
their fake implementations), at a fraction of the step's batch. Prints the MiB each saves and the
(shape, dtype) -> count of the tensors one saves and the other does not (views of the same
bytes show up on both sides).

    python scripts/step_saved.py [--steps step/mlp,step/gpt2] [--batch-div 8]
"""

from __future__ import annotations

import argparse
import collections
import math
import warnings

import torch

import evt.backend
from evt.bench import steps
from evt.bench.plan import add_step_options, step_cases

BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "int64": 8, "bool": 1}


def saved(case, backend: str) -> collections.Counter:
    torch._dynamo.reset()
    w = steps.build(case, torch.bfloat16, "meta")
    if backend == "evt":
        fn = torch.compile(w.target, backend=evt.backend.evt_backend, options={"rest": "eager"})
    else:
        fn = torch.compile(w.target, backend=backend)
    out: collections.Counter = collections.Counter()

    def pack(t):
        out[(tuple(t.shape), str(t.dtype).removeprefix("torch."))] += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*w.make_inputs(0))
    return out


def mib(counts: collections.Counter) -> float:
    return sum(n * math.prod(s) * BYTES.get(d, 4) for (s, d), n in counts.items()) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_step_options(ap)
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    for case in step_cases(a.steps, a.batch_div):
        e, ref = saved(case, "evt"), saved(case, "aot_eager")
        print(f"{case.name}: evt {mib(e):.1f} MiB, aot_eager {mib(ref):.1f} MiB", flush=True)
        print(f"    evt only: {dict(e - ref)}\n    aot_eager only: {dict(ref - e)}", flush=True)


if __name__ == "__main__":
    main()
