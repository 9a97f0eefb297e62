"""Common `torch.nn` modules and functional patterns a user trains, as they come: transformer
layers, `nn.MultiheadAttention` with its masks, recurrent cells, a CNN's head, tied embeddings,
the losses, `baddbmm` with alpha and beta, in-place ops, several outputs, and blocks of other
families (ConvNeXt's and MLP-Mixer's, Swin's window attention, CLIP's loss, layer scale with
stochastic depth, a highway layer; session 55; a bottleneck of pointwise convolutions, session
56). The CPU tier
(`test_nn_modules.py`) trains each through evt's reference path against eager in float32; the
GPU tier (`test_gpu_nn_modules.py`) trains each in bf16 on real kernels against float32 eager.
Session 50 wrote them as a probe and found `baddbmm(c, x, w, beta=0.5, alpha=2.0)` computed
wrongly: alpha's and beta's products shared IR node names.

Each case builds its module from `dim` and its inputs from (batch, seq, dim); float inputs are
float32 (the GPU tier casts them), index and mask inputs keep their dtype. A module returns one
tensor, a tuple (its float tensors all feed the loss) or a scalar loss of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Case:
    build: Callable[[int], nn.Module]  # dim -> module
    inputs: Callable[[int, int, int], list[torch.Tensor]]  # (batch, seq, dim) -> inputs
    # whether evt fuses something in its step (else why not: the test holds the case to it, so
    # a change either way is seen)
    unfused: str = ""
    # the same for the GPU tier's bf16 step, where it differs (the GPU test holds the case to it)
    bf16_unfused: str = ""
    # the CPU tier's bound on the relative error against eager (autocast rounds to bf16 between
    # ops, which evt's epilogue does not)
    tol: float = 1e-4
    # the module sets its own precision (autocast): the GPU tier keeps its parameters float32
    float32: bool = False


def _x(b: int, s: int, d: int) -> list[torch.Tensor]:
    return [torch.randn(b, s, d)]


def _rows(b: int, s: int, d: int) -> list[torch.Tensor]:
    return [torch.randn(b * s, d)]


class KeyPadding(nn.Module):
    """Self-attention through `nn.MultiheadAttention` with a key padding mask."""

    def __init__(self, d: int):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)

    def forward(self, x, pad):
        return self.attn(x, x, x, key_padding_mask=pad, need_weights=False)[0]


def _padded(b: int, s: int, d: int) -> list[torch.Tensor]:
    pad = torch.zeros(b, s, dtype=torch.bool)
    pad[1::2, s // 2 :] = True
    return [torch.randn(b, s, d), pad]


class CrossAttentionWeights(nn.Module):
    """Cross-attention with other key and value widths, its averaged weights returned too."""

    def __init__(self, d: int):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True, kdim=d // 2, vdim=d // 4)

    def forward(self, x, k, v):
        return self.attn(x, k, v)


def _cross(b: int, s: int, d: int) -> list[torch.Tensor]:
    return [torch.randn(b, s, d), torch.randn(b, s // 2, d // 2), torch.randn(b, s // 2, d // 4)]


class Decoder(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(d, 4, 2 * d, dropout=0.0, batch_first=True)

    def forward(self, x, memory):
        return self.layer(x, memory)


class Bilinear(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.bil, self.out = nn.Bilinear(d, d // 2, d), nn.Linear(d, d)

    def forward(self, x, y):
        return self.out(torch.relu(self.bil(x, y)))


class EinsumHeads(nn.Module):
    """A per-head projection written as an einsum (a batched GEMM), then ReLU and a scale."""

    def __init__(self, d: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, d // 4, d // 4) * d**-0.5)

    def forward(self, x):
        b, s, d = x.shape
        heads = x.view(b, s, 4, d // 4).transpose(1, 2)
        return torch.einsum("bhsd,hde->bhse", heads, self.w).relu() * 2


class ScaledBaddbmm(nn.Module):
    """`baddbmm` with alpha and beta both != 1, then a sigmoid (the bug session 50 found)."""

    def __init__(self, d: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, d, d) * d**-0.5)
        self.c = nn.Parameter(torch.randn(8, 1, d))

    def forward(self, x):
        c = self.c.expand(-1, x.shape[1], -1)
        return torch.sigmoid(torch.baddbmm(c, x, self.w, beta=0.5, alpha=2.0))


class ScaledAddmm(nn.Module):
    """`addmm` with alpha and beta both != 1 and `addbmm` summing over a batch, then tanh."""

    def __init__(self, d: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(d, d) * d**-0.5)
        self.wb = nn.Parameter(torch.randn(2, d, d) * d**-0.5)
        self.c = nn.Parameter(torch.randn(d))

    def forward(self, x):
        y = torch.tanh(torch.addmm(self.c, x, self.w, beta=0.25, alpha=1.5))
        return torch.addbmm(self.c, torch.stack([y, x]), self.wb).relu()


class Linear4d(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.up, self.down = nn.Linear(d, 2 * d), nn.Linear(2 * d, d, bias=False)

    def forward(self, x):
        x = x.view(2, x.shape[0] // 2, *x.shape[1:])
        return self.down(F.silu(self.up(x))) + x


class TransposedInput(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return F.gelu(self.fc(x.t()), approximate="tanh")


class Cells(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.lstm, self.gru = nn.LSTMCell(d, d), nn.GRUCell(d, d)

    def forward(self, x):
        h, c = self.lstm(x)
        return self.gru(h, c)


class ConvHead(nn.Module):
    """A convolution (outside every region) with batch norm, then a Linear head and log_softmax."""

    def __init__(self, d: int):
        super().__init__()
        self.conv, self.norm = nn.Conv2d(3, 8, 3, bias=False), nn.BatchNorm2d(8)
        self.head = nn.Linear(8 * 6 * 6, d)

    def forward(self, x):
        return F.log_softmax(self.head(F.relu(self.norm(self.conv(x))).flatten(1)), -1)


def _images(b: int, s: int, d: int) -> list[torch.Tensor]:
    return [torch.randn(b * s, 3, 8, 8)]


class TiedLabelSmoothing(nn.Module):
    """Tied embedding and head, cross-entropy with label smoothing and an ignored index."""

    def __init__(self, d: int):
        super().__init__()
        self.emb, self.fc = nn.Embedding(4 * d, d), nn.Linear(d, d)

    def forward(self, tokens, targets):
        logits = torch.relu(self.fc(self.emb(tokens))) @ self.emb.weight.t()
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), label_smoothing=0.1, ignore_index=3)


def _tokens(b: int, s: int, d: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    return [torch.randint(0, 4 * d, (b, s), generator=g), torch.randint(0, 4 * d, (b, s), generator=g)]


class DenseExperts(nn.Module):
    """Every expert on every token (batched GEMMs), the router's top expert picked by gather."""

    def __init__(self, d: int):
        super().__init__()
        self.router = nn.Linear(d, 4)
        self.w1 = nn.Parameter(torch.randn(4, d, 2 * d) * d**-0.5)
        self.w2 = nn.Parameter(torch.randn(4, 2 * d, d) * (2 * d) ** -0.5)

    def forward(self, x):
        p = F.softmax(self.router(x), -1)
        top = p.argmax(-1)
        out = torch.bmm(torch.bmm(x.expand(4, -1, -1), self.w1).relu(), self.w2)
        picked = out.gather(0, top.view(1, -1, 1).expand(1, -1, x.shape[1])).squeeze(0)
        return picked * p.gather(1, top.view(-1, 1))


