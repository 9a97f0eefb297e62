"""Masks computed from indices alone (`torch.ones(S, S).triu(1)`: integer iota arithmetic and a
compare) computed in float32 (`evt/graph/float_index_masks.py`), so the causal scores' region
computes its mask from a row and a column broadcast instead of loading a bool [S, S] tensor."""

from __future__ import annotations

import warnings

import pytest
import torch

from evt import ir, pipeline
from evt.backend import evt_backend
from evt.bench.patterns import attention_scores
from evt.graph.capture import capture_joint
from evt.graph.float_index_masks import rewrite_index_masks
from tests.graphs import explain

aten, prims = torch.ops.aten, torch.ops.prims


def qk(s=16, d=8, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(2, 3, s, d, generator=g, dtype=dtype) for _ in range(2)]


def region_spec(f, *args) -> ir.KernelSpec:
    (region,) = explain(f, *args).regions
    return region.spec


def assert_computes_its_mask(spec: ir.KernelSpec) -> None:
    """The region loads no mask: it computes it from a row and a column index vector."""
    kinds = {type(n).__name__ for n in spec.nodes}
    assert "AuxLoad" not in kinds and {"RowBroadcast", "ColBroadcast"} <= kinds, spec.nodes


def forward_scores(report) -> list[ir.KernelSpec]:
    """The specs of the forward's scores regions (a bmm's) in an `explain` report."""
    return [r.spec for r in report.regions if r.anchor == "aten.bmm" and r.side == "forward"]


def test_the_causal_mask_is_computed_in_the_epilogue_from_two_index_vectors():
    spec = region_spec(attention_scores, *qk())
    assert_computes_its_mask(spec)
    ops = [n.op for n in spec.nodes if isinstance(n, ir.Compute)]
    assert ops == ["mul", "sub", "ge", "where"], ops
    assert all(n.dtype == "f32" for n in spec.nodes if isinstance(n, (ir.RowBroadcast, ir.ColBroadcast)))


@pytest.mark.parametrize("s", [16, 13])
def test_fused_scores_match_eager(s):
    """The region runs (reference path, as on a machine without the GPU) with the vectors the
    graph computes; -inf exactly above the diagonal, the rest as eager computes it."""
    q, k = qk(s)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.compile(attention_scores, backend=evt_backend, options={"rest": "eager"})(q, k)
    want = attention_scores(q, k)
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_the_rewrite_keeps_every_value():
    """The graph after the pass computes what it did before (the compare in float32, the
    `logical_and` with the all-true `full` gone)."""
    q, k = qk()
    with torch.no_grad():
        graph = capture_joint(attention_scores, q, k)
    before = torch.fx.GraphModule(torch.nn.Module(), graph)(q, k)
    rewrite_index_masks(graph)
    graph.lint()
    targets = [n.target for n in graph.nodes]
    assert aten.logical_and.default not in targets
    (compare,) = [n for n in graph.nodes if n.target is aten.ge.Scalar]
    (sub,) = compare.args[:1]
    assert sub.meta["val"].dtype == torch.float32 and compare.meta["val"].dtype == torch.bool
    after = torch.fx.GraphModule(torch.nn.Module(), graph)(q, k)
    for a, b in zip(before, after, strict=True):
        assert torch.equal(a, b)


def test_chains_the_rewrite_leaves_alone():
    """An iota of 2**24 or more (float32 would round), a compare with a tensor the graph reads
    (a one-hot's target: `float_index_compares`' case) and an index another reader takes as
    integers stay integer compares."""

    def wide(x):
        i = torch.arange(2**24 + 2)
        return x * (i[-4:] - 2**24 >= 0)

    def target(x, t):
        return x * (torch.arange(4) == t[:, None])

    def shared(x):
        i = torch.arange(4)
        return x * (i[None, :] - i[:, None] >= 1), i * 3

    x = torch.randn(4, 4)
    cases = [(wide, (torch.randn(4),)), (target, (x, torch.tensor([0, 1, 2, 3]))), (shared, (x,))]
    for f, args in cases:
        with torch.no_grad():
            graph = capture_joint(f, *args)
        rewrite_index_masks(graph)
        compares = [n for n in graph.nodes if n.target in (aten.ge.Scalar, aten.eq.Tensor)]
        assert compares, f.__name__
        assert all(a.meta["val"].dtype == torch.int64 for n in compares for a in n.args
                   if isinstance(a, torch.fx.Node)), f.__name__  # fmt: skip


