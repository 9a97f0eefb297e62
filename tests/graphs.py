"""Small modules and joint-graph capture helpers shared by the CPU tests."""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F

from evt.backend import evt_backend
from evt.explain import recording
from evt.graph.capture import capture_joint  # noqa: F401  (re-exported for the tests)


class LinearAct(nn.Module):
    def __init__(self, k=32, n=48, act="gelu", bias=True):
        super().__init__()
        self.fc = nn.Linear(k, n, bias=bias)
        self.act = act

    def forward(self, x):
        y = self.fc(x)
        if self.act == "gelu":
            return F.gelu(y)
        if self.act == "gelu_tanh":
            return F.gelu(y, approximate="tanh")
        if self.act == "relu":
            return F.relu(y)
        return y


class Arith(nn.Module):
    """mm followed by scalar and tensor arithmetic, a cast, neg and sub."""

    def __init__(self, k=32, n=48):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n, k) / k**0.5)

    def forward(self, x, r):
        y = x @ self.w.t()
        y = (y * 0.5 - r) / 2.0
        return (-y).to(torch.float32) + r


class Attention(nn.Module):
    """Attention's scores from separate q and k projections, `(q @ kᵀ) * scale + mask`, and with
    `softmax` also softmax(scores) @ v; with `qkv` q, k and v are cut from one projection. k has
    no bias: softmax ignores it, so its gradient is 0."""

    def __init__(self, d=32, heads=2, softmax=False, qkv=False):
        super().__init__()
        if qkv:
            self.qkv = nn.Linear(d, 3 * d, bias=False)
        else:
            self.qkv, self.q, self.k = None, nn.Linear(d, d), nn.Linear(d, d, bias=False)
            self.v = nn.Linear(d, d) if softmax else None
        self.heads, self.softmax = heads, softmax

    def forward(self, x, mask):
        b, s, d = x.shape
        heads = lambda t: t.view(b, s, self.heads, -1).transpose(1, 2)  # noqa: E731
        if self.qkv is not None:  # heads cut from one projection (EVT_NESTED_BATCH=1: in place)
            q, k, v = (heads(t) for t in self.qkv(x).split(d, dim=-1))
            return (F.softmax(q @ k.transpose(-1, -2) + mask, -1) @ v).transpose(1, 2).flatten(2)
        q, k = heads(self.q(x)), heads(self.k(x))
        scores = (q @ k.transpose(-1, -2)) * (d // self.heads) ** -0.5 + mask
        if self.v is None:
            return scores
        return (scores.softmax(-1) @ heads(self.v(x))).transpose(1, 2).reshape(b, s, d)


class LoRALinear(nn.Module):
    """A frozen Linear plus a trainable low-rank update (LoRA): base(x) + 0.5 * B(A(x))."""

    def __init__(self, d_in: int, d_out: int, rank: int):
        super().__init__()
        self.base = nn.Linear(d_in, d_out).requires_grad_(False)
        self.a = nn.Linear(d_in, rank, bias=False)
        self.b = nn.Linear(rank, d_out, bias=False)
        nn.init.normal_(self.b.weight, std=0.02)  # LoRA starts B at 0; a nonzero update here

    def forward(self, x):
        return self.base(x) + 0.5 * self.b(self.a(x))


def lora_mlp(dim: int, hidden: int, rank: int) -> nn.Module:
    return nn.Sequential(LoRALinear(dim, hidden, rank), nn.SiLU(), LoRALinear(hidden, dim, rank))


class LinearStatistics(nn.Module):
    """A Linear followed by per-row statistics of its output: `kind` is softmax, log_softmax,
    cross_entropy (against fixed targets), logsumexp, layer_norm (of the output plus a fixed
    residual), batch_norm (BatchNorm1d: statistics over the rows) or reductions (amax, sum and a
    sum of everything)."""

    def __init__(self, kind: str, k: int = 32, n: int = 64, rows: int = 16):
        super().__init__()
        self.fc = nn.Linear(k, n, bias=kind != "batch_norm")  # BatchNorm subtracts a bias's share
        self.norm = nn.LayerNorm(n) if kind == "layer_norm" else nn.BatchNorm1d(n) if kind == "batch_norm" else None
        self.kind = kind
        g = torch.Generator().manual_seed(3)
        self.register_buffer("residual", torch.randn(rows, n, generator=g))
        self.register_buffer("target", torch.randint(0, n, (rows,), generator=g))

    def forward(self, x):
        y = self.fc(x)
        if self.kind == "softmax":
            return F.softmax(y, -1)
        if self.kind == "log_softmax":
            return F.log_softmax(y, -1)
        if self.kind == "cross_entropy":
            return F.cross_entropy(y.float(), self.target)
        if self.kind == "logsumexp":
            return torch.logsumexp(y, -1)
        if self.kind == "layer_norm":
            return self.norm(y + self.residual.to(y.dtype))
        if self.kind == "batch_norm":
            return self.norm(y)
        return y.amax(-1) + y.sum(-1) + y.sum()


class MSEBlock(nn.Module):
    """A residual Linear and an MSE loss against a float32 target: the loss region's pattern
    (y - target for the loss and again for its gradient, a mean of squares)."""

    def __init__(self, dim: int = 32):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x, t):
        return F.mse_loss((x + self.fc(x)).float(), t)


