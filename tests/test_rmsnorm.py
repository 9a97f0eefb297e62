"""RMSNorm (nn.RMSNorm, a Llama-style MLP block): its statistic (the mean of squares over N)
joins the GEMM before it, and its backward's reductions (the weight gradient over M, the per-row
sum over N) join the dgrad GEMM that produces its incoming gradient; training matches eager."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import evt
from tests.graphs import train_compare


class Block(nn.Module):
    def __init__(self, pre: bool, d: int = 32, h: int = 64):
        super().__init__()
        self.pre = pre
        self.fc1, self.fc2 = nn.Linear(d, h, bias=False), nn.Linear(h, d, bias=False)
        self.norm = nn.RMSNorm(d)

    def forward(self, x):
        if self.pre:
            return x + self.fc2(F.silu(self.fc1(self.norm(x))))
        return self.norm(x + self.fc2(F.silu(self.fc1(x))))


def regions(model: nn.Module, x: torch.Tensor):
    model = model.to(torch.bfloat16)
    x = x.to(torch.bfloat16).requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = evt.explain(lambda x: model(x).float().pow(2).sum().backward(), x)
    return {(r.side, r.anchor, tuple(r.fused)) for r in report.regions}


def test_the_mean_of_squares_joins_the_gemm_before_the_norm():
    torch.manual_seed(0)
    fused = regions(Block(pre=False), torch.randn(4, 16, 32))
    assert any(side == "forward" and "aten.mean" in ops for side, _, ops in fused), fused


def test_the_norm_backward_joins_the_dgrad_gemm_after_it():
    torch.manual_seed(0)
    fused = regions(Block(pre=True), torch.randn(4, 16, 32))
    sums = [ops.count("aten.sum") for side, anchor, ops in fused if side == "backward"]
    assert max(sums) >= 2, fused  # the weight gradient and the per-row sum


@pytest.mark.parametrize("pre", [True, False], ids=["pre-norm", "post-norm"])
def test_rmsnorm_blocks_train_like_eager(pre):
    torch.manual_seed(1)
    errs = train_compare(Block(pre), [torch.randn(4, 16, 32)], torch.bfloat16)
    assert max(errs.values()) < 2e-2, errs


@pytest.mark.gpu
@pytest.mark.parametrize("pre", [True, False], ids=["pre-norm", "post-norm"])
def test_rmsnorm_blocks_on_the_gpu(pre):
    """Real kernels (an SM90 GPU): the bf16 block against fp32 eager, every region launched. The
    loss weighs the output by a random tensor: mean(norm(h) ** 2) would be the same for every h
    (RMSNorm divides out the scale), its gradients rounding noise."""
    from evt.runtime import dispatch

    if not dispatch.sm90_available():
        pytest.skip("needs a CUDA SM90 (H100/H200) device")
    dispatch.reset()
    torch.manual_seed(2)
    model = Block(pre, d=256, h=1024).cuda()
    x = torch.randn(4, 256, 256, device="cuda")
    got_model = copy.deepcopy(model).to(torch.bfloat16)
    compiled = torch.compile(got_model, backend="evt")
    xb = x.to(torch.bfloat16).requires_grad_()
    weigh = torch.randn(4, 256, 256, device="cuda")
    (compiled(xb).float() * weigh).mean().backward()
    assert dispatch.FALLBACKS == {} and sum(dispatch.launches().values()) >= 4, dispatch.launches()
    x32 = x.clone().requires_grad_()
    (model(x32) * weigh).mean().backward()
    for got, want in [(xb.grad, x32.grad)] + [
        (p.grad, q.grad) for p, q in zip(got_model.parameters(), model.parameters())
    ]:
        err = ((got.double() - want.double()).abs().max() / want.double().abs().max()).item()
        assert err < 3e-2, err
