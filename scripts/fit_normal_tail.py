"""Fit the polynomial of evt's standard normal tail (evt/templates/evt_functors.h, normal_tail).

    Phi(-x) = t exp(-x^2 / 2) Q(t),   t = 1 / (1 + C x),   x = |z| >= 0

Q(t) = Phi(-x) exp(x^2 / 2) / t is smooth on t in (0, 1] (it tends to C / sqrt(2 pi) as x grows),
so a low-degree polynomial reaches float32's precision. Sharing exp(-z^2 / 2) with the normal
density lets GELU's backward take one exp2 and one reciprocal per element (the Numerical Recipes
form, exp(-x^2 + P(t)), needs a second exp2 for the density).

The error minimized is |error of Phi(-x)| / max(Phi(-x), tau): relative where the tail is above
tau, absolute (tau times that) below it, over x <= 13.5 (beyond it exp(-x^2 / 2) is below
float32's smallest normal and the SFU's ex2 flushes it, and the tail with it, to 0 whatever Q
is). That is the error torch's own float32 formula, 0.5 (1 + erf(z / sqrt 2)), is judged by:
its absolute error is a few 1e-8 everywhere and its relative error grows without bound in the
lower tail (2e-4 at |z| < 3, 0.2 at |z| < 5: tests/test_functors_host.py). Degree 5 with tau = 1e-2 keeps every
z's error under torch's (absolute 3e-8 or better, relative 2e-7 at |z| < 3, 7e-5 at |z| < 5)
with three multiply-adds fewer per element than the float32-relative degree 8, which a GEMM
epilogue at K <= 1024 pays for (session 15: +5% for bias + GELU at K = 768).

The fit is Lawson's iteration (weighted least squares on Chebyshev points of t) towards the
minimax. Prints, per candidate C, the worst errors in float64 and, for the chosen (degree, C,
tau), the coefficients as the header writes them (highest degree first).

    python scripts/fit_normal_tail.py [--degree 5] [--c 0.28] [--tau 1e-2]

`--form exp2` fits the 16-bit GELUs' tail instead (`normal_tail_exp2`): one exp2 of a polynomial,

    Phi(-x) = 2^P(x),   x = min(|z|, 13)

P fitted to log2 Phi(-x) on [0, 13] (Phi(-13) = 2^-126.9: the SFU's ex2 flushes it to 0, as it
flushes the t form's exp(-x^2 / 2) beyond 13.2). An error e of P is a relative error
2^e - 1 of the tail at every x, and no reciprocal: one SFU instruction an element instead of
two, and no compare and select for Phi(z) (evt_functors.h, gelu_16_bit: 12 instructions an
element for bf16, where the t form took 14). Float32's own rounding of P (values down to -127)
sets a floor near 4e-5 relative: bf16 takes degree 8 (1.4e-4, 3.6% of its unit roundoff 2^-8),
fp16 degree 10 (3.8e-5, 7.8% of 2^-11; degree 11 and 12 gain nothing in float32). Prints the
worst relative error in float64 and with P evaluated in float32.

    python scripts/fit_normal_tail.py --form exp2 [--degree 8 | --degree 10]
"""

from __future__ import annotations

import argparse
import math

import torch

F64 = torch.float64  # every tensor here (explicitly: importing this sets no global default)

X_MAX = 13.5  # exp(-x^2 / 2) < 2^-126 beyond: ex2.approx.ftz gives 0


def target(t: torch.Tensor, c: float) -> torch.Tensor:
    x = (1 / t - 1) / c
    return torch.exp(torch.special.log_ndtr(-x) + x * x / 2 - torch.log(t))


def weight(t: torch.Tensor, c: float, tau: float) -> torch.Tensor:
    """What an error of Q at t costs: t exp(-x^2 / 2) / max(Phi(-x), tau)."""
    x = (1 / t - 1) / c
    factor = t * torch.exp(-x * x / 2)
    return factor / (factor * target(t, c)).clamp_min(tau)


def chebyshev_points(lo: float, hi: float, n: int = 4000) -> torch.Tensor:
    return lo + (hi - lo) * (0.5 - 0.5 * torch.cos(torch.linspace(0, torch.pi, n, dtype=F64)))


def fit(degree: int, c: float, tau: float) -> torch.Tensor:
    t = chebyshev_points(1 / (1 + c * X_MAX), 1)
    w_err = weight(t, c, tau)
    return lawson(torch.vander(t, degree + 1, increasing=True) * w_err[:, None], target(t, c) * w_err)


