"""Attention's heads read in place: a batched GEMM operand that is a copy of a [B, H, rows, cols]
view (`view(clone(x), [B * H, rows, cols])`, what Inductor's decomposition of `q @ k.transpose`
and `att @ v` makes of heads cut from a [B, S, H·D] projection) is read from `x` itself, with
two batch strides (a nested batch, `ir.Gemm.nested`).

Rewrites only `node.meta["evt_gemm"]` (after `fold_gemm_operands`); the graph keeps its clone,
which dead-code elimination removes once no GEMM reads it (`free_head_copies`). `x` is taken
only where a kernel can read it: a unit-stride last or second-last dimension, every other stride
(and the start) a whole 16-byte multiple, no expanded batch, for every size Dynamo's guards
allow (symbolic sizes and strides where the shape environment proves it); anything else keeps
the copy.

On by default (`EVT_NESTED_BATCH=0` turns it off): the nested kernels and GPT-2/BERT training
with them matched eager on an H100 (`tests/test_gpu_nested_batch.py`), and a GPT-2 block with
attention written out ran 1.77 ms a step instead of 1.80 under CUDA graphs, same peak memory.
"""

from __future__ import annotations

import dataclasses
import os

import torch
from torch.fx import Graph, Node
from torch.fx.experimental.symbolic_shapes import statically_known_true

from evt.graph.fold_gemm_operands import GEMM, GemmOperands

aten = torch.ops.aten
VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)
ALIGN = 16  # bytes: TMA strides and base addresses


def enabled() -> bool:
    return os.environ.get("EVT_NESTED_BATCH", "1") != "0"


def read_heads_in_place(graph: Graph) -> Graph:
    if not enabled():
        return graph
    for node in graph.nodes:
        g = node.meta.get(GEMM)
        if isinstance(g, GemmOperands) and g.batched and not g.nested:
            a, b = _heads(g.a), _heads(g.b)
            if a is not None or b is not None:
                node.meta[GEMM] = dataclasses.replace(g, a=a or g.a, b=b or g.b, nested=True)
    return graph


def _heads(operand: Node) -> Node | None:
    """The [B, H, rows, cols] tensor `operand` = view(clone(x), [B * H, rows, cols]) copies,
    where a kernel can read it in place, else None."""
    if operand.op != "call_function" or operand.target not in VIEWS:
        return None
    clone = operand.args[0]
    if not (isinstance(clone, Node) and clone.target == aten.clone.default):
        return None
    x = _skip_noop_expands(clone.args[0])
    val, out = x.meta.get("val"), operand.meta.get("val")
    if not (isinstance(val, torch.Tensor) and isinstance(out, torch.Tensor)):
        return None
    if val.dim() != 4 or tuple(out.shape) != (val.shape[0] * val.shape[1], *val.shape[2:]):
        return None
    return x if readable(val) else None


def _skip_noop_expands(node: Node) -> Node:
    """`node` without the expands to its own shape the decomposition of `matmul` adds."""
    while node.target == aten.expand.default and _shape(node.args[0]) == _shape(node):
        node = node.args[0]
    return node


def _shape(node) -> tuple | None:
    val = node.meta.get("val") if isinstance(node, Node) else None
    return tuple(val.shape) if isinstance(val, torch.Tensor) else None


def readable(val: torch.Tensor) -> bool:
    """Whether TMA can read the 4-D `val` in place, for every size Dynamo's guards allow: unit
    stride along one of the last two dimensions, every other stride of an extent above 1 a
    non-zero multiple of 16 bytes (no expanded batch), and a 16-byte aligned start. Symbolic
    sizes and strides count where the shape environment proves this (a batch of s0 heads cut from
    [s0, S, H * D]: strides S * H * D, D, H * D, 1); what it cannot prove keeps the copy, so the
    launch guards never refuse the kernel at one step and take it at another."""
    sizes, strides, item = tuple(val.shape), tuple(val.stride()), val.dtype.itemsize
    unit = next((i for i in (3, 2) if statically_known_true(strides[i] == 1)), None)
    if unit is None or not statically_known_true(val.storage_offset() * item % ALIGN == 0):
        return False
    return all(statically_known_true(size == 1) or (statically_known_true(stride != 0)
               and statically_known_true(stride * item % ALIGN == 0))
               for i, (size, stride) in enumerate(zip(sizes, strides)) if i != unit)  # fmt: skip
