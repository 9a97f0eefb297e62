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

import torch
from torch.fx import Graph, Node

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
            if not _dense(item):
                _contain(graph, item)
    return graph


def _contain(graph: Graph, padded: Node) -> None:
    """Route `padded`'s readers that need dense storage through one contiguous copy of it;
    follow the views that keep its layout (their fake values, traced on a dense input, are
    traced again on the padded one)."""
    dense: Node | None = None
    for user in list(padded.users):
        if _takes_padded(user):
            if user.target in VIEWS or user.target in RESHAPES:
                user.meta["val"] = fake_value(user.target, user.args, user.kwargs, user)
                if not _dense(user):
                    _contain(graph, user)
            elif user.target is operator.getitem and not _dense(user):
                _contain(graph, user)  # an output of a split / unbind above
            continue
        if dense is None:
            with graph.inserting_after(padded):
                dense = make_node(graph, aten.clone.default, (padded,),
                                  {"memory_format": torch.contiguous_format}, padded,
                                  f"{padded.name}_dense")  # fmt: skip
        user.replace_input_with(padded, dense)


def _takes_padded(user: Node) -> bool:
    """Whether `user` reads a padded (row-strided) input correctly as it is."""
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
        return _views(user)
    return isinstance(target, torch._ops.OpOverload) and target.namespace in ("aten", "prims")


def _views(node: Node) -> bool:
    """Whether the padded fake input can be viewed as `node` asks (else eager raises)."""
    src, shape = node.args[0], node.args[1]
    try:
        src.meta["val"].view(shape)
    except (RuntimeError, ValueError):  # eager's and the fake tensor's refusals
        return False
    return True


def _values(node: Node) -> list:
    val = node.meta.get("val")
    return list(val) if isinstance(val, (list, tuple)) else [val]


def _dense(node: Node) -> bool:
    return all(v is None or _dense_val(v) for v in _values(node))


def _dense_val(val) -> bool:
    return not isinstance(val, torch.Tensor) or val.is_contiguous()
