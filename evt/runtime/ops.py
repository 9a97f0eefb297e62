"""The one custom op every region becomes: `evt::fused_gemm(spec, inputs) -> outputs`.

`spec` is the region's `KernelSpec` as JSON, so the op is self-describing: a process that loads a
graph from Inductor's FX or AOTAutograd cache can compute output shapes (the fake impl) and run the
kernel without any state from the process that compiled it. The op is registered when `evt` is
imported, which the `torch_dynamo_backends` entry point does.
"""

from __future__ import annotations

import torch

from evt import ir
from evt.runtime import dispatch, reference


@torch.library.custom_op("evt::fused_gemm", mutates_args=())
def fused_gemm(spec: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return dispatch.run(ir.from_json(spec), inputs)


@fused_gemm.register_fake
def _fused_gemm_fake(spec: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    kernel = ir.from_json(spec)
    M, N, _, L = reference.problem_shape(kernel, inputs)
    shape = (L, M, N) if kernel.gemm.batched else (M, N)
    device = inputs[kernel.gemm.a.input].device
    return [
        torch.empty(shape, dtype=ir.torch_dtype(d), device=device) for d in kernel.output_dtypes()
    ]
