"""The GEMM+epilogue suite: each pattern of `evt.bench.patterns` at shapes from real models.

Shapes are (M, N, K): the GEMM's output is M x N, its reduction K; M is batch x sequence tokens.
  FFN_UP    BERT-Large 16x512 tokens 1024->4096, GPT-2 small 8x1024 tokens 768->3072,
            ViT-B/16 64x197 tokens 768->3072 (M = 12608, not a multiple of 128)
  FFN_DOWN  the same layers' down projections (large K: 4096, 3072)
  GPTJ      GPT-J-6B's MLP (4x2048 tokens, 4096 -> 16384 and back, biases, tanh GELU): the
            linear patterns' shapes with M, N, K >= 4096 (issue #7's 0.90-of-the-GEMM target for
            bias, ReLU and tanh GELU is set there)
  LLAMA     LLaMA-7B's, Llama-3-8B's and TinyLlama-1.1B's gated MLP (8192 tokens, 4096 -> 11008,
            4096 -> 14336, 2048 -> 5632): the SwiGLU patterns (no biases)
  BATCHNORM a bias-free Linear before BatchNorm1d: a SimCLR-style projection head (4096 images,
            2048 -> 2048) and the FFN_UP shapes of BERT and GPT-2
  HEAD      LM heads: GPT-2 (vocab 50257 padded to 50304), BERT-Large MLM (30522 -> 30528),
            a LLaMA-7B-sized head (4096 tokens, K = 4096, vocab 32000)
  ATTN      (B, H, S, D) of the same three models' self-attention
A backward pattern takes the shape of the GEMM it runs: GELU' in the dgrad of the FFN down
projection is dy (M x dim) @ W2 (dim x hidden), the same M, N, K as FFN_UP.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from evt.bench import patterns as P
from evt.bench.workload import Case, Workload, generator, randn, tiny, to_reference

FFN_UP = {"bert": (8192, 4096, 1024), "gpt2": (8192, 3072, 768), "vit": (12608, 3072, 768)}
FFN_DOWN = {"bert": (8192, 1024, 4096), "gpt2": (8192, 768, 3072), "vit": (12608, 768, 3072)}
HEAD = {"gpt2": (8192, 50304, 768), "bert": (8192, 30528, 1024), "llama": (4096, 32000, 4096)}
ATTN = {"gpt2": (8, 12, 1024, 64), "bert": (16, 16, 512, 64), "vit": (64, 12, 197, 64)}
LLAMA = {
    "llama": (8192, 11008, 4096),
    "llama3": (8192, 14336, 4096),
    "tinyllama": (8192, 5632, 2048),
}
GPTJ = {"gptj": (8192, 16384, 4096), "gptj-down": (8192, 4096, 16384)}
BATCHNORM = {"simclr": (4096, 2048, 2048), "bert": FFN_UP["bert"], "gpt2": FFN_UP["gpt2"]}
LINEAR_SHAPES = {**FFN_UP, "bert-down": FFN_DOWN["bert"], **GPTJ}


def linear(dims, dtype, dev, g, residual: torch.dtype | None = None):
    """x: M x K, w: N x K (scaled by 1/sqrt(K)), b: N, and optionally a residual r: M x N."""
    m, n, k = dims
    xs = (randn((m, k), dtype, dev, g), randn((n, k), dtype, dev, g, k**-0.5))
    xs += (randn((n,), dtype, dev, g, 0.1),)
    return xs + (randn((m, n), residual, dev, g),) if residual else xs


def dgrad(dims, dtype, dev, g, aux: bool = True):
    """dy: M x K, w: K x N (scaled by 1/sqrt(K)), and GELU's saved pre-activation h: M x N."""
    m, n, k = dims
    xs = (randn((m, k), dtype, dev, g), randn((k, n), dtype, dev, g, k**-0.5))
    return xs + (randn((m, n), dtype, dev, g),) if aux else xs


def gated(dims, dtype, dev, g, backward: bool = False):
    """The forward: x: M x K, w: N x K (1/sqrt(K)) and the gate's output g: M x N; the backward:
    dy: M x K, w: K x N (1/sqrt(K)) and the saved g and u: M x N."""
    m, n, k = dims
    x = randn((m, k), dtype, dev, g)
    w = randn((k, n) if backward else (n, k), dtype, dev, g, k**-0.5)
    return (x, w) + tuple(randn((m, n), dtype, dev, g) for _ in range(1 + backward))


def head(dims, dtype, dev, g, lse: bool = False):
    """x: M x K, w: N x K (1/sqrt(K)), targets t: M in [0, N), and optionally the saved lse."""
    m, n, k = dims
    x, w = randn((m, k), dtype, dev, g), randn((n, k), dtype, dev, g, k**-0.5)
    t = torch.randint(n, (m,), generator=g, device=dev)
    return (x, w, t, torch.logsumexp((x @ w.t()).float(), dim=1)) if lse else (x, w, t)


