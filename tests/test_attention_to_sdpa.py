"""`attention_to_sdpa`: attention written out as matmuls and a softmax becomes one SDPA call on
Dynamo's graph, only where that computes the same function, and trains like eager."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F

from evt import pipeline
from evt.bench import patterns
from evt.bench.models import SelfAttention
from evt.graph.attention_to_sdpa import attention_to_sdpa

D64 = torch.float64


@pytest.fixture(autouse=True)
def sdpa_default(monkeypatch):
    monkeypatch.delenv("EVT_SDPA", raising=False)  # on by default


def compiled(fn, *inputs) -> tuple[list[dict], object]:
    """Compile `fn` with a backend that runs the pass on Dynamo's graph: (the kwargs of every
    SDPA call in the rewritten graph, its result on `inputs`)."""
    calls = []

    def backend(gm, example_inputs):
        attention_to_sdpa(gm)
        calls.extend(dict(n.kwargs) for n in gm.graph.find_nodes(
            op="call_function", target=F.scaled_dot_product_attention))  # fmt: skip
        return gm.forward

    torch._dynamo.reset()
    out = torch.compile(fn, backend=backend, fullgraph=True)(*inputs)
    return calls, out


def rewritten(fn, *inputs) -> tuple[int, object]:
    """(SDPA calls in `fn`'s rewritten graph, its result on `inputs`)."""
    calls, out = compiled(fn, *inputs)
    return len(calls), out


def sdpa_calls(fn, *inputs) -> list[dict]:
    """The kwargs of every SDPA call in `fn`'s rewritten graph."""
    return compiled(fn, *inputs)[0]


def qkv(s_q=16, s_k=16, dtype=D64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 3, s_q, 8, dtype=dtype, generator=g)
    k, v = (torch.randn(2, 3, s_k, 8, dtype=dtype, generator=g) for _ in range(2))
    return q, k, v


def causal_where(q, k, v):  # Hugging Face's eager attention: where(tril, scores, finfo.min)
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    scores = torch.where(keep, scores, torch.finfo(scores.dtype).min)
    return F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype) @ v


def causal_not_tril(q, k, v):  # masked_fill(~tril, -inf), no scale (SDPA gets scale=1)
    mask = ~torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    scores = (q @ torch.transpose(k, -2, -1)).masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def bidirectional(q, k, v):
    return (q @ k.transpose(-2, -1) * 0.125).softmax(-1) @ v


@pytest.mark.parametrize("fn", [patterns.attention, causal_where, causal_not_tril, bidirectional])
def test_written_out_attention_becomes_one_sdpa_call(fn):
    q, k, v = qkv()
    n, got = rewritten(fn, q, k, v)
    assert n == 1
    torch.testing.assert_close(got, fn(q, k, v), rtol=1e-6, atol=1e-6)  # fp32 casts in fn


def not_causal_above(q, k, v):  # triu(2): the first diagonal above stays in
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(2)
    return torch.softmax((q @ k.transpose(-2, -1)).masked_fill(mask, float("-inf")), dim=-1) @ v


def mask_from_input(q, k, v, mask):
    return torch.softmax((q @ k.transpose(-2, -1)).masked_fill(mask, float("-inf")), dim=-1) @ v


def probs_returned(q, k, v):
    p = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
    return p @ v, p


def dropout_between(q, k, v):
    return F.dropout(torch.softmax(q @ k.transpose(-2, -1), dim=-1), 0.1, training=True) @ v


def softmax_over_queries(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1), dim=-2) @ v


def finite_fill(q, k, v):  # -1e4 is not -inf for fp64 scores: a large score survives it
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
    return torch.softmax((q @ k.transpose(-2, -1)).masked_fill(mask, -1e4), dim=-1) @ v


def scale_after_finite_fill(q, k, v):  # finfo.min scaled by 1e-40 is back in range
    keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    scores = torch.where(keep, q @ k.transpose(-2, -1), torch.finfo(q.dtype).min) * 1e-300
    return torch.softmax(scores, dim=-1) @ v


