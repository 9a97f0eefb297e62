"""The graph verifier, run after every pass in tests (and at EVT_DEBUG>=2) and once at the end of
every pipeline run: FX invariants plus evt's own (every node has a fake value, but ops that return
nothing, such as `_assert_async`; no symbolic size is
written as a literal; every fused call's spec parses and matches its outputs)."""

from __future__ import annotations

import torch
from torch.fx import Graph

from evt import ir
from evt.errors import GraphVerifyError

FUSED_GEMM = torch.ops.evt.fused_gemm.default


def verify(graph: Graph, after: str = "?") -> None:
    try:
        graph.lint()
    except Exception as e:
        raise GraphVerifyError(f"after pass '{after}': graph.lint() failed: {e}") from e
    for node in graph.nodes:
        if node.op in ("call_function", "placeholder") and "val" not in node.meta:
            if _returns_nothing(node):  # e.g. `_assert_async` (F.one_hot's range checks)
                continue
            raise GraphVerifyError(f"after pass '{after}': no meta['val'] on {node.format_node()}")
        if _symbolic_literal(node.args) or _symbolic_literal(tuple(node.kwargs.values())):
            raise GraphVerifyError(f"after pass '{after}': a symbolic size written as a literal "
                                   f"in {node.format_node()} (the generated code cannot name it)")  # fmt: skip
        if node.target is FUSED_GEMM:
            spec = ir.from_json(node.args[0])
            if len(node.meta["val"]) != spec.num_outputs:
                raise GraphVerifyError(f"after pass '{after}': {node.name} output count mismatch")
            if len(node.args[1]) != spec.num_inputs:
                raise GraphVerifyError(f"after pass '{after}': {node.name} input count mismatch")


def _returns_nothing(node) -> bool:
    """An op called for its effect: its schema returns nothing, so it has no value to carry."""
    schema = getattr(node.target, "_schema", None)
    return node.op == "call_function" and schema is not None and not schema.returns


def _symbolic_literal(values) -> bool:
    """Whether an argument holds a SymInt/SymFloat/SymBool object rather than the node that
    computes it."""
    for v in values:
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return True
        if isinstance(v, (list, tuple)) and _symbolic_literal(v):
            return True
    return False
