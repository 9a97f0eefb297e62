"""Training steps: forward, loss and backward of a model from `evt.bench.models` (no optimizer).

A step's outputs are the loss, the input's gradient and every parameter's gradient, all of which
are checked against a float64 copy of the model. Batch sizes fill an H100 (8192..12608 tokens;
ResNet's bottleneck takes 256 images, the usual per-GPU batch: 50176 pixels, at 64 images its
step took under 0.5 ms on an H200 and the host paced it).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn

from evt.bench.models import (
    Bottleneck,
    Checkpointed,
    LlamaBlock,
    LMHead,
    MLPBlock,
    PatchTSTLayer,
    PostLNLayer,
    PreLNBlock,
    ProjectionHead,
    WithLoss,
)
from evt.bench.workload import Case, Workload, generator, randn, to_reference
from evt.examples import padding_keys


@dataclass(frozen=True)
class Step:
    doc: str
    model: Callable[..., nn.Module]  # (**sizes) -> the model
    loss: str  # "mse" against a random fp32 target, "ce" against random class targets
    full: dict[str, int]
    small: dict[str, int]  # the CPU-test sizes (same keys, same order)


def _block(causal: bool, approximate: str, math: bool = False):
    return lambda dim, heads, hidden, **_: PreLNBlock(dim, heads, hidden, causal, approximate, math)


_TINY_BLOCK = dict(batch=2, seq=16, dim=32, heads=2, hidden=64)
STEPS: dict[str, Step] = {
    "mlp": Step(
        "MLP block x + fc2(gelu(fc1(x))), BERT-Large sizes, 16 x 512 tokens",
        lambda dim, hidden, **_: MLPBlock(dim, hidden),
        "mse",
        dict(batch=16, seq=512, dim=1024, hidden=4096),
        dict(batch=2, seq=16, dim=32, hidden=64),
    ),
    "gpt2": Step(
        "GPT-2 small block (pre-LN, causal attention, tanh GELU), 8 x 1024 tokens",
        _block(True, "tanh"),
        "mse",
        dict(batch=8, seq=1024, dim=768, heads=12, hidden=3072),
        _TINY_BLOCK,
    ),
    "gpt2_math": Step(
        "GPT-2 small block with attention written out (Q·Kᵀ, scale, causal mask, softmax, P·V, as "
        "Hugging Face's eager attention), 8 x 1024 tokens",
        _block(True, "tanh", math=True),
        "mse",
        dict(batch=8, seq=1024, dim=768, heads=12, hidden=3072),
        _TINY_BLOCK,
    ),
    "gpt2_checkpointed": Step(
        "GPT-2 small block under activation checkpointing (torch.utils.checkpoint: recomputed "
        "whole in the backward), 8 x 1024 tokens",
        lambda **sizes: Checkpointed(_block(True, "tanh")(**sizes)),
        "mse",
        dict(batch=8, seq=1024, dim=768, heads=12, hidden=3072),
        _TINY_BLOCK,
    ),
    "gpt2_selective": Step(
        "GPT-2 small block under selective activation checkpointing (the GEMMs' outputs saved, "
        "the rest recomputed), 8 x 1024 tokens",
        lambda **sizes: Checkpointed(_block(True, "tanh")(**sizes), selective=True),
        "mse",
        dict(batch=8, seq=1024, dim=768, heads=12, hidden=3072),
        _TINY_BLOCK,
    ),
    "bert": Step(
        "BERT-Large layer (post-LN, bidirectional attention, exact GELU), 16 x 512 tokens",
        lambda dim, heads, hidden, **_: PostLNLayer(dim, heads, hidden),
        "mse",
        dict(batch=16, seq=512, dim=1024, heads=16, hidden=4096),
        _TINY_BLOCK,
    ),
    "bert_math": Step(
        "BERT-Large layer with Hugging Face's eager attention (Q·Kᵀ, scale, + padding mask, "
        "softmax, P·V; the last quarter of every sequence but the first is padding), 16 x 512 tokens",
        lambda dim, heads, hidden, batch, seq, **_: PostLNLayer(
            dim, heads, hidden, math=True, padding=padding_keys(batch, seq)),
        "mse",
        dict(batch=16, seq=512, dim=1024, heads=16, hidden=4096),
        _TINY_BLOCK,
    ),
    "vit": Step(
        "ViT-B/16 block (pre-LN, bidirectional, exact GELU), 64 images x 197 tokens",
        _block(False, "none"),
        "mse",
        dict(batch=64, seq=197, dim=768, heads=12, hidden=3072),
        {**_TINY_BLOCK, "seq": 17},
    ),
    "llama": Step(
        "LLaMA-style decoder layer (RMSNorm, rotary causal attention, SwiGLU MLP, no biases) at "
        "TinyLlama-1.1B's widths, 4 x 2048 tokens",
        lambda dim, heads, hidden, **_: LlamaBlock(dim, heads, hidden),
        "mse",
        dict(batch=4, seq=2048, dim=2048, heads=32, hidden=5632),
        {**_TINY_BLOCK, "heads": 4},
    ),
    "projection_head": Step(
        "BYOL-style projection head (Linear without bias, BatchNorm1d on the batch's statistics, "
        "ReLU, Linear), 4096 images' 2048 features",
        lambda dim, hidden, **_: ProjectionHead(dim, hidden),
        "mse",
        dict(batch=4096, seq=1, dim=2048, hidden=4096),
        dict(batch=16, seq=1, dim=32, hidden=64),
    ),
    "patchtst": Step(
        "PatchTST encoder layer (post-norm, each norm a BatchNorm1d over the transposed "
        "[series, dim, patches], exact GELU) at PatchTST/64's widths, 2048 series x 64 patches",
        lambda dim, heads, hidden, **_: PatchTSTLayer(dim, heads, hidden),
        "mse",
        dict(batch=2048, seq=64, dim=128, heads=16, hidden=256),
        {**_TINY_BLOCK, "seq": 8},
    ),
    "resnet_bottleneck": Step(
        "ResNet-50's bottleneck block of its third stage on channels-last 14 x 14 maps (1x1, 3x3 "
        "and 1x1 convolutions, each with BatchNorm2d, ReLU, the residual), 256 images",
        lambda dim, hidden, seq, **_: Bottleneck(dim, hidden, math.isqrt(seq)),
        "mse",
        dict(batch=256, seq=196, dim=1024, hidden=256),
        dict(batch=2, seq=16, dim=32, hidden=16),
    ),
    "lm_head": Step(
        "GPT-2 final LayerNorm + LM head (vocab 50304) + cross-entropy, 8 x 1024 tokens",
        lambda dim, vocab, **_: LMHead(dim, vocab),
        "ce",
        dict(batch=8, seq=1024, dim=768, vocab=50304),
        dict(batch=2, seq=16, dim=32, vocab=96),
    ),
}


def cases(small: bool = False) -> list[Case]:
    out = []
    for name, s in STEPS.items():
        sizes = s.small if small else s.full
        shape = " ".join(f"{k}={v}" for k, v in sizes.items())  # e.g. "batch=16 seq=512 ..."
        out.append(Case(f"step/{name}", "step", name, shape, tuple(sizes.values()), s.doc))
    return out


def clear_grads(tensors) -> None:
    for t in tensors:
        t.grad = None


def make_step(module: Callable, params: list[torch.Tensor]) -> Callable:
    """One training step through `module` (the model with its loss, compiled or not)."""

    def step(x, target):
        clear_grads([*params, x])
        loss = module(x, target)
        loss.backward()
        return (loss.detach(), x.grad, *(p.grad for p in params))

    return step


def build(case: Case, dtype: torch.dtype, device: str) -> Workload:
    s = STEPS[case.group]
    sizes = dict(zip(s.full, case.dims))
    torch.manual_seed(0)  # nn.Linear's and nn.LayerNorm's default initialization
    module = WithLoss(s.model(**sizes), s.loss).to(device=device, dtype=dtype)
    params = list(module.parameters())
    shape = (sizes["batch"], sizes["seq"])

    made: list[torch.Tensor] = []  # every input made, so `release` can drop their gradients

    def make_inputs(seed: int) -> tuple:
        gen = generator(device, seed)
        x = randn((*shape, sizes["dim"]), dtype, device, gen).requires_grad_()
        made.append(x)
        if s.loss == "ce":
            return x, torch.randint(sizes["vocab"], shape, generator=gen, device=device)
        return x, randn((*shape, sizes["dim"]), torch.float32, device, gen)

    def reference(inputs: tuple) -> tuple:
        ref = copy.deepcopy(module).double()
        return make_step(ref, list(ref.parameters()))(*to_reference(inputs))

    return Workload(
        eager=make_step(module, params),
        target=module,
        wrap=lambda compiled: make_step(compiled, params),
        make_inputs=make_inputs,
        reference=reference,
        release=lambda: clear_grads([*params, *made]),
    )