def scale_by_tensor(q, k, v, s):
    return torch.softmax(q @ k.transpose(-2, -1) * s, dim=-1) @ v


@pytest.mark.parametrize("fn, extra", [
    (not_causal_above, ()), (probs_returned, ()), (softmax_over_queries, ()), (finite_fill, ()),
    (scale_after_finite_fill, ()), (mask_from_input, (torch.ones(16, 16, dtype=torch.bool).triu(1),)),
    (scale_by_tensor, (torch.tensor(0.5, dtype=D64),)),
])  # fmt: skip
def test_attention_that_sdpa_would_change_is_left_alone(fn, extra):
    q, k, v = qkv()
    n, got = rewritten(fn, q, k, v, *extra)
    assert n == 0
    torch.testing.assert_close(got, fn(q, k, v, *extra))


def padded(q, k, v, mask):  # BERT's: scale, + padding mask [B, 1, 1, S], softmax, dropout
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + mask
    return F.dropout(torch.softmax(scores, dim=-1), 0.1, training=False) @ v


def padding_mask(dtype=D64, batch=2, s_k=16):
    """0 where a key is a token, finfo.min where it is padding (the last 5 of the first row)."""
    keep = torch.ones(batch, s_k, dtype=dtype)
    keep[0, -5:] = 0
    return ((1.0 - keep) * torch.finfo(dtype).min)[:, None, None, :]


def test_an_additive_padding_mask_becomes_sdpas_attn_mask():
    q, k, v = qkv()
    mask = padding_mask()
    assert [c["attn_mask"] is not None and c["dropout_p"] for c in sdpa_calls(padded, q, k, v, mask)] == [0.0]
    n, got = rewritten(padded, q, k, v, mask)
    assert n == 1
    torch.testing.assert_close(got, padded(q, k, v, mask), rtol=1e-12, atol=1e-12)
    # mask + scores, a [S_q, S_k] mask, and a per-head one
    for m in (torch.randn(16, 16, dtype=D64), torch.randn(2, 3, 16, 16, dtype=D64)):
        fn = lambda q, k, v, m: torch.softmax(m + q @ k.transpose(-2, -1) * 0.25, dim=-1) @ v  # noqa: E731
        n, got = rewritten(fn, q, k, v, m)
        assert n == 1
        torch.testing.assert_close(got, fn(q, k, v, m), rtol=1e-12, atol=1e-12)


def mask_before_scale(q, k, v, mask):  # the scale would scale the mask too
    return torch.softmax((q @ k.transpose(-2, -1) + mask) * 0.25, dim=-1) @ v


def causal_and_padding(q, k, v, mask):  # SDPA takes is_causal or a mask, not both
    future = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
    return torch.softmax((q @ k.transpose(-2, -1) + mask).masked_fill(future, -math.inf), -1) @ v


@pytest.mark.parametrize("fn, mask", [
    (padded, padding_mask(torch.float32)),  # promotes the scores to float32: another function
    (padded, padding_mask().requires_grad_()),  # SDPA's fused kernels give the mask no gradient
    (mask_before_scale, padding_mask()),
    (causal_and_padding, padding_mask()),
    (padded, torch.zeros(1, 2, 3, 1, 16, dtype=D64)),  # broadcasts the scores to 5 dims
])  # fmt: skip
def test_an_additive_mask_sdpa_would_change_is_left_alone(fn, mask):
    q, k, v = qkv()
    n, got = rewritten(fn, q, k, v, mask)
    assert n == 0
    torch.testing.assert_close(got, fn(q, k, v, mask))


