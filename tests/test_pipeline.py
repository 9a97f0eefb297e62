"""Capture -> passes -> partition -> lowering -> reference execution, against eager (CPU)."""

import warnings

import pytest
import torch

import evt
from evt.examples import EXAMPLES, MLP
from tests.graphs import Arith, LinearAct, rel_err, train_compare

TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2}


def test_entry_point_registers_backend():
    assert "evt" in torch._dynamo.list_backends()


def test_mlp_regions_forward_and_backward():
    step, args = EXAMPLES["mlp"].build(torch.float32, "cpu")
    report = evt.explain(step, *args)
    got = [(r.side, r.anchor, r.fused) for r in report.regions]
    assert got == [
        ("forward", "aten.addmm", ["aten.gelu"]),
        # the residual, and the loss's mean of squares as a sum over everything (split_full_means)
        ("forward", "aten.addmm", ["aten.add", "aten.pow", "aten.sum"]),
        # GELU' in the dgrad GEMM, and fc1's bias gradient (a sum over M) with it
        ("backward", "aten.mm", ["aten.gelu_backward", "aten.sum"]),
        ("backward", "aten.mm", ["aten.add"]),  # residual gradient
    ]
    assert report.unfused_gemms == 2  # the two weight-gradient GEMMs have nothing to fuse
    assert all(r.bytes_saved > 0 for r in report.regions)
    assert "evt_b2_mm" in str(report)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mlp_training_matches_eager(dtype):
    torch.manual_seed(0)
    errs = train_compare(MLP(64, 256), [torch.randn(128, 64)], dtype)
    assert set(errs) == {
        "out",
        "grad_in0",
        "grad_fc1.weight",
        "grad_fc1.bias",
        "grad_fc2.weight",
        "grad_fc2.bias",
    }
    assert max(errs.values()) < TOL[dtype], errs


@pytest.mark.parametrize("act", ["gelu", "gelu_tanh", "relu", "none"])
def test_linear_activation(act):
    torch.manual_seed(1)
    model = LinearAct(act=act)
    errs = train_compare(model, [torch.randn(40, 32)], torch.float32)
    assert max(errs.values()) < TOL[torch.float32], errs
    report = evt.explain(
        lambda x: model(x).sum().backward(), torch.randn(40, 32, requires_grad=True)
    )
    forward = [r.fused for r in report.regions if r.side == "forward"]
    # the loss, `sum()` of the output, is a scalar reduction of the same kernel
    assert forward == [([] if act == "none" else [f"aten.{act.split('_')[0]}"]) + ["aten.sum"]]


def test_arithmetic_scalars_casts():
    torch.manual_seed(2)
    x, r = torch.randn(24, 32), torch.randn(24, 48)
    errs = train_compare(Arith(), [x, r], torch.float32)
    assert max(errs.values()) < TOL[torch.float32], errs
    m = Arith()
    report = evt.explain(lambda x, r: m(x, r).sum().backward(), x.requires_grad_(), r)
    fwd = [r for r in report.regions if r.side == "forward"]
    assert len(fwd) == 1
    assert {"aten.mul", "aten.sub", "aten.div", "aten.neg", "aten.add"} <= set(fwd[0].fused)


def test_inference_graph_forms_forward_regions():
    torch.manual_seed(3)
    model = MLP(64, 256)
    x = torch.randn(32, 64)
    with torch.no_grad():
        report = evt.explain(model, x)
        assert [r.side for r in report.regions] == ["forward", "forward"]
        compiled = torch.compile(model, backend="evt", options={"rest": "eager"})
        assert rel_err(compiled(x), model(x)) < 1e-5


def test_region_formation_does_not_depend_on_dtype():
    def regions(dtype):
        model = MLP(64, 128).to(dtype)
        x = torch.randn(32, 64, dtype=dtype, requires_grad=True)
        report = evt.explain(lambda x: model(x).sum().backward(), x)
        return [(r.side, r.anchor, r.fused) for r in report.regions]

    assert regions(torch.float32) == regions(torch.bfloat16)


def test_inductor_route_trains():
    torch.manual_seed(4)
    errs = train_compare(MLP(32, 64), [torch.randn(16, 32)], torch.float32, rest="inductor")
    assert max(errs.values()) < TOL[torch.float32], errs


def test_bad_option_is_a_clear_error():
    with pytest.raises(Exception, match="rest"):
        torch.compile(MLP(8, 8), backend="evt", options={"rest": "nope"})(torch.randn(2, 8))


