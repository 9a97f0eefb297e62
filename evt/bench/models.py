"""The training-step models, written out as plain nn.Modules (no library layers beyond Linear,
LayerNorm, BatchNorm1d and scaled_dot_product_attention) so a reader can check what is
measured."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from evt.testing.models import saving_gemms


class MLP(nn.Module):
    """fc2(GELU(fc1(x))), GELU exact or tanh."""

    def __init__(self, dim: int, hidden: int, approximate: str = "none"):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)
        self.approximate = approximate

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate=self.approximate))


class MLPBlock(nn.Module):
    """x + MLP(x): the MLP of a transformer layer with its residual, no normalization."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.mlp = MLP(dim, hidden)

    def forward(self, x):
        return x + self.mlp(x)


class SelfAttention(nn.Module):
    """Multi-head self-attention: one qkv Linear, SDPA, an output projection. With
    `math=True` the attention is written out as Hugging Face's "eager" attention does it
    (Q·Kᵀ, scale, causal mask by `where`, softmax, P·V), which is what evt can fuse. `padding`
    (a [B, S] bool buffer, True at padding keys): BERT's padding mask, added to the scaled scores
    as 0 or the dtype's lowest value (SDPA's float `attn_mask` when not written out)."""

    def __init__(self, dim: int, heads: int, causal: bool, math: bool = False,
                 padding: torch.Tensor | None = None):  # fmt: skip
        super().__init__()
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.heads, self.causal, self.math = heads, causal, math
        self.register_buffer("padding", padding, persistent=False)

    def forward(self, x):  # x: B x S x dim
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        mask = None
        if self.padding is not None:
            mask = self.padding[:, None, None, :].to(x.dtype) * torch.finfo(x.dtype).min
        if self.math:
            scores = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
            if self.causal:
                keep = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
                scores = torch.where(keep, scores, torch.finfo(scores.dtype).min)
            if mask is not None:
                scores = scores + mask
            y = torch.softmax(scores, dim=-1) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class PreLNBlock(nn.Module):
    """GPT-2 (causal, tanh GELU) and ViT (bidirectional, exact GELU) blocks:
    x + attn(ln1(x)), then + mlp(ln2(.))."""

    def __init__(
        self, dim: int, heads: int, hidden: int, causal: bool, approximate: str, math: bool = False
    ):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads, causal, math)
        self.mlp = MLP(dim, hidden, approximate)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class RMSNorm(nn.Module):
    """LLaMA's RMSNorm as Hugging Face's `LlamaRMSNorm` writes it: x / rms(x) in fp32, cast back,
    then scaled by the weight."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryAttention(nn.Module):
    """LLaMA's attention: q, k, v and output projections without bias, rotary position
    embeddings on q and k (Hugging Face's rotate-half form, base 10000), causal SDPA."""

    def __init__(self, dim: int, heads: int, base: float = 10000.0):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.heads = heads
        half = dim // heads // 2
        self.register_buffer("inv_freq", base ** -(torch.arange(half, dtype=torch.float32) / half),
                             persistent=False)  # fmt: skip

    def forward(self, x):  # x: B x S x dim
        b, s, d = x.shape
        q, k, v = (
            p(x).view(b, s, self.heads, -1).transpose(1, 2) for p in (self.q, self.k, self.v)
        )
        angles = torch.arange(s, device=x.device, dtype=torch.float32)[:, None] * self.inv_freq
        angles = torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        q, k = (t * cos + _rotate_half(t) * sin for t in (q, k))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, s, d))


class SwiGLU(nn.Module):
    """LLaMA's MLP: down(silu(gate(x)) * up(x)), no biases."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate, self.up = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class LlamaBlock(nn.Module):
    """A LLaMA decoder layer: x + attn(rms1(x)), then + mlp(rms2(.))."""

    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
        self.attn = RotaryAttention(dim, heads)
        self.mlp = SwiGLU(dim, hidden)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Checkpointed(nn.Module):
    """`model` under activation checkpointing (`torch.utils.checkpoint`, non-reentrant): all of
    it recomputed in the backward, or with `selective` only what the policy does not save (the
    GEMMs' outputs saved, the rest recomputed: `evt.testing.models.save_gemms`)."""

    def __init__(self, model: nn.Module, selective: bool = False):
        super().__init__()
        self.model, self.selective = model, selective

    def forward(self, x):
        context = {"context_fn": saving_gemms} if self.selective else {}
        return checkpoint(self.model, x, use_reentrant=False, **context)


class PostLNLayer(nn.Module):
    """A BERT layer: ln1(x + attn(x)), then ln2(. + mlp(.)); bidirectional, exact GELU;
    `math` and `padding` as SelfAttention's."""

    def __init__(self, dim: int, heads: int, hidden: int, math: bool = False,
                 padding: torch.Tensor | None = None):  # fmt: skip
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads, causal=False, math=math, padding=padding)
        self.mlp = MLP(dim, hidden)

    def forward(self, x):
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.mlp(x))


