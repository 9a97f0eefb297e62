"""Capture the joint forward+backward aten graph evt's pipeline sees, without rewriting it: for
tests, benchmarks of the partitioner, and `evt dump`-style inspection."""

from __future__ import annotations

import copy

import torch
from torch.fx import Graph


def capture_joint(fn, *args) -> Graph:
    """The joint graph AOTAutograd builds for `fn(*args)` with evt's decompositions (training when
    some input or parameter requires grad; the inference graph otherwise)."""
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd

    from evt.backend import decompositions

    graphs: list[Graph] = []

    def partition_fn(joint, joint_inputs, **kw):
        graphs.append(copy.deepcopy(joint.graph))
        return min_cut_rematerialization_partition(joint, joint_inputs, **kw)

    def inference(gm, _):
        graphs.append(copy.deepcopy(gm.graph))
        return make_boxed_func(gm.forward)

    backend = aot_autograd(
        fw_compiler=lambda gm, _: make_boxed_func(gm.forward),
        inference_compiler=inference,
        partition_fn=partition_fn,
        decompositions=decompositions(),
    )
    torch._dynamo.reset()
    try:
        torch.compile(fn, backend=backend)(*args)
    finally:
        torch._dynamo.reset()
    return graphs[0]
