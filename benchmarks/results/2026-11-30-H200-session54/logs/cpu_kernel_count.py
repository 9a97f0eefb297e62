"""Inductor's generated kernels over each bench step (small sizes, CPU, bf16) with each region
call's input layouts recorded (`record_input_layouts`: exact strides) and without it (no layout
constraint on the call). Run from the repository root; prints: step, kernels with, without."""

import torch
from torch._inductor import metrics

from evt import pipeline
from evt.bench import steps

on = list(pipeline.SPLIT_PASSES)
off = [p for p in on if p[0] != "record_input_layouts"]
for case in steps.cases(small=True):
    row = [case.name]
    for passes in (on, off):
        pipeline.SPLIT_PASSES[:] = passes
        torch._dynamo.reset()
        metrics.reset()
        w = steps.build(case, torch.bfloat16, "cpu")
        w.wrap(torch.compile(w.target, backend="evt"))(*w.make_inputs(0))
        row.append(metrics.generated_kernel_count)
    print(*row, "same" if row[1] == row[2] else "differs", flush=True)
pipeline.SPLIT_PASSES[:] = on
