"""Make a one-hot written with integers something an epilogue computes: `F.one_hot(t, N)` (and
`torch.arange(N) == t[:, None]`) decompose to an integer compare and an integer cast,

    eq(t[:, None], iota(N))  ->  eq(float(t[:, None]), float(iota(N)))
    convert(one_hot_bool, int64) read by float arithmetic  ->  convert(one_hot_bool, <its dtype>)

An epilogue holds no integers, but both rewrites are exact: the iota's values are below
N <= 2**24, which float32 holds exactly, and an index at or above 2**24 rounds to a float32 that
is still no column (a negative one stays negative); a 0/1 cast straight to the float dtype its
reader would promote it to gives the reader the same values. Compares of a wider iota, and casts
with a reader that is not float arithmetic, are left alone. With both, the compare is a node
computed from a row and a column broadcast (`candidates.load_tree`) and joins the region
of the GEMM whose epilogue subtracts it, as `p - one_hot(t)` in a hand-written cross-entropy
gradient does.
"""

from __future__ import annotations

import torch
from torch.fx import Graph, Node

from evt.graph.fake import fake_value, make_node, value
from evt.graph.one_hot_scatters import EXACT, INTEGERS

aten, prims = torch.ops.aten, torch.ops.prims
FLOAT_ARITHMETIC = {aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.rsub.Tensor}


def rewrite_index_compares(graph: Graph) -> Graph:
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is aten.eq.Tensor and _iota_compare(node):
            _compare_in_float(graph, node)
        elif node.target is prims.convert_element_type.default:
            _cast_for_reader(node)
    return graph


def _iota_compare(node: Node) -> bool:
    """eq of an integer iota (through views) and an integer column of one value per row."""
    vals = [value(a) for a in node.args]
    if any(not isinstance(v, torch.Tensor) or v.dtype not in INTEGERS for v in vals):
        return False
    iotas = [a for a in node.args if _iota_extent(a) is not None]
    return len(iotas) == 1 and _iota_extent(iotas[0]) <= EXACT


def _iota_extent(a: Node) -> int | None:
    """N for `prims.iota(N, start=0, step=1)` (an int N), else None."""
    if not isinstance(a, Node) or a.target is not prims.iota.default:
        return None
    n, kwargs = a.args[0], a.kwargs
    if not isinstance(n, int) or kwargs.get("start", 0) != 0 or kwargs.get("step", 1) != 1:
        return None
    return n


def _compare_in_float(graph: Graph, node: Node) -> None:
    with graph.inserting_before(node):
        args = [make_node(graph, prims.convert_element_type.default, (a, torch.float32), {},
                          node, f"{a.name}_f32") for a in node.args]  # fmt: skip
    node.args = tuple(args)


def _cast_for_reader(node: Node) -> None:
    """convert(bool, integer) whose readers all add/subtract/multiply it into one float dtype:
    cast to that dtype instead (0 and 1 either way)."""
    x, dtype = node.args[:2]
    xv = value(x)
    if not isinstance(xv, torch.Tensor) or xv.dtype != torch.bool or dtype not in INTEGERS:
        return
    if not node.users or any(u.target not in FLOAT_ARITHMETIC for u in node.users):
        return
    results = {getattr(value(u), "dtype", None) for u in node.users}
    (float_dtype,) = results if len(results) == 1 else (None,)
    if not isinstance(float_dtype, torch.dtype) or not float_dtype.is_floating_point:
        return
    node.args = (x, float_dtype, *node.args[2:])
    node.meta["val"] = fake_value(node.target, node.args, node.kwargs)
