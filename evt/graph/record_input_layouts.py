"""Record on each `evt::fused_gemm` call the layouts its kernel was built for, for Inductor.

The op carries the `needs_exact_strides` tag (`evt.runtime.ops`): Inductor then hands each
input in the strides of the fake value recorded in the call's `eager_input_vals` meta, which
torch sets only on ops that were in the traced program, and evt's calls were inserted after
tracing. Without it Inductor constrains nothing, and may lay out a value it computes in the
order it computed it: PatchTST's BatchNorm backward wrote the dgrad GEMM's A column-major
(session 53), and the launch then pays a copy into rows (`guards.copy_into_rows`). The stride
order tag (`needs_fixed_stride_order`) reaches a `Tensor[]` argument only from
pytorch/pytorch#184098 on; the exact-strides path through `eager_input_vals` reaches it on torch
2.11 too (the H200's, session 54: PatchTST's step runs without the copy).

Run on each graph after the forward/backward split (last of `pipeline.SPLIT_PASSES`, after
calls were rewritten), where the inputs' fake values are the layouts the region was built for.
"""

from __future__ import annotations

from torch.fx import Graph

from evt.graph import lower_regions


def record_input_layouts(graph: Graph) -> Graph:
    for call in graph.find_nodes(op="call_function", target=lower_regions.FUSED_GEMM):
        values = lower_regions.input_values(call)
        if any(v is None for v in values):  # an input without a traced value: no constraint
            continue  # (what arrives against the kernel is copied into rows at the launch)
        call.meta["eager_input_vals"] = ((call.args[0], values), {})
    return graph
