"""Pointwise (1x1) convolutions on channels-last activations run as GEMMs
(evt/graph/pointwise_convs_as_mm.py): the ops around them join their epilogues as they do a
Linear's, every other convolution stays as it is, and training matches eager either way."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx import Graph

from evt.graph.capture import capture_joint
from evt.graph.fold_views import fold_views
from evt.graph.pointwise_convs_as_mm import pointwise_convs_as_mm
from tests.graphs import explain, train_compare
from tests.nn_catalog import PointwiseBottleneck, train_step

aten = torch.ops.aten
CONVS = (aten.convolution.default, aten.convolution_backward.default)


class Biased(nn.Module):
    """conv(x) -> GELU -> conv, plus the input: biased convolutions of any kind."""

    def __init__(self, conv, channels_last: bool = True):
        super().__init__()
        self.first, self.second, self.channels_last = conv(16, 32), conv(32, 16), channels_last

    def forward(self, x):
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x + self.second(F.gelu(self.first(x)))


def convs_after_the_pass(model: nn.Module, x: torch.Tensor) -> tuple[int, int]:
    """(before, after): the joint graph's convolution nodes before and after the pass."""
    model = copy.deepcopy(model)  # the capture runs a backward: the caller's model keeps no grads
    graph = capture_joint(lambda x: model(x).square().sum().backward(), x.requires_grad_())
    before = _convs(graph)
    pointwise_convs_as_mm(graph)
    graph.lint()
    return before, _convs(graph)


def _convs(graph: Graph) -> int:
    return sum(n.target in CONVS for n in graph.nodes)


def test_the_bottlenecks_convolutions_become_gemms_and_take_their_neighbours():
    """Each convolution's forward and backward become GEMMs. The forward GEMMs take BatchNorm2d's
    batch statistics (over their rows, the pixels); the dgrad of the second convolution takes
    ReLU's backward and BatchNorm's two sums; the dgrad of the first takes the residual's
    gradient (an add of a channels-last tensor, read through the inverse permute)."""
    torch.manual_seed(0)
    model, x = PointwiseBottleneck(32), torch.randn(4, 32, 4, 4)
    before, after = convs_after_the_pass(model, x.clone())
    assert (before, after) == (4, 0)
    report = explain(lambda x: train_step(model, [x]), x)
    forward = [r for r in report.regions if r.side == "forward"]
    backward = [r for r in report.regions if r.side == "backward"]
    assert len(forward) == 2 and all({"aten.var", "aten.mean"} <= set(r.fused) for r in forward), (
        forward
    )
    fused = sorted(tuple(sorted(set(r.fused))) for r in backward)
    assert ("aten.add",) in fused, fused
    assert any({"aten.threshold_backward", "aten.sum"} <= set(f) for f in fused), fused


@pytest.mark.parametrize("rest", ["eager", "inductor"])
def test_the_bottleneck_trains_like_eager(rest):
    torch.manual_seed(0)
    model = PointwiseBottleneck(32)
    errs = train_compare(model, [torch.randn(4, 32, 4, 4)], torch.float32, rest=rest)
    assert max(errs.values()) < 1e-4, errs


@pytest.mark.parametrize("rest", ["eager", "inductor"])
def test_biased_pointwise_convolutions_become_addmms_and_train_like_eager(rest):
    torch.manual_seed(0)
    model = Biased(lambda i, o: nn.Conv2d(i, o, 1))
    x = torch.randn(2, 16, 4, 6)
    # a channels-last gradient (where it is laid out otherwise, the backward stays a convolution)
    probe = torch.randn(x.shape).contiguous(memory_format=torch.channels_last)
    twin = copy.deepcopy(model)
    graph = capture_joint(lambda x: (twin(x) * probe).sum().backward(), x.clone().requires_grad_())
    pointwise_convs_as_mm(graph)
    assert _convs(graph) == 0
    assert sum(n.target is aten.addmm.default for n in graph.nodes) == 2
    errs = train_compare(model, [x], torch.float32, rest=rest)
    assert max(errs.values()) < 1e-4, errs


