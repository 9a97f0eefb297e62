"""`recompute_inside` (default on; `EVT_RECOMPUTE_INSIDE=0` turns it off): LayerNorm's backward kernel computes
x̂ = (float(x) - mean) * rstd in its epilogue from the bf16 input and the row statistics instead
of loading the fp32 x̂ the forward computed, so AOTAutograd's partitioner saves the bf16 x as it
does without evt, not the fp32 x̂ (CPU tier: a meta capture for what is saved at CUDA's layout
decisions, the reference path for the numbers)."""

from __future__ import annotations

import collections
import copy
import math

import pytest
import torch
from torch import nn

import evt.backend
from evt import ir
from evt.runtime import reference
from tests.graphs import rel_err


class PreNormStack(nn.Module):
    def __init__(self, blocks: int = 2, d: int = 256, h: int = 1024):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.ModuleDict({"ln": nn.LayerNorm(d), "fc1": nn.Linear(d, h), "fc2": nn.Linear(h, d)})
            for _ in range(blocks)
        )

    def forward(self, x):
        for b in self.blocks:
            x = x + b["fc2"](nn.functional.gelu(b["fc1"](b["ln"](x))))
        return x.float().pow(2).mean()


def saved(model, x, backend, width: int | None = None) -> collections.Counter:
    """((tokens, width), dtype) -> count of the [tokens, width] tensors one step saves ([batch,
    seq, width] alike); `width`: x's last size unless given (a hidden layer's)."""
    torch._dynamo.reset()
    options = {"options": {"rest": "eager"}} if backend is evt.backend.evt_backend else {}
    fn = torch.compile(model, backend=backend, **options)
    out: collections.Counter = collections.Counter()
    width = width or x.shape[-1]
    tokens = x.numel() // x.shape[-1]

    def pack(t):
        if t.dim() and t.numel() == tokens * width and t.shape[-1] == width:
            out[((tokens, width), t.dtype)] += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(x)
    return out


