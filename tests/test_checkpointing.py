"""Activation checkpointing (`torch.utils.checkpoint`) through evt (CPU): a checkpointed block's
regions carry its recompute tags (`lower_regions.ANCHOR_META`), so AOTAutograd's partitioner
recomputes them in the backward instead of saving their outputs, as it does for the GEMMs
themselves without evt; the forward's calls drop the aux stores only the backward read
(`prune_unused_outputs`); and the step still matches eager."""

from __future__ import annotations

import collections

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import evt
from evt import ir
from evt.runtime import reference
from evt.testing.models import saving_gemms
from tests.graphs import rel_err


class Block(nn.Module):
    def __init__(self, d: int = 64, h: int = 256):
        super().__init__()
        self.ln, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, h), nn.Linear(h, d)

    def inner(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln(x))))

    def forward(self, x, checkpointed: bool | str):
        """`checkpointed`: False, True, or "selective" (the GEMMs' outputs saved)."""
        if not checkpointed:
            return self.inner(x)
        selective = {"context_fn": saving_gemms} if checkpointed == "selective" else {}
        return checkpoint(self.inner, x, use_reentrant=False, **selective)


class Stack(nn.Module):
    def __init__(self, blocks: int = 3):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(blocks))

    def forward(self, x, checkpointed: bool | str):
        for b in self.blocks:
            x = b(x, checkpointed)
        return x.pow(2).mean()


def saved_bytes(fn) -> tuple[int, torch.Tensor]:
    """Bytes of the tensors autograd saves for the backward during `fn()`, and its loss (the
    backward not run yet)."""
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fn()
    return total, loss


def saved_shapes(fn) -> tuple[list[tuple[int, ...]], torch.Tensor]:
    """The shapes of the tensors autograd saves for the backward during `fn()`, and its loss."""
    shapes = []

    def pack(t):
        shapes.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fn()
    return shapes, loss


def step(checkpointed: bool, compiled: bool):
    """(saved bytes, loss, gradients, region name -> reference-path runs) of one step."""
    torch.manual_seed(0)
    model = Stack()
    x = torch.randn(256, 64)
    fn = model
    if compiled:
        torch._dynamo.reset()
        fn = torch.compile(model, backend=evt.backend.evt_backend, options={"rest": "eager"})
    runs: collections.Counter = collections.Counter()
    outputs: dict[str, list[int]] = collections.defaultdict(list)  # region -> outputs per run
    original = reference.run

    def counted(spec, tensors):
        runs[spec.name] += 1
        outputs[spec.name].append(spec.num_outputs)
        return original(spec, tensors)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(reference, "run", counted)
        saved, loss = saved_bytes(lambda: fn(x, checkpointed))
        loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    return saved, loss.detach(), grads, runs, outputs


def test_checkpointed_regions_are_recomputed_not_saved():
    plain, _, _, plain_runs, _ = step(checkpointed=False, compiled=True)
    saved, loss, grads, runs, outputs = step(checkpointed=True, compiled=True)
    # every block's forward regions run twice (the forward and the backward's recompute) ...
    forward = [name for name in runs if name.startswith("evt_f")]
    assert forward and all(runs[name] == 2 for name in forward), runs
    assert all(n == 1 for n in plain_runs.values()), plain_runs
    # ... so the checkpoint keeps its memory saving (before the tags: 0.93 of the plain step's)
    assert saved < 0.5 * plain, (saved, plain)
    # the forward run of fc1's region no longer stores the pre-activation only the backward
    # read: its recompute there does (`prune_unused_outputs`)
    pruned = [name for name in forward if outputs[name][0] < outputs[name][1]]
    assert len(pruned) == 3, dict(outputs)  # one per block
    _, want_loss, want, _, _ = step(checkpointed=True, compiled=False)
    assert rel_err(loss, want_loss) < 1e-4
    assert max(rel_err(grads[n], want[n]) for n in want) < 1e-4


def test_without_stores_renumbers_the_outputs_and_reads_through():
    """Dropping an aux store: its readers read its argument, the outputs after it move down, D
    stays output 0; the reference path computes the same values for what is kept."""
    import dataclasses

    from evt import ir
    from evt.graph.prune_unused_outputs import without_stores
    from evt.testing.inputs import make_inputs
    from tests import specs

    base = specs.row_statistics()  # D = logits; outputs 1-8: statistics and reductions
    fields = ir.OUTPUT_FIELDS

    def shifted(n):  # output indices up by one: room for the new output 1
        return dataclasses.replace(n, **{f: getattr(n, f) + 1 for f in fields
                                         if getattr(n, f, None) is not None})  # fmt: skip

    def reads_early(n):  # the writers of `logits` read it through the new store
        return dataclasses.replace(n, arg="early") if getattr(n, "arg", None) == "logits" else n

    early = ir.AuxStore("early", "logits", 1, "bf16")
    nodes = (*base.nodes[:3], early, *(reads_early(shifted(n)) for n in base.nodes[3:]),
             ir.AuxStore("late", "early", 10, "bf16"))  # fmt: skip
    full = ir.KernelSpec("k", base.gemm, nodes, "early", "bf16", base.num_inputs)
    pruned, renumber = without_stores(full, {"early"})
    assert renumber == {0: 0, **{i: i - 1 for i in range(2, 11)}}
    assert pruned.d == "logits" and all(getattr(n, "arg", "") != "early" for n in pruned.nodes)
    assert [o.index for o in pruned.outputs()] == list(range(1, 10))
    x = make_inputs(full, 64, 48, 32, seed=0, device="cpu")
    want, got = reference.run(full, x), reference.run(pruned, x)
    assert len(got) == len(want) - 1
    for old, new in renumber.items():
        torch.testing.assert_close(got[new], want[old], rtol=0, atol=0)


