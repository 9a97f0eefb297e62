"""Data-parallel training through evt on one process (gloo, CPU: the reference path runs the
regions): DistributedDataParallel compiled whole (default buckets: one graph; smaller buckets
split it in Dynamo's DDPOptimizer, which in torch 2.13 trips its own assertion with Inductor
alone too), and FSDP2 (`fully_shard` on each block and the root) with each block compiled, alone
and around checkpointed blocks (full and selective), train like eager, and evt's regions run in
both passes. One process checks that evt's capture, passes and custom op compose with the
wrappers' hooks, DTensor parameters and collectives (with world size 1); more ranks need more
devices."""

from __future__ import annotations

import collections

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.checkpoint import checkpoint

import evt  # noqa: F401  (the backend by name)
from evt.runtime import reference
from evt.testing.models import saving_gemms
from tests.data_parallel_rank import blocks, whole
from tests.graphs import rel_err


@pytest.fixture
def group(tmp_path):
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def step_and_runs(model, fn, x) -> tuple[dict[str, torch.Tensor], collections.Counter]:
    """Gradients (full tensors) of one step, and the reference-path runs of evt's forward and
    backward regions."""
    runs: collections.Counter = collections.Counter()

    def counted(spec, tensors, original=reference.run):
        runs[spec.name[:5]] += 1  # evt_f... forward, evt_b... backward regions
        return original(spec, tensors)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(reference, "run", counted)
        fn(x).pow(2).mean().backward()
    return {n: whole(p.grad) for n, p in model.named_parameters()}, runs


def eager_grads(x) -> dict[str, torch.Tensor]:
    model = blocks()
    model(x).pow(2).mean().backward()
    return {n: p.grad for n, p in model.named_parameters()}


def test_ddp_trains_like_eager(group):
    from torch.nn.parallel import DistributedDataParallel

    x = torch.randn(256, 64)
    torch._dynamo.reset()
    model = blocks()
    got, runs = step_and_runs(model, torch.compile(DistributedDataParallel(model), backend="evt"), x)
    assert runs["evt_f"] > 0 and runs["evt_b"] > 0, runs
    want = eager_grads(x)
    assert set(got) == set(want) and max(rel_err(got[n], want[n]) for n in want) < 1e-5


class Checkpointed(nn.Module):
    def __init__(self, block: nn.Module, selective: bool):
        super().__init__()
        self.block, self.selective = block, selective

    def forward(self, x):
        context = {"context_fn": saving_gemms} if self.selective else {}
        return checkpoint(self.block, x, use_reentrant=False, **context)


@pytest.mark.parametrize("checkpointed", [None, "full", "selective"])
def test_fsdp2_trains_like_eager(group, checkpointed):
    """FSDP2 alone, and around blocks under activation checkpointing (full: forward regions
    also run in the backward's recompute; selective, the GEMMs' outputs saved: they do not)."""
    from torch.distributed.fsdp import fully_shard

    x = torch.randn(256, 64)
    torch._dynamo.reset()
    model = blocks()
    wrapped = model if checkpointed is None else nn.Sequential(
        *(Checkpointed(b, checkpointed == "selective") for b in model))  # fmt: skip
    for block in wrapped:
        fully_shard(block)
    fully_shard(wrapped)
    for block in wrapped:
        block.compile(backend="evt")
    got, runs = step_and_runs(model, wrapped, x)
    # fc1 and fc2 of each block in each pass (and again in the full checkpoint's recompute)
    assert (runs["evt_f"] > 4 if checkpointed == "full" else runs["evt_f"] == 4), runs
    assert runs["evt_b"] == 4, runs
    want = eager_grads(x)
    assert set(got) == set(want) and max(rel_err(got[n], want[n]) for n in want) < 1e-5