@pytest.mark.parametrize("shape", [(512, 256), (2, 256, 256)], ids=["2d", "3d"])
@pytest.mark.parametrize("on", [False, True])
def test_the_backward_saves_the_bf16_input_not_the_fp32_xhat(monkeypatch, on, shape):
    """[tokens, d], and [batch, seq, d] (x̂ computed on [B, S, D], read by the GEMM over B·S rows
    through a view: the kernel computes it from the flattened x and statistics)."""
    monkeypatch.setenv("EVT_RECOMPUTE_INSIDE", "1" if on else "0")
    torch.manual_seed(0)
    model = PreNormStack().to(torch.bfloat16).to("meta")
    x = torch.randn(*shape, dtype=torch.bfloat16).to("meta")
    got, want = saved(model, x, evt.backend.evt_backend), saved(model, x, "aot_eager")
    tokens = (x.numel() // shape[-1], shape[-1])
    assert ((got == want) == on) and want[(tokens, torch.float32)] == 0, (got, want)


def run_both(monkeypatch, build) -> tuple[dict, dict]:
    """The backward regions' loads ((dtype, kind), sorted) and the gradients of one bf16 step
    with the pass off and on; `build()` -> (model, step function of the compiled model, args)."""
    loads, grads = {}, {}
    for on in (False, True):
        monkeypatch.setenv("EVT_RECOMPUTE_INSIDE", "1" if on else "0")
        ran: list[ir.KernelSpec] = []

        def recorded(spec, tensors, ran=ran, original=reference.run):
            ran.append(spec)
            return original(spec, tensors)

        monkeypatch.setattr(reference, "run", recorded)
        torch._dynamo.reset()
        model, step, args = build()
        step(*args).backward()
        loads[on] = sorted((n.dtype, n.kind) for s in ran if s.name.startswith("evt_b")
                           for n in s.nodes if n.kind in ("aux_load", "col_broadcast"))  # fmt: skip
        grads[on] = {n: p.grad.float() for n, p in model.named_parameters() if p.grad is not None}
    return loads, grads


@pytest.mark.parametrize("shape", [(512, 256), (2, 256, 256)], ids=["2d", "3d"])
def test_the_kernel_computes_xhat_from_loads_and_trains_like_without(monkeypatch, shape):
    def build():
        torch.manual_seed(0)
        model, x = PreNormStack().to(torch.bfloat16), torch.randn(*shape, dtype=torch.bfloat16)
        return model, torch.compile(model, backend=evt.backend.evt_backend, options={"rest": "eager"}), (x,)

    loads, grads = run_both(monkeypatch, build)
    # off: LayerNorm's backward kernels load the fp32 x̂ (beside GELU's bf16 pre-activations);
    # on: the bf16 x instead, and mean and rstd as column vectors
    assert loads[False].count(("f32", "aux_load")) == 2 and loads[False].count(("bf16", "aux_load")) == 2
    assert ("f32", "aux_load") not in loads[True] and loads[True].count(("bf16", "aux_load")) == 4
    assert sum(kind == "col_broadcast" for _, kind in loads[True]) == 4, loads
    assert max(rel_err(grads[True][n], grads[False][n]) for n in grads[False]) < 1e-6


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_transformers_train_like_without(monkeypatch, name):
    """GPT-2's and BERT's LayerNorm backward regions take the pass too (bf16, small sizes): each
    loads the bf16 input instead of the fp32 x̂, and the step is unchanged."""
    from evt import examples

    def build():
        torch.manual_seed(0)
        sizes = examples.Sizes(vocab=96, seq=16, dim=32, heads=2, hidden=64, batch=4)
        if name == "gpt2":
            model, args = examples.GPT2(sizes), examples.gpt2_inputs(sizes, "cpu")
        else:
            model, args = examples.Bert(sizes, "mlm"), examples.bert_inputs(sizes, "cpu", "mlm")
        model = model.to(torch.bfloat16)
        return model, torch.compile(model, backend=evt.backend.evt_backend, options={"rest": "eager"}), args

    loads, grads = run_both(monkeypatch, build)
    f32, bf16 = (("f32", "aux_load"), ("bf16", "aux_load"))
    fewer = loads[False].count(f32) - loads[True].count(f32)  # x̂ per LayerNorm backward kernel
    assert fewer > 0 and loads[True].count(bf16) - loads[False].count(bf16) == fewer, loads
    assert max(rel_err(grads[True][n], grads[False][n]) for n in grads[False]) < 1e-6


@pytest.mark.parametrize("shape", [(512, 256), (2, 256, 256)], ids=["2d", "3d"])
def test_dynamic_shapes_take_the_pass_too(monkeypatch, shape):
    """Under `dynamic=True` as with static shapes (before session 58 the pass was for static shapes
    only and the kernels loaded the fp32 x̂): the bf16 x and the statistics instead, the
    flattening view's symbolic sizes computed from the graph's inputs (3-D); the step trains like
    without the pass."""

    def build():
        torch.manual_seed(0)
        model, x = PreNormStack().to(torch.bfloat16), torch.randn(*shape, dtype=torch.bfloat16)
        compiled = torch.compile(model, backend=evt.backend.evt_backend, options={"rest": "eager"}, dynamic=True)
        return model, compiled, (x,)

    loads, grads = run_both(monkeypatch, build)
    assert loads[False].count(("f32", "aux_load")) == 2, loads
    assert ("f32", "aux_load") not in loads[True] and loads[True].count(("bf16", "aux_load")) == 4
    assert sum(kind == "col_broadcast" for _, kind in loads[True]) == 4, loads
    assert max(rel_err(grads[True][n], grads[False][n]) for n in grads[False]) < 1e-6


class SwiGLUStack(nn.Module):
    """LLaMA's MLP with a residual, no biases: x + down(silu(gate(x)) * up(x))."""

    def __init__(self, blocks: int = 2, d: int = 256, h: int = 512):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                {
                    n: nn.Linear(*io, bias=False)
                    for n, io in (("gate", (d, h)), ("up", (d, h)), ("down", (h, d)))
                }
            )  # fmt: skip
            for _ in range(blocks)
        )

    def forward(self, x):
        for b in self.blocks:
            x = x + b["down"](nn.functional.silu(b["gate"](x)) * b["up"](x))
        return x.float().pow(2).mean()


