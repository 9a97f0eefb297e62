"""A one-hot written with integers (`F.one_hot`, `arange(N) == t[:, None]`) compared and cast in
float32 (`evt/graph/float_index_compares.py`), so a hand-written cross-entropy gradient
`softmax - one_hot(t)` is one epilogue."""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F

from evt.backend import evt_backend
from tests.graphs import explain
from tests.test_one_hot_scatters import exact, inputs


def run(f, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.compile(f, backend=evt_backend, options={"rest": "eager"})(*args)


def grad_one_hot(x, w, t, lse):
    p = torch.exp((x @ w.t()).float() - lse[:, None])
    return ((p - F.one_hot(t, w.shape[0])) / x.shape[0]).to(x.dtype)


def grad_arange(x, w, t, lse):
    p = torch.exp((x @ w.t()).float() - lse[:, None])
    hit = torch.arange(w.shape[0], device=x.device) == t[:, None]
    return ((p - hit.to(p.dtype)) / x.shape[0]).to(x.dtype)


def test_f_one_hot_is_one_region_and_matches_float64():
    """F.one_hot's range checks (`_assert_async`, no value) stay in the graph; the verifier
    accepts them (they used to leave the whole graph unfused)."""
    args = inputs()
    (region,) = explain(grad_one_hot, *args).regions
    assert "aten.eq" in region.fused and region.fused.count("aten.sub") == 2, region.fused
    got = run(grad_one_hot, *args)
    err = (got.double() - exact(*args)).abs().max().item()
    assert err <= (grad_one_hot(*args).double() - exact(*args)).abs().max().item(), err


def test_arange_compare_is_one_region():
    args = inputs()
    (region,) = explain(grad_arange, *args).regions
    assert "aten.eq" in region.fused, region.fused
    got = run(grad_arange, *args)
    assert (got.double() - exact(*args)).abs().max().item() < 2e-4


def test_a_cast_read_by_a_reduction_stays_integer():
    """`one_hot(t).sum(0)` counts classes: the int64 cast feeds no float arithmetic, so it stays
    (and so does its dtype)."""

    def f(x, w, t):
        return (x @ w.t()).float().relu(), F.one_hot(t, w.shape[0]).sum(0)

    x, w, t, _ = inputs()
    got, counts = run(f, x, w, t)
    assert counts.dtype == torch.int64 and torch.equal(counts, torch.bincount(t, minlength=96))


def test_out_of_range_targets_match_no_column():
    """A hand-written compare (no range check): an index past N, or above 2**24 where float32
    rounds, still matches no column, as the integer compare would not."""
    x, w, t, lse = inputs()
    t = t.clone()
    t[:4] = torch.tensor([96, 2**24 + 1, 2**40, -1])
    got = run(grad_arange, x, w, t, lse)
    torch.testing.assert_close(got[:4].float(), grad_arange(x, w, t, lse)[:4].float(), rtol=2e-2, atol=1e-4)
