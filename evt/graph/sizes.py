"""Comparing sizes and shapes that may be symbolic (`dynamic=True`) without adding a guard.

`==` on SymInts asks the shape environment for a bool, which records a guard on the sizes Dynamo
traced with: a pass that compared `B * S == 32` that way made the graph compile again at every
other B * S. These compare symbolic sizes by their expressions or as the guards Dynamo already
holds prove them (`statically_known_true`), and answer "not the same" where neither tells.
"""

from __future__ import annotations

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
    return isinstance(a, sizes) and isinstance(b, sizes) and statically_known_true(a == b)


def same_shape(a, b) -> bool:
    """Equal shapes, size by size as `same_size` (no guard is added)."""
    return len(a) == len(b) and all(same_size(x, y) for x, y in zip(a, b))
