"""`evt/graph/sizes.py`: symbolic sizes compared by proof, never by a guard, and the layout facts
decided from them (`layouts.tma_aligned`)."""

from __future__ import annotations

import torch

from evt.graph.layouts import tma_aligned
from evt.graph.sizes import dense, same_shape, same_size
from tests.graphs import symbolic_value


def shape_env_of(val: torch.Tensor):
    return next(d.node.shape_env for d in val.shape if isinstance(d, torch.SymInt))


def test_sizes_compare_without_adding_a_guard():
    x = symbolic_value(lambda s: torch.empty(s, 2 * s, 8))
    env = shape_env_of(x)
    s, twice = x.shape[0], x.shape[1]
    assert same_size(s * 2, twice) and same_shape(x.shape, (s, 2 * s, 8))
    assert not same_size(s, 10)  # its hint, but not every size: no guard says so
    assert not same_size(s, twice) and not same_size(s * 8, 80)
    assert not env.guards, env.guards  # `==` on the SymInts would have added some


def test_products_compare_factor_by_factor():
    """B * (s + S) against B * S where the environment holds s = 0 (HF's `h[:, -s:]`): each factor
    pair proven on its own, which the environment does not do for the products."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    b, big, zero = (env.create_unbacked_symint() for _ in range(3))
    torch._check(zero == 0)  # a fact the environment holds, as Dynamo's guards on s
    assert same_size(zero + big, big)
    assert same_size(b * (zero + big), b * big)
    assert not same_size(b * (zero + big), b * b)


def test_dense_strides_are_proven_for_symbolic_sizes():
    x = symbolic_value(lambda s: torch.empty(s, 4, 6))
    assert dense(x.shape, x.stride())
    assert not dense(x.shape, (24, 1, 4))  # the last two dimensions swapped
    t = symbolic_value(lambda s: torch.empty(s, 4, 6).transpose(1, 2))
    assert not dense(t.shape, t.stride())
    ones = symbolic_value(lambda s: torch.empty(s, 1, 6).as_strided((s, 1, 6), (6, 99, 1)))
    assert dense(ones.shape, ones.stride())  # a size-1 dimension's stride is free


def test_tma_alignment_of_symbolic_values_is_decided_where_proven():
    """CUDA ("meta") values: rows of 10 fp32 (40 bytes) are misaligned whatever the row count,
    so the region is vetoed at compile time as with static sizes; rows of s fp32 depend on s,
    which the launch guards decide; CPU values are never decided here."""
    assert not tma_aligned(symbolic_value(lambda s: torch.empty(s, 10, device="meta")))
    assert tma_aligned(symbolic_value(lambda s: torch.empty(s, 16, device="meta")))
    assert tma_aligned(symbolic_value(lambda s: torch.empty(10, s, device="meta")))
    # a stride of 10 fp32 along M (the transpose of [s, 10] read M-major)
    assert not tma_aligned(symbolic_value(lambda s: torch.empty(s, 10, device="meta").t()))
    assert tma_aligned(symbolic_value(lambda s: torch.empty(s, 10)))
