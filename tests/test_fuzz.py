"""CPU tier of the differential fuzzer (`evt.testing`): generated specs are valid, render, round-trip
through JSON and cover the IR, nested batches (L = L1 x L2) included; the reference runs them
without inf or NaN on the fuzz inputs, which fit the guards at every fuzz shape (a nested spec's
operands as strided views of larger tensors, with two batch strides); the checker rejects what the
generator must not make; the minimizer shrinks a spec with an injected failure to a 1-minimal
one."""

from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path

import pytest
import torch

from evt import ir
from evt.codegen.emit import render
from evt.codegen.visitor import plan_visitor
from evt.runtime import guards, reference
from evt.testing import fuzz
from evt.testing.compare import SHAPES
from evt.testing.inputs import NESTED_BATCH, make_inputs
from evt.testing.minimize import candidates_of, minimize
from tests import specs

SEEDS = range(300)
REGRESSIONS = sorted((Path(__file__).parent / "fuzz_regressions").glob("*.json"))


@pytest.fixture(scope="module")
def generated() -> dict[int, ir.KernelSpec]:
    return {s: fuzz.generate(s) for s in SEEDS}


def test_specs_are_valid_render_and_round_trip(generated):
    for seed, spec in generated.items():
        assert fuzz.check(spec) == [], seed
        assert ir.from_json(ir.to_json(spec)) == spec
        assert ('"nested":true' in ir.to_json(spec)) == spec.gemm.nested, seed
        source = render(spec)
        assert "using CustomEVT" in source, seed
        assert ("{M, N, K, cute::make_shape(L1, L2)}" in source) == spec.gemm.nested, seed


def test_generation_is_deterministic():
    assert [fuzz.generate(s) for s in range(5)] == [fuzz.generate(s) for s in range(5)]


def _features(spec: ir.KernelSpec) -> set[str]:
    out = {n.kind for n in spec.nodes} | {f"op:{n.op}" for n in spec.nodes if n.kind == "compute"}
    out |= {f"{n.kind}:{n.dtype}" for n in spec.nodes if hasattr(n, "dtype")}
    out |= {
        f"d:{spec.d_dtype}",
        f"gemm:{spec.gemm.dtype}",
        "dag" if plan_visitor(spec).dag else "tree",
    }
    out |= {f"keepdim:{n.keepdim}" for n in spec.nodes if isinstance(n, ir.RowReduction)}
    reads = collections.Counter(a for n in spec.nodes for a in ir.node_args(n))
    writers = {n.name for n in spec.nodes if isinstance(n, (ir.AuxStore, ir.RowReduction))}
    out |= {"shared"} if any(c > 1 for c in reads.values()) else set()
    out |= {"read-through"} if writers & {a for n in spec.nodes for a in ir.node_args(n)} else set()
    out |= {
        f"outputs:{min(spec.num_outputs, 4)}",
        f"a:{spec.gemm.a.major}",
        f"b:{spec.gemm.b.major}",
    }
    if spec.gemm.nested:
        out |= {"nested", f"nested a:{spec.gemm.a.major}", f"nested b:{spec.gemm.b.major}"}
        out |= {f"nested {n.kind}" + " every batch" * getattr(n, "broadcast_l", False)
                for n in spec.nodes}  # fmt: skip
    return out


def test_coverage(generated):
    seen = set().union(*(_features(s) for s in generated.values()))
    want = {k for k in ir.NODE_TYPES if k not in fuzz.NOT_DRAWN}
    want |= {f"op:{op}" for op in fuzz.WEIGHTS}  # every op but
    assert set(ir.COMPUTE_OPS) - set(fuzz.WEIGHTS) == set(fuzz.FORMS + fuzz.LATER)  # these four
    want |= {"aux_load:b8", "aux_load:f16", "aux_load:f32", "aux_store:b8", "aux_store:f32",
             "compute:bf16", "compute:f16", "row_reduction:bf16", "d:b8", "d:f16", "d:f32",
             "gemm:f16", "dag", "tree", "keepdim:True", "keepdim:False", "shared",
             "read-through", "outputs:4", "a:m", "b:n"}  # fmt: skip
    want |= {f"nested {k}" for k in ("a:k", "a:m", "b:k", "b:n", "aux_load", "aux_load every batch",
                                     "row_broadcast", "col_broadcast", "aux_store",
                                     "col_reduction", "scalar_reduction", "softmax_stats",
                                     "welford")}  # fmt: skip
    assert want <= seen, want - seen
    nested = [s for s in generated.values() if s.gemm.nested]
    assert 20 <= len(nested) <= 80, len(nested)  # fuzz.NESTED = 0.15 of the seeds
    assert not any(isinstance(n, ir.NOT_NESTED) for s in nested for n in s.nodes)


