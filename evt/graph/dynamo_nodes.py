"""What the Dynamo passes (`attention_to_sdpa`, `tanh_gelu_to_native`) read off Dynamo's graph:
its calls are torch functions, operators and tensor methods, each node's fake value is its
`example_value`, and a float may be a traced SymFloat."""

from __future__ import annotations

import torch
from torch.fx import Node


def is_call(node, targets) -> bool:
    """`node` calls one of `targets` (functions, or method names for a method call)."""
    if not isinstance(node, Node):
        return False
    if node.op == "call_method":
        return node.target in targets
    return node.op == "call_function" and node.target in targets


def example_value(node):
    """The fake value Dynamo traced `node` with (None for a non-node)."""
    return node.meta.get("example_value") if isinstance(node, Node) else None


def traced_number(x) -> float | None:
    """A Python number's value, or the value a SymFloat node was traced with: under
    `dynamic=True` Dynamo passes a module's float attributes (LLaMA's `scaling`, its attention
    dropout's p) and globals such as `math.pi` as graph inputs, `.item()` of a 0-d tensor. A pass
    that uses one specializes the graph on it (`guard_float`), as Dynamo itself does where a
    program passes such a float to a function taking Python floats. Not a SymFloat with no
    traced value (`.item()` of a tensor computed in the graph)."""
    if type(x) in (int, float):
        return float(x)
    val = example_value(x)
    return float(val.node.hint) if isinstance(val, torch.SymFloat) and val.node.has_hint() else None
