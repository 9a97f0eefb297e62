"""LoRA fine-tuning on an SM90 GPU (bf16, real kernels): a frozen base Linear plus a trainable
low-rank update, SiLU between two of them. At rank 8 and 16 the low-rank GEMM (K = rank, one
partial k-block) may anchor the update's add and the SiLU; at rank 4 its 8-byte rows are no TMA
operand, so the base GEMM anchors them (`layouts.unreadable_operand`). Either way: real kernels
(no fallback) and the trainable weights' gradients within what bf16 eager is off by from fp32
eager (per tensor: at most 2x that, or 2e-2). Kernels are built here on first use."""

from __future__ import annotations

import copy

import pytest
import torch

from evt.runtime import dispatch
from tests.graphs import lora_mlp, rel_err
from tests.test_gpu_mlp import fresh_dispatch  # noqa: F401  (autouse: env and dispatch reset per test)

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("rank", [4, 8, 16])
def test_lora_step_matches_fp32(rank):
    torch.manual_seed(rank)
    model = lora_mlp(1024, 4096, rank).to("cuda", torch.bfloat16)
    x = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16)

    def step(module, fn, inputs):
        for p in module.parameters():
            p.grad = None
        loss = fn(inputs).float().pow(2).mean()
        loss.backward()
        return {"loss": loss.detach(), **{n: p.grad.float() for n, p in module.named_parameters()
                                           if p.grad is not None}}  # fmt: skip

    got = step(model, torch.compile(model, backend="evt"), x)
    assert dispatch.FALLBACKS == {} and dispatch.launches(), dict(dispatch.launches())
    eager16 = step(model, model, x)
    model32 = copy.deepcopy(model).float()
    want = step(model32, model32, x.float())
    assert set(got) == set(want) and len(want) == 5  # the loss and the four low-rank weights
    for n in want:
        err, eager_err = rel_err(got[n], want[n]), rel_err(eager16[n], want[n])
        assert torch.isfinite(got[n]).all() and err < max(2e-2, 2 * eager_err), (n, err, eager_err)