def qkv(dims, dtype, dev, g, n: int = 3):
    return tuple(randn(dims, dtype, dev, g) for _ in range(n))


@dataclass(frozen=True)
class Pattern:
    fn: Callable
    inputs: Callable  # (dims, dtype, device, generator) -> input tuple
    gemm: Callable
    shapes: dict[str, tuple[int, ...]]
    variants: dict[str, Callable] = field(default_factory=dict)


def _pattern(fn, inputs, gemm=P.gemm_xwt, shapes=LINEAR_SHAPES, **variants) -> Pattern:
    return Pattern(fn, inputs, gemm, shapes, variants)


PATTERNS: dict[str, Pattern] = {
    "bias": _pattern(P.bias, linear, cublaslt=P.lt_bias),
    "bias_relu": _pattern(P.bias_relu, linear, cublaslt=P.lt_bias_relu),
    "bias_gelu": _pattern(P.bias_gelu, linear),
    "bias_gelu_tanh": _pattern(P.bias_gelu_tanh, linear, cublaslt=P.lt_bias_gelu_tanh),
    "bias_gelu_aux": _pattern(P.bias_gelu_aux, linear),
    "bias_gelu_tanh_aux": _pattern(P.bias_gelu_tanh_aux, linear, cublaslt=P.lt_bias_gelu_tanh_aux),
    "dgrad_gelu": _pattern(P.dgrad_gelu, dgrad, P.gemm_dgrad, FFN_UP),
    "dgrad_gelu_tanh": _pattern(
        P.dgrad_gelu_tanh, dgrad, P.gemm_dgrad, FFN_UP, cublaslt=P.lt_dgrad_gelu_tanh
    ),
    "dgrad_gelu_tanh_bias_grad": _pattern(
        P.dgrad_gelu_tanh_bias_grad,
        dgrad,
        P.gemm_dgrad,
        FFN_UP,
        cublaslt=P.lt_dgrad_gelu_tanh_bias_grad,
    ),
    "dgrad_bias_grad": _pattern(
        P.dgrad_bias_grad, lambda *a: dgrad(*a, aux=False), P.gemm_dgrad, FFN_DOWN
    ),
    "residual_scale_cast": _pattern(
        P.residual_scale_cast, lambda *a: linear(*a, residual=torch.float32), shapes=FFN_DOWN
    ),
    "layernorm_stats": _pattern(
        P.layernorm_stats, lambda *a: linear(*a, residual=a[1]), shapes=FFN_DOWN
    ),
    "swiglu": _pattern(P.swiglu, gated, shapes=LLAMA),
    "dgrad_swiglu": _pattern(
        P.dgrad_swiglu, lambda *a: gated(*a, backward=True), P.gemm_dgrad, LLAMA
    ),
    "batchnorm_stats": _pattern(P.batchnorm_stats, lambda *a: linear(*a)[:2], shapes=BATCHNORM),
    "softmax_stats": _pattern(P.softmax_stats, lambda *a: head(*a)[:2], shapes=HEAD),
    "ce_forward": _pattern(P.ce_forward, head, shapes=HEAD),
    "ce_backward": _pattern(P.ce_backward, lambda *a: head(*a, lse=True), shapes=HEAD),
    "attention_scores": _pattern(P.attention_scores, lambda *a: qkv(*a, n=2), P.gemm_scores, ATTN),
    "attention": _pattern(P.attention, qkv, P.gemm_attention, ATTN, sdpa=P.sdpa_attention),
}


# Issue #7's cuBLASLt target (>= 1.00x its fused epilogue, geomean) is set on these patterns;
# cuBLASLt's training epilogues (the saved pre-activation, GELU's backward) are compared apart.
CUBLASLT_TARGET = ("bias", "bias_relu", "bias_gelu_tanh")


def cases(small: bool = False) -> list[Case]:
    """Every (pattern, shape) of the suite; `small` divides the sizes for CPU tests."""
    out = []
    for name, p in PATTERNS.items():
        doc = (p.fn.__doc__ or name).strip().split("\n")[0]
        for shape, dims in p.shapes.items():
            dims = tiny(dims) if small else dims
            out.append(Case(f"{name}/{shape}", "op", name, shape, dims, doc, frozenset(p.variants)))
    return out


def build(case: Case, dtype: torch.dtype, device: str) -> Workload:
    p = PATTERNS[case.group]

    def make_inputs(seed: int) -> tuple:
        gen = generator(device, seed)
        return p.inputs(case.dims, dtype, device, gen)

    return Workload(
        eager=p.fn,
        target=p.fn,
        wrap=lambda compiled: compiled,
        make_inputs=make_inputs,
        reference=lambda inputs: p.fn(*to_reference(inputs)),
        gemm=p.gemm,
        variants=dict(p.variants),
    )
