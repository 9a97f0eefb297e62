"""Comparing sizes and shapes that may be symbolic (`dynamic=True`) without adding a guard.

`==` on SymInts asks the shape environment for a bool, which records a guard on the sizes Dynamo
traced with: a pass that compared `B * S == 32` that way made the graph compile again at every
other B * S. These compare symbolic sizes by their expressions or as the guards Dynamo already
holds prove them (`statically_known_true`), and answer "not the same" where neither tells.
"""

from __future__ import annotations

import sympy
import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true


def is_static(shape) -> bool:
    return all(isinstance(d, int) for d in shape)


def same_size(a, b) -> bool:
    """Equal sizes, symbolic ones by their expressions or as the guards Dynamo holds prove them
    equal (HF's `h[:, -s:]` has s + S rows where a guard says s = 0; no guard is added)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, torch.SymInt) and isinstance(b, torch.SymInt) and a.node.expr == b.node.expr:
        return True
    sizes = (int, torch.SymInt)
    if not (isinstance(a, sizes) and isinstance(b, sizes)):
        return False
    return statically_known_true(a == b) or _same_factors(a, b)


def _same_factors(a, b) -> bool:
    """Products whose factors pair up, each pair proven equal on its own: B * (s + S) against
    B * S where a guard says s = 0, which the shape environment does not prove of the products."""
    env = next(x.node.shape_env for x in (a, b) if isinstance(x, torch.SymInt))
    left, right = (list(sympy.Mul.make_args(sympy.sympify(x.node.expr if isinstance(x, torch.SymInt) else x)))
                   for x in (a, b))  # fmt: skip
    if len(left) != len(right) or len(left) < 2:
        return False
    for x in left:
        match = next((y for y in right if x == y or proven_equal(x, y, env)), None)
        if match is None:
            return False
        right.remove(match)
    return True


def proven_equal(x, y, env) -> bool:
    """Whether the guards shape environment `env` holds prove expressions `x` and `y` equal
    (`statically_known_true`'s own evaluation, on expressions; no guard is added)."""
    return env is not None and env._maybe_evaluate_static(sympy.Eq(x, y)) == sympy.true


def same_shape(a, b) -> bool:
    """Equal shapes, size by size as `same_size` (no guard is added)."""
    return len(a) == len(b) and all(same_size(x, y) for x, y in zip(a, b))


def dense(shape, strides) -> bool:
    """Whether `strides` are `shape`'s contiguous (row-major) strides, proven as `same_size`
    proves sizes; a dimension of size 1 may have any stride."""
    expected = 1
    for size, stride in zip(reversed(tuple(shape)), reversed(tuple(strides))):
        if same_size(size, 1):
            continue
        if not same_size(stride, expected):
            return False
        expected = expected * size
    return True