def lawson(v: torch.Tensor, rhs: torch.Tensor, iterations: int = 1000) -> torch.Tensor:
    """Coefficients minimizing max |v @ coef - rhs| (Lawson's reweighted least squares)."""
    w = torch.full_like(rhs, 1 / len(rhs))
    coef = torch.zeros(v.shape[1], dtype=F64)
    for _ in range(iterations):
        sw = w.sqrt()
        coef = torch.linalg.lstsq(v * sw[:, None], (rhs * sw)[:, None]).solution[:, 0]
        w = w * (v @ coef - rhs).abs()
        w = w / w.sum()
    return coef


def errors(coef: torch.Tensor, c: float) -> dict[str, float]:
    """Worst absolute error of Phi(-x) and its relative error for x < 3, x < 5, x <= 13.5."""
    t = torch.linspace(1 / (1 + c * X_MAX), 1, 400001, dtype=F64)
    x = (1 / t - 1) / c
    q, want = torch.vander(t, len(coef), increasing=True) @ coef, target(t, c)
    absolute = (t * torch.exp(-x * x / 2) * (q - want)).abs()
    rel = (q / want - 1).abs()
    return {"abs": float(absolute.max()), "rel x<3": float(rel[x < 3].max()),
            "rel x<5": float(rel[x < 5].max()), "rel": float(rel.max())}  # fmt: skip


EXP2_X_MAX = 13.0  # log2 Phi(-13) = -126.9: ex2.approx.ftz flushes the tail to 0 from there on


def log2_tail(x: torch.Tensor) -> torch.Tensor:
    return torch.special.log_ndtr(-x) / math.log(2)


def fit_exp2(degree: int) -> torch.Tensor:
    """P's coefficients (of x^k, lowest first) for Phi(-x) = 2^P(x), x in [0, 13], fitted in
    x / 13 (a well-conditioned basis) and scaled back."""
    x = chebyshev_points(0, EXP2_X_MAX, 6000)
    coef = lawson(torch.vander(x / EXP2_X_MAX, degree + 1, increasing=True), log2_tail(x))
    return coef / EXP2_X_MAX ** torch.arange(degree + 1, dtype=F64)


def horner_float32(coef: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """P(x) as the epilogue computes it: float32 coefficients, one rounding per multiply-add."""
    c = coef.float().double()
    x = x.float().double()
    p = torch.full_like(x, float(c[-1]))
    for k in reversed(range(len(c) - 1)):
        p = (p * x + c[k]).float().double()
    return p


def exp2_errors(coef: torch.Tensor) -> dict[str, float]:
    x = torch.linspace(0, EXP2_X_MAX, 400001, dtype=F64)
    want = log2_tail(x)
    float64 = (torch.vander(x, len(coef), increasing=True) @ coef - want).abs().max()
    float32 = (horner_float32(coef, x) - want).abs().max()
    return {"rel": math.expm1(float(float64) * math.log(2)),
            "rel in float32": math.expm1(float(float32) * math.log(2))}


def show(e: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1e}" for k, v in e.items())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--degree", type=int, default=5)
    p.add_argument("--c", type=float, default=0.28)
    p.add_argument("--tau", type=float, default=1e-2,
                   help="tail value below which the error counts as absolute (0: relative)")
    p.add_argument("--form", choices=("t", "exp2"), default="t",
                   help="t: t exp(-x^2 / 2) Q(t) (float32); exp2: 2^P(x) (bf16, fp16)")
    a = p.parse_args()
    if a.form == "exp2":
        for degree in range(max(a.degree - 2, 2), a.degree + 3):
            print(f"degree {degree}: {show(exp2_errors(fit_exp2(degree)))}")
        coef = fit_exp2(a.degree)
        print(f"chosen: degree {a.degree}: {show(exp2_errors(coef))}")
        for k in reversed(range(len(coef))):
            print(f"  x^{k}: {float(coef[k]):.9e}f")
        return
    tau = a.tau or 1e-300
    for c in (0.25, 0.28, 0.3, 0.32, 0.35, 0.4):
        print(f"degree {a.degree}, C {c}: {show(errors(fit(a.degree, c, tau), c))}")
    coef = fit(a.degree, a.c, tau)
    print(f"chosen: degree {a.degree}, C {a.c}, tau {a.tau}: {show(errors(coef, a.c))}")
    rounded = coef.float().double()
    print(f"  with float32 coefficients: {show(errors(rounded, a.c))}")
    for k in reversed(range(len(coef))):
        print(f"  t^{k}: {float(coef[k]):.9e}f")


if __name__ == "__main__":
    main()
