"""Session 53 diagnostic: which layout Inductor hands evt_b3_mm's A in PatchTST's step, and
whether constraining the inputs to the graph's exact strides (eager_input_vals) fixes it."""
import json
import os
import sys
import warnings

import torch

sys.path.insert(0, ".")
import torch._library.utils as lu
from torch._inductor import lowering

from evt import pipeline
from evt.bench import plan, steps
from evt.graph import lower_regions as LR
from evt.runtime import dispatch

device, small = sys.argv[1], sys.argv[2] == "small"
op = torch.ops.evt.fused_gemm.default
print("torch", torch.__version__, "tags", op.tags, "tag", lu.get_layout_constraint_tag(op, with_default=False),
      "constraint", lowering.maybe_layout_constraints(op), flush=True)
if os.environ.get("EXACT") == "1":
    orig = LR._replace

    def _replace(graph, region, b, inputs, replaced):
        orig(graph, region, b, inputs, replaced)
        for n in graph.find_nodes(op="call_function", target=LR.FUSED_GEMM):
            if "eager_input_vals" not in n.meta:
                n.meta["eager_input_vals"] = ((n.args[0], [a.meta["val"] for a in n.args[1]]), {})
    LR._replace = _replace


def show(graph):
    for n in graph.find_nodes(op="call_function", target=LR.FUSED_GEMM):
        nm = json.loads(n.args[0])["name"]
        for a in n.args[1]:
            v = a.meta.get("val")
            print("POST", nm, a.name, a.target if a.op == "call_function" else a.op, tuple(v.shape), v.stride(),
                  "eager_input_vals" in n.meta, flush=True)
    return graph


pipeline.SPLIT_PASSES.append(("show", show))
run = dispatch.run


def traced(spec, inputs, key=None):
    print("RUN", spec.name, [(tuple(t.shape), t.stride()) for t in inputs], flush=True)
    return run(spec, inputs, key)


dispatch.run = traced
c = [c for c in plan.all_cases(small=small) if c.name == "step/patchtst"][0]
w = steps.build(c, torch.bfloat16, device)
fn = w.wrap(torch.compile(w.target, backend="evt"))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    fn(*w.make_inputs(0))
    fn(*w.make_inputs(0))
    if device == "cuda":
        torch.cuda.synchronize()
for x in caught:
    if "evt" in str(x.message):
        print("WARN", str(x.message)[:400])
print("done")
