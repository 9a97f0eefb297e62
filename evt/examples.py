"""Built-in examples, for `evt dump --example NAME` and the tests: small training steps."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    """Linear -> GELU -> Linear, with biases and a residual connection."""

    def __init__(self, dim: int = 256, hidden: int = 1024, approximate: str = "none"):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate=self.approximate)) + x


class BertLayer(nn.Module):
    """A BERT-style post-LayerNorm encoder layer with explicit (unfused) attention."""

    def __init__(self, dim: int = 256, heads: int = 4, ffn: int = 1024):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln1 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, ffn)
        self.fc2 = nn.Linear(ffn, dim)
        self.ln2 = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, s, d)
        x = self.ln1(x + self.proj(y))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


@dataclass(frozen=True)
class Example:
    description: str
    build: Callable[[torch.dtype, str], tuple[Callable, tuple]]  # -> (train step, its args)


def _mlp(dtype: torch.dtype, device: str, tokens: int = 512, dim: int = 256, hidden: int = 1024):
    torch.manual_seed(0)
    model = MLP(dim, hidden).to(device=device, dtype=dtype)
    x = torch.randn(tokens, dim, device=device, dtype=dtype, requires_grad=True)

    def step(x):
        loss = model(x).float().pow(2).mean()
        loss.backward()
        return loss

    return step, (x,)


def _bert(dtype: torch.dtype, device: str, layers: int = 1, batch: int = 2, seq: int = 128):
    torch.manual_seed(0)
    model = nn.Sequential(*[BertLayer() for _ in range(layers)]).to(device=device, dtype=dtype)
    x = torch.randn(batch, seq, 256, device=device, dtype=dtype, requires_grad=True)

    def step(x):
        loss = model(x).float().pow(2).mean()
        loss.backward()
        return loss

    return step, (x,)


EXAMPLES: dict[str, Example] = {
    "mlp": Example("Linear-GELU-Linear MLP with biases and a residual, forward+backward", _mlp),
    "bert": Example("a BERT-style encoder layer (attention, LayerNorm, GELU FFN), fwd+bwd", _bert),
}
