"""Passes, the greedy partitioner and the independent validator, on captured joint graphs."""

import dataclasses

import pytest
import torch
import torch.nn as nn

from evt.errors import PartitionError
from evt.examples import MLP
from evt.graph.annotate_sides import annotate_sides
from evt.graph.fold_gemm_operands import GEMM, fold_gemm_operands
from evt.graph.verify import verify
from evt.partition import Region, partition, validate
from evt.pipeline import fuse
from tests.graphs import capture_joint, lora_mlp

aten = torch.ops.aten


def mlp_graph():
    torch.manual_seed(0)
    return capture_joint(MLP(32, 64), torch.randn(16, 32, requires_grad=True))


def prepared(graph):
    return fold_gemm_operands(annotate_sides(graph))


def test_sides_follow_the_tangents():
    g = prepared(mlp_graph())
    for n in g.nodes:
        if n.op == "placeholder":
            want = "backward" if n.name.startswith("tangents") else "forward"
            assert n.meta["evt_side"] == want
    gelu_bwd = next(n for n in g.nodes if n.target == aten.gelu_backward.default)
    assert gelu_bwd.meta["evt_side"] == "backward"


def test_transposes_fold_into_operand_layouts():
    g = prepared(mlp_graph())
    for n in g.nodes:
        if GEMM in n.meta:
            ops = n.meta[GEMM]
            for base in (ops.a, ops.b):
                assert base.target != aten.permute.default, n.format_node()
    # backward dgrad: mm(grad, permute(permute(W2))) reads W2 itself, untransposed
    dgrad = [n for n in g.nodes if n.target == aten.mm.default][0]
    assert dgrad.meta[GEMM].b.name == "primals_4" and not dgrad.meta[GEMM].b_transposed


def test_greedy_partition_is_valid_and_one_sided():
    g = prepared(mlp_graph())
    regions = partition(g)
    validate(g, regions)
    assert len(regions) == 4
    assert [r.side for r in regions] == ["forward", "forward", "backward", "backward"]


def test_validator_rejects_two_gemms_in_a_region():
    g = prepared(mlp_graph())
    regions = partition(g)
    other = next(n for n in g.nodes if n.target == aten.mm.default and n is not regions[2].anchor)
    bad = dataclasses.replace(regions[2], nodes=regions[2].nodes + (other,))
    with pytest.raises(PartitionError, match="exactly one GEMM"):
        validate(g, [bad])


def test_validator_rejects_mixed_sides():
    g = prepared(mlp_graph())
    regions = partition(g)
    gelu_bwd = next(n for n in g.nodes if n.target == aten.gelu_backward.default)
    bad = dataclasses.replace(regions[0], nodes=regions[0].nodes + (gelu_bwd,))
    with pytest.raises(PartitionError, match="mixes sides"):
        validate(g, [bad])


def test_validator_rejects_overlap_and_non_downstream_nodes():
    g = prepared(mlp_graph())
    r = partition(g)
    with pytest.raises(PartitionError, match="shares nodes"):
        validate(g, [r[0], r[0]])
    first_add = r[1].epilogue[-1]
    bad = Region(r[0].anchor, (r[0].anchor, first_add), "forward")
    with pytest.raises(PartitionError):
        validate(g, [bad])