@pytest.mark.parametrize("conv, channels_last, shape", [
    (lambda i, o: nn.Conv2d(i, o, 3, padding=1), True, (2, 16, 4, 4)),  # not 1x1
    (lambda i, o: nn.Conv2d(i, o, 1, stride=2), True, (2, 16, 4, 4)),  # strided
    (lambda i, o: nn.Conv2d(i, o, 1, groups=2), True, (2, 16, 4, 4)),  # grouped
    (lambda i, o: nn.Conv2d(i, o, 1), False, (2, 16, 4, 4)),  # NCHW: rows not dense
    (lambda i, o: nn.Conv1d(i, o, 1), False, (2, 16, 8)),  # channels-last input, NCL result
], ids=["3x3", "stride2", "groups2", "nchw", "conv1d_transposed"])  # fmt: skip
def test_other_convolutions_stay_and_train_like_eager(conv, channels_last, shape):
    """A convolution that is not a dense GEMM over the pixels (or whose result cuDNN lays out
    otherwise than the GEMM's view: Conv1d's [N, C, L] of a transposed [N, L, C]) keeps its
    convolution nodes, and trains as before."""
    torch.manual_seed(0)
    model = Biased(conv, channels_last)
    x = torch.randn(*shape)
    if len(shape) == 3:  # a [N, L, C] activation transposed to [N, C, L]: channels innermost
        x = torch.randn(shape[0], shape[2], shape[1]).transpose(1, 2)
    before, after = convs_after_the_pass(model, x.clone())
    assert before == after > 0
    errs = train_compare(model, [x], torch.float32)
    assert max(errs.values()) < 1e-4, errs


def test_view_chains_through_permutes_and_aliases_fold_to_their_source():
    """view(permute(permute(view(h)))) re-reads h unchanged and reads h instead; an identity
    permute of a permuted view reads that view, not h (laid out otherwise)."""
    g = Graph()
    h = g.placeholder("h")
    h.meta["val"] = torch.empty(6, 4)
    nodes = {"h": h}

    def add(name, target, *args):
        node = g.call_function(target, (nodes[args[0]], *args[1:]))
        node.meta["val"] = target(nodes[args[0]].meta["val"], *args[1:])
        nodes[name] = node
        return node

    add("v", aten.view.default, "h", [2, 3, 4])
    add("p", aten.permute.default, "v", [0, 2, 1])
    add("back", aten.permute.default, "p", [0, 2, 1])
    add("flat", aten.view.default, "back", [6, 4])
    add("same", aten.permute.default, "p", [0, 1, 2])
    add("relu", aten.relu.default, "flat")
    add("moved", aten.relu.default, "same")
    g.output((nodes["relu"], nodes["moved"]))
    fold_views(g)
    g.lint()
    assert nodes["relu"].args[0] is h
    assert nodes["moved"].args[0] is nodes["p"]


def test_evt_pointwise_convs_0_keeps_every_convolution(monkeypatch):
    monkeypatch.setenv("EVT_POINTWISE_CONVS", "0")
    torch.manual_seed(0)
    before, after = convs_after_the_pass(PointwiseBottleneck(32), torch.randn(4, 32, 4, 4))
    assert before == after == 4


def test_a_meta_capture_keeps_the_convolutions_a_cpu_capture_runs_as_gemms():
    """Meta lays a convolution's result out contiguously (cuDNN and the CPU return it
    channels-last), so the bench's meta capture finds none of ResNet's bottleneck's pointwise
    GEMMs: `scripts/kernel_pack.py build --capture cpu` builds their kernels ahead."""
    from evt.bench import plan, steps

    case = {c.name: c for c in plan.all_cases(small=True)}["step/resnet_bottleneck"]
    found = {}
    for device in ("meta", "cpu"):
        w = steps.build(case, torch.bfloat16, device)
        found[device] = len(explain(w.target, *w.make_inputs(0)).regions)
    assert found == {"meta": 0, "cpu": 4}, found



@pytest.mark.parametrize("rest", ["eager", "inductor"])
def test_with_dynamic_shapes_the_convolutions_become_gemms_and_train_like_eager(rest):
    """Symbolic sizes (`dynamic=True`): the views' sizes are built from the SymInt inputs (H * W
    of one symbol a square: `sink_views.size_terms`) and the channels-last layouts proven
    (`sizes.dense`), so the convolutions become GEMMs with their regions, at two sizes, every
    region's inputs in its kernel's layouts. (Session 56 kept them: Inductor then failed to compile
    two CNN blocks' graphs, "cannot determine truth value of Relational: 1 < s53", which passes
    comparing sizes with `==` caused; none does since session 59.)"""
    from evt.backend import evt_backend
    from evt.testing.layouts import checked_layouts
    from tests.graphs import rel_err

    torch.manual_seed(0)
    model = PointwiseBottleneck(32)
    twin = copy.deepcopy(model)
    torch._dynamo.reset()
    compiled = torch.compile(twin, backend=evt_backend, options={"rest": rest}, dynamic=True)
    for shape in ((4, 32, 6, 6), (2, 32, 4, 4)):
        x = torch.randn(*shape)
        with checked_layouts() as (calls, failed):
            got = train_step(twin, [x], compiled)
        want = train_step(model, [x])
        assert len(set(calls)) == 4 and not failed, (shape, calls, failed)
        errs = {n: rel_err(got[n], want[n]) for n in want}
        assert max(errs.values()) < 1e-4, (shape, errs)
    torch._dynamo.reset()