class BroadcastMatmul(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, d, d) * d**-0.5)

    def forward(self, x):
        return torch.exp(torch.matmul(x.unsqueeze(0), self.w) * 0.1)


class SharedWeight(nn.Module):
    """One Linear applied three times."""

    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return self.fc(torch.relu(self.fc(x))) * self.fc(x).sigmoid()


class InPlace(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc, self.act = nn.Linear(d, d), nn.ReLU(inplace=True)

    def forward(self, x):
        y = self.fc(x)
        y.mul_(2).add_(1)
        return self.act(y)


class SeveralOutputs(nn.Module):
    """A hidden state, a detached projection and an integer argmax."""

    def __init__(self, d: int):
        super().__init__()
        self.fc, self.proj = nn.Linear(d, d), nn.Linear(d, 8)

    def forward(self, x):
        h = F.leaky_relu(self.fc(x), 0.2)
        return h, self.proj(h).detach() + 1, self.proj(h).max(-1).indices


class MishPlainNorm(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc, self.out = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
        self.norm = nn.LayerNorm(2 * d, elementwise_affine=False)

    def forward(self, x):
        return F.log_softmax(self.out(self.norm(F.mish(self.fc(x)))), -1)


class Normed(nn.Module):
    """A Linear, a normalization layer (`nn.GroupNorm`, `nn.RMSNorm`), a Linear."""

    def __init__(self, d: int, norm: Callable[[int], nn.Module]):
        super().__init__()
        self.fc, self.norm, self.out = nn.Linear(d, 2 * d), norm(2 * d), nn.Linear(2 * d, d)

    def forward(self, x):
        return self.out(self.norm(self.fc(x)))


class Glu(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(2 * d, d)

    def forward(self, x):
        return self.out(F.glu(self.fc(x), -1))


class SoftminSoftplus(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, 2 * d)

    def forward(self, x):
        return F.softmin(self.fc(x) / 0.7, -1) * F.softplus(self.fc(x), beta=2, threshold=5)


class Losses(nn.Module):
    """KL divergence, smooth L1 and BCE with logits on one Linear's output."""

    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, 16)

    def forward(self, x, t):
        y = self.fc(x)
        return (F.kl_div(F.log_softmax(y, -1), t, reduction="batchmean") + F.smooth_l1_loss(y, t)
                + F.binary_cross_entropy_with_logits(y, t))  # fmt: skip


def _soft_targets(b: int, s: int, d: int) -> list[torch.Tensor]:
    return [torch.randn(b * s, d), torch.softmax(torch.randn(b * s, 16), -1)]


class MoreLosses(nn.Module):
    """Summed cross-entropy, the largest per-row NLL and an MSE against a detached target."""

    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, 16)

    def forward(self, x, t):
        y = self.fc(x)
        nll = F.nll_loss(F.log_softmax(y, -1), t, reduction="none").max()
        return F.cross_entropy(y, t, reduction="sum") / t.numel() + nll + F.mse_loss(y, y.detach() * 0.5)


def _classes(b: int, s: int, d: int) -> list[torch.Tensor]:
    return [torch.randn(b * s, d), torch.randint(0, 16, (b * s,), generator=torch.Generator().manual_seed(6))]


class RowStatistics(nn.Module):
    """`sub` with alpha, `masked_fill`, then logsumexp, std, amax and var_mean over rows."""

    def __init__(self, d: int):
        super().__init__()
        self.a, self.b = nn.Linear(d, 2 * d), nn.Linear(2 * d, 2 * d)

    def forward(self, x):
        h = self.a(x)
        h = torch.sub(h, self.b.bias, alpha=0.3).masked_fill(h > 2, 0.0)
        y = self.b(h)
        var = torch.var_mean(y, -1, correction=0, keepdim=True)[0]
        return (torch.logsumexp(y, -1, keepdim=True) + y.std(-1, keepdim=True)
                + y.amax(-1, keepdim=True) - var)  # fmt: skip


class OpsOutside(nn.Module):
    """cumsum and sort after Linears: ops no epilogue computes."""

    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return torch.cumsum(F.relu(self.fc(x)), -1) + torch.sort(self.fc(x), -1).values


class Attention(nn.Module):
    """Packed q, k, v; SDPA with an additive float mask, or the same written out, or written
    out with a boolean padding mask and `masked_fill`."""

    def __init__(self, d: int, how: str):
        super().__init__()
        self.qkv, self.out, self.how = nn.Linear(d, 3 * d), nn.Linear(d, d), how

    def forward(self, x, mask):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, 4, d // 4).permute(2, 0, 3, 1, 4)
        if self.how == "sdpa":
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        elif self.how == "float_mask":
            a = torch.softmax((q @ k.transpose(-1, -2)) * (d // 4) ** -0.5 + mask, -1) @ v
        else:
            scores = (q @ k.transpose(-1, -2)).masked_fill(~mask[:, None, None, :], float("-inf"))
            a = torch.softmax(scores * 0.3, -1) @ v
        return self.out(a.transpose(1, 2).reshape(b, s, d))


def _float_mask(b: int, s: int, d: int) -> list[torch.Tensor]:
    return [torch.randn(b, s, d), torch.randn(s, s)]


def _keep(b: int, s: int, d: int) -> list[torch.Tensor]:
    keep = torch.ones(b, s, dtype=torch.bool)
    keep[1::2, s // 2 :] = False
    return [torch.randn(b, s, d), keep]


class WeightNormEmbedding(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.emb = nn.Embedding(4 * d, d, padding_idx=0)
        self.fc = nn.utils.parametrizations.weight_norm(nn.Linear(d, d))

    def forward(self, tokens, _targets):
        return F.elu(self.fc(self.emb(tokens)))


class Pointwise(nn.Module):
    """A mix of pointwise ops after a Linear: where, pow, sqrt, clamp, rsqrt, reciprocal, sign,
    remainder."""

    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        y = self.fc(x)
        return (torch.where(y > 0, y**3, y.abs().sqrt()) + y.clamp(-0.5, 0.5) * torch.rsqrt(y * y + 1)
                + torch.reciprocal(y.abs() + 1) + y.sign() * y.remainder(0.7))  # fmt: skip


class Gram(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        y = self.fc(x)
        return torch.bmm(y, y.transpose(1, 2)).tanh() @ y


class Similarities(nn.Module):
    """L2-normalized rows and the cosine similarity of two projections."""

    def __init__(self, d: int):
        super().__init__()
        self.a, self.b = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        y = self.a(x)
        return y / y.norm(dim=-1, keepdim=True).clamp_min(1e-6) + F.cosine_similarity(y, self.b(x), dim=-1)[:, None]



class AutocastMLP(nn.Module):
    """Float32 parameters, the GEMMs under autocast (mixed-precision training as users write it)."""

    def __init__(self, d: int):
        super().__init__()
        self.up, self.down = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x):
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            return self.down(F.gelu(self.up(x))).float()


class ParallelResidual(nn.Module):
    """GPT-NeoX's block: attention and MLP both read the input, x + attn(ln1 x) + mlp(ln2 x),
    causal attention written out with `masked_fill`."""

    def __init__(self, d: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, 4, d // 4).transpose(1, 2) for z in self.qkv(self.ln1(x)).chunk(3, -1))
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        p = torch.softmax((q @ k.transpose(-1, -2) * (d // 4) ** -0.5).masked_fill(causal, float("-inf")), -1)
        a = (p @ v).transpose(1, 2).reshape(b, t, d)
        return x + self.o(a) + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))


class GatedGeluRMSNorm(nn.Module):
    """T5 v1.1's feed-forward: its RMSNorm (no mean, no bias), gelu(x W0) * (x W1), no biases."""

    def __init__(self, d: int):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(d))
        self.wi0, self.wi1 = nn.Linear(d, 2 * d, bias=False), nn.Linear(d, 2 * d, bias=False)
        self.wo = nn.Linear(2 * d, d, bias=False)

    def forward(self, x):
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.scale
        return x + self.wo(F.gelu(self.wi0(h), approximate="tanh") * self.wi1(h))


class RegressionHead(nn.Module):
    """A one-output head (N = 1: rows TMA cannot store) after a SiLU layer."""

    def __init__(self, d: int):
        super().__init__()
        self.fc, self.head = nn.Linear(d, d), nn.Linear(d, 1)

    def forward(self, x):
        return self.head(F.silu(self.fc(x))).squeeze(-1)


class NarrowK(nn.Module):
    """Linears of 1 and 3 input features (K too narrow for TMA's 16-byte rows) beside a wide one."""

    def __init__(self, d: int):
        super().__init__()
        self.one, self.three, self.wide = nn.Linear(1, d), nn.Linear(3, d), nn.Linear(d, d)

    def forward(self, x):
        return F.relu(self.one(x[..., :1])) + torch.tanh(self.three(x[..., :3])) + F.gelu(self.wide(x))


class FrozenBase(nn.Module):
    """Fine-tuning a head over a frozen layer: no weight gradient for the base."""

    def __init__(self, d: int):
        super().__init__()
        self.base, self.head = nn.Linear(d, d), nn.Linear(d, d)
        self.base.requires_grad_(False)

    def forward(self, x):
        return self.head(F.gelu(self.base(x)))


class AlibiScores(nn.Module):
    """Attention probabilities with ALiBi's distance penalty added to the scores."""

    def __init__(self, d: int):
        super().__init__()
        self.qk = nn.Linear(d, 2 * d)

    def forward(self, x):
        q, k = self.qk(x).chunk(2, -1)
        pos = torch.arange(x.shape[1], device=x.device)
        penalty = (pos[None, :] - pos[:, None]).abs().float() * -0.5
        return torch.softmax(q @ k.transpose(-1, -2) * x.shape[-1] ** -0.5 + penalty, -1)


class ColumnStatistics(nn.Module):
    """Statistics over rows (M) instead of columns: each column's norm and mean."""

    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        y = self.fc(x)
        return y / y.norm(dim=0, keepdim=True) + y.mean(0)


class TopTwoExperts(nn.Module):
    """A mixture of experts: softmax router, top-2 gates, each expert's ReLU output masked to its
    tokens."""

    def __init__(self, d: int):
        super().__init__()
        self.router = nn.Linear(d, 4)
        self.experts = nn.ModuleList(nn.Linear(d, d) for _ in range(4))

    def forward(self, x):
        gate, idx = torch.softmax(self.router(x), -1).topk(2, -1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            picked = idx == e
            weight = (gate * picked).sum(-1, keepdim=True)
            out = out + torch.where(picked.any(-1, keepdim=True), F.relu(expert(x)) * weight, 0.0)
        return out


class MaskedSoftmax(nn.Module):
    """`torch.where` on a bool mask input, then softmax."""

    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x, keep):
        return torch.where(keep, self.fc(x), -1e4).softmax(-1)


class Activations(nn.Module):
    """The activations torch.nn has beyond the usual, summed after one Linear."""

    def __init__(self, d: int):
        super().__init__()
        self.a, self.b = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        y = self.a(x)
        acts = (torch.cos(y) * torch.expm1(y.clamp(max=2)) + torch.erf(y) + torch.atan(y)
                + F.softplus(y, beta=2) + F.mish(y) + F.hardswish(y) + F.elu(y) + F.leaky_relu(y, 0.1)
                + F.logsigmoid(y))  # fmt: skip
        return self.b(acts)


class UnbiasedStatistics(nn.Module):
    """Rows standardized by the unbiased variance, plus their standard deviation."""

    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        y = self.fc(x)
        return (y - y.mean(-1, keepdim=True)) / (y.var(-1, keepdim=True) + 1e-5).sqrt() + y.std(-1, keepdim=True)



class LinearBatchNorm(nn.Module):
    """A projection head as SimCLR writes it: Linear without bias, BatchNorm1d (statistics over
    the batch's rows), ReLU, Linear."""

    def __init__(self, d: int):
        super().__init__()
        self.head = nn.Sequential(nn.Linear(d, 2 * d, bias=False), nn.BatchNorm1d(2 * d), nn.ReLU(),
                                  nn.Linear(2 * d, d))  # fmt: skip

    def forward(self, x):
        return self.head(x)


class TransposedBatchNorm(nn.Module):
    """PatchTST's feed-forward block with its BatchNorm: the Linear's [B, L, C] output is
    transposed to [B, C, L] for BatchNorm1d and back (statistics over B and L, all of the
    Linear's rows), GELU, Linear, residual. The first Linear has no bias: BatchNorm subtracts
    the mean, so its gradient would be zero but for rounding."""

    def __init__(self, d: int):
        super().__init__()
        self.fc1, self.norm = nn.Linear(d, 2 * d, bias=False), nn.BatchNorm1d(2 * d)
        self.fc2 = nn.Linear(2 * d, d)

    def forward(self, x):
        h = self.norm(self.fc1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.fc2(F.gelu(h))


class PReLUMLP(nn.Module):
    """PReLU's learned slope per channel between two Linears."""

    def __init__(self, d: int):
        super().__init__()
        self.up, self.act, self.down = nn.Linear(d, 2 * d), nn.PReLU(2 * d), nn.Linear(2 * d, d)

    def forward(self, x):
        return self.down(self.act(self.up(x)))


class ConvNeXtBlock(nn.Module):
    """ConvNeXt's block: a depthwise convolution (outside every region), channels-last LayerNorm,
    Linear, GELU, Linear, a learned per-channel layer scale, and the residual in NCHW (the
    block's output permuted back)."""

    def __init__(self, d: int):
        super().__init__()
        self.dw, self.norm = nn.Conv2d(d, d, 7, padding=3, groups=d), nn.LayerNorm(d, eps=1e-6)
        self.up, self.down = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
        self.gamma = nn.Parameter(0.1 * torch.ones(d))

    def forward(self, x):
        h = self.down(F.gelu(self.up(self.norm(self.dw(x).permute(0, 2, 3, 1)))))
        return x + (self.gamma * h).permute(0, 3, 1, 2)


def _feature_maps(b: int, s: int, d: int) -> list[torch.Tensor]:
    return [torch.randn(b, d, s // 4, s // 4)]


class PointwiseBottleneck(nn.Module):
    """A ResNet-style bottleneck of pointwise (1x1) convolutions on channels-last feature maps:
    convolution, BatchNorm2d, ReLU, convolution, BatchNorm2d, the residual, ReLU. The
    convolutions run as GEMMs (`pointwise_convs_as_mm`): the batch statistics join their
    forward epilogues, ReLU's and BatchNorm's backward and the residual's gradient their dgrads'."""

    def __init__(self, d: int):
        super().__init__()
        self.reduce, self.n1 = nn.Conv2d(d, d // 2, 1, bias=False), nn.BatchNorm2d(d // 2)
        self.expand, self.n2 = nn.Conv2d(d // 2, d, 1, bias=False), nn.BatchNorm2d(d)

    def forward(self, x):
        x = x.contiguous(memory_format=torch.channels_last)
        h = F.relu(self.n1(self.reduce(x)))
        return F.relu(x + self.n2(self.expand(h)))


class MixerBlock(nn.Module):
    """MLP-Mixer's block: token mixing (Linears over the transposed LayerNorm output, across its
    `dim // 4` tokens), then channel mixing, each with its residual."""

    def __init__(self, d: int):
        super().__init__()
        t = d // 4
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.t1, self.t2 = nn.Linear(t, 2 * t), nn.Linear(2 * t, t)
        self.c1, self.c2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x):
        x = x + self.t2(F.gelu(self.t1(self.n1(x).transpose(1, 2)))).transpose(1, 2)
        return x + self.c2(F.gelu(self.c1(self.n2(x))))


def _tokens_of_mixer(b: int, s: int, d: int) -> list[torch.Tensor]:
    return [torch.randn(b, d // 4, d)]


class WindowAttention(nn.Module):
    """Swin's window attention: 4 x 4 windows of tokens, the scores plus a relative position bias
    gathered from a learned table, softmax, values, projection."""

    def __init__(self, d: int, heads: int = 4, w: int = 4):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.table = nn.Parameter(0.02 * torch.randn((2 * w - 1) ** 2, heads))
        c = torch.stack(torch.meshgrid(torch.arange(w), torch.arange(w), indexing="ij")).flatten(1)
        r = (c[:, :, None] - c[:, None, :]).permute(1, 2, 0) + (w - 1)
        self.register_buffer("index", r[..., 0] * (2 * w - 1) + r[..., 1])

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = (q * (d // self.heads) ** -0.5) @ k.transpose(-2, -1)
        bias = self.table[self.index.view(-1)].view(n, n, -1).permute(2, 0, 1)
        a = (a + bias[None]).softmax(-1)
        return self.proj((a @ v).transpose(1, 2).reshape(b, n, d))


def _windows(b: int, s: int, d: int) -> list[torch.Tensor]:
    return [torch.randn(b * s // 16, 16, d)]


class ClipLoss(nn.Module):
    """CLIP's contrastive loss: normalized projections, their similarities scaled by a learned
    temperature, cross-entropy over the rows and over the columns."""

    def __init__(self, d: int):
        super().__init__()
        self.img, self.txt = nn.Linear(d, d), nn.Linear(d, d)
        self.scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, a, b):
        i, t = F.normalize(self.img(a), dim=-1), F.normalize(self.txt(b), dim=-1)
        logits = self.scale.exp() * i @ t.t()
        y = torch.arange(a.shape[0], device=a.device)
        return (F.cross_entropy(logits, y) + F.cross_entropy(logits.t(), y)) / 2


def _pairs(b: int, s: int, d: int) -> list[torch.Tensor]:
    return [torch.randn(b * s, d), torch.randn(b * s, d)]


class LayerScaleDropPath(nn.Module):
    """A pre-norm SiLU MLP block with a learned layer scale and stochastic depth (a per-sample
    keep mask, given, scaled by 1 / keep probability) on its residual branch."""

    def __init__(self, d: int):
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
        self.gamma = nn.Parameter(0.1 * torch.ones(d))

    def forward(self, x, keep):
        return x + keep / 0.8 * (self.gamma * self.down(F.silu(self.up(self.norm(x)))))


def _kept_samples(b: int, s: int, d: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(b)
    return [torch.randn(b, s, d), (torch.rand(b, 1, 1, generator=g) > 0.2).float()]


class Highway(nn.Module):
    """A highway layer: a sigmoid gate mixing a ReLU transform with the input."""

    def __init__(self, d: int):
        super().__init__()
        self.gate, self.transform = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        t = torch.sigmoid(self.gate(x))
        return F.relu(self.transform(x)) * t + x * (1 - t)


class ReZero(nn.Module):
    """ReZero's residual (Bachlechner et al.): x + alpha * mlp(x), alpha one learned 0-d scalar,
    and a learned temperature on the output: 0-d tensors the epilogue reads (`ir.ScalarLoad`,
    session 57; before, an op on one stayed out of every region)."""

    def __init__(self, d: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
        self.alpha = nn.Parameter(torch.tensor(0.3))
        self.temperature = nn.Parameter(torch.tensor(1.5))

    def forward(self, x):
        h = x + self.alpha * self.fc2(F.gelu(self.fc1(x)))
        return h / self.temperature


def _keep_mask(b: int, s: int, d: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(b * s * d)
    return [torch.randn(b * s, d), torch.rand(b * s, d, generator=g) > 0.3]


def _layer(**kw) -> Callable[[int], nn.Module]:
    return lambda d: nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.0, **kw)


TRIMMED = "Inductor's kernel after the GEMM moves fewer bytes than its epilogue would (trim_for_inductor)"
CASES: dict[str, Case] = {
    "encoder_post_norm_relu": Case(_layer(batch_first=True), _x),
    "encoder_pre_norm_gelu": Case(_layer(batch_first=True, norm_first=True, activation="gelu"), _x),
    "encoder_sequence_first": Case(_layer(), _x),
    "decoder": Case(Decoder, lambda b, s, d: [torch.randn(b, s, d), torch.randn(b, s // 2, d)]),
    "mha_key_padding": Case(KeyPadding, _padded),
    "mha_cross_kv_dims_weights": Case(CrossAttentionWeights, _cross),
    "bilinear": Case(Bilinear, lambda b, s, d: [torch.randn(b * s, d), torch.randn(b * s, d // 2)]),
    "einsum_heads": Case(EinsumHeads, _x),
    "baddbmm_alpha_beta": Case(ScaledBaddbmm, lambda b, s, d: [torch.randn(8, b * s // 8, d)]),
    "addmm_alpha_beta_addbmm": Case(ScaledAddmm, _rows),
    "linear_4d_residual": Case(Linear4d, _x),
    "linear_transposed_input": Case(TransposedInput, lambda b, s, d: [torch.randn(d, b * s)]),
    "lstm_gru_cells": Case(Cells, _rows),
    "conv_batchnorm_head": Case(ConvHead, _images),
    "tied_label_smoothing": Case(TiedLabelSmoothing, _tokens),
    "dense_experts": Case(DenseExperts, _rows),
    "broadcast_matmul": Case(BroadcastMatmul, _rows,
                             "torch makes it one mm, [M, K] x [K, 3N], whose rows it splits "
                             "and permutes into [3, M, N]: the ops after that stay outside"),
    "shared_weight": Case(SharedWeight, _rows),
    "in_place": Case(InPlace, _rows),
    "several_outputs": Case(SeveralOutputs, _rows),
    "mish_plain_layernorm": Case(MishPlainNorm, _rows),
    "groupnorm": Case(lambda d: Normed(d, lambda n: nn.GroupNorm(4, n)), _rows,
                      "GroupNorm's statistics span groups of columns, not rows"),
    "rmsnorm": Case(lambda d: Normed(d, nn.RMSNorm), _rows),
    "glu": Case(Glu, _rows, bf16_unfused="its one region (the dgrad's GLU backward) moves fewer bytes in "
                                       "Inductor's kernel with the ops after it in bf16 (trim_for_inductor)"),
    "softmin_softplus": Case(SoftminSoftplus, _rows),
    "kl_smooth_l1_bce": Case(Losses, _soft_targets),
    "ce_sum_nll_none_mse": Case(MoreLosses, _classes),
    "row_statistics": Case(RowStatistics, _rows),
    "ops_outside": Case(OpsOutside, _rows),
    "sdpa_float_mask": Case(lambda d: Attention(d, "sdpa"), _float_mask),
    "attention_float_mask": Case(lambda d: Attention(d, "float_mask"), _float_mask),
    "attention_padding_mask": Case(lambda d: Attention(d, "padding"), _keep),
    "weight_norm_embedding": Case(WeightNormEmbedding, _tokens, TRIMMED),
    "pointwise": Case(Pointwise, _rows, TRIMMED),
    "gram": Case(Gram, _x),
    "similarities": Case(Similarities, _rows),
    "autocast_bf16": Case(AutocastMLP, _rows, tol=2e-2, float32=True),
    "parallel_residual": Case(ParallelResidual, _x),
    "gated_gelu_rmsnorm": Case(GatedGeluRMSNorm, _x),
    "regression_head": Case(RegressionHead, _x),
    "narrow_k": Case(NarrowK, _x),
    "frozen_base": Case(FrozenBase, _rows),
    "alibi_scores": Case(AlibiScores, _x),
    "column_statistics": Case(ColumnStatistics, _rows),
    "top_two_experts": Case(TopTwoExperts, _rows),
    "masked_softmax": Case(MaskedSoftmax, _keep_mask),
    "activations": Case(Activations, _rows),
    "unbiased_statistics": Case(UnbiasedStatistics, _rows),
    "linear_batchnorm": Case(LinearBatchNorm, _rows),
    "transposed_batchnorm": Case(TransposedBatchNorm, _x),
    "prelu": Case(PReLUMLP, _rows),
    "convnext_block": Case(ConvNeXtBlock, _feature_maps),
    "pointwise_bottleneck": Case(PointwiseBottleneck, _feature_maps),
    "mixer_block": Case(MixerBlock, _tokens_of_mixer),
    "window_attention": Case(WindowAttention, _windows),
    "clip_loss": Case(ClipLoss, _pairs),
    "rezero_scalars": Case(ReZero, _x),
    "layer_scale_drop_path": Case(LayerScaleDropPath, _kept_samples),
    "highway": Case(Highway, _rows),
    "single_row": Case(lambda d: nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d)),
                       lambda b, s, d: [torch.randn(1, d)]),
}


def train_step(model: nn.Module, inputs, fn=None) -> dict[str, torch.Tensor]:
    """Forward (through `fn`, else `model`), loss, backward: the loss, the float inputs' and the
    parameters' gradients, as float32."""
    model.zero_grad(set_to_none=True)
    args = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    value = loss((model if fn is None else fn)(*args))
    value.backward()
    got = {"loss": value.detach().float()}
    got.update({f"input{i}": a.grad.float() for i, a in enumerate(args) if a.grad is not None})
    got.update({n: p.grad.float() for n, p in model.named_parameters() if p.grad is not None})
    return got


def loss(out) -> torch.Tensor:
    """The step's loss: a module's own scalar loss, else each float output against a fixed random
    probe (so the incoming gradient is a fresh tensor, not a constant)."""
    if isinstance(out, tuple):
        return torch.stack([loss(o) for o in out if o.is_floating_point()]).sum()
    if out.dim() == 0:
        return out.float()
    g = torch.Generator().manual_seed(out.numel())
    return (out.float() * torch.randn(out.shape, generator=g).to(out.device)).sum()