def test_the_report_keeps_nothing_for_a_checkpointed_backward():
    """`evt.explain`'s "kept for bwd" is 0 for a checkpointed block's regions (recomputed in the
    backward) and the activation bytes for the same regions without checkpoints."""
    torch.manual_seed(0)
    model, x = Stack(), torch.randn(256, 64)
    kept = {}
    for checkpointed in (False, True):
        torch._dynamo.reset()
        report = evt.explain(lambda x, c=checkpointed: model(x, c).backward(), x)
        kept[checkpointed] = [r.saved_for_backward for r in report.regions if r.side == "forward"]
    assert any(kept[False]) and not any(kept[True]), kept


def test_the_report_lists_the_pruned_kernels_a_run_launches():
    """A checkpointed block's forward fc1 region stores the pre-activation only the backward
    read; once AOTAutograd has split the graph (the backward recomputing the region) that store
    is dropped (`prune_unused_outputs`), and `Report.kernels()` lists the pruned kernel, the one
    the run builds and launches (what the GPU tests' fixtures and `kernel_pack.py` build ahead),
    in the region's place; every other region's kernel is its own."""
    torch.manual_seed(0)
    model, x = Stack(), torch.randn(256, 64)
    report = evt.explain(lambda x: model(x, True).backward(), x)
    stores = {r.name: sum(n.kind == "aux_store" for n in r.spec.nodes) for r in report.regions}
    kernels = dict(zip((r.name for r in report.regions), report.kernels(), strict=True))
    pruned = sorted(n for g in report.graphs for n in g.pruned)
    assert len(pruned) == len(model.blocks) and all(n.startswith("evt_f") for n in pruned), pruned
    for r in report.regions:
        spec, problem = kernels[r.name]
        kept = sum(n.kind == "aux_store" for n in spec.nodes)
        assert problem == r.problem and kept == stores[r.name] - (r.name in pruned), (r.name, kept)


def test_selective_checkpointing_trains_like_eager():
    """Selective activation checkpointing (a policy that saves the GEMMs and recomputes the
    rest): a region takes its anchor's MUST_SAVE, and the backward recomputes its epilogue's
    results from the saved GEMM output (`recompute_for_backward`) as Inductor alone does (before:
    both saved, 2181 KiB against Inductor's 1409 on a 3-block stack); the forward region still
    fuses the GELU, the step saves what Inductor's does (but the residual regions' LayerNorm
    statistics, rows x 4 bytes each) and matches eager."""
    grads, saved = {}, {}
    for route in ("evt", "inductor", "eager"):
        torch.manual_seed(0)
        model, x = Stack(), torch.randn(256, 64)
        torch._dynamo.reset()
        if route == "evt":
            fn = torch.compile(lambda x, model=model: model(x, "selective"),
                               backend=evt.backend.evt_backend, options={"rest": "eager"})  # fmt: skip
        elif route == "inductor":
            fn = torch.compile(lambda x, model=model: model(x, "selective"))
        else:
            fn = lambda x, model=model: model(x, "selective")  # noqa: E731
        runs: collections.Counter = collections.Counter()

        def counted(spec, tensors, runs=runs, original=reference.run):
            runs[spec.name[:5]] += 1  # evt_f... forward, evt_b... backward regions
            return original(spec, tensors)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(reference, "run", counted)
            shapes, loss = saved_shapes(lambda fn=fn, x=x: fn(x))
            loss.backward()
        # beside Inductor's: LayerNorm's row statistics, computed by the residual regions
        # (MUST_SAVE with their GEMM) where Inductor recomputes them (rows x 4 bytes each)
        saved[route] = sorted(s for s in shapes if s[-1] != 1)
        grads[route] = {n: p.grad for n, p in model.named_parameters()}
        assert (route == "evt") == (runs["evt_f"] > 0 and runs["evt_b"] > 0), runs  # both passes
    assert max(rel_err(grads["evt"][n], grads["eager"][n]) for n in grads["eager"]) < 1e-4
    assert saved["evt"] == saved["inductor"], saved
    torch._dynamo.reset()
    model = Stack()
    report = evt.explain(lambda x: model(x, "selective").backward(), torch.randn(256, 64))
    forward = [r for r in report.regions if r.side == "forward"]
    assert any("aten.gelu" in r.fused for r in forward), forward  # still fused in the forward
    assert all(r.saved_for_backward <= 256 * 256 * 4 for r in forward), forward  # h alone (fp32)


def test_evt_dump_writes_the_kernel_that_runs(tmp_path, monkeypatch, capsys):
    """`evt dump` writes each region's kernel as the run launches it: a checkpointed block's
    forward fc1 kernel without the store the split leaves unread."""
    from evt.cli import main
    from evt.examples import EXAMPLES, Example

    torch.manual_seed(0)
    model, x = Stack(), torch.randn(256, 64)
    report = evt.explain(lambda x: model(x, True).backward(), x)
    pruned = {n: spec for g in report.graphs for n, (spec, _) in g.pruned.items()}
    joint = {r.name: r.spec for r in report.regions}
    example = Example("checkpointed blocks", lambda dtype, device: (lambda x: model(x, True).backward(), (x,)))
    monkeypatch.setitem(EXAMPLES, "mlp", example)
    assert main(["dump", "--example", "mlp", "--out", str(tmp_path), "--dtype", "f32"]) == 0
    assert pruned
    for name, spec in pruned.items():
        tree = (tmp_path / f"{name}.tree.txt").read_text()
        assert tree == ir.format_tree(spec) != ir.format_tree(joint[name]), name
