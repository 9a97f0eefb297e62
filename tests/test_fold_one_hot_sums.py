"""`fold_one_hot_sums`: the row sum of cross-entropy's one-hot gradient becomes the row's one
term, so its backward has no reduction over the vocabulary; gradients still match eager, static
and dynamic, and sums that are not of a one-hot row stay."""

from __future__ import annotations

import pytest
import torch
import torch.fx
import torch.nn.functional as F

from evt.backend import evt_backend
from evt.graph.capture import capture_joint
from evt.graph.fold_one_hot_sums import fold_one_hot_sums

aten = torch.ops.aten


def one_hot_sums(graph) -> list:
    return [n for n in graph.nodes if n.target is aten.sum.dim_IntList
            and any(a.target is aten.scatter.value for a in n.all_input_nodes[0].all_input_nodes)]  # fmt: skip


def ce(logits, labels):
    return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100)


def ce_inputs(vocab=96, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 8, vocab, generator=g).to(torch.bfloat16)
    labels = torch.randint(0, vocab, (3, 8), generator=g)
    labels[0, :3] = -100  # ignored rows
    return logits, labels


def test_cross_entropy_backward_loses_its_row_sum():
    logits, labels = ce_inputs()
    graph = capture_joint(ce, logits.requires_grad_(), labels)
    row_sums = sum(n.target is aten.sum.dim_IntList for n in graph.nodes)
    assert len(one_hot_sums(graph)) == 1
    fold_one_hot_sums(graph)
    graph.lint()
    assert one_hot_sums(graph) == []  # the softmax's sum of exponentials stays
    assert sum(n.target is aten.sum.dim_IntList for n in graph.nodes) == row_sums - 1


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("rest", ["eager", "inductor"])
def test_the_loss_and_its_gradient_match_eager(dynamic, rest):
    torch._dynamo.reset()
    fn = torch.compile(ce, backend=evt_backend, dynamic=dynamic, options={"rest": rest})
    for vocab, seed in ((96, 0), (80, 1)):  # dynamic: a second vocabulary, no recompile needed
        logits, labels = ce_inputs(vocab, seed)
        a, b = logits.clone().requires_grad_(), logits.clone().requires_grad_()
        want, got = ce(a, labels), fn(b, labels)
        want.backward()
        got.backward()
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(b.grad, a.grad, rtol=0, atol=0)  # the same bf16 numbers
        assert b.grad[0, :3].abs().max() == 0  # the ignored rows


def sum_graph(w_shape, dim=1, fill=0.0, keepdim=True, per_row=1):
    """sum(scatter(full([M, N], fill), 1, t, -1.0) * w, [dim], keepdim) as an FX graph with fake
    values, and its inputs (t: `per_row` distinct columns a row)."""
    m, n = 5, 7

    def f(t, w):
        s = aten.scatter.value(aten.full.default([m, n], fill), 1, t, -1.0)
        return aten.sum.dim_IntList(aten.mul.Tensor(s, w), [dim], keepdim)

    t = torch.randperm(n)[:per_row].repeat(m, 1)
    w = torch.randn(w_shape)
    gm = torch.fx.experimental.proxy_tensor.make_fx(f, tracing_mode="fake")(t, w)
    return gm, (t, w)


@pytest.mark.parametrize("w_shape", [(5, 1), (), (1,)], ids=["rows", "0-d", "one"])
@pytest.mark.parametrize("keepdim", [True, False])
def test_each_form_gives_the_sum(w_shape, keepdim):
    gm, args = sum_graph(w_shape, keepdim=keepdim)
    want = gm(*args)
    fold_one_hot_sums(gm.graph)
    gm.graph.lint()
    gm.recompile()
    assert one_hot_sums(gm.graph) == []
    got = gm(*args)
    assert got.shape == want.shape and torch.equal(got, want)


@pytest.mark.parametrize("case", [
    dict(w_shape=(5, 7)),  # w varies along the row: the sum is no single term
    dict(w_shape=(5, 1), dim=0),  # a sum over the rows
    dict(w_shape=(5, 1), fill=1.0),  # a scatter into ones
    dict(w_shape=(5, 1), per_row=2),  # two ones a row
], ids=["row-varying", "over-rows", "ones", "two-a-row"])
def test_other_sums_stay(case):
    gm, _ = sum_graph(**case)
    before = [n.target for n in gm.graph.nodes]
    fold_one_hot_sums(gm.graph)
    assert [n.target for n in gm.graph.nodes] == before