def mse_forward_region(model: MSEBlock, x: torch.Tensor, t: torch.Tensor):
    """The one forward region `evt.explain` reports for a training step of `model` (its loss)."""
    import evt

    def step(x):
        loss = model(x, t)
        loss.backward()
        return loss

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = evt.explain(step, x.detach().clone().requires_grad_())
    (region,) = [r for r in report.regions if r.side == "forward"]
    return region


def assert_mse_trains_like_eager(model: MSEBlock, x: torch.Tensor, t: torch.Tensor) -> None:
    """`model` compiled with evt (the rest eager) against a copy run eagerly: the loss, the
    input's gradient and the Linear weight's."""
    model.zero_grad()
    ref = copy.deepcopy(model)
    x1, x2 = (x.detach().clone().requires_grad_() for _ in range(2))
    compiled = torch.compile(model, backend=evt_backend, options={"rest": "eager"})
    got, want = compiled(x1, t), ref(x2, t)
    got.backward()
    want.backward()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=0)
    torch.testing.assert_close(x1.grad.float(), x2.grad.float(), rtol=2e-2, atol=2e-3)
    torch.testing.assert_close(model.fc.weight.grad.float(), ref.fc.weight.grad.float(),
                               rtol=2e-2, atol=2e-3)  # fmt: skip


def train_compare(model: nn.Module, args, dtype, rest="eager", tol=None):
    """Run forward+backward eagerly and with evt; return max relative errors per tensor."""
    model = model.to(dtype)
    ref, fused = model, copy.deepcopy(model)
    a1 = [a.to(dtype).detach().requires_grad_(a.dtype.is_floating_point) for a in args]
    a2 = [a.detach().clone().requires_grad_(a.requires_grad) for a in a1]
    compiled = torch.compile(fused, backend=evt_backend, options={"rest": rest})
    y1, y2 = ref(*a1), compiled(*a2)
    probe = torch.randn(y1.shape, generator=torch.Generator().manual_seed(7))
    (y1.float() * probe).sum().backward()  # a loss whose gradient is a fresh random tensor
    (y2.float() * probe).sum().backward()
    pairs = [("out", y1, y2)]
    pairs += [(f"grad_in{i}", a.grad, b.grad) for i, (a, b) in enumerate(zip(a1, a2)) if a.grad is not None]
    pairs += [
        (f"grad_{n}", p.grad, q.grad)
        for (n, p), q in zip(ref.named_parameters(), fused.parameters())
    ]
    return {name: rel_err(b, a) for name, a, b in pairs}


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double(), want.double()
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-12)).item()


def explain(f, *args):
    """`evt.explain(f, *args)` with its warnings silenced."""
    import evt

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return evt.explain(f, *args)


def explain_case(name: str, dtype: torch.dtype = torch.bfloat16):
    """`evt.explain` of a benchmark case (`step/gpt2`, `ce_forward/gpt2`, ...) at its small CPU
    sizes: what the pipeline fuses in that step or op, warnings silenced."""
    from evt.bench import ops, plan, steps

    case = {c.name: c for c in plan.all_cases(small=True)}[name]
    w = (steps if case.kind == "step" else ops).build(case, dtype, "cpu")
    return explain(w.target, *w.make_inputs(0))


@contextlib.contextmanager
def compile_reports(fresh: bool = False) -> Iterator[list]:
    """evt's `GraphReport` of each graph compiled inside, its pruned kernels noted
    (`evt.explain.recording`). `fresh`: Inductor's FX graph cache and AOTAutograd's cache off, so
    that each graph compiles (a cache hit reports nothing)."""
    with recording([]) as reports, contextlib.ExitStack() as stack:
        if fresh:
            stack.enter_context(torch._inductor.config.patch(fx_graph_cache=False))
            stack.enter_context(torch._functorch.config.patch(enable_autograd_cache=False))
        yield reports


def symbolic_value(make):
    """`make(s)`'s fake value, s a symbolic size (hint 10) of a fresh shape environment."""
    from torch._dynamo.source import ConstantSource
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    s = env.create_symintnode(env.create_symbol(10, ConstantSource("s")), hint=10)
    with FakeTensorMode(shape_env=env):
        return make(s)
