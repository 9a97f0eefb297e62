"""Give a contiguous copy of a padded region output to each reader that needs its storage dense.

A region output whose rows are not whole 16-byte vectors (ViT's 197 x 197 bf16 attention scores)
is allocated with padded rows (`ir.row_pitch`: 32 bytes) so TMA can store it: an [L,] M, N tensor
with a row stride above N, as Inductor's padded buffers are. Pointwise ops, reductions, Inductor's
kernels (they index through strides) and evt's regions (the launch guards read the strides) take
it as it is. What reads the storage as if it were dense gets `clone(contiguous)` of it instead,
which has exactly the values and layout it was traced against:

- `as_strided` (functionalization's view replay) addresses the storage directly;
- a `view` / `_unsafe_view` the padded strides cannot express (merging M and N) fails on eager;
- an op outside aten and evt (a user's custom kernel may assume dense rows);
- the graph's outputs (user code may `.view()` them).

Views that do express the padded layout (splitting the batch, a transpose, `unsqueeze`) are
followed: their readers are checked the same way. Runs after `lower_regions`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from torch.fx import Graph, Node

from evt import debug
from evt.errors import first_line
from evt.graph.fake import fake_value, make_node

aten = torch.ops.aten
FUSED_GEMM = torch.ops.evt.fused_gemm.default

STORAGE_READERS = {aten.as_strided.default, aten.as_strided_.default,
                   aten.as_strided_scatter.default}  # fmt: skip
RESHAPES = {aten.view.default, aten._unsafe_view.default, aten.reshape.default}
VIEWS = {aten.permute.default, aten.transpose.int, aten.t.default, aten.unsqueeze.default,
         aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.expand.default,
         aten.slice.Tensor, aten.select.int, aten.alias.default, aten.split.Tensor,
         aten.split_with_sizes.default, aten.unbind.int}  # fmt: skip


def contain_padded_outputs(graph: Graph) -> Graph:
    for call in [n for n in graph.nodes if n.target is FUSED_GEMM]:
        for item in list(call.users):
            readers, views = dense_readers(item, item.meta.get("val"))
            for view, val in views.items():
                view.meta["val"] = val  # traced on a dense input, traced again on the padded one
            copies: dict[Node, Node] = {}
            for padded, user in readers:
                if padded not in copies:
                    with graph.inserting_after(padded):
                        copies[padded] = make_node(graph, aten.clone.default, (padded,),
                                                   {"memory_format": torch.contiguous_format},
                                                   padded, f"{padded.name}_dense")  # fmt: skip
                user.replace_input_with(padded, copies[padded])
    return graph


def copied_outputs(region, built) -> dict[int, int]:
    """Before lowering: output index -> bytes of its copy, for the outputs of `region` (built as
    `built`) that its kernel stores in padded rows (`KernelSpec.output_layouts`) and a reader
    outside the region needs dense: after lowering this pass gives that reader a copy, which
    runs after every launch, reading the padded rows and writing dense ones. The default mode's
    profitability check counts those bytes (`evt.pipeline.fuse`); max-autotune times each
    candidate with the copies (`evt.runtime.autotune`)."""
    from evt.graph.lower_regions import fake_outputs

    try:
        fakes = fake_outputs(built.spec, list(built.inputs))
    except Exception as e:  # noqa: BLE001 - a spec its fake implementation refuses: lowering says so
        debug.log(1, f"region {built.spec.name}: no fake outputs to find its copies ({first_line(e)})")
        return {}
    inside = set(region.nodes)
    return {i: 2 * val.numel() * val.element_size()
            for i, (node, val) in enumerate(zip(built.outputs, fakes, strict=True))
            if dense_readers(node, val, outside=lambda user: user not in inside)[0]}  # fmt: skip


def dense_readers(
    node: Node, val, outside: Callable[[Node], bool] = lambda user: True
) -> tuple[list[tuple[Node, Node]], dict[Node, Any]]:
    """Were `node`'s value `val` (a region output, padded or not): the (padded node, reader)
    pairs where `contain_padded_outputs` hands the reader a dense copy, and the fake values of the
    views it follows from `node`, traced on the padded value. Only the readers `outside` accepts
    are looked at (max-autotune asks before lowering, when the region's own nodes still read its
    outputs: `evt.runtime.autotune.dense_outputs`). Changes nothing."""
    readers: list[tuple[Node, Node]] = []
    views: dict[Node, Any] = {}

    def walk(padded: Node, val) -> None:
        if all(_dense_val(v) for v in _as_list(val)):
            return
        for user in padded.users:
            if not outside(user):
                continue
            if not _takes_padded(user, val):
                readers.append((padded, user))
            elif user.target in VIEWS or user.target in RESHAPES or user.target is operator.getitem:
                views[user] = _traced(user, padded, val)
                walk(user, views[user])

    walk(node, val)
    return readers, views


def _traced(view: Node, src: Node, val):
    """`view`'s value were `src`'s `val`: a split's output by its index, a view traced again."""
    if view.target is operator.getitem:
        return val[view.args[1]]
    args = [val if a is src else a for a in view.args]
    return fake_value(view.target, args, view.kwargs, view)


def _takes_padded(user: Node, val) -> bool:
    """Whether `user` reads a padded (row-strided) input of value `val` correctly as it is."""
    if user.op != "call_function":  # the graph's output among them
        return False
    target = user.target
    if target is FUSED_GEMM:
        return True
    if target is operator.getitem:  # of a split / unbind: its readers are checked in turn
        return True
    if target in STORAGE_READERS:
        return False
    if target in RESHAPES:
        return _views(val, user.args[1])
    return isinstance(target, torch._ops.OpOverload) and target.namespace in ("aten", "prims")


def _views(val, shape) -> bool:
    """Whether the padded fake value can be viewed as `shape` (else eager raises)."""
    try:
        val.view(shape)
    except (RuntimeError, ValueError):  # eager's and the fake tensor's refusals
        return False
    return True


def _as_list(val) -> list:
    return list(val) if isinstance(val, (list, tuple)) else [val]


def _dense_val(val) -> bool:
    return not isinstance(val, torch.Tensor) or val.is_contiguous()