class PatchTSTLayer(nn.Module):
    """PatchTST's encoder layer (Nie et al., ICLR 2023: `TSTEncoderLayer` with its default
    norm="BatchNorm"): post-norm, bidirectional attention, exact GELU. Each norm is a
    BatchNorm1d of the [B, dim, patches] transpose (statistics over every token of the batch),
    transposed back."""

    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        self.attn = SelfAttention(dim, heads, causal=False)
        self.norm1, self.norm2 = nn.BatchNorm1d(dim), nn.BatchNorm1d(dim)
        self.mlp = MLP(dim, hidden)

    @staticmethod
    def _norm(norm: nn.BatchNorm1d, x):
        return norm(x.transpose(1, 2)).transpose(1, 2)

    def forward(self, x):
        x = self._norm(self.norm1, x + self.attn(x))
        return self._norm(self.norm2, x + self.mlp(x))


class Bottleneck(nn.Module):
    """ResNet-50's bottleneck block (torchvision's `Bottleneck`, stride 1) on channels-last
    feature maps, as channels-last training runs it: 1x1 convolution, BatchNorm2d, ReLU, 3x3
    convolution, BatchNorm2d, ReLU, 1x1 convolution, BatchNorm2d, the residual, ReLU. Its
    [B, H*W, C] input is the [B, C, H, W] channels-last map viewed as tokens (and the result is
    viewed back). Under evt the pointwise convolutions run as GEMMs (`pointwise_convs_as_mm`);
    the 3x3 one stays cuDNN's."""

    def __init__(self, dim: int, hidden: int, side: int):
        super().__init__()
        self.side = side
        self.conv1, self.bn1 = nn.Conv2d(dim, hidden, 1, bias=False), nn.BatchNorm2d(hidden)
        self.conv2 = nn.Conv2d(hidden, hidden, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(hidden)
        self.conv3, self.bn3 = nn.Conv2d(hidden, dim, 1, bias=False), nn.BatchNorm2d(dim)
        self.to(memory_format=torch.channels_last)

    def forward(self, x):
        b, hw, c = x.shape
        x = x.view(b, self.side, self.side, c).permute(0, 3, 1, 2)  # channels-last [B, C, H, W]
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        return F.relu(x + self.bn3(self.conv3(h))).permute(0, 2, 3, 1).reshape(b, hw, c)


class LMHead(nn.Module):
    """GPT-2's final LayerNorm and vocabulary projection (no bias); returns the logits."""

    def __init__(self, dim: int, vocab: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, x):
        return self.head(self.ln(x))


class ProjectionHead(nn.Module):
    """A self-supervised projection head (SimCLR's, BYOL's): Linear without bias, BatchNorm1d
    over the batch's rows (training mode: the batch's statistics), ReLU, Linear; on the
    flattened [batch * seq, dim] features, returned as the input's shape."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1, self.norm = nn.Linear(dim, hidden, bias=False), nn.BatchNorm1d(hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.relu(self.norm(self.fc1(x.flatten(0, -2))))).view(x.shape)


class WithLoss(nn.Module):
    """A model and its loss in one module, the unit every compiled baseline compiles:
    cross-entropy for logits against class targets, else MSE in fp32 against a random target."""

    def __init__(self, model: nn.Module, loss: str):
        super().__init__()
        self.model, self.loss = model, loss

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        out = self.model(x)
        out = out.float() if out.dtype in (torch.bfloat16, torch.float16) else out  # f64 refs
        if self.loss == "ce":
            return F.cross_entropy(out.flatten(0, -2), target.flatten())
        return F.mse_loss(out, target.to(out.dtype))
