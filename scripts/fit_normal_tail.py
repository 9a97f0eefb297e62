"""Fit the polynomial of evt's standard normal tail (evt/templates/evt_functors.h, normal_tail).

    Phi(-x) = t exp(-x^2 / 2) Q(t),   t = 1 / (1 + C x),   x = |z| >= 0

Q(t) = Phi(-x) exp(x^2 / 2) / t is smooth on t in (0, 1] (it tends to C / sqrt(2 pi) as x grows),
so a low-degree polynomial reaches float32's precision relative to Phi(-x) for every x. Sharing
exp(-z^2 / 2) with the normal density lets GELU's backward take one exp2 and one reciprocal per
element (the Numerical Recipes form, exp(-x^2 + P(t)), needs a second exp2 for the density).

The fit is a minimax of the relative error by Lawson's iteration (weighted least squares on
Chebyshev points of t). Prints, per candidate C, the worst relative error of Q in float64 and, for
the chosen (degree, C), the coefficients as the header writes them (highest degree first).

    python scripts/fit_normal_tail.py [--degree 8] [--c 0.28]
"""

from __future__ import annotations

import argparse

import torch

torch.set_default_dtype(torch.float64)


def target(t: torch.Tensor, c: float) -> torch.Tensor:
    x = (1 / t - 1) / c
    return torch.exp(torch.special.log_ndtr(-x) + x * x / 2 - torch.log(t))


def fit(degree: int, c: float, iterations: int = 400) -> torch.Tensor:
    t = 0.5 - 0.5 * torch.cos(torch.linspace(0, torch.pi, 3000))
    t = t[t > 2e-3]  # x up to 1800 / C: Phi(-x) is far below float32's range long before
    y = target(t, c)
    v = torch.vander(t, degree + 1, increasing=True) / y[:, None]
    w = torch.full_like(t, 1 / len(t))
    coef = torch.zeros(degree + 1)
    for _ in range(iterations):
        sw = w.sqrt()
        coef = torch.linalg.lstsq(v * sw[:, None], sw[:, None]).solution[:, 0]
        w = w * (v @ coef - 1).abs()
        w = w / w.sum()
    return coef


def worst(coef: torch.Tensor, c: float) -> float:
    t = torch.linspace(2e-3, 1, 200001)
    got = torch.vander(t, len(coef), increasing=True) @ coef
    return float((got / target(t, c) - 1).abs().max())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--degree", type=int, default=8)
    p.add_argument("--c", type=float, default=0.28)
    a = p.parse_args()
    for c in (0.25, 0.28, 0.32, 0.35355, 0.4, 0.45):
        print(f"degree {a.degree}, C {c}: worst relative error {worst(fit(a.degree, c), c):.2e}")
    coef = fit(a.degree, a.c)
    print(f"chosen: degree {a.degree}, C {a.c}, worst relative error {worst(coef, a.c):.2e}")
    for k in reversed(range(len(coef))):
        print(f"  t^{k}: {float(coef[k]):.9e}f")


if __name__ == "__main__":
    main()