@pytest.mark.parametrize("nested", [False, True], ids=["copies", "in-place"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_3d_activations_sink_views_and_match_eager(dtype, nested, monkeypatch):
    monkeypatch.setenv("EVT_NESTED_BATCH", "1" if nested else "0")
    monkeypatch.setenv("EVT_SDPA", "0")  # evt's own kernels for the attention as written
    from evt.examples import BertLayer

    torch.manual_seed(5)
    model = BertLayer(64, 4, 128)
    errs = train_compare(model, [torch.randn(2, 16, 64)], dtype)
    assert max(errs.values()) < TOL[dtype] * 2, errs  # two LayerNorms amplify bf16 rounding
    x = torch.randn(2, 16, 64, dtype=dtype, requires_grad=True)
    probe = torch.randn(2, 16, 64, dtype=dtype)
    report = evt.explain(lambda x: (model(x) * probe).sum().backward(), x)
    fused = [op for r in report.regions for op in r.fused]
    assert "aten.gelu" in fused and "aten.gelu_backward" in fused
    forward = [(r.anchor, r.fused) for r in report.regions if r.side == "forward"]
    # Q·Kᵀ / sqrt(d), proj+res, fc1+gelu, fc2+res; in place also P·V (alone: it frees v's copy)
    assert len(forward) == 4 + nested and (("aten.bmm", []) in forward) == nested
    assert forward[0][0] == "aten.bmm" and "aten.div" in forward[0][1]  # bf16: + softmax's upcast


def test_report_says_why_each_gemm_stayed_unfused():
    model = MLP(32, 64)
    x = torch.randn(16, 32, requires_grad=True)
    report = evt.explain(lambda x: model(x).sum().backward(), x)  # .sum(): an expanded gradient
    reasons = {why for _, side, why in report.unfused if side == "backward"}
    assert any("unit-stride" in why for why in reasons), report.unfused
    assert len(report.unfused) == report.unfused_gemms
    assert "unfused" in str(report)


def test_evt_unfuse_leaves_the_regions_it_names_unfused_and_training_matches(monkeypatch):
    """`EVT_UNFUSE` (fnmatch patterns over region names) leaves those regions to the unfused
    path, says so in the report, and the step still matches eager."""
    step, args = EXAMPLES["mlp"].build(torch.float32, "cpu")
    names = [r.name for r in evt.explain(step, *args).regions]
    assert len(names) == 4 and sum(n.startswith("evt_b") for n in names) == 2, names
    monkeypatch.setenv("EVT_UNFUSE", f" {names[0]}, evt_b* ")
    report = evt.explain(step, *args)
    assert [r.name for r in report.regions] == names[1:2]
    requested = [why for _, _, why in report.unfused if "EVT_UNFUSE" in why]
    assert len(requested) == 3 and any(names[0] in why for why in requested), report.unfused
    errs = train_compare(MLP(32, 64), [torch.randn(16, 32)], torch.float32)
    assert max(errs.values()) < 1e-4, errs


@pytest.mark.parametrize("name", ["step/llama", "step/gpt2_selective"])
def test_with_every_region_vetoed_the_rewrites_around_them_leave_a_valid_graph(name, monkeypatch):
    """Every region left unfused (as a profitability check or max-autotune may leave them): the
    rewrites made around the regions before the vetoes (recompute_outside's chains, LLaMA's
    RMSNorm backward; recompute_for_backward's, selective checkpointing) leave the nodes in
    order, so the pipeline does not fail and leave the whole graph unfused. Until session 49 they
    copied a chain in reverse (`inserting_after` puts each new node right after the same one),
    which only the lowering's reordering repaired, and putting the graph back then raised in
    training."""
    from evt.bench import plan, steps

    case = {c.name: c for c in plan.all_cases(small=True)}[name]
    w = steps.build(case, torch.bfloat16, "cpu")
    monkeypatch.setenv("EVT_UNFUSE", "evt_*")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = evt.explain(w.target, *w.make_inputs(0))
    assert not [str(c.message) for c in caught if "evt:" in str(c.message)]
    assert not report.regions and report.unfused
    assert any("EVT_UNFUSE" in why for _, _, why in report.unfused), report.unfused


def _rewrites_then_raises(graph):
    first = next(n for n in graph.nodes if n.op == "call_function")
    with graph.inserting_after(first):
        graph.call_function(torch.ops.aten.neg.default, (first,))  # a rewrite, then
    raise RuntimeError("injected pass failure")


def _leaves_a_node_before_its_input(graph):
    """Session 49: putting such a graph back raised, and Dynamo failed the step."""
    first = next(n for n in graph.nodes if n.op == "call_function")
    with graph.inserting_after(first):  # each right after `first`: `exp` lands before `neg`
        neg = graph.call_function(torch.ops.aten.neg.default, (first,))
        graph.call_function(torch.ops.aten.exp.default, (neg,))
    graph.lint()  # raises: used before it is defined


@pytest.mark.parametrize("failing", [_rewrites_then_raises, _leaves_a_node_before_its_input])
def test_a_failing_pass_leaves_the_graph_as_it_came_and_training_runs(failing, monkeypatch):
    """A pass that rewrites the graph and then fails (here: a view spelling a symbolic size as a
    literal, caught by the final verifier, or any exception), even one that leaves a node before
    one it reads, must not leave a half-rewritten graph: the backend puts the graph back, warns
    once, and the step matches eager."""
    from evt import backend, pipeline
    from evt.graph.capture import capture_joint

    graph = capture_joint(MLP(8, 16), torch.randn(4, 8, requires_grad=True))
    before = [(n.op, str(n.target)) for n in graph.nodes]
    monkeypatch.setattr(pipeline, "GRAPH_PASSES", [*pipeline.GRAPH_PASSES, ("failing", failing)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert backend.fuse_graph(graph) is None
    graph.lint()
    assert [(n.op, str(n.target)) for n in graph.nodes] == before
    assert [str(w.message) for w in caught if "graph left unfused" in str(w.message)]
    errs = train_compare(MLP(8, 16), [torch.randn(4, 8)], torch.float32)
    assert max(errs.values()) < 1e-5, errs


def test_the_verifier_rejects_a_symbolic_size_written_as_a_literal():
    from torch.fx import Graph
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from evt.errors import GraphVerifyError
    from evt.graph.verify import verify

    size = ShapeEnv().create_unbacked_symint()
    g = Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(8)
    v = g.call_function(torch.ops.aten.view.default, (x, [size, 4]))
    v.meta["val"] = torch.empty(2, 4)
    g.output((v,))
    with pytest.raises(GraphVerifyError, match="symbolic size written as a literal"):
        verify(g, after="test")


def test_symbolic_view_sizes_come_from_the_graphs_symint_inputs():
    """sink_views builds a symbolic size (M = s0 * s1 * 2, and sums and floor divisions:
    `x.view(2, x.shape[0] // 2, ...)` flattens to 2 * (s0 // 2) * s1) from the SymInt
    placeholders, so no `sym_size` reads the GEMM or epilogue value being viewed (that user split
    regions); a size whose symbol is not an input gets None (the caller falls back to
    `sym_size`)."""
    import operator

    from torch.fx import Graph
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from evt.graph.sink_views import size_from_inputs, size_terms

    env = ShapeEnv()
    s0, s1, s2 = (env.create_unbacked_symint() for _ in range(3))
    g = Graph()
    p0, p1 = g.placeholder("b"), g.placeholder("s")
    p0.meta["val"], p1.meta["val"] = s0, s1
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(4)

    def evaluate(n, b, s):
        if not isinstance(n, torch.fx.Node):
            return n
        if n is p0 or n is p1:
            return b if n is p0 else s
        return n.target(*(evaluate(a, b, s) for a in n.args))

    built = size_from_inputs(g, (s0 * s1 * 2).node.expr, x)
    assert built is not None and built.target is operator.mul
    factors, stack = [], [built]
    while stack:
        n = stack.pop()
        if isinstance(n, torch.fx.Node) and n.target is operator.mul:
            stack.extend(n.args)
        else:
            factors.append(n)
    assert sorted(map(str, factors)) == ["2", "b", "s"]
    assert size_from_inputs(g, s0.node.expr, x) is p0
    assert size_from_inputs(g, (s0 * s2).node.expr, x) is None
    for size, want in (((s0 // 2) * s1 * 2, lambda b, s: b // 2 * s * 2),
                       (s0 + s1 - 1, lambda b, s: b + s - 1)):  # fmt: skip
        built = size_from_inputs(g, size.node.expr, x)
        assert built is not None
        assert [evaluate(built, b, s) for b, s in ((7, 3), (10, 5))] == [want(7, 3), want(10, 5)]
    nodes = len(g.nodes)  # the terms alone (`recompute_inside` asks before it copies)
    assert size_terms(g, (s0 * s1 * 2).node.expr) == (operator.mul, [p0, p1, 2])
    assert size_terms(g, (s0 * s2).node.expr) is None and len(g.nodes) == nodes


def test_a_view_merging_symbolic_leading_dims_is_proven_from_strides(monkeypatch):
    """`sink_views._viewable` (can the input view as [prod(leading), *rest]?) proves it from the
    strides where it can, without torch's view check (seconds a call on Swin's symbolic windows),
    and adds no guard; a permuted input that cannot view so is refused either way."""
    from torch._dynamo.source import ConstantSource
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from evt.graph import sink_views

    env = ShapeEnv()
    b, s = (env.create_symintnode(env.create_symbol(h, ConstantSource(n)), hint=h)
            for n, h in (("b", 4), ("s", 6)))  # fmt: skip
    with FakeTensorMode(shape_env=env):
        x = torch.empty(b, s, 3, 8)
        t = x.permute(1, 0, 2, 3)  # [s, b, 3, 8]: s and b do not merge in place
    asked = []
    monkeypatch.setattr(torch.Tensor, "view", lambda self, *a: asked.append(a) or self)
    assert sink_views._viewable(x, (b * s * 3, 8)) and sink_views._viewable(x, (b * s, 3, 8))
    assert asked == [] and env.guards == []
    monkeypatch.undo()
    assert not sink_views._viewable(t, (s * b * 3, 8)) and not sink_views._viewable(t, (s * b, 3, 8))


def test_a_linear_on_a_transposed_activation_fuses(monkeypatch):
    """`silu(linear(x.transpose(0, 1))).transpose(0, 1) + x`: the residual add's [B, S, D] input
    cannot be viewed as the GEMM's [S·B, D] in place, so sink_views must leave that add (torch's
    fake `view` raised ValueError, which the pass did not catch: the whole graph was left
    unfused, found by the model fuzzer), and the activation still joins the GEMM."""
    import warnings

    # the ILP's choice (the activation's only reader is the add, so trim_for_inductor would give
    # it to Inductor: the pre-activation is saved for the backward anyway)
    monkeypatch.setenv("EVT_TRIM", "0")
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 16)
    x = torch.randn(2, 8, 16, requires_grad=True)

    def step(x):
        y = torch.nn.functional.silu(lin(x.transpose(0, 1))).transpose(0, 1) + x
        (y * torch.linspace(-1, 1, 16)).sum().backward()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = evt.explain(step, x)
    assert not [w for w in caught if "graph left unfused" in str(w.message)]
    assert any("aten.silu" in r.fused for r in report.regions), str(report)


def test_division_by_a_number_is_a_multiply_by_its_float32_reciprocal():
    """x / 3 in an epilogue is x * float32(1 / 3), as ATen's CUDA kernel divides by a CPU scalar:
    eager's bits, and no IEEE division per element (a slow-path call in the SASS)."""
    from evt import ir

    w = torch.randn(48, 32)
    report = evt.explain(lambda x: (x @ w.t()) / 3.0, torch.randn(24, 32))
    (region,) = report.regions
    nodes = region.spec.nodes
    assert not [n for n in nodes if isinstance(n, ir.Compute) and n.op == "div"], nodes
    (scalar,) = [n for n in nodes if isinstance(n, ir.ScalarBroadcast)]
    assert scalar.value == (torch.tensor(1.0) / torch.tensor(3.0)).item() != 1 / 3


def test_an_einsums_permuted_result_takes_its_activation():
    """`einsum("bhsd,hde->bhse")` is a bmm over h whose [H, B·S, E] result is viewed to [H, B, S,
    E] and permuted to [B, H, S, E]; the ReLU and the scale after it sink above the permute and
    the view (`sink_views._sink_layout`) into the bmm's epilogue. With dynamic shapes the view
    stays (its sizes are symbolic), and the step still trains like eager."""
    import copy

    from tests.nn_catalog import EinsumHeads

    torch.manual_seed(0)
    model = EinsumHeads(32)
    x = torch.randn(2, 8, 32)
    errs = train_compare(copy.deepcopy(model), [x], torch.float32)
    assert max(errs.values()) < 1e-5, errs
    probe = torch.randn(2, 4, 8, 8)
    report = evt.explain(lambda x: (model(x) * probe).sum().backward(), x)
    forward = [(r.anchor, r.fused) for r in report.regions if r.side == "forward"]
    assert len(forward) == 1 and forward[0][0] == "aten.bmm" and "aten.relu" in forward[0][1], forward

    torch._dynamo.reset()
    twin = copy.deepcopy(model)
    compiled = torch.compile(twin, backend=evt.backend.evt_backend, options={"rest": "eager"},
                             dynamic=True)  # fmt: skip
    for rows in (8, 12):
        xs = torch.randn(2, rows, 32)
        model.zero_grad(), twin.zero_grad()
        got, want = compiled(xs), model(xs)
        got.square().sum().backward(), want.square().sum().backward()
        assert rel_err(got, want) < 1e-5 and rel_err(twin.w.grad, model.w.grad) < 1e-5
