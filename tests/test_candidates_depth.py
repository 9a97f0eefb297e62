"""Candidate sets stop where a kernel would need more aux loads than fit (`candidates._grow`): a
residual stream no longer makes every later residual add a candidate of each earlier GEMM (ILP
variables quadratic in the depth), and the ILP's regions are the ones it chose before."""

import torch
from torch import nn

from evt.graph.annotate_sides import annotate_sides
from evt.graph.fold_gemm_operands import fold_gemm_operands
from evt.partition import ilp
from evt.partition.candidates import MAX_AUX_TENSORS, find_candidates
from tests.graphs import capture_joint


class Residual(nn.Module):
    def __init__(self, blocks: int, d: int = 32):
        super().__init__()
        self.fcs = nn.ModuleList(nn.Linear(d, d) for _ in range(blocks))

    def forward(self, x):
        for fc in self.fcs:
            x = x + torch.relu(fc(x))
        return x.pow(2).sum()


def graph_of(blocks: int):
    torch.manual_seed(0)
    return fold_gemm_operands(annotate_sides(capture_joint(Residual(blocks), torch.randn(16, 32, requires_grad=True))))


def first_forward(graph, max_aux: int = MAX_AUX_TENSORS):
    return find_candidates(graph, max_aux)[0]


def test_candidates_do_not_grow_with_the_depth():
    """The first GEMM's candidates: its ReLU and residual adds while each later add's load (the
    next block's ReLU output) still fits: the add after `MAX_AUX_TENSORS` loads is not one."""
    unbounded = [first_forward(graph_of(b), 10**6) for b in (8, 12)]
    bounded = [first_forward(graph_of(b)) for b in (8, 12)]
    assert len(unbounded[1].nodes) > len(unbounded[0].nodes) > 8  # the whole stream after it
    names = [[n.name for n in c.nodes] for c in bounded]
    assert names[0] == names[1] == ["relu", "add", *(f"add_{i}" for i in range(1, MAX_AUX_TENSORS))], names


def test_the_ilp_chooses_the_same_regions(monkeypatch):
    graph = graph_of(8)

    def regions():
        return sorted((r.anchor.name, sorted(n.name for n in r.nodes)) for r in ilp.partition(graph))

    bounded = regions()
    monkeypatch.setattr(ilp, "find_candidates", lambda g, max_aux: find_candidates(g, 10**6))
    assert regions() == bounded


def test_a_long_chain_is_solved_in_windows_with_the_same_regions(monkeypatch):
    """40 residual blocks: one part of 40 forward GEMMs (each may absorb the next adds), split
    into windows of `WINDOW` GEMMs (the repeated ones answered by the solve cache); the regions
    are those of the whole part solved at once."""
    from evt.partition import components as comps

    graph = graph_of(40)
    order = {n: i for i, n in enumerate(graph.nodes)}
    cands = find_candidates(graph)
    assert max(len(p) for p in comps._parts(cands)) > comps.SPLIT_ABOVE
    assert max(len(c.anchors) for c in comps.components(cands, order)) <= comps.WINDOW

    def regions():
        return sorted((r.anchor.name, sorted(n.name for n in r.nodes)) for r in ilp.partition(graph))

    windowed = regions()
    monkeypatch.setattr(comps, "SPLIT_ABOVE", 10**6)
    assert regions() == windowed
