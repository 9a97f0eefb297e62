"""`evt dump --draw`: the picture of a partition (pydot; Graphviz's dot renders it when present)."""

import shutil

import pytest
import torch

from evt.cli import main
from evt.examples import MLP
from evt.explain import explain


def test_drawing_has_one_cluster_per_region_and_both_sides():
    torch.manual_seed(0)
    model, probe = MLP(32, 64), torch.randn(16, 32)
    x = torch.randn(16, 32, requires_grad=True)
    report = explain(lambda x: (model(x) * probe).sum().backward(), x, draw=True)
    (graph,) = report.graphs
    text = graph.drawing.to_string()
    assert text.count("subgraph cluster_region") == len(report.regions) == 4
    assert "cluster_forward" in text and "cluster_backward" in text
    assert "penwidth=3" in text  # GEMMs are drawn bold
    assert "KiB" in text  # edges carry their bytes


def test_evt_dump_draw_writes_dot_and_pictures(tmp_path, capsys):
    assert main(["dump", "--example", "mlp", "--out", str(tmp_path), "--draw"]) == 0
    assert (tmp_path / "partition_0.dot").exists()
    if shutil.which("dot") is None:
        assert "apt-get install graphviz" in capsys.readouterr().err
        pytest.skip("Graphviz's dot is not installed: only the .dot was written")
    assert (tmp_path / "partition_0.svg").stat().st_size > 0
    assert (tmp_path / "partition_0.png").stat().st_size > 0
