"""Random small training programs for the graph-level differential fuzzer: a seed picks a chain of
transformer-ish blocks on a [B, S, D] activation (Linears with and without bias, activations,
residual adds, LayerNorm with and without affine, RMSNorm, softmax, scaling, attention with a
causal mask, an additive padding mask or none, GLU halves of one projection, a Linear on a
transposed activation, BatchNorm1d over its output's channels (on the [B, D, S] permute, as
PatchTST, or on the flattened rows), views), some blocks under activation checkpointing
(`torch.utils.checkpoint`: their regions recomputed in the backward; half of them selectively,
the GEMMs' outputs saved), which runs through the whole pipeline (`backend="evt"`, regions on
the reference path) and is compared with eager, forward and backward (`tests/test_model_fuzz.py`, `scripts/model_fuzz.py`).

Where `evt.testing.fuzz` generates kernel specs, this generates torch code: it exercises capture,
the graph passes, the partitioner and lowering on graphs AOTAutograd really produces.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "leaky": lambda x: torch.maximum(x, 0.1 * x),
}
# smooth activations only: on a GPU the bf16 kernels are compared with fp32 eager, and a ReLU's
# mask flipped by one rounding moves a small model's gradients more than any kernel error would
SMOOTH = ("gelu", "gelu_tanh", "silu", "sigmoid", "tanh")
CHECKPOINTED = 0.3  # the chance of each block to run under activation checkpointing
SELECTIVE = 0.5  # the chance of a checkpointed block to save its GEMMs' outputs (selective)
GEMMS = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default)
BLOCKS = ("mlp", "residual_linear", "norm", "rms_norm", "attention", "scale", "softmax", "gated",
          "glu", "transposed", "plain_norm")  # fmt: skip
ATTENTION_MASKS = ("causal", "padding", "none")
BATCH_NORMS = ("permuted", "flat", "none")


def save_gemms(ctx, op, *args, **kwargs):
    """Selective checkpointing's policy: save the GEMMs' outputs, recompute the rest."""
    return CheckpointPolicy.MUST_SAVE if op in GEMMS else CheckpointPolicy.PREFER_RECOMPUTE


def saving_gemms():
    """`checkpoint(..., context_fn=saving_gemms)`: selective checkpointing with `save_gemms`."""
    return create_selective_checkpoint_contexts(save_gemms)


class PreNormMLP(nn.Module):
    """x + fc2(gelu(fc1(LayerNorm(x)))): the transformer's MLP block, the smallest model with
    regions in both passes (`tests/test_distributed.py`, `tests/data_parallel_rank.py`,
    `scripts/checkpoint_step_time.py`)."""

    def __init__(self, d: int = 64, h: int = 256):
        super().__init__()
        self.ln, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


class RMSNorm(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Block(nn.Module):
    """One block of kind `kind` on [B, S, D] (the same shape out)."""

    def __init__(self, kind: str, d: int, rng: random.Random, smooth: bool = False):
        super().__init__()
        self.kind, self.d = kind, d
        self.act = rng.choice(SMOOTH if smooth else sorted(ACTIVATIONS))
        self.pre_norm = rng.random() < 0.5
        hidden = rng.choice((d, 2 * d))
        bias = rng.random() < 0.7
        self.fc1 = nn.Linear(d, hidden, bias=bias) if kind in ("mlp", "gated") else None
        self.fc2 = nn.Linear(hidden, d, bias=rng.random() < 0.7) if kind in ("mlp", "gated") else None
        self.gate = nn.Linear(d, hidden, bias=False) if kind == "gated" else None
        self.lin = nn.Linear(d, d, bias=bias) if kind in ("residual_linear", "transposed") else None
        self.glu = nn.Linear(d, 2 * d, bias=bias) if kind == "glu" else None
        self.norm = nn.LayerNorm(d) if kind in ("norm", "mlp", "attention") else None
        self.plain = nn.LayerNorm(d, elementwise_affine=False) if kind == "plain_norm" else None
        self.rms = RMSNorm(d) if kind == "rms_norm" else None
        self.heads = rng.choice((1, 2))
        self.qkv = nn.Linear(d, 3 * d, bias=bias) if kind == "attention" else None
        self.proj = nn.Linear(d, d) if kind == "attention" else None
        self.scale = rng.choice((0.5, 2.0, -1.0))
        # attention's mask (drawn last, and only for attention, so programs without attention,
        # and a program's blocks before its first attention, stay as they were):
        # causal (GPT), BERT's additive padding mask over keys (SDPA's float attn_mask when evt
        # rewrites the attention), or none (ViT)
        self.mask = rng.choice(ATTENTION_MASKS) if kind == "attention" else None
        # BatchNorm1d of the transposed block's Linear output, drawn last and only there (as the
        # mask): the batch's statistics (no running ones: a checkpointed block would update
        # them twice), over the channels of its [B, D, S] permute or of its flattened rows
        self.batch_norm = rng.choice(BATCH_NORMS) if kind == "transposed" else None
        self.bn = nn.BatchNorm1d(d, track_running_stats=False) if self.batch_norm in ("permuted", "flat") else None
        if self.bn is not None:  # BatchNorm subtracts the mean: a bias before it would have a
            self.lin.bias = None  # gradient of zero but for rounding, no relative error to check

    def forward(self, x):
        act = ACTIVATIONS[self.act]
        if self.kind == "mlp":
            h = self.norm(x) if self.pre_norm else x
            y = x + self.fc2(act(self.fc1(h)))
            return y if self.pre_norm else self.norm(y)
        if self.kind == "gated":  # SwiGLU-style: act(gate(x)) * fc1(x)
            return x + self.fc2(act(self.gate(x)) * self.fc1(x))
        if self.kind == "residual_linear":
            return act(self.lin(x)) + x
        if self.kind == "glu":  # the two halves of one projection: strided views of its output
            a, b = self.glu(x).chunk(2, dim=-1)
            return x + a * act(b)
        if self.kind == "transposed":  # a [S, B, D] activation: the GEMM reads a permuted view
            y = self.lin(x.transpose(0, 1))
            if self.batch_norm == "permuted":  # [B, D, S]: statistics over all of the GEMM's rows
                y = self.bn(y.permute(1, 2, 0)).permute(2, 0, 1)
            elif self.batch_norm == "flat":
                y = self.bn(y.flatten(0, 1)).view(y.shape)
            return act(y).transpose(0, 1) + x
        if self.kind == "plain_norm":
            return self.plain(x) * self.scale
        if self.kind == "norm":
            return self.norm(x)
        if self.kind == "rms_norm":
            return self.rms(x)
        if self.kind == "scale":
            return x * self.scale + 1.0
        if self.kind == "softmax":
            return F.softmax(x * self.scale, -1) * self.d
        b, s, d = x.shape  # attention
        h = self.norm(x) if self.pre_norm else x
        q, k, v = self.qkv(h).split(d, dim=-1)
        heads = lambda t: t.view(b, s, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        q, k, v = heads(q), heads(k), heads(v)
        scores = (q @ k.transpose(-1, -2)) * (d // self.heads) ** -0.5
        if self.mask == "causal":
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
        elif self.mask == "padding":  # [B, 1, 1, S]: as `evt.examples`' BERT adds its mask
            padding = torch.zeros(b, s, dtype=torch.bool, device=x.device)
            padding[1:, s - max(1, s // 4) :] = True  # every sequence but the first ends padded
            scores = scores + padding[:, None, None, :].to(scores.dtype) * torch.finfo(scores.dtype).min
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, d)
        y = x + self.proj(out)
        return y if self.pre_norm else self.norm(y)


class Program(nn.Module):
    """A seed's chain of blocks, then a head: a Linear to `classes` logits with cross-entropy, or
    the mean of squares of a last Linear."""

    def __init__(self, seed: int, d: int = 16, classes: int = 24, smooth: bool = False):
        super().__init__()
        rng = random.Random(seed)
        self.kinds = [rng.choice(BLOCKS) for _ in range(rng.randint(1, 3))]
        self.blocks = nn.ModuleList(Block(k, d, rng, smooth) for k in self.kinds)
        self.loss = rng.choice(("cross_entropy", "mse"))
        self.head = nn.Linear(d, classes if self.loss == "cross_entropy" else d, bias=rng.random() < 0.5)
        self.classes = classes
        # drawn last: the draws above, so each seed's blocks, are what they were before
        self.checkpointed = [rng.random() < CHECKPOINTED for _ in self.blocks]
        self.selective = [ck and rng.random() < SELECTIVE for ck in self.checkpointed]

    def forward(self, x, target):
        for block, checkpointed, selective in zip(self.blocks, self.checkpointed, self.selective):
            if selective:
                x = checkpoint(block, x, use_reentrant=False, context_fn=saving_gemms)
            else:
                x = checkpoint(block, x, use_reentrant=False) if checkpointed else block(x)
        out = self.head(x)
        if self.loss == "cross_entropy":
            return F.cross_entropy(out.flatten(0, 1).float(), target.flatten())
        return out.float().pow(2).mean()


def program(
    seed: int, b: int = 2, s: int = 8, d: int = 16, smooth: bool = False
) -> tuple[Program, list[torch.Tensor]]:
    """The seed's program (initialized from the seed) and its inputs: x [B, S, D], targets [B, S];
    `smooth`: activations from `SMOOTH` only."""
    torch.manual_seed(seed)
    model = Program(seed, d, smooth=smooth)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, s, d, generator=g)
    target = torch.randint(0, model.classes, (b, s), generator=g)
    return model, [x, target]


def seeds(start: int, count: int, mask: str | None = None, smooth: bool = False,
          op: str | None = None) -> list[int]:  # fmt: skip
    """`count` seeds from `start` on; with `mask` (one of `ATTENTION_MASKS`) only those whose
    program (`smooth` as it will run: the draws differ) has an attention block with that mask,
    e.g. to put BERT's padding mask through real kernels (`scripts/model_fuzz.py --mask`); with
    `op` (one of `evt.ir.COMPUTE_OPS`) only those whose regions compute it, as the program will
    run (`region_ops`), e.g. a new form such as `silu_backward_sigmoid` (`--op`)."""
    if mask is not None and mask not in ATTENTION_MASKS:
        raise ValueError(f"mask {mask!r}: expected one of {', '.join(ATTENTION_MASKS)}")
    from evt import ir

    if op is not None and op not in ir.COMPUTE_OPS:
        raise ValueError(f"op {op!r}: not one of evt.ir.COMPUTE_OPS")
    out, seed = [], start
    while len(out) < count:
        if (mask is None or any(b.mask == mask for b in program(seed, smooth=smooth)[0].blocks)) and (
            op is None or op in region_ops(seed, smooth)
        ):
            out.append(seed)
        seed += 1
        if seed - start > 1000 * count:  # a mask or op no program draws: say so, do not spin
            raise ValueError(f"no {count} seeds from {start} draw {mask or op}")
    return out


def region_ops(seed: int, smooth: bool) -> set[str]:
    """The compute ops of the seed's regions as the program will run: bf16 with smooth
    activations (on a GPU), float32 with any (on the CPU). Captured on the CPU (`evt.explain`)."""
    from evt import ir
    from evt.runtime import dispatch

    dtype = torch.bfloat16 if smooth else torch.float32
    with dispatch.no_prefetch():  # a seed without the op is dropped: build nothing for it
        captured = kernels_of(seed, dtype, smooth)
    return {n.op for spec, _ in captured for n in spec.nodes if isinstance(n, ir.Compute)}


def describe(model: Program) -> str:
    marks = [", selectively checkpointed" if sel else ", checkpointed" if ck else ""
             for ck, sel in zip(model.checkpointed, model.selective)]  # fmt: skip
    parts = [f"{blk.kind}({blk.act}{', pre' if blk.pre_norm else ''}"
             f"{f', {blk.mask} mask' if blk.mask else ''}"
             f"{f', {blk.batch_norm} batch norm' if blk.bn is not None else ''}{mark})"
             for blk, mark in zip(model.blocks, marks)]  # fmt: skip
    return " -> ".join([*parts, f"head+{model.loss}"])


def compare(
    seed: int, dtype: torch.dtype = torch.float32, dynamic: bool | None = None, rest: str = "eager"
) -> tuple[dict[str, float], int]:
    """The seed's training step with evt (regions on the reference path, or real kernels on a
    GPU; `dynamic` as torch.compile's; the rest of the graph as `rest` says: "eager", or
    "inductor", where every region call's inputs must also arrive in the layouts its kernel was
    built for, `evt.testing.layouts`) against eager: the relative error of the loss and of every
    gradient (to the tensor's largest element), and how many regions evt formed."""
    import copy

    import evt
    from evt.backend import evt_backend
    from evt.testing.layouts import checked_layouts

    model, (x, target) = program(seed)
    model = model.to(dtype)
    fused = copy.deepcopy(model)
    want = model(x.to(dtype), target)
    want.backward()
    reports: list = []
    evt.backend._listeners.append(reports.append)
    try:
        torch._dynamo.reset()
        compiled = torch.compile(fused, backend=evt_backend, options={"rest": rest}, dynamic=dynamic)
        with warnings.catch_warnings(record=True) as caught, checked_layouts() as (_, mismatched):
            warnings.simplefilter("always")
            got = compiled(x.to(dtype), target)
            got.backward()
    finally:
        evt.backend._listeners.remove(reports.append)
        torch._dynamo.reset()
    # a pass that raised leaves the whole graph unfused, and an ILP that failed leaves it to the
    # greedy partition (correct, but bugs to report: seed 94's cycle went unseen until session 49)
    failed = [str(w.message) for w in caught
              if any(sign in str(w.message) for sign in ("graph left unfused", "using the greedy partition"))]  # fmt: skip
    if failed:
        raise PipelineFailed(failed[0])
    if mismatched:
        raise LayoutMismatch(mismatched[0])
    errs = {"loss": _rel(got, want)}
    for (name, p), q in zip(model.named_parameters(), fused.parameters()):
        errs[name] = _rel(q.grad, p.grad)
    return errs, sum(len(r.regions) for r in reports)


class PipelineFailed(Exception):
    """evt warned that a pass failed and left a graph unfused, or that the ILP partitioner fell
    back to the greedy partition."""


class LayoutMismatch(Exception):
    """A region call got an input in a layout its kernel was not built for: laid out against it,
    or failing its guards (`evt.testing.layouts`)."""


def _rel(got: torch.Tensor | None, want: torch.Tensor | None) -> float:
    if got is None or want is None:
        return 0.0 if got is None and want is None else float("inf")
    got, want = got.double(), want.double()
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-12)).item()