def test_reference_is_finite_and_inputs_fit_the_guards(generated):
    for seed in [s for s in SEEDS if not generated[s].gemm.nested][:100]:
        spec = generated[seed]
        for M, N, K in SHAPES[1:]:
            inputs = make_inputs(spec, M, N, K, seed)
            guards.check(spec, [guards.TensorInfo.of(t) for t in inputs])
            for i, out in enumerate(reference.run(spec, inputs)):
                assert torch.isfinite(out.float()).all(), (seed, i)


def test_nested_inputs_are_strided_views_the_guards_and_the_reference_take(generated):
    """Every nested seed at the fuzz shapes with residues (the first 5 also at whole tiles): the
    guards take the inputs as a nested batch NESTED_BATCH; each operand passed as [L1, L2, rows,
    cols] is a view of a larger tensor whose L1 stride is not L2 times its L2 stride (no flat L
    stride could read it); the reference's outputs are
    finite, contiguous [L1 * L2, M, N] and equal to its outputs on contiguous copies."""
    nested = [s for s in SEEDS if generated[s].gemm.nested]
    for seed in nested:
        spec, g = generated[seed], generated[seed].gemm
        for M, N, K in SHAPES if seed in nested[:5] else SHAPES[1:]:
            inputs = make_inputs(spec, M, N, K, seed)
            p = guards.check(spec, [guards.TensorInfo.of(t) for t in inputs])
            assert p.nested == NESTED_BATCH and p.abi_shape == (M, N, K, *NESTED_BATCH)
            views = [inputs[i] for i in (g.a.input, g.b.input) if inputs[i].dim() == 4]
            assert views, seed  # the kernel takes (L1, L2) from an operand's view
            for t in views:
                assert not t.is_contiguous(), seed
                assert t.stride(0) != NESTED_BATCH[1] * t.stride(1), seed
            outs = reference.run(spec, inputs)
            # [L1 * L2, M, N]; M-vectors [L1 * L2, M(, 1)]; scalars [] or [1, 1, 1]
            shapes = spec.output_shapes(M, N, 6)
            for i, out in enumerate(outs):
                assert torch.isfinite(out.float()).all(), (seed, i)
                assert out.shape == shapes[i] and out.is_contiguous(), (seed, i)
                assert out.numel() == 1 or out.shape[:2] == (6, M), (seed, i)
            if M < 512:
                dense = reference.run(spec, [t.contiguous() for t in inputs])
                assert all(map(torch.equal, outs, dense)), seed


def test_nested_layouts_cover_the_forms():
    """Across nested seeds the inputs take every form: operand views and flat operands, padded
    and unpadded rows, per-batch aux tensors as views and flat, [M, N] and [1, M, N] tensors
    every batch reads."""
    forms: set[str] = set()
    for seed in [s for s in range(160) if fuzz.generate(s).gemm.nested]:
        spec = fuzz.generate(seed)
        inputs = make_inputs(spec, *SHAPES[2], seed)
        for n in spec.nodes:
            if isinstance(n, ir.AuxLoad):
                t = inputs[n.input]
                forms.add(f"aux {t.dim()}d" + " every batch" * n.broadcast_l)
        for op in (spec.gemm.a, spec.gemm.b):
            t = inputs[op.input].mT if op.transposed else inputs[op.input]
            inner = t.shape[-1] if t.stride(-1) == 1 else t.shape[-2]
            step = t.stride(1) if t.dim() == 4 else max(t.stride()[-2:])  # L2's, or a row's
            forms.add(f"operand {t.dim()}d")
            forms.add("padded" if step > inner else "unpadded")
    assert forms >= {"operand 4d", "operand 3d", "padded", "unpadded", "aux 4d", "aux 3d",
                     "aux 2d every batch", "aux 3d every batch"}, forms  # fmt: skip