def step_grads(model, x, dtype, backend) -> tuple[dict[str, torch.Tensor], list[ir.KernelSpec]]:
    """One step of a copy of `model` in `dtype`, eager (`backend` None) or compiled (rest eager):
    its gradients (float64) and the specs of the regions it ran."""
    ran: list[ir.KernelSpec] = []
    original = reference.run

    def recorded(spec, tensors):
        ran.append(spec)
        return original(spec, tensors)

    m = copy.deepcopy(model).to(dtype)
    torch._dynamo.reset()
    fn = m if backend is None else torch.compile(m, backend=backend, options={"rest": "eager"})
    reference.run = recorded if backend else original
    try:
        fn(x.to(dtype)).backward()
    finally:
        reference.run = original
    return {n: p.grad.double() for n, p in m.named_parameters()}, ran


@pytest.mark.parametrize("on", [False, True])
def test_swiglu_backward_computes_silu_from_the_gate_it_loads(monkeypatch, on):
    """SwiGLU's backward kernel (the down projection's dgrad) loads g for silu's backward and
    read silu(g) too, so silu(g) was saved beside g, u and their product; computed from g in the
    epilogue (a 16-bit chain whose inputs the kernel loads anyway), the step saves what
    AOTAutograd's own partitioner saves (silu(g) recomputed: 3 per block, not 4)."""
    monkeypatch.setenv("EVT_RECOMPUTE_INSIDE", "1" if on else "0")
    model = SwiGLUStack().to(torch.bfloat16).to("meta")
    x = torch.randn(512, 256, dtype=torch.bfloat16).to("meta")
    got, want = (sum(saved(model, x, b, width=512).values()) for b in (evt.backend.evt_backend, "aot_eager"))
    assert want == 3 * 2 and got == want + (0 if on else 2), (got, want)


def test_swiglu_backward_loads_one_tensor_less_and_trains_as_eager():
    """Each block's backward kernel loads g and u (bf16), not silu(g) as well, and the step's
    gradients stay within eager's own bf16 error of the fp64 step (the kernel's silu(g) is not
    rounded to bf16: Inductor's recompute does the same)."""
    torch.manual_seed(0)
    model, x = SwiGLUStack(), torch.randn(512, 256)
    ran: list[ir.KernelSpec] = []
    grads = {}
    for name, dtype, backend in (("f64", torch.float64, None), ("eager", torch.bfloat16, None),
                                 ("evt", torch.bfloat16, evt.backend.evt_backend)):  # fmt: skip
        grads[name], specs = step_grads(model, x, dtype, backend)
        ran += specs
    # SwiGLU's backward: its silu_backward and silu share one sigmoid (`share_sigmoids`)
    swiglu = [s for s in ran if s.name.startswith("evt_b") and any(n.op == "silu_backward_sigmoid"
                                                                     for n in s.nodes if n.kind == "compute")]  # fmt: skip
    assert len(swiglu) == 2, [s.name for s in ran]
    for s in swiglu:
        assert sorted(n.dtype for n in s.nodes if n.kind == "aux_load") == ["bf16", "bf16"], s.nodes
    for n, want in grads["f64"].items():
        assert rel_err(grads["evt"][n], want) <= 2 * rel_err(grads["eager"][n], want) + 1e-3, n


@pytest.fixture
def written_out(monkeypatch):
    """The tanh GELU stays written out in 16-bit dtypes too (`EVT_TANH_GELU=0`: evt makes it
    one native gelu there, `tanh_gelu_to_native`): the tests using it are about its ops."""
    monkeypatch.setenv("EVT_TANH_GELU", "0")


