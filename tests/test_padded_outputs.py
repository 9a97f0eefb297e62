"""Region outputs whose rows are not whole 16-byte vectors: allocated with padded rows
(`ir.row_pitch`) by the kernel, the fake implementation and the reference path alike, and
`contain_padded_outputs` hands a contiguous copy to the readers that need dense storage."""

from __future__ import annotations

import copy
import operator
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from evt import ir, pipeline
from evt.backend import evt_backend
from evt.graph.capture import capture_joint
from evt.graph.contain_padded_outputs import FUSED_GEMM

aten = torch.ops.aten


class Narrow(nn.Module):
    """A Linear to 6 features (24-byte fp32 rows, padded to 32) and ReLU, read by a view that
    splits its rows (it can stay padded), a view that merges them (it cannot) and returned."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 6)

    def forward(self, x):
        y = F.relu(self.fc(x))
        return y, y.view(4, 4, 6).sum(1), y.reshape(-1) * 2


def fused_graph():
    torch.manual_seed(0)
    with torch.no_grad():
        graph = capture_joint(Narrow(), torch.randn(16, 32))
    report = pipeline.fuse(graph, check=True)
    assert len(report.regions) == 1, report
    return graph


def test_padded_output_is_copied_for_the_readers_that_need_dense_rows():
    graph = fused_graph()
    (call,) = [n for n in graph.nodes if n.target is FUSED_GEMM]
    (item,) = call.users
    assert item.meta["val"].stride() == (ir.row_pitch(6, "f32"), 1) == (8, 1)
    (dense,) = [u for u in item.users if u.target is aten.clone.default]
    assert dense.meta["val"].is_contiguous()
    views = {tuple(u.args[1]): u for u in (*item.users, *dense.users) if u.target is aten.view.default}
    assert views[(4, 4, 6)].args[0] is item  # splitting M: the padded rows stay
    assert views[(4, 4, 6)].meta["val"].stride() == (32, 8, 1)  # traced again on the padded value
    assert views[(-1,)].args[0] is dense  # merging M and N needs dense rows
    assert dense in graph.output_node().all_input_nodes and item not in graph.output_node().all_input_nodes


@pytest.mark.parametrize("rest", ["eager", "inductor"])
def test_padded_outputs_train_like_eager(rest):
    """Forward and backward with the region's output padded match eager on either route."""
    torch.manual_seed(0)
    model = Narrow()
    ref = copy.deepcopy(model)
    x1 = torch.randn(16, 32, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.compile(model, backend=evt_backend, options={"rest": rest})(x1)
    want = ref(x2)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
        assert g.is_contiguous()  # returned to the user dense
    sum(o.sum() * (i + 1) for i, o in enumerate(got)).backward()
    sum(o.sum() * (i + 1) for i, o in enumerate(want)).backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(model.fc.weight.grad, ref.fc.weight.grad, rtol=1e-5, atol=1e-5)


def test_an_as_strided_reader_gets_the_dense_copy():
    """`as_strided` addresses storage as the dense tensor it was traced on."""
    def f(x, w):
        y = torch.relu(x @ w)  # 16 x 6 fp32
        return torch.as_strided(y, (6, 16), (1, 6)).sum(0)

    x, w = torch.randn(16, 32), torch.randn(32, 6)
    with torch.no_grad():
        graph = capture_joint(f, x, w)
    pipeline.fuse(graph, check=True)
    (reader,) = [n for n in graph.nodes if n.target is aten.as_strided.default]
    assert reader.args[0].target is aten.clone.default
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    torch.testing.assert_close(gm(x, w)[0], f(x, w))


def test_staged_stores_give_dense_rows_and_no_copy(monkeypatch):
    """`EVT_STAGED_STORES=1`: a region whose rows TMA cannot store is given dense rows
    (`KernelSpec.dense_rows`) that its kernel stores with its threads (`_ss` configs at such an
    N, from the heuristic and by default), so no reader gets a copy; aligned rows and the
    default setting are as before."""
    from evt.codegen import config as cfgs

    monkeypatch.setenv("EVT_STAGED_STORES", "1")
    graph = fused_graph()
    (call,) = [n for n in graph.nodes if n.target is FUSED_GEMM]
    (item,) = call.users
    assert item.meta["val"].stride() == (6, 1)
    assert not [n for n in graph.nodes if n.target is aten.clone.default]
    spec = ir.from_json(call.args[0])
    assert spec.dense_rows and '"dense_rows":true' in ir.to_json(spec)
    assert spec.output_layouts(16, 6, 1)[0] == ((16, 6), (6, 1))
    assert all(c.staged_stores and not c.pad_rows for c in cfgs.heuristic(spec, 16, 6, 32))
    assert not any(c.staged_stores for c in cfgs.heuristic(spec, 16, 8, 32))  # 32-byte rows: TMA
    assert cfgs.default_config(spec).staged_stores
    plain = ir.from_json(ir.to_json(spec).replace(',"dense_rows":true', ""))
    assert not plain.dense_rows and plain.output_layouts(16, 6, 1)[0] == ((16, 6), (8, 1))
    assert all(c.pad_rows and not c.staged_stores for c in cfgs.heuristic(plain, 16, 6, 32))
    monkeypatch.setenv("EVT_STAGED_STORES", "0")
    assert test_padded_output_is_copied_for_the_readers_that_need_dense_rows() is None


@pytest.mark.parametrize("rest", ["eager", "inductor"])
def test_dense_rows_train_like_eager(rest, monkeypatch):
    """The dense rows of `EVT_STAGED_STORES=1` on the reference path, forward and backward."""
    monkeypatch.setenv("EVT_STAGED_STORES", "1")
    test_padded_outputs_train_like_eager(rest)


def test_the_pieces_of_a_split_padded_output_are_followed_to_their_readers():
    """`unbind` keeps the padded rows in each piece; a piece the graph returns gets the dense
    copy, one a reduction reads does not. (Before, the pieces kept the fake values traced on a
    dense input, so the returned piece left padded, unlike its fake value.)"""
    def f(x, w):
        y = torch.relu(x @ w)  # 16 x 6 fp32: padded rows
        a, b = y.view(2, 8, 6).unbind(0)
        return a, b.sum(0)

    x, w = torch.randn(16, 32), torch.randn(32, 6)
    with torch.no_grad():
        graph = capture_joint(f, x, w)
    pipeline.fuse(graph, check=True)
    (clone,) = [n for n in graph.nodes if n.target is aten.clone.default]
    assert clone.args[0].target is operator.getitem and clone.args[0].args[1] == 0
    assert clone in graph.output_node().all_input_nodes
    (total,) = [n for n in graph.nodes if n.target is aten.sum.dim_IntList]
    assert total.args[0].meta["val"].stride() == (8, 1)  # the other piece, read as it is
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    got = gm(x, w)
    assert got[0].is_contiguous()
    for g, want in zip(got, f(x, w), strict=True):
        torch.testing.assert_close(g, want)


def test_dense_readers_predicts_the_copies_without_changing_the_graph():
    """What max-autotune asks before lowering (`autotune.dense_outputs`): for a region output
    (still the aten node) and the padded value the kernel gives it, which readers get a copy;
    the region's own readers left out; nothing in the graph changes."""
    from torch._guards import detect_fake_mode

    from evt.graph.contain_padded_outputs import dense_readers

    def f(x, w):
        y = torch.relu(x @ w)
        return y.view(4, 4, 6).sum(1), y.reshape(-1) * 2

    x, w = torch.randn(16, 32), torch.randn(32, 6)
    with torch.no_grad():
        graph = capture_joint(f, x, w)
    (relu,) = [n for n in graph.nodes if n.target is aten.relu.default]
    with detect_fake_mode([relu.meta["val"]]):
        padded, dense = torch.empty_strided((16, 6), (8, 1)), torch.empty(16, 6)
    before = {n: n.meta.get("val") for n in graph.nodes}
    readers, views = dense_readers(relu, padded)
    assert [(p, u.target, u.args[1]) for p, u in readers] == [(relu, aten.view.default, [-1])]
    assert {u.args[1] == [4, 4, 6] for u in views} == {True}
    assert all(n.meta.get("val") is v for n, v in before.items())
    readers, again = dense_readers(relu, padded, outside=lambda u: u.args[1] != [-1])
    assert readers == [] and list(again) == list(views)
    assert dense_readers(relu, dense) == ([], {})