def test_the_fuzz_gemm_is_exact():
    spec = fuzz.generate(0)
    inputs = make_inputs(spec, 64, 48, 264, seed=3)
    g = spec.gemm
    a = inputs[g.a.input].mT if g.a.transposed else inputs[g.a.input]
    b = inputs[g.b.input].mT if g.b.transposed else inputs[g.b.input]
    exact = a.double() @ b.double()
    assert torch.equal((a.float() @ b.float()).double(), exact) and exact.abs().max() <= 4


def test_timing_inputs_are_a_layers_operands_laid_out_as_the_checked_ones(generated):
    """`normal=True` (what config sweeps time on): A ~ N(0, 1), B ~ N(0, 1/K), every tensor
    with the exact inputs' shape, strides and dtype, so the kernel takes both alike."""
    for spec in list(generated.values())[:8]:
        exact = make_inputs(spec, 64, 48, 1024, seed=3)
        timed = make_inputs(spec, 64, 48, 1024, seed=3, normal=True)
        layout = [(t.shape, t.stride(), t.dtype) for t in exact]
        assert [(t.shape, t.stride(), t.dtype) for t in timed] == layout, spec.name
    flat = next(s for s in generated.values() if not s.gemm.nested)
    timed = make_inputs(flat, 64, 48, 1024, seed=3, normal=True)
    a, b = timed[flat.gemm.a.input], timed[flat.gemm.b.input]
    assert 0.9 < a.float().std() < 1.1 and 0.9 < b.float().std() * 1024**0.5 < 1.1
    assert len(torch.unique(a.float())) > 3  # not ternary


def _spec(*nodes: ir.Node, d: str, d_dtype: str = "bf16", inputs: int = 2) -> ir.KernelSpec:
    return ir.KernelSpec("k", specs.LINEAR, (ir.AccFetch("acc"), *nodes), d, d_dtype, inputs)


def _nested(spec: ir.KernelSpec) -> ir.KernelSpec:
    return dataclasses.replace(spec, gemm=specs.nested_attention_scores().gemm)


C, E = ir.ScalarBroadcast("c", 0.5), ir.Compute("e", "exp", ("acc",))


@pytest.mark.parametrize(
    "spec, problem",
    [
        (_spec(ir.Compute("l", "log", ("acc",)), d="l"), "unsafe"),  # log of a negative
        (_spec(C, E, ir.Compute("g", "gt", ("e", "c")), d="g"), "unsafe"),  # unstable mask
        (_spec(C, E, ir.Compute("w", "where", ("e", "acc", "c")), d="w"), "unsafe"),
        (_spec(ir.AuxStore("s", "acc", 1, "b8"), d="acc"), "not a mask"),
        (_spec(E, d="acc", d_dtype="f32"), "dead"),
        (_spec(ir.Compute("n", "neg", ("x",)), d="n"), "before it is defined"),
        (
            _spec(
                *(ir.AuxLoad(f"x{i}", 2 + i, "bf16", "n") for i in range(5)),
                ir.Compute("m", "add", ("x0", "x1")),
                d="m",
                inputs=7,
            ),
            "aux loads",
        ),  # fmt: skip
        (_spec(ir.AuxLoad("x", 3, "bf16", "n"), d="x", inputs=4), "inputs"),
        (_spec(ir.Compute("g", "gt", ("acc", "acc")), d="g", d_dtype="b8"), None),  # valid
        (_nested(_spec(ir.RowReduction("r", "acc", 1, "f32"), d="acc")), "nested batch"),
        (_nested(_spec(ir.ScalarReduction("r", "acc", 1, "f32"), d="acc")), None),
        (_nested(_spec(ir.ColReduction("r", "acc", 1, "f32"), d="acc")), None),  # over N: valid
        (_nested(_spec(ir.AuxLoad("x", 2, "bf16", "n", True), ir.Compute("m", "add", ("acc", "x")),
                       d="m", inputs=3)), None),  # fmt: skip
        (_spec(ir.AuxLoad("x", 2, "bf16", "n", True), ir.Compute("m", "add", ("acc", "x")),
               d="m", inputs=3), "every batch of an unbatched"),  # fmt: skip
        (dataclasses.replace(_spec(d="acc"), gemm=specs.attention_scores().gemm), "flat batched"),
        (dataclasses.replace(_spec(d="acc"), gemm=dataclasses.replace(
            specs.nested_attention_scores().gemm, batched=False)), "not batched"),  # fmt: skip
    ],
)
def test_check_rejects(spec, problem):
    found = fuzz.check(spec)
    assert (not found) if problem is None else any(problem in p for p in found), found