def _step(model: nn.Module, fn, x: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
    """Loss and parameter gradients of one training step through `fn` (the model or its compile)."""
    loss = fn(x, target)
    loss.backward()
    return {"loss": loss.detach(), **{n: p.grad for n, p in model.named_parameters()}}


def against_fp32(
    seed: int, device: str = "cuda", dtype: torch.dtype = torch.bfloat16
) -> dict[str, tuple[float, float]]:
    """The seed's smooth program in `dtype` on `device`, with evt (`rest="eager"`: every region a
    launch) and eagerly, each against fp32 eager: name -> (evt's error, eager's error), relative
    to the tensor's largest element. A kernel is right when its error is about eager's."""
    import copy

    from evt.backend import evt_backend

    model, (x, target) = program(seed, smooth=True)
    x, target = x.to(device), target.to(device)
    ref = copy.deepcopy(model).to(device)
    want = _step(ref, ref, x, target)
    low = copy.deepcopy(model).to(device, dtype)
    eager = _step(low, low, x.to(dtype), target)
    fused = copy.deepcopy(model).to(device, dtype)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(fused, backend=evt_backend, options={"rest": "eager"})
        got = _step(fused, compiled, x.to(dtype), target)
    finally:
        torch._dynamo.reset()
    return {n: (_rel(got[n], want[n]), _rel(eager[n], want[n])) for n in want}


def kernels_of(seed: int, dtype: torch.dtype = torch.bfloat16, smooth: bool = True) -> list[tuple]:
    """(spec, problem shape) of every region the seed's (smooth) program forms in `dtype`,
    captured on the CPU (`evt.explain`, the reference path runs them): what to build before
    `against_fp32`."""
    import copy

    import evt

    model, (x, target) = program(seed, smooth=smooth)
    model = copy.deepcopy(model).to(dtype)
    report = evt.explain(lambda x, target: model(x, target).backward(), x.to(dtype), target)
    return report.kernels()
