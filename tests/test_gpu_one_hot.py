"""Cross-entropy's backward with its one-hot in the epilogue (`evt/graph/one_hot_scatters.py`) on
an SM90 GPU: the logits' gradient recomputed from x, W and the saved log-sum-exp
(`evt.bench.patterns.ce_backward`) runs as one kernel, every launch checked against the reference
path (`EVT_VERIFY=1`), and the result against float64 no worse than eager's bf16 one."""

from __future__ import annotations

import pytest
import torch

from evt.backend import evt_backend
from evt.bench.patterns import ce_backward
from evt.runtime import dispatch
from tests.test_one_hot_scatters import exact

pytestmark = pytest.mark.gpu

CE_SHAPES = [(1024, 50304, 256), (200, 1000, 72), (64, 2048, 64)]
ONE_HOT_SHAPE = (512, 32000, 128)


def _regions(fn, m: int, n: int, k: int) -> list[tuple]:
    """(spec, problem) of each region `fn(x, w, t, lse)` forms at M x N x K, from a meta capture."""
    from tests.graphs import explain

    x = torch.empty(m, k, device="meta", dtype=torch.bfloat16)
    w = torch.empty(n, k, device="meta", dtype=torch.bfloat16)
    t = torch.empty(m, device="meta", dtype=torch.int64)
    lse = torch.empty(m, device="meta")
    dispatch.reset()
    torch._dynamo.reset()
    with dispatch.reference_only():
        report = explain(fn, x, w, t, lse)
    return report.kernels()


def captured() -> dict[str, list[tuple]]:
    """The one region each test compiles, captured on the CPU at the test's sizes (`scripts/
    kernel_pack.py build --tests one_hot` builds them without a GPU)."""
    from tests.test_index_compares import grad_one_hot

    seen = {f"ce_backward {m}x{n}x{k}": _regions(ce_backward, m, n, k) for m, n, k in CE_SHAPES}
    seen["f_one_hot"] = _regions(grad_one_hot, *ONE_HOT_SHAPE)
    return seen


@pytest.mark.parametrize("m,n,k", CE_SHAPES)
def test_ce_backward_one_kernel(monkeypatch, m, n, k):
    monkeypatch.setenv("EVT_VERIFY", "1")
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g) * k**-0.5
    t = torch.randint(0, n, (m,), device="cuda", generator=g)
    t[0] = n - 1  # the last column, in the last (partial) N tile
    lse = torch.logsumexp((x @ w.t()).float(), dim=1)
    dispatch.reset()
    torch._dynamo.reset()
    got = torch.compile(ce_backward, backend=evt_backend)(x, w, t, lse)
    assert dispatch.FALLBACKS == {} and len(dispatch.launches()) == 1, dict(dispatch.launches())
    want, eager = exact(x, w, t, lse), ce_backward(x, w, t, lse)
    err = (got.double() - want).abs().max().item()
    assert err <= 1.5 * (eager.double() - want).abs().max().item() + 1e-7, err
    rows = torch.arange(m, device="cuda")
    torch.testing.assert_close(got.double()[rows, t], want[rows, t], rtol=2e-2, atol=2 / m / 256)


def test_f_one_hot_gradient_one_kernel(monkeypatch):
    """`softmax - F.one_hot(t, N)` (`rewrite_index_compares`): one kernel, verified per launch."""
    from tests.test_index_compares import grad_one_hot

    monkeypatch.setenv("EVT_VERIFY", "1")
    m, n, k = ONE_HOT_SHAPE
    g = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g) * k**-0.5
    t = torch.randint(0, n, (m,), device="cuda", generator=g)
    lse = torch.logsumexp((x @ w.t()).float(), dim=1)
    dispatch.reset()
    torch._dynamo.reset()
    got = torch.compile(grad_one_hot, backend=evt_backend)(x, w, t, lse)
    assert dispatch.FALLBACKS == {} and len(dispatch.launches()) == 1, dict(dispatch.launches())
    want, eager = exact(x, w, t, lse), grad_one_hot(x, w, t, lse)
    err = (got.double() - want).abs().max().item()
    assert err <= 1.5 * (eager.double() - want).abs().max().item() + 1e-7, err
