"""Activation checkpointing on an SM90 GPU (bf16, real kernels): the checkpointed blocks'
forward regions launch twice (the forward and the backward's recompute), the step saves less than
half of what the same step saves without checkpoints, and its loss and gradients are within what
bf16 eager's checkpointed step is off by from fp32 eager (per tensor: at most 2x that, or 2e-2).
The CPU tier (tests/test_checkpointing.py) checks the same on the reference path."""

from __future__ import annotations

import copy

import pytest
import torch

from evt.runtime import dispatch
from tests.graphs import rel_err
from tests.test_checkpointing import Stack, saved_bytes, saved_shapes
from tests.test_gpu_mlp import fresh_dispatch  # noqa: F401  (autouse: env and dispatch reset per test)

pytestmark = pytest.mark.gpu


def test_checkpointed_step_recomputes_its_kernels():
    torch.manual_seed(0)
    model = Stack().to("cuda", torch.bfloat16)
    x = torch.randn(2048, 64, device="cuda", dtype=torch.bfloat16)

    def run(fn, checkpointed):
        for p in model.parameters():
            p.grad = None
        saved, loss = saved_bytes(lambda: fn(x, checkpointed))
        loss.backward()
        return saved, {"loss": loss.detach().float(), **{n: p.grad.float() for n, p in model.named_parameters()}}

    compiled = torch.compile(model, backend="evt")
    plain, _ = run(compiled, False)
    dispatch.reset()
    torch._dynamo.reset()
    saved, got = run(torch.compile(model, backend="evt"), True)
    launches = dict(dispatch.launches())
    assert dispatch.FALLBACKS == {} and launches, launches
    forward = {name: n for name, n in launches.items() if name.startswith("evt_f")}
    assert forward and all(n % 2 == 0 for n in forward.values()), launches
    assert saved < 0.5 * plain, (saved, plain)
    _, eager16 = run(model, True)
    model32 = copy.deepcopy(model).float()
    for p in model32.parameters():
        p.grad = None
    loss32 = model32(x.float(), True)
    loss32.backward()
    want = {"loss": loss32.detach(), **{n: p.grad for n, p in model32.named_parameters()}}
    for n in want:
        err, eager_err = rel_err(got[n], want[n]), rel_err(eager16[n], want[n])
        assert torch.isfinite(got[n]).all() and err < max(2e-2, 2 * eager_err), (n, err, eager_err)


def test_selective_checkpointing_saves_what_inductor_saves():
    """Selective checkpointing (the GEMMs' outputs saved, the rest recomputed): the forward's
    kernels run once (nothing recomputes a GEMM), the step saves the tensors Inductor's own saves
    (the residual regions' LayerNorm statistics aside: rows x 4 bytes each; before
    `recompute_for_backward` the fc1 regions' GELU outputs were saved too), and its loss and
    gradients are within what bf16 eager's selective step is off by from fp32 eager."""
    torch.manual_seed(0)
    model = Stack().to("cuda", torch.bfloat16)
    x = torch.randn(2048, 64, device="cuda", dtype=torch.bfloat16)

    def run(fn):
        for p in model.parameters():
            p.grad = None
        shapes, loss = saved_shapes(lambda: fn(x, "selective"))
        loss.backward()
        grads = {"loss": loss.detach().float(), **{n: p.grad.float() for n, p in model.named_parameters()}}
        return sorted(s for s in shapes if s[-1] != 1), grads

    saved, got = run(torch.compile(model, backend="evt"))
    launches = dict(dispatch.launches())
    assert dispatch.FALLBACKS == {} and launches, launches
    assert all(n == 1 for name, n in launches.items() if name.startswith("evt_f")), launches
    torch._dynamo.reset()
    inductor, _ = run(torch.compile(model))
    assert saved == inductor, (saved, inductor)
    _, eager16 = run(model)
    model32 = copy.deepcopy(model).float()
    loss32 = model32(x.float(), "selective")
    loss32.backward()
    want = {"loss": loss32.detach(), **{n: p.grad for n, p in model32.named_parameters()}}
    for n in want:
        err, eager_err = rel_err(got[n], want[n]), rel_err(eager16[n], want[n])
        assert torch.isfinite(got[n]).all() and err < max(2e-2, 2 * eager_err), (n, err, eager_err)
