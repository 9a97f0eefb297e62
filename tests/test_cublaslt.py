"""cuBLASLt's training epilogues as a baseline (`evt.bench.cublaslt`): the row-major to
column-major mapping and the argument checks on the CPU, the three epilogues against float64 on
the GPU (outputs poisoned with NaN first)."""

from __future__ import annotations

import pytest
import torch

from evt.bench import check, cublaslt
from evt.bench import patterns as P


@pytest.mark.parametrize(
    "shape, stride, expected",
    [
        ((64, 32), (32, 1), (cublaslt.OP_N, 32, 64, 32)),  # contiguous: its transpose, read as is
        ((64, 32), (1, 64), (cublaslt.OP_T, 64, 32, 64)),  # w.t() of a contiguous 32 x 64 w
        ((64, 32), (48, 1), (cublaslt.OP_N, 32, 64, 48)),  # padded rows: ld is the row pitch
    ],
)
def test_operand_maps_a_row_major_operand_to_the_column_major_matrix_in_memory(shape, stride, expected):
    assert cublaslt.operand(shape, stride) == expected


def test_operand_refuses_a_layout_with_no_contiguous_dimension():
    with pytest.raises(cublaslt.CublasLtError, match="contiguous"):
        cublaslt.operand((64, 32), (64, 2))


def test_the_algorithm_count_is_read_from_the_environment(monkeypatch):
    assert cublaslt.algorithms_wanted() == 1
    monkeypatch.setenv("EVT_CUBLASLT_ALGOS", "8")
    assert cublaslt.algorithms_wanted() == 8
    for bad in ("0", "many", "-2"):
        monkeypatch.setenv("EVT_CUBLASLT_ALGOS", bad)
        with pytest.raises(cublaslt.CublasLtError, match="a count of algorithms"):
            cublaslt.algorithms_wanted()


def test_matmul_refuses_unknown_epilogues_and_cpu_tensors_with_what_it_takes():
    a, b = torch.ones(4, 8, dtype=torch.bfloat16), torch.ones(8, 16, dtype=torch.bfloat16)
    with pytest.raises(cublaslt.CublasLtError, match="one of"):
        cublaslt.matmul(a, b, "relu_aux")
    with pytest.raises(cublaslt.CublasLtError, match="CUDA"):
        cublaslt.matmul(a, b, "dgelu")
    if torch.cuda.is_available():
        with pytest.raises(cublaslt.CublasLtError, match="M x K @ K x N"):
            cublaslt.matmul(a.cuda(), a.cuda(), "dgelu")


def _close(got, want, what):
    assert not got.isnan().any(), f"{what}: NaN left (unwritten elements)"
    err = check.rel_error(got, want)
    assert err < 2e-2, f"{what}: relative error {err:.2e}"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("m, n, k", [(512, 768, 256), (1000, 384, 200)])
def test_the_three_epilogues_match_float64(m, n, k):
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    dt, dev = torch.bfloat16, "cuda"
    x = torch.randn(m, k, generator=g, device=dev, dtype=dt)
    w = (torch.randn(n, k, generator=g, device=dev, dtype=dt) * k**-0.5).to(dt)
    b = torch.randn(n, generator=g, device=dev, dtype=dt) * 0.1
    nan = lambda *shape: torch.full(shape, float("nan"), device=dev, dtype=dt)  # noqa: E731

    out, h = nan(m, n), nan(m, n)
    cublaslt.matmul(x, w.t(), "gelu_aux_bias", bias=b, aux=h, out=out)
    want_y, want_h = P.bias_gelu_tanh_aux(x.double(), w.double(), b.double())
    _close(out, want_y, "gelu_aux_bias: D")
    _close(h, want_h, "gelu_aux_bias: the saved pre-activation")

    dy = torch.randn(m, k, generator=g, device=dev, dtype=dt)
    w2 = (torch.randn(k, n, generator=g, device=dev, dtype=dt) * k**-0.5).to(dt)
    pre = torch.randn(m, n, generator=g, device=dev, dtype=dt)
    want = P.dgrad_gelu_tanh(dy.double(), w2.double(), pre.double())
    _close(cublaslt.matmul(dy, w2, "dgelu", aux=pre, out=nan(m, n)), want, "dgelu")
    out, db = nan(m, n), nan(n)
    cublaslt.matmul(dy, w2, "dgelu_bgrad", bias=db, aux=pre, out=out)
    _close(out, want, "dgelu_bgrad: D")
    _close(db, want.sum(0), "dgelu_bgrad: the bias gradient")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_fastest_of_the_heuristics_first_algorithms_computes_the_same(monkeypatch):
    """EVT_CUBLASLT_ALGOS=4: the heuristic's first four timed, the fastest kept (a shape of its
    own: plans are cached per problem)."""
    monkeypatch.setenv("EVT_CUBLASLT_ALGOS", "4")
    monkeypatch.setenv("EVT_DEBUG", "1")
    g = torch.Generator(device="cuda").manual_seed(7)
    m, n, k = 768, 512, 320
    dy = torch.randn(m, k, generator=g, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(k, n, generator=g, device="cuda", dtype=torch.bfloat16) * k**-0.5).to(torch.bfloat16)
    pre = torch.randn(m, n, generator=g, device="cuda", dtype=torch.bfloat16)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    db = torch.full((n,), float("nan"), device="cuda", dtype=torch.bfloat16)
    cublaslt.matmul(dy, w, "dgelu_bgrad", bias=db, aux=pre, out=out)
    want = P.dgrad_gelu_tanh(dy.double(), w.double(), pre.double())
    _close(out, want, "dgelu_bgrad: D")
    _close(db, want.sum(0), "dgelu_bgrad: the bias gradient")