def test_dropout_of_the_probabilities_becomes_sdpas_dropout_p():
    q, k, v = qkv()
    assert [c["dropout_p"] for c in sdpa_calls(dropout_between, q, k, v)] == [0.1]
    # not training: none; torch.dropout's spelling too
    evaluate = lambda q, k, v: F.dropout(torch.softmax(q @ k.transpose(-2, -1), -1), 0.3, False) @ v  # noqa: E731
    assert [c["dropout_p"] for c in sdpa_calls(evaluate, q, k, v)] == [0.0]
    n, got = rewritten(evaluate, q, k, v)
    torch.testing.assert_close(got, evaluate(q, k, v))
    spelled = lambda q, k, v: torch.dropout(torch.softmax(q @ k.transpose(-2, -1), -1), 0.2, True) @ v  # noqa: E731
    assert [c["dropout_p"] for c in sdpa_calls(spelled, q, k, v)] == [0.2]


def test_dropout_through_sdpa_keeps_its_distribution():
    """With v = 1, each output is its row's kept probabilities scaled by 1 / (1 - p): 1 on
    average, spread as dropout spreads it (a wrong p or scaling moves the mean or the spread)."""
    p = 0.25
    fn = lambda q, k, v: F.dropout(torch.softmax(q @ k.transpose(-2, -1), -1), p, True) @ v  # noqa: E731
    g = torch.Generator().manual_seed(1)
    q, k = (torch.randn(64, 4, 64, 8, dtype=D64, generator=g) * 0.1 for _ in range(2))
    v = torch.ones(64, 4, 64, 1, dtype=D64)
    n, got = rewritten(fn, q, k, v)
    assert n == 1
    want = torch.stack([fn(q, k, v) for _ in range(4)])
    assert abs(got.mean().item() - 1.0) < 0.01 and abs(want.mean().item() - 1.0) < 0.01
    torch.testing.assert_close(got.std(), want.std(), rtol=0.05, atol=0)


def test_an_inplace_dropout_is_left_alone():
    fn = lambda q, k, v: F.dropout(torch.softmax(q @ k.transpose(-2, -1), -1), 0.1, True, True) @ v  # noqa: E731
    assert rewritten(fn, *qkv())[0] == 0


def test_a_causal_mask_needs_as_many_queries_as_keys():
    """SDPA's is_causal aligns the mask top-left; a [8, 16] triu(1) is the same mask, but the
    rewrite proves only the square case (decoding with a cache aligns bottom-right)."""
    q, k, v = qkv(s_q=8)
    n, got = rewritten(causal_not_tril, q, k, v)
    assert n == 0
    torch.testing.assert_close(got, causal_not_tril(q, k, v))


def test_evt_sdpa_0_turns_it_off(monkeypatch):
    monkeypatch.setenv("EVT_SDPA", "0")
    assert rewritten(bidirectional, *qkv())[0] == 0


def test_deterministic_algorithms_keep_the_written_out_chain():
    torch.use_deterministic_algorithms(True)
    try:
        assert rewritten(bidirectional, *qkv())[0] == 0
    finally:
        torch.use_deterministic_algorithms(False)


def test_a_failing_dynamo_pass_leaves_the_graph_as_it_was(monkeypatch):
    def broken(gm):
        for node in list(gm.graph.nodes):
            if node.op == "call_function" and node.target is torch.softmax:
                node.target = torch.sigmoid  # half a rewrite, then a failure
        raise RuntimeError("boom")

    monkeypatch.setattr(pipeline, "DYNAMO_PASSES", [("broken", broken)])
    q, k, v = qkv()
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.compile(bidirectional, backend="evt", options={"rest": "eager"})(q, k, v)
    assert any("Dynamo pass 'broken' failed" in str(w.message) for w in caught)
    torch.testing.assert_close(got, bidirectional(q, k, v))


