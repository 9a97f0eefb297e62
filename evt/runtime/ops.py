"""The one custom op every region becomes: `evt::fused_gemm(spec, inputs) -> outputs`.

`spec` is the region's `KernelSpec` as JSON, so the op is self-describing: a process that loads a
graph from Inductor's FX or AOTAutograd cache can compute output shapes (the fake impl) and run the
kernel without any state from the process that compiled it. The op is registered when `evt` is
imported, which the `torch_dynamo_backends` entry point does.

It is defined with `torch.library.Library` rather than `torch.library.custom_op`: the op runs once
per region per step, and the plain registration costs a quarter of custom_op's per-call overhead.
The op is inserted after autograd tracing (it never needs a backward) and is functional: its
outputs are fresh tensors, never views of its inputs, laid out as `KernelSpec.output_layouts`
says (rows of D and the aux stores that are not whole 16-byte vectors padded, `ir.row_pitch`)
by the kernel, this fake
implementation and the reference path alike.
"""

from __future__ import annotations

import torch

from evt import ir
from evt.runtime import dispatch, reference

_lib = torch.library.Library("evt", "DEF")
# Inductor lays out what it computes for a region as the region's graph said (the kernel was
# built for those layouts: which mode of each operand is unit-stride). Without a layout tag it
# constrains a custom op's inputs only where the op was in the traced program, which evt's is
# not: a value Inductor computed in a transposed order reached a k-major kernel column-major
# (PatchTST's BatchNorm backward, session 53). With `needs_exact_strides` it gives each input
# the strides of the fake value `evt.graph.record_input_layouts` records on the call, on torch
# 2.11 as on 2.13 (both checked, session 54; the stride-order tag reaches a `Tensor[]` only from
# pytorch/pytorch#184098 on). Whatever still arrives against the kernel is copied into rows at
# the launch (`guards.copy_into_rows`).
_lib.define("fused_gemm(str spec, Tensor[] inputs) -> Tensor[]", tags=(torch.Tag.needs_exact_strides,))
# what the C++ launch path (evt.runtime.fast) calls for a spec or input layout it has no plan for
_lib.define("fused_gemm_slow(str spec, Tensor[] inputs) -> Tensor[]")


def fused_gemm(spec: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return dispatch.run(ir.from_json(spec), inputs, key=spec)


_lib.impl("fused_gemm", fused_gemm, "CompositeExplicitAutograd")
_lib.impl("fused_gemm_slow", fused_gemm, "CompositeExplicitAutograd")


@torch.library.register_fake("evt::fused_gemm")
def _fused_gemm_fake(spec: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    kernel = ir.from_json(spec)
    M, N, _, L = reference.problem_shape(kernel, inputs)
    device = inputs[kernel.gemm.a.input].device
    layouts, dtypes = kernel.output_layouts(M, N, L), kernel.output_dtypes()
    return [torch.empty_strided(shape, strides, dtype=ir.torch_dtype(d), device=device)
            for (shape, strides), d in zip(layouts, dtypes)]  # fmt: skip
