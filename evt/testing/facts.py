"""What a value of a fuzzed epilogue can hold, and which compositions are safe to generate.

Domain safety by interval arithmetic: every value carries an interval [lo, hi] that holds for the
inputs of `evt.testing.inputs` (loads in [-2, 2], the accumulator in [-4, 4]); an op is allowed
only where its arguments are inside its domain with margin (log and rsqrt of >= 0.05, a divisor
>= 0.25, exp of <= 10) and its result stays within `CAP`, so the reference never makes inf or NaN.

Stability: a comparison, a `where` condition or `threshold_backward`'s x that differs by one ulp
between the kernel and the reference flips a mask and the whole element. So those read only
*stable* values: ones both paths compute bit for bit (loads, the exact GEMM of the fuzz inputs,
IEEE adds, selects, casts); transcendental ops, division, and an add that nvcc may contract with
a product into an FMA are not stable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from evt import ir

CAP = 1e4  # |value| bound: well inside f16 (65504) and far from fp32 overflow
ACC = (-4.0, 4.0)
LOAD = (-2.0, 2.0)
COMPARE = ("gt", "ge", "lt", "le", "eq", "ne")
SELECT_STABLE = ("identity", "neg", "relu", "maximum", "minimum", "where", "threshold_backward")
# max |d/dz act(z)| of the activation backwards that take the pre-activation
SLOPE = {"gelu_backward": 1.13, "gelu_tanh_backward": 1.13, "silu_backward": 1.1}


@dataclass(frozen=True)
class Fact:
    lo: float
    hi: float
    stable: bool = True  # bitwise equal in kernel and reference
    mask: bool = False  # 0 or 1 only (a comparison or a bool load)
    product: bool = False  # a mul of two tensors: an add reading it may become an FMA

    @property
    def mag(self) -> float:
        return max(abs(self.lo), abs(self.hi))


def _sig(x: float) -> float:
    return 0.5 * (1.0 + math.tanh(0.5 * x))


def _reference(op: str) -> str:
    """The function `op` computes (`ir.COMPUTE_OPS`: forms of one function share it)."""
    return ir.COMPUTE_OPS[op].reference if op in ir.COMPUTE_OPS else op


def _unary(op: str, a: Fact) -> tuple[float, float] | None:
    lo, hi = a.lo, a.hi
    if op in ("identity",):
        return lo, hi
    if op == "neg":
        return -hi, -lo
    if op == "cube":  # monotonic
        return lo**3, hi**3
    if op == "relu":
        return max(lo, 0.0), max(hi, 0.0)
    if _reference(op) in ("gelu", "gelu_tanh", "silu"):  # each GELU form alike
        return (-0.3 if lo < 0 else 0.0), max(hi, 0.0)
    if op == "sigmoid":
        return _sig(lo), _sig(hi)
    if op == "tanh":
        return math.tanh(lo), math.tanh(hi)
    if op == "exp":
        return (math.exp(lo), math.exp(hi)) if hi <= 10 else None
    if op == "log":
        return (math.log(lo), math.log(hi)) if lo >= 0.05 else None
    if op == "rsqrt":
        return (hi**-0.5, lo**-0.5) if lo >= 0.05 else None
    raise KeyError(op)


def _corners(f, a: Fact, b: Fact) -> tuple[float, float]:
    vals = [f(x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    return min(vals), max(vals)


def _binary(op: str, a: Fact, b: Fact) -> tuple[float, float] | None:
    if op == "add":
        return a.lo + b.lo, a.hi + b.hi
    if op == "sub":
        return a.lo - b.hi, a.hi - b.lo
    if op == "mul":
        return _corners(lambda x, y: x * y, a, b)
    if op == "div":
        return _corners(lambda x, y: x / y, a, b) if b.lo >= 0.25 else None
    if op == "maximum":
        return max(a.lo, b.lo), max(a.hi, b.hi)
    if op == "minimum":
        return min(a.lo, b.lo), min(a.hi, b.hi)
    if op in COMPARE:
        return (0.0, 1.0) if a.stable and b.stable else None
    if op in SLOPE:
        m = a.mag * SLOPE[op]
        return -m, m
    if op == "sigmoid_backward":  # grad * y * (1 - y)
        m = a.mag * max(abs(y * (1 - y)) for y in (b.lo, b.hi, min(max(0.5, b.lo), b.hi)))
        return -m, m
    if op == "tanh_backward":  # grad * (1 - y^2)
        m = a.mag * max(abs(1 - y * y) for y in (b.lo, b.hi, min(max(0.0, b.lo), b.hi)))
        return -m, m
    raise KeyError(op)


def infer(op: str, args: list[Fact]) -> Fact | None:
    """The fact of `op(*args)`, or None where the op is unsafe on these arguments."""
    if op == "where":
        c, a, b = args
        if not c.stable:
            return None
        lohi: tuple[float, float] | None = (min(a.lo, b.lo), max(a.hi, b.hi))
    elif op == "threshold_backward":
        g, x, t = args
        if not (x.stable and t.stable):
            return None
        lohi = (min(g.lo, 0.0), max(g.hi, 0.0))
    else:
        lohi = _unary(op, args[0]) if len(args) == 1 else _binary(op, args[0], args[1])
    if lohi is None or not all(math.isfinite(v) and abs(v) <= CAP for v in lohi):
        return None
    mask = op in COMPARE or (op in ("identity", "relu") and args[0].mask)
    product = op == "mul" and not any(a.mask for a in args)
    return Fact(*lohi, stable=_stable(op, args), mask=mask, product=product)


def _stable(op: str, args: list[Fact]) -> bool:
    if op in COMPARE:
        return True
    if op in SELECT_STABLE or op == "mul":
        values = args[1:] if op == "where" else args[:1] if op == "threshold_backward" else args
        return all(a.stable for a in values)
    if op in ("add", "sub"):
        return all(a.stable and not a.product for a in args)
    return False