class GeluNewStack(nn.Module):
    """Pre-norm MLP blocks with GPT-2's tanh GELU as Hugging Face writes it out in ops
    (`gelu_new`): its backward reads four [tokens, h] values of the forward."""

    def __init__(self, blocks: int = 2, d: int = 128, h: int = 512):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.ModuleDict({"ln": nn.LayerNorm(d), "fc1": nn.Linear(d, h), "fc2": nn.Linear(h, d)})
            for _ in range(blocks)
        )

    @staticmethod
    def gelu_new(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    def forward(self, x):
        for b in self.blocks:
            x = x + b["fc2"](self.gelu_new(b["fc1"](b["ln"](x))))
        return x.float().pow(2).mean()


@pytest.mark.parametrize("together", [False, True])
def test_gelu_new_backward_computes_its_inputs_together(monkeypatch, written_out, together):
    """`EVT_RECOMPUTE_TOGETHER` (on by default): the GELU backward kernel computes 0.5·x,
    1 + tanh(u), tanh(u) and 3·x² from x (the up projection's output; pow(x, 3) is an epilogue
    op, `cube`) instead of loading them, so each block saves x and the GELU's output (fc2's
    input, its weight gradient's operand) alone, as Inductor's partition does (4 in all here on
    the CPU); without it, three [tokens, h] tensors more a block."""
    monkeypatch.setenv("EVT_RECOMPUTE_TOGETHER", "1" if together else "0")
    model = GeluNewStack().to(torch.bfloat16).to("meta")
    x = torch.randn(512, 128, dtype=torch.bfloat16).to("meta")
    got = sum(saved(model, x, evt.backend.evt_backend, width=512).values())
    assert got == (2 if together else 5) * len(model.blocks), got


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
def test_gelu_new_backward_loads_one_tensor_not_four_and_trains_as_eager(monkeypatch, written_out, dtype):
    """Each block's GELU backward kernel loads 1 [tokens, h] tensor (x) instead of 4, and the step's
    gradients stay within eager's own error of the fp64 step (in bf16 the kernel's recomputed
    values skip the forward's roundings, as Inductor's recompute does)."""
    torch.manual_seed(0)
    model, x = GeluNewStack(), torch.randn(512, 128)
    grads, loads = {}, {}
    runs = [("f64", torch.float64, None, "0"), ("eager", dtype, None, "0"),
            ("off", dtype, evt.backend.evt_backend, "0"), ("on", dtype, evt.backend.evt_backend, "1")]  # fmt: skip
    for name, dt, backend, together in runs:
        monkeypatch.setenv("EVT_RECOMPUTE_TOGETHER", together)
        grads[name], ran = step_grads(model, x, dt, backend)
        gelu = [s for s in ran if s.name.startswith("evt_b")
                and any(n.kind == "compute" and n.op == "tanh_backward" for n in s.nodes)]  # fmt: skip
        loads[name] = [sum(n.kind == "aux_load" for n in s.nodes) for s in gelu]
    assert loads["off"] == [4, 4] and loads["on"] == [1, 1], loads
    for n, want in grads["f64"].items():
        bound = 2 * rel_err(grads["eager"][n], want) + (1e-3 if dtype == torch.bfloat16 else 1e-5)
        assert rel_err(grads["on"][n], want) <= bound, n



def test_the_forward_gelu_region_stores_x_alone(written_out):
    """Once the backward computes 0.5·x, 1 + tanh(u), tanh(u) and 3·x² itself, nothing reads the
    forward's (AOTAutograd's alias and view of them erased with them, `_drop_unread`): the up
    projection's kernel stores x alone beside D already in the joint graph, the kernel that runs
    and that max-autotune times, not one the split has to prune."""
    torch.manual_seed(0)
    model, x = GeluNewStack().to(torch.bfloat16), torch.randn(512, 128, dtype=torch.bfloat16)
    report = evt.explain(lambda x: model(x).backward(), x)
    gelu = [r for r in report.regions if r.side == "forward"
            and any(n.kind == "compute" and n.op == "cube" for n in r.spec.nodes)]  # fmt: skip
    assert [sum(n.kind == "aux_store" for n in r.spec.nodes) for r in gelu] == [1, 1]
    assert not any(g.pruned for g in report.graphs), [g.pruned for g in report.graphs]
