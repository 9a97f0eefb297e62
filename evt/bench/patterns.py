"""The GEMM+epilogue patterns of the suite, as plain torch functions anyone can run by hand.

Every pattern's main GEMM produces an M x N output from a reduction over K (see `evt.bench.ops`
for the inputs and shapes). `gemm_*` are the same GEMMs without the epilogue: the speed-of-light
column. `lt_*` and `sdpa_attention` are the peers' hand-fused versions (cuBLASLt epilogues via
`torch._addmm_activation` / `addmm` and, for those torch does not expose, `evt.bench.cublaslt`;
and `F.scaled_dot_product_attention`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from evt.bench import cublaslt

aten = torch.ops.aten


def bias(x, w, b):
    """A Linear layer: x @ w.T + b (x: M x K, w: N x K, b: N)."""
    return F.linear(x, w, b)


def bias_relu(x, w, b):
    return F.relu(F.linear(x, w, b))


def bias_gelu(x, w, b):
    """Exact (erf) GELU, as BERT and ViT use it."""
    return F.gelu(F.linear(x, w, b))


def bias_gelu_tanh(x, w, b):
    """tanh-approximated GELU, as GPT-2 uses it and cuBLASLt's GELU epilogue computes it."""
    return F.gelu(F.linear(x, w, b), approximate="tanh")


def bias_gelu_aux(x, w, b):
    """The training forward: GELU's output and its pre-activation, saved for the backward."""
    h = F.linear(x, w, b)
    return F.gelu(h), h


def bias_gelu_tanh_aux(x, w, b):
    """GPT-2's training forward: the tanh-approximated GELU and its pre-activation, saved."""
    h = F.linear(x, w, b)
    return F.gelu(h, approximate="tanh"), h


def dgrad_gelu_tanh(dy, w, h):
    """The tanh-approximated GELU's backward in the data-gradient GEMM: (dy @ w) * GELU'(h)."""
    return aten.gelu_backward(dy @ w, h, approximate="tanh")


def dgrad_gelu_tanh_bias_grad(dy, w, h):
    """The same and the GELU's input's bias gradient (that Linear's bias, summed over M)."""
    g = aten.gelu_backward(dy @ w, h, approximate="tanh")
    return g, g.sum(0)


def dgrad_gelu(dy, w, h):
    """GELU's backward in the data-gradient GEMM: (dy @ w) * GELU'(h).
    dy: M x K (gradient of the next Linear's output), w: K x N (its weight), h: M x N (saved)."""
    return aten.gelu_backward(dy @ w, h)


def dgrad_bias_grad(dy, w):
    """A data gradient g = dy @ w and the preceding Linear's bias gradient g.sum(0) (over M)."""
    g = dy @ w
    return g, g.sum(0)


def residual_scale_cast(x, w, b, r):
    """A residual branch added to an fp32 residual stream: r + 0.5 * float(x @ w.T + b)."""
    return r + 0.5 * F.linear(x, w, b).float()


def swiglu(x, w, g):
    """LLaMA's gated MLP in the up projection's epilogue: silu(g) * (x @ w.T), g the gate
    projection's output; the up projection's output is kept for the backward."""
    u = x @ w.t()
    return F.silu(g) * u, u


def dgrad_swiglu(dy, w, g, u):
    """SwiGLU's backward in the down projection's data gradient dh = dy @ w: the gate's gradient
    dh * u * silu'(g) and the up projection's dh * silu(g) (g, u: M x N, saved)."""
    dh = dy @ w
    return aten.silu_backward(dh * u, g), dh * F.silu(g)


def softmax_stats(x, w):
    """Logits and their per-row softmax statistics (max and sum of exp over N), in fp32."""
    logits = x @ w.t()
    lf = logits.float()
    m = lf.amax(dim=1)
    return logits, m, torch.exp(lf - m[:, None]).sum(dim=1)


def layernorm_stats(x, w, b, r):
    """The residual sum after a Linear and its LayerNorm statistics (mean, 1/std over N)."""
    h = F.linear(x, w, b) + r
    hf = h.float()
    return h, hf.mean(dim=1), torch.rsqrt(hf.var(dim=1, unbiased=False) + 1e-5)


def batchnorm_stats(x, w):
    """A bias-free Linear's output and its BatchNorm1d batch statistics (mean, biased var over
    M), in fp32."""
    h = x @ w.t()
    var, mean = torch.var_mean(h.float(), dim=0, correction=0)
    return h, mean, var


def ce_forward(x, w, t):
    """LM head + cross-entropy forward: mean loss and the per-row log-sum-exp (saved)."""
    logits = (x @ w.t()).float()
    lse = torch.logsumexp(logits, dim=1)
    return (lse - logits.gather(1, t[:, None]).squeeze(1)).mean(), lse


def ce_backward(x, w, t, lse):
    """LM head + cross-entropy backward: the logits' gradient (softmax - onehot(t)) / M,
    recomputed from x, w and the saved log-sum-exp."""
    p = torch.exp((x @ w.t()).float() - lse[:, None])
    g = p.scatter_add(1, t[:, None], torch.full_like(lse[:, None], -1.0))
    return (g / x.shape[0]).to(x.dtype)


def attention_scores(q, k):
    """Causal attention scores: (q @ k^T) / sqrt(D), -inf above the diagonal (q, k: B x H x S x D)."""
    s = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    return scores.masked_fill(mask, float("-inf"))


def attention(q, k, v):
    """Causal attention written out: softmax(scores) @ v, the softmax in fp32."""
    return torch.softmax(attention_scores(q, k).float(), dim=-1).to(q.dtype) @ v


def gemm_xwt(x, w, *_):
    return x @ w.t()


def gemm_dgrad(dy, w, *_):
    return dy @ w


def gemm_scores(q, k):
    return q @ k.transpose(-2, -1)


def gemm_attention(q, k, v):
    return (q @ k.transpose(-2, -1)) @ v


def lt_bias(x, w, b):
    return torch.addmm(b, x, w.t())


def lt_bias_relu(x, w, b):
    return torch._addmm_activation(b, x, w.t(), use_gelu=False)


def lt_bias_gelu_tanh(x, w, b):
    return torch._addmm_activation(b, x, w.t(), use_gelu=True)


def lt_bias_gelu_tanh_aux(x, w, b):
    h = torch.empty((x.shape[0], w.shape[0]), dtype=x.dtype, device=x.device)
    return cublaslt.matmul(x, w.t(), "gelu_aux_bias", bias=b, aux=h), h


def lt_dgrad_gelu_tanh(dy, w, h):
    return cublaslt.matmul(dy, w, "dgelu", aux=h)


def lt_dgrad_gelu_tanh_bias_grad(dy, w, h):
    db = torch.empty(w.shape[1], dtype=dy.dtype, device=dy.device)
    return cublaslt.matmul(dy, w, "dgelu_bgrad", bias=db, aux=h), db


def sdpa_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
