"""Activation checkpointing (`torch.utils.checkpoint`) through evt (CPU): a checkpointed block's
regions carry its recompute tags (`lower_regions.ANCHOR_META`), so AOTAutograd's partitioner
recomputes them in the backward instead of saving their outputs, as it does for the GEMMs
themselves without evt, and the step still matches eager."""

from __future__ import annotations

import collections

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import evt
from evt.runtime import reference
from tests.graphs import rel_err


class Block(nn.Module):
    def __init__(self, d: int = 64, h: int = 256):
        super().__init__()
        self.ln, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, h), nn.Linear(h, d)

    def inner(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln(x))))

    def forward(self, x, checkpointed: bool):
        return checkpoint(self.inner, x, use_reentrant=False) if checkpointed else self.inner(x)


class Stack(nn.Module):
    def __init__(self, blocks: int = 3):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(blocks))

    def forward(self, x, checkpointed: bool):
        for b in self.blocks:
            x = b(x, checkpointed)
        return x.pow(2).mean()


def saved_bytes(fn) -> tuple[int, torch.Tensor]:
    """Bytes of the tensors autograd saves for the backward during `fn()`, and its loss (the
    backward not run yet)."""
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fn()
    return total, loss


def step(checkpointed: bool, compiled: bool):
    """(saved bytes, loss, gradients, region name -> reference-path runs) of one step."""
    torch.manual_seed(0)
    model = Stack()
    x = torch.randn(256, 64)
    fn = model
    if compiled:
        torch._dynamo.reset()
        fn = torch.compile(model, backend=evt.backend.evt_backend, options={"rest": "eager"})
    runs: collections.Counter = collections.Counter()
    original = reference.run

    def counted(spec, tensors):
        runs[spec.name] += 1
        return original(spec, tensors)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(reference, "run", counted)
        saved, loss = saved_bytes(lambda: fn(x, checkpointed))
        loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    return saved, loss.detach(), grads, runs


def test_checkpointed_regions_are_recomputed_not_saved():
    plain, _, _, plain_runs = step(checkpointed=False, compiled=True)
    saved, loss, grads, runs = step(checkpointed=True, compiled=True)
    # every block's forward regions run twice (the forward and the backward's recompute) ...
    forward = [name for name in runs if name.startswith("evt_f")]
    assert forward and all(runs[name] == 2 for name in forward), runs
    assert all(n == 1 for n in plain_runs.values()), plain_runs
    # ... so the checkpoint keeps its memory saving (before the tags: 0.93 of the plain step's)
    assert saved < 0.5 * plain, (saved, plain)
    eager_saved, want_loss, want, _ = step(checkpointed=True, compiled=False)
    assert rel_err(loss, want_loss) < 1e-4
    assert max(rel_err(grads[n], want[n]) for n in want) < 1e-4
