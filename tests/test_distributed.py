"""Data-parallel training through evt on one process (gloo, CPU: the reference path runs the
regions): DistributedDataParallel compiled whole (default buckets: one graph; smaller buckets
split it in Dynamo's DDPOptimizer, which in torch 2.13 trips its own assertion with Inductor
alone too), and FSDP2 (`fully_shard` on each
block and the root) with each block compiled, train like eager, and evt's regions run in both
passes. One process checks that evt's capture, passes and custom op compose with the wrappers'
hooks, DTensor parameters and collectives (with world size 1); more ranks need more devices."""

from __future__ import annotations

import collections

import pytest
import torch
import torch.distributed as dist
from torch import nn

import evt  # noqa: F401  (the backend by name)
from evt.runtime import reference
from tests.graphs import rel_err


class Block(nn.Module):
    def __init__(self, d: int = 64, h: int = 256):
        super().__init__()
        self.ln, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln(x))))


def blocks() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(Block(), Block())


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
    full = lambda g: g.full_tensor() if hasattr(g, "full_tensor") else g  # noqa: E731
    return {n: full(p.grad) for n, p in model.named_parameters()}, runs


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


def test_fsdp2_trains_like_eager(group):
    from torch.distributed.fsdp import fully_shard

    x = torch.randn(256, 64)
    torch._dynamo.reset()
    model = blocks()
    for block in model:
        fully_shard(block)
    fully_shard(model)
    for block in model:
        block.compile(backend="evt")
    got, runs = step_and_runs(model, model, x)
    assert runs["evt_f"] == 4 and runs["evt_b"] == 4, runs  # fc1 and fc2 of each block, each pass
    want = eager_grads(x)
    assert set(got) == set(want) and max(rel_err(got[n], want[n]) for n in want) < 1e-5
