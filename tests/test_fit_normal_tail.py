"""`scripts/fit_normal_tail.py` fits the coefficients `evt_functors.h` holds: the float32 t form
(`normal_tail`) and the 16-bit exp2 forms (`normal_tail_exp2`), with the errors the header
states."""

from __future__ import annotations

import re

import torch

from evt.codegen.nvcc import TEMPLATES
from scripts import fit_normal_tail as fit

HEADER = (TEMPLATES / "evt_functors.h").read_text()


def header_polynomials(function: str) -> list[list[float]]:
    """The coefficients of each `horner(...)` call in `function`'s body, highest degree first."""
    start = HEADER.index(f" {function}(float")
    body = HEADER[start : HEADER.index("\n}\n", start)]
    calls = re.findall(r"horner\((?:t|x), ([^;]*?)\)", body)
    return [[float(c) for c in re.findall(r"(-?\d\.\d+e[-+]\d+)f", call)] for call in calls]


def same(header: list[float], coef: torch.Tensor) -> bool:
    """The header's coefficients are the fit's as the script prints them (10 digits, highest
    degree first), but for the last digit (least squares in another BLAS)."""
    return torch.allclose(torch.tensor(header, dtype=torch.float64), coef.flip(0), rtol=1e-8, atol=0)


def test_the_float32_tail_is_the_t_form_fit():
    (q,) = header_polynomials("normal_tail")
    assert same(q, fit.fit(5, 0.28, 1e-2))


def test_the_16_bit_tails_are_the_exp2_fits_within_their_budgets():
    """bf16 degree 8, fp16 degree 10: P evaluated in float32 keeps the tail's relative error a
    small share of the dtype's unit roundoff (bf16 2^-8: 3.6%; fp16 2^-11: 7.8%)."""
    bf16, f16 = header_polynomials("normal_tail_exp2")
    for header, degree, unit, share in ((bf16, 8, 2.0**-8, 0.04), (f16, 10, 2.0**-11, 0.08)):
        coef = fit.fit_exp2(degree)
        assert same(header, coef), degree
        assert fit.exp2_errors(torch.tensor(header[::-1], dtype=torch.float64))["rel in float32"] < share * unit


def test_importing_the_script_leaves_torch_s_default_dtype():
    """The script computes in float64 with explicit dtypes: importing it (as this module does,
    at collection, before every other test runs) once set the default dtype to float64 for the
    whole session, and 163 tests failed."""
    assert torch.get_default_dtype() == torch.float32