def returns_its_mask(q, k):
    s = q.shape[-2]
    mask = torch.ones(s, s, dtype=torch.bool).triu(1)
    return (q @ k.transpose(-2, -1)).masked_fill(mask, 0.0), mask


def test_each_reader_of_a_mask_gets_its_own_copy():
    """A mask the graph also returns: the returned one is a copy of the chain
    (`copy_index_masks`), and the scores' region computes its own from the index vectors."""
    spec = region_spec(returns_its_mask, *qk())
    assert_computes_its_mask(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.compile(returns_its_mask, backend=evt_backend, options={"rest": "eager"})(*qk())
    for a, b in zip(got, returns_its_mask(*qk()), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_a_mask_read_outside_the_region_is_refused_in_it():
    """A batched region's [S, S] mask node is stored per batch if it were a region output, so
    without its copies (the passes before `copy_index_masks`) the validator refuses a partition
    that computes the shared node in the region."""
    from evt.errors import PartitionError
    from evt.partition.region import Region
    from evt.partition.validate import validate

    with torch.no_grad():
        graph = capture_joint(returns_its_mask, *qk())
    passes = [(name, fn) for name, fn in pipeline.GRAPH_PASSES if name != "copy_index_masks"]
    pipeline.run_passes(graph, passes, check=True)
    (bmm,) = [n for n in graph.nodes if n.target is aten.bmm.default]
    (compare,) = [n for n in graph.nodes if n.target is aten.ge.Scalar]
    assert len(compare.users) == 2
    sub = compare.args[0]
    where = next(u for u in compare.users if u.op == "call_function")
    with pytest.raises(PartitionError, match="works on shape"):
        validate(graph, [Region(bmm, (bmm, sub, compare, where), "forward")])


class CausalAttention(torch.nn.Module):
    """Math attention with GPT-2's causal mask as `tril` and `~mask` (`scripts/model_fuzz.py`'s):
    the forward's `where` and the backward's read one mask node of the joint graph."""

    def forward(self, q, k, v):
        s = q.shape[-2]
        mask = torch.ones(s, s, dtype=torch.bool).tril()
        scores = (q @ k.transpose(-2, -1) * 0.5).masked_fill(~mask, float("-inf"))
        return (scores.softmax(-1) @ v).sum()


@pytest.mark.parametrize("s", [16, 13])
def test_training_computes_the_mask_in_the_forward_kernel_and_matches_eager(monkeypatch, s):
    """In training the backward reads the mask too: with a copy of its own (a backward node) the
    forward's scores region computes the mask, `~tril` folded into one compare, and the
    gradients match eager's (reference path)."""
    monkeypatch.setenv("EVT_SDPA", "0")  # keep the math attention
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, s, 8, generator=g, requires_grad=True) for _ in range(3))
    report = explain(lambda *a: CausalAttention()(*a).backward(), q, k, v)
    (scores,) = forward_scores(report)
    assert_computes_its_mask(scores)
    ops = sorted(n.op for n in scores.nodes if isinstance(n, ir.Compute))
    assert ops == ["gt", "mul", "sub", "where"], ops
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = torch.compile(CausalAttention(), backend=evt_backend, options={"rest": "eager"})
        loss = compiled(q, k, v)
    grads = torch.autograd.grad(loss, (q, k, v))
    want_loss = CausalAttention()(q, k, v)
    want = torch.autograd.grad(want_loss, (q, k, v))
    torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_off_by_setting(monkeypatch):
    monkeypatch.setenv("EVT_INDEX_MASKS", "0")
    spec = region_spec(attention_scores, *qk())
    assert any(isinstance(n, ir.AuxLoad) and n.broadcast_l and n.dtype == "b8" for n in spec.nodes)


def test_layers_sharing_one_mask_each_compute_it(monkeypatch):
    """Two attention layers: common-subexpression elimination leaves one mask node for both
    layers' forwards and backwards; each scores region computes its own copy."""
    monkeypatch.setenv("EVT_SDPA", "0")

    def two_layers(q, k, v):
        return (CausalAttention()(q, k, v) + CausalAttention()(q * 2, k, v)).backward()

    q, k, v = (torch.randn(2, 3, 16, 8, requires_grad=True) for _ in range(3))
    report = explain(two_layers, q, k, v)
    scores = forward_scores(report)
    assert len(scores) == 2
    for spec in scores:
        assert_computes_its_mask(spec)
