"""`constant_indices_as_slices`: an index of one constant position (`x[..., [-2], :]`, Falcon's
multi-query key and value) becomes a slice, and its backward's `index_put` a slice scatter;
Falcon's attention through Inductor then gets eager's gradients, where Inductor's own constant
folding of the index made them wrong (session 61)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from evt.backend import evt_backend
from evt.graph.constant_indices_as_slices import constant_indices_as_slices

aten = torch.ops.aten
B, S, H, D = 2, 16, 4, 16


def multi_query(x, w):
    """Falcon's split of a fused QKV projection: H query heads, one key and one value head."""
    qkv = (x @ w.t()).view(B, S, H + 2, D)
    q, k, v = qkv[..., :-2, :], qkv[..., [-2], :], qkv[..., [-1], :]
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@pytest.mark.parametrize("rest", ["inductor", "eager"])
def test_multi_query_attention_gets_eagers_gradients(rest):
    torch.manual_seed(0)
    x, w = torch.randn(B, S, H * D), torch.randn((H + 2) * D, H * D)
    g = torch.randn(B, H, S, D)

    def grads(fn):
        a, b = x.clone().requires_grad_(), w.clone().requires_grad_()
        (fn(a, b) * g).sum().backward()
        return a.grad, b.grad

    torch._dynamo.reset()
    compiled = torch.compile(multi_query, backend=evt_backend, options={"rest": rest})
    for got, want in zip(grads(compiled), grads(multi_query)):  # Inductor's own were off by 100%
        assert (got - want).abs().max() <= 1e-5 * want.abs().max()


def traced(fn, *shapes):
    gm = make_fx(fn, tracing_mode="fake")(*[torch.randn(s) for s in shapes])
    return gm, [n.target for n in gm.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("position", [-2, 1])
def test_an_index_and_its_index_put_become_a_slice_and_a_slice_scatter(position):
    def f(x, v):
        idx = torch.tensor([position])
        return x[:, :, idx], aten.index_put(x, [None, None, idx], v, True), aten.index_put(x, [None, None, idx], v)

    gm, before = traced(f, (2, 3, 6, 4), (2, 3, 1, 4))
    assert aten.index.Tensor in before and aten.index_put.default in before
    x, v = torch.randn(2, 3, 6, 4), torch.randn(2, 3, 1, 4)
    want = gm(x, v)
    constant_indices_as_slices(gm.graph)
    gm.graph.lint()
    gm.recompile()
    after = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert aten.index.Tensor not in after and aten.index_put.default not in after
    assert aten.slice.Tensor in after and aten.slice_scatter.default in after
    for a, b in zip(gm(x, v), want):
        assert torch.equal(a, b)


@pytest.mark.parametrize("case", ["two positions", "a computed index", "broadcast values"])
def test_other_indices_stay(case):
    if case == "two positions":
        gm, before = traced(lambda x: x[:, [0, 2]], (3, 6))
    elif case == "a computed index":
        gm, before = traced(lambda x: x[:, torch.arange(1)], (3, 6))  # computed, not a constant
    else:
        gm, before = traced(lambda x, v: aten.index_put(x, [None, torch.tensor([1])], v, True), (3, 6), (1,))
    constant_indices_as_slices(gm.graph)
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == before


def test_a_graph_without_its_module_is_left_alone():
    gm, before = traced(lambda x: x[:, [1]], (3, 6))
    graph = torch.fx.Graph()
    graph.graph_copy(gm.graph, {})  # a copy holds no module to read the constant from
    constant_indices_as_slices(graph)
    assert [n.target for n in graph.nodes if n.op == "call_function"] == before