class RowNormalize(nn.Module):
    """y - y.sum(1): fusing the subtraction would put the row sum (which needs all of y)
    both after and before the GEMM's kernel: a cycle the partitioner must refuse."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(48, 32))

    def forward(self, x):
        y = x @ self.w.t()
        return y - y.sum(dim=1, keepdim=True)


def test_cycle_inducing_fusion_is_refused():
    g = prepared(capture_joint(RowNormalize(), torch.randn(16, 32, requires_grad=True)))
    regions = partition(g)
    validate(g, regions)
    fwd = [r for r in regions if r.side == "forward"]
    # the row sum joins the GEMM; the sub, which reads it, cannot
    assert [[n.target for n in r.epilogue] for r in fwd] == [[aten.sum.dim_IntList]]
    sub = next(n for n in g.nodes if n.target == aten.sub.Tensor)
    with pytest.raises(PartitionError, match="cycle"):
        anchor = sub.args[0]
        validate(g, [Region(anchor, (anchor, sub), "forward")])


def test_full_pipeline_leaves_a_verified_graph():
    g = mlp_graph()
    report = fuse(g, check=True)
    verify(g, after="test")
    calls = [n for n in g.nodes if n.target == torch.ops.evt.fused_gemm.default]
    assert len(calls) == len(report.regions) == 4
    assert not [n for n in g.nodes if n.target == aten.gelu.default]


@pytest.mark.parametrize("rank, anchor", [(4, "aten.addmm"), (8, "aten.mm")])
def test_a_gemm_tma_cannot_read_leaves_its_epilogue_to_another(rank, anchor):
    """LoRA in bf16 on CUDA (here "meta"): at rank 4 the low-rank GEMM's operand rows are 8 bytes,
    which TMA cannot read, so it anchors nothing and the frozen base GEMM takes the update's add
    and the SiLU into its epilogue (the low-rank GEMM was chosen before, then its region vetoed
    at lowering, and the base GEMM, kept out of it, stayed unfused too); at rank 8 (16-byte rows)
    the low-rank GEMM may anchor them."""
    import evt

    torch.manual_seed(0)
    model = lora_mlp(256, 1024, rank).to("meta", torch.bfloat16)
    x = torch.randn(128, 256, device="meta", dtype=torch.bfloat16)
    report = evt.explain(lambda x: model(x).float().pow(2).mean().backward(), x)
    forward = [r for r in report.regions if r.side == "forward"]
    assert any(r.anchor == anchor and {"aten.add", "aten.silu"} <= set(r.fused) for r in forward), [
        (r.anchor, r.fused) for r in forward]  # fmt: skip
    if rank == 4:
        why = [w for _, side, w in report.unfused if "TMA cannot read its operand" in w]
        assert any("[128, 4]" in w and "(4, 1)" in w for w in why), report.unfused
        assert not any(r.anchor == "aten.mm" and r.side == "forward" for r in report.regions)


class ScaledGemm(nn.Module):
    """addmm / baddbmm with both alpha and beta != 1, then a sigmoid the region takes."""

    def __init__(self, batched: bool):
        super().__init__()
        self.batched = batched
        lead = (3,) if batched else ()
        self.w = nn.Parameter(torch.randn(*lead, 16, 8) * 0.3)
        self.c = nn.Parameter(torch.randn(*lead, 12, 8))

    def forward(self, x):
        gemm = torch.baddbmm if self.batched else torch.addmm
        return torch.sigmoid(gemm(self.c, x, self.w, beta=0.5, alpha=2.0))


@pytest.mark.parametrize("batched", [False, True], ids=["addmm", "baddbmm"])
def test_a_gemm_scaled_by_alpha_and_beta_trains_like_eager(batched):
    """alpha's product and beta's were both named after the anchor with one counter each, so the
    tree held two nodes of each name and the add read beta's product twice: a wrong forward."""
    from tests.graphs import explain, train_compare

    torch.manual_seed(0)
    x = torch.randn(3, 12, 16) if batched else torch.randn(12, 16)
    report = explain(lambda x: ScaledGemm(batched)(x).sum(), x)
    assert [r.fused for r in report.regions if r.side == "forward"] == [["aten.sigmoid", "aten.sum"]]
    errs = train_compare(ScaledGemm(batched), [x], torch.float32)
    assert max(errs.values()) < 1e-5, errs


class AlphaThenAdds(nn.Module):
    """`torch.add(y, r, alpha=2)` (FX `add`, whose alpha step was named `add_2`) and two more adds
    (FX `add_1`, `add_2`) in one region."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x, r):
        a = torch.add(self.fc(x), r, alpha=2.0)
        return torch.relu(a + 1.5 + r)


def test_an_expressions_inner_steps_never_take_a_graph_nodes_name():
    """An expression's inner steps were named `<node>_<i>`, which the graph's own `add_2` also
    was: the tree held two nodes of that name (its C++ two `using` declarations of one name), and
    the region stayed unfused. They take the next free number now."""
    import warnings

    from tests.graphs import train_compare

    torch.manual_seed(0)
    x, r = torch.randn(8, 16), torch.randn(8, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no region falls back
        errs = train_compare(AlphaThenAdds(), [x, r], torch.float32)
    assert max(errs.values()) < 1e-5, errs
    from tests.graphs import explain

    report = explain(lambda x, r: (AlphaThenAdds()(x, r) * r).sum().backward(), x, r)
    (forward,) = [r for r in report.regions if r.side == "forward"]
    names = [n.name for n in forward.spec.nodes]
    assert forward.fused.count("aten.add") == 3 and "add_2" in names, (forward.fused, names)