def _has_masked_where(spec: ir.KernelSpec) -> bool:
    """The injected failure: a `where` whose condition is a comparison."""
    ops = {n.name: n.op for n in spec.nodes if isinstance(n, ir.Compute)}
    return any(op == "where" and ops.get(spec.node(n).args[0], "") in fuzz.COMPARE
               for n, op in ops.items())  # fmt: skip


def test_minimizer_shrinks_an_injected_failure_to_a_minimal_spec(generated):
    failing = [s for s in generated.values() if _has_masked_where(s)]
    assert len(failing) >= 5
    for spec in failing[:10]:
        small = minimize(spec, _has_masked_where)
        assert _has_masked_where(small) and fuzz.check(small) == []
        assert len(small.nodes) <= 6 and small.num_outputs == 1, ir.format_tree(small)
        smaller = [c for c in candidates_of(small) if len(c.nodes) < len(small.nodes)]
        assert not any(_has_masked_where(c) and not fuzz.check(c) for c in smaller)


def test_minimizer_keeps_a_nested_batch_runnable(generated):
    """A nested spec shrinks to a valid nested one whose fuzz inputs still fit the guards."""

    def every_batch(s: ir.KernelSpec) -> bool:
        return any(isinstance(n, ir.AuxLoad) and n.broadcast_l for n in s.nodes)

    spec = next(s for s in generated.values() if s.gemm.nested and every_batch(s) and len(s.nodes) > 12)
    small = minimize(spec, every_batch)
    assert small.gemm == spec.gemm and fuzz.check(small) == [] and len(small.nodes) <= 4
    inputs = make_inputs(small, *SHAPES[2], seed=1)
    assert guards.check(small, [guards.TensorInfo.of(t) for t in inputs]).nested == NESTED_BATCH


def test_minimizer_keeps_the_spec_when_nothing_smaller_fails(generated):
    spec = generated[3]
    assert minimize(spec, lambda s: s == spec) is spec


@pytest.mark.parametrize("path", REGRESSIONS, ids=[p.stem for p in REGRESSIONS])
def test_regression_specs_are_valid(path):
    body = json.loads(path.read_text())
    spec = ir.from_json(body["spec"])
    assert fuzz.check(spec) == [] and len(body["shape"]) == 3
    render(spec)


def test_gpu_runner_logs_minimizes_and_writes_regressions(tmp_path, monkeypatch):
    """scripts/fuzz_gpu.py's flow without a GPU: builds and cases faked, the failure injected."""
    from evt.testing.compare import Failure
    from scripts import fuzz_gpu

    built: list[str] = []
    monkeypatch.setattr(fuzz_gpu.build, "prefetch", lambda spec: built.append(spec.name))
    fake = Failure("mismatch", "injected")
    monkeypatch.setattr(fuzz_gpu, "run_case", lambda spec, shape, seed: fake
                        if _has_masked_where(spec) and shape == SHAPES[1] else None)  # fmt: skip
    assert fuzz_gpu.main(["--count", "6", "--seed", "16", "--out", str(tmp_path)]) == 1
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [e["seed"] for e in log] == list(range(16, 22)) and len(built) >= 6
    failed = [e for e in log if e["status"] == "fail"]
    assert failed and all(e["kind"] == "mismatch" and e["shape"] == list(SHAPES[1]) for e in failed)
    for e in failed:
        body = json.loads(Path(e["regression"]).read_text())
        small = ir.from_json(body["spec"])
        assert body["seed"] == e["seed"] and _has_masked_where(small) and len(small.nodes) <= 6


def test_gpu_runner_runs_only_nested_seeds_when_asked(tmp_path, monkeypatch):
    from scripts import fuzz_gpu

    ran: list[tuple[int, tuple]] = []
    monkeypatch.setattr(fuzz_gpu.build, "prefetch", lambda spec: None)
    monkeypatch.setattr(fuzz_gpu, "run_case", lambda spec, shape, seed: ran.append((seed, shape)))
    assert fuzz_gpu.main(["--nested-only", "--count", "4", "--seed", "7", "--out", str(tmp_path)]) == 0
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    want = [s for s in range(7, 200) if fuzz.generate(s).gemm.nested][:4]
    assert [e["seed"] for e in log] == want and all(e["status"] == "ok" for e in log)
    assert ran == [(s, shape) for s in want for shape in SHAPES]