@pytest.mark.parametrize("causal", [True, False])
def test_a_written_out_attention_block_trains_like_eager_through_evt(causal):
    """backend="evt" end to end (the rest eager): forward and every gradient as eager's."""
    torch.manual_seed(0)
    model = SelfAttention(48, 4, causal, math=True).to(D64)
    x = torch.randn(2, 16, 48, dtype=D64, requires_grad=True)
    probe = torch.randn(2, 16, 48, dtype=D64)
    (model(x) * probe).sum().backward()
    want = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
    x.grad = None
    model.zero_grad()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="evt", options={"rest": "eager"})
    (compiled(x) * probe).sum().backward()
    got = [x.grad] + [p.grad for p in model.parameters()]
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", ["gpt2", "bert"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_the_example_models_train_like_eager_with_sdpa(name, dynamic):
    """evt's built-in GPT-2 (attention written out, Hugging Face's `where(tril, .., finfo.min)`)
    and BERT (its padding mask added to the scores) through backend="evt" on the default route
    (Inductor for the rest): their attention becomes SDPA (no scores region left) and every
    gradient matches eager's, also with symbolic shapes."""
    from evt.examples import GPT2, SMALL, Bert, bert_inputs, gpt2_inputs
    from tests.graphs import compile_reports

    torch.manual_seed(0)
    model = GPT2(SMALL, tied=True) if name == "gpt2" else Bert(SMALL)
    inputs = gpt2_inputs(SMALL, "cpu") if name == "gpt2" else bert_inputs(SMALL, "cpu")
    model(*inputs).backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    torch._dynamo.reset()
    with compile_reports() as reports:
        torch.compile(model, backend="evt", dynamic=dynamic)(*inputs).backward()
    regions = [r for g in reports for r in g.regions]
    assert regions and not any(r.anchor == "aten.bmm" for r in regions), [r.anchor for r in regions]
    for n, p in model.named_parameters():  # (k's bias: zero up to rounding, so an absolute bound)
        torch.testing.assert_close(p.grad, want[n], rtol=1e-4, atol=1e-6, msg=n)


class ScaledAttention(torch.nn.Module):
    """Attention with its scale and dropout p module floats (LLaMA's `scaling`,
    `attention_dropout`), which Dynamo passes as graph inputs under `dynamic=True`."""

    def __init__(self, scale: float, p: float):
        super().__init__()
        self.scale, self.p = scale, p

    def forward(self, q, k, v):
        probs = torch.softmax(q @ k.transpose(-2, -1) * self.scale, -1)
        return F.dropout(probs, self.p, self.training) @ v


def test_float_attributes_traced_under_dynamic_shapes_are_specialized():
    """Under `dynamic=True` the scale and p reach the graph as SymFloats (`.item()` of an input):
    the rewrite takes the values they were traced with and guards on them, as Dynamo does where a
    program passes such a float to SDPA itself, so another value compiles again, not reused."""
    calls = []

    def backend(gm, example_inputs):
        attention_to_sdpa(gm)
        calls.extend(dict(n.kwargs) for n in gm.graph.find_nodes(
            op="call_function", target=F.scaled_dot_product_attention))  # fmt: skip
        assert not gm.graph.find_nodes(op="call_method", target="item")  # erased with the chain
        return gm.forward

    model = ScaledAttention(0.25, 0.0)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend, dynamic=True)
    q, k, v = qkv()
    for scale in (0.25, 0.5, 0.25):
        model.scale = scale
        torch.testing.assert_close(compiled(q, k, v), model(q, k, v))
    assert {(c["scale"], c["dropout_p"]) for c in calls} == {(0.25, 0.0), (0.5, 0.0)}
    assert all(type(c["scale"]) is float and type(c["dropout_p"]) is float for c in calls)


def test_a_scale_computed_in_the_graph_stays_written_out():
    """A scale read from a tensor the graph computes (`.item()`: no value it was traced with) is
    no Python float for SDPA: the chain stays as written."""
    torch._dynamo.config.capture_scalar_outputs, before = True, torch._dynamo.config.capture_scalar_outputs
    try:
        fn = lambda q, k, v, t: (q @ k.transpose(-2, -1) * t.exp().item()).softmax(-1) @ v  # noqa: E731
        n, got = rewritten(fn, *qkv(), torch.tensor(-1.0, dtype=D64))
    finally:
        torch._dynamo.config.capture_scalar_outputs = before
    assert n == 0
    torch.testing.assert_close(got, fn(*qkv(), torch.tensor(-1.0, dtype=D64)))
