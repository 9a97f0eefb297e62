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


EXAMPLES: dict[str, Example] = {
    "mlp": Example("Linear-GELU-Linear MLP with biases and a residual, forward+backward", _mlp),
}
