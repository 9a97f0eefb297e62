"""Every EVT node kind and compute op is reached from a torch module through the whole pipeline
(`tests/node_catalog.py`), and each module's training step on the reference path matches eager."""

import pytest
import torch

import evt
from evt import ir
from tests.graphs import train_compare
from tests.node_catalog import CASES, NOT_A_NODE, untrimmed  # noqa: F401  (untrimmed: autouse)

ROWS, DIM = 16, 32


def reached(name: str) -> tuple[set[str], set[str]]:
    """The node kinds and compute ops of the regions of `name`'s training step."""
    case = CASES[name]
    torch.manual_seed(0)
    model = case.build(ROWS, DIM)
    x, *rest = case.inputs(ROWS, DIM)
    x.requires_grad_(True)

    def step(x, *rest):
        out = model(x, *rest).float()
        probe = torch.randn(out.shape, generator=torch.Generator().manual_seed(7))
        (out * probe).sum().backward()

    report = evt.explain(step, x, *rest)
    nodes = [n for r in report.regions for n in r.spec.nodes]
    return {n.kind for n in nodes}, {n.op for n in nodes if isinstance(n, ir.Compute)}


@pytest.fixture(scope="module")
def coverage() -> dict[str, tuple[set[str], set[str]]]:
    return {name: reached(name) for name in CASES}


@pytest.mark.parametrize("name", list(CASES))
def test_each_module_fuses_its_node_kinds_and_ops(coverage, name):
    kinds, ops = coverage[name]
    assert CASES[name].kinds <= kinds, (name, sorted(CASES[name].kinds - kinds))
    assert CASES[name].ops <= ops, (name, sorted(CASES[name].ops - ops))


def test_the_catalog_reaches_every_node_kind_and_compute_op(coverage):
    kinds = set().union(*(k for k, _ in coverage.values()))
    ops = set().union(*(o for _, o in coverage.values()))
    assert kinds == set(ir.NODE_TYPES), sorted(set(ir.NODE_TYPES) - kinds)
    assert ops - NOT_A_NODE == set(ir.COMPUTE_OPS) - NOT_A_NODE, sorted(set(ir.COMPUTE_OPS) - NOT_A_NODE - ops)


@pytest.mark.parametrize("name", list(CASES))
def test_each_module_trains_like_eager(name):
    case = CASES[name]
    torch.manual_seed(1)
    errs = train_compare(case.build(ROWS, DIM), case.inputs(ROWS, DIM), torch.float32)
    assert max(errs.values()) < case.tolerance, errs
