"""Built-in examples, for `evt dump --example NAME`, `scripts/model_coverage.py` and the tests:
small training steps, written out as plain modules so a reader can see every op evt sees.

- `mlp`: Linear -> GELU -> Linear with a residual.
- `gpt2`: a GPT-2 model (token + position embeddings, pre-LayerNorm blocks with causal attention
  written out op by op and a tanh-GELU MLP, final LayerNorm, LM head tied to the token embedding
  or not) and its next-token cross-entropy.
- `bert`: a BERT model (embeddings + LayerNorm, post-LayerNorm layers with a padding mask and an
  exact-GELU MLP) with a masked-LM head (tied decoder) or a classification head (pooler + tanh),
  and its cross-entropy.
- `llama`: a LLaMA model (token embedding, decoder layers with RMSNorm, rotary causal attention
  and a SwiGLU MLP, no biases; final RMSNorm, untied LM head) and its next-token cross-entropy.

Sizes are arguments: `SMALL` for CPU tests, `GPU` for realistic-but-small runs on a device.
Dropout is optional and off by default (p = 0 adds no op to the graph), so a compiled step can be
compared with eager.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from evt.bench.models import MLP as FeedForward  # fc2(GELU(fc1(x))), exact or tanh
from evt.bench.models import LlamaBlock, RMSNorm


class MLP(nn.Module):
    """Linear -> GELU -> Linear, with biases and a residual connection."""

    def __init__(self, dim: int = 256, hidden: int = 1024, approximate: str = "none"):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate=self.approximate)) + x


def maybe_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """F.dropout, absent from the graph when p is 0."""
    return F.dropout(x, p, training) if p > 0 else x


def split_heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    """[B, S, H*D] -> [B, H, S, D]."""
    b, s, _ = t.shape
    return t.view(b, s, heads, -1).transpose(1, 2)


class BertLayer(nn.Module):
    """A BERT-style post-LayerNorm encoder layer with explicit (unfused) attention:
    ln1(x + proj(attention)), then ln2(. + fc2(GELU(fc1(.)))), GELU exact.

    `mask` (optional): an additive attention mask broadcastable to [B, H, S, S], e.g. BERT's
    padding mask [B, 1, 1, S] (0 where a key is a token, a large negative where it is padding)."""

    def __init__(self, dim: int = 256, heads: int = 4, ffn: int = 1024, dropout: float = 0.0):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln1 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, ffn)
        self.fc2 = nn.Linear(ffn, dim)
        self.ln2 = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5
        if mask is not None:
            scores = scores + mask
        att = maybe_dropout(torch.softmax(scores, dim=-1), self.dropout, self.training)
        y = (att @ v).transpose(1, 2).reshape(b, s, d)
        x = self.ln1(x + maybe_dropout(self.proj(y), self.dropout, self.training))
        h = self.fc2(F.gelu(self.fc1(x)))
        return self.ln2(x + maybe_dropout(h, self.dropout, self.training))


class CausalSelfAttention(nn.Module):
    """GPT-2's attention, op by op: q, k and v projections, softmax(Q·Kᵀ * scale, causal mask)
    (future keys set to -inf), optional dropout on the probabilities, P·V, output projection."""

    def __init__(self, dim: int, heads: int, dropout: float = 0.0):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)
        self.heads, self.dropout = heads, dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = (split_heads(f(x), self.heads) for f in (self.q, self.k, self.v))
        scores = (q @ k.transpose(-1, -2)) * (d // self.heads) ** -0.5
        future = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        att = maybe_dropout(torch.softmax(scores, dim=-1), self.dropout, self.training)
        y = (att @ v).transpose(1, 2).reshape(b, s, d)
        return maybe_dropout(self.proj(y), self.dropout, self.training)


class GPT2Block(nn.Module):
    """Pre-LayerNorm: x + attn(ln1(x)), then + mlp(ln2(.)) with a tanh-GELU MLP."""

    def __init__(self, dim: int, heads: int, hidden: int, dropout: float = 0.0):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, dropout)
        self.mlp = FeedForward(dim, hidden, approximate="tanh")
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + maybe_dropout(self.mlp(self.ln2(x)), self.dropout, self.training)


@dataclass(frozen=True)
class Sizes:
    """A transformer's sizes and its batch. Keep every size a multiple of 8 (16 for `seq`) so
    each GEMM operand and mask row starts on a 16-byte boundary, as the kernels need."""

    vocab: int
    seq: int
    dim: int
    heads: int
    hidden: int
    layers: int = 1
    batch: int = 2
    classes: int = 8  # BERT's classification head


SMALL = Sizes(vocab=96, seq=16, dim=32, heads=2, hidden=64)  # CPU tests: a second per step
DUMP = Sizes(vocab=1024, seq=128, dim=256, heads=4, hidden=1024)  # `evt dump`
GPU = Sizes(vocab=8192, seq=256, dim=768, heads=12, hidden=3072, batch=4)  # GPT-2 small widths


class GPT2(nn.Module):
    """Token + position embeddings, `layers` GPT2Blocks, a final LayerNorm and the LM head (the
    token embedding's weight when `tied`, else its own Linear without bias); `forward` returns
    the cross-entropy of the logits (in fp32) against `targets` ([B, S] token ids)."""

    def __init__(self, sizes: Sizes, tied: bool = True, dropout: float = 0.0):
        super().__init__()
        z = sizes
        self.wte, self.wpe = nn.Embedding(z.vocab, z.dim), nn.Embedding(z.seq, z.dim)
        self.blocks = nn.ModuleList(
            GPT2Block(z.dim, z.heads, z.hidden, dropout) for _ in range(z.layers)
        )
        self.ln_f = nn.LayerNorm(z.dim)
        self.head = None if tied else nn.Linear(z.dim, z.vocab, bias=False)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        logits = self.head(x) if self.head is not None else F.linear(x, self.wte.weight)
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


class Bert(nn.Module):
    """Word + position embeddings and their LayerNorm, `layers` BertLayers under a padding mask,
    and a head: `"mlm"` (Linear, GELU, LayerNorm, then a decoder tied to the word embedding with
    its own bias; loss over the positions whose target is not -100) or `"cls"` (pooler: Linear
    and tanh on the first token, then a classifier Linear; `targets` are [B] labels)."""

    def __init__(self, sizes: Sizes, head: str = "mlm", dropout: float = 0.0):
        super().__init__()
        z = sizes
        self.wte, self.wpe = nn.Embedding(z.vocab, z.dim), nn.Embedding(z.seq, z.dim)
        self.ln_emb = nn.LayerNorm(z.dim)
        self.layers = nn.ModuleList(
            BertLayer(z.dim, z.heads, z.hidden, dropout) for _ in range(z.layers)
        )
        self.head = head
        if head == "mlm":
            self.transform, self.ln_head = nn.Linear(z.dim, z.dim), nn.LayerNorm(z.dim)
            self.decoder_bias = nn.Parameter(torch.zeros(z.vocab))
        elif head == "cls":
            self.pooler, self.classifier = nn.Linear(z.dim, z.dim), nn.Linear(z.dim, z.classes)
        else:
            raise ValueError(f"Bert: head must be 'mlm' or 'cls', got {head!r}")

    def forward(self, ids, padding, targets) -> torch.Tensor:
        """`padding`: [B, S] bool, True at padding tokens (keys no query may attend to)."""
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        x = self.ln_emb(x)
        mask = padding[:, None, None, :].to(x.dtype) * torch.finfo(x.dtype).min  # [B, 1, 1, S]
        for layer in self.layers:
            x = layer(x, mask)
        if self.head == "cls":
            logits = self.classifier(torch.tanh(self.pooler(x[:, 0])))
            return F.cross_entropy(logits.float(), targets)
        h = self.ln_head(F.gelu(self.transform(x)))
        logits = F.linear(h, self.wte.weight, self.decoder_bias)
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-100)


class Llama(nn.Module):
    """Token embedding, `layers` LlamaBlocks (`evt.bench.models`: RMSNorm, rotary causal SDPA,
    SwiGLU MLP, no biases), a final RMSNorm and an untied LM head; `forward` returns the
    cross-entropy of the logits (in fp32) against `targets` ([B, S] token ids)."""

    def __init__(self, sizes: Sizes):
        super().__init__()
        z = sizes
        self.wte = nn.Embedding(z.vocab, z.dim)
        self.blocks = nn.ModuleList(LlamaBlock(z.dim, z.heads, z.hidden) for _ in range(z.layers))
        self.norm = RMSNorm(z.dim)
        self.head = nn.Linear(z.dim, z.vocab, bias=False)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.wte(ids)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def gpt2_inputs(sizes: Sizes, device: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token ids and next-token targets, [batch, seq] each."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(sizes.vocab, (sizes.batch, sizes.seq + 1), generator=g)
    return ids[:, :-1].contiguous().to(device), ids[:, 1:].contiguous().to(device)


def padding_keys(batch: int, seq: int) -> torch.Tensor:
    """[batch, seq] bool, True at padding: the last quarter of every sequence but the first."""
    padding = torch.zeros(batch, seq, dtype=torch.bool)
    padding[1:, seq - seq // 4 :] = True
    return padding


def bert_inputs(sizes: Sizes, device: str, head: str = "mlm", seed: int = 0) -> tuple:
    """Token ids, a padding mask (every sequence but the first ends in a quarter of padding)
    and targets: for `mlm` a token id at 15% of the positions and -100 (ignored) elsewhere, for
    `cls` one label per sequence."""
    g = torch.Generator().manual_seed(seed)
    b, s = sizes.batch, sizes.seq
    ids = torch.randint(sizes.vocab, (b, s), generator=g)
    padding = padding_keys(b, s)
    if head == "cls":
        targets = torch.randint(sizes.classes, (b,), generator=g)
    else:
        picked = (torch.rand(b, s, generator=g) < 0.15) & ~padding
        picked[0, 0] = True  # at least one position counts
        targets = torch.where(picked, torch.randint(sizes.vocab, (b, s), generator=g), -100)
    return ids.to(device), padding.to(device), targets.to(device)


@dataclass(frozen=True)
class Example:
    description: str
    build: Callable[[torch.dtype, str], tuple[Callable, tuple]]  # -> (train step, its args)


def training_step(model: nn.Module) -> Callable:
    """loss = model(*args); loss.backward(); the loss."""

    def step(*args):
        loss = model(*args)
        loss.backward()
        return loss

    return step


def _mlp(dtype: torch.dtype, device: str, tokens: int = 512, dim: int = 256, hidden: int = 1024):
    torch.manual_seed(0)
    model = MLP(dim, hidden).to(device=device, dtype=dtype)
    x = torch.randn(tokens, dim, device=device, dtype=dtype, requires_grad=True)

    def step(x):
        loss = model(x).float().pow(2).mean()
        loss.backward()
        return loss

    return step, (x,)


def _gpt2(dtype: torch.dtype, device: str, sizes: Sizes = DUMP, tied: bool = True):
    torch.manual_seed(0)
    model = GPT2(sizes, tied).to(device=device, dtype=dtype)
    return training_step(model), gpt2_inputs(sizes, device)


def _bert(dtype: torch.dtype, device: str, sizes: Sizes = DUMP, head: str = "mlm"):
    torch.manual_seed(0)
    model = Bert(sizes, head).to(device=device, dtype=dtype)
    return training_step(model), bert_inputs(sizes, device, head)


def _llama(dtype: torch.dtype, device: str, sizes: Sizes = DUMP):
    torch.manual_seed(0)
    model = Llama(sizes).to(device=device, dtype=dtype)
    return training_step(model), gpt2_inputs(sizes, device)


EXAMPLES: dict[str, Example] = {
    "mlp": Example("Linear-GELU-Linear MLP with biases and a residual, forward+backward", _mlp),
    "gpt2": Example(
        "GPT-2: embeddings, a pre-LN block (causal attention written out, tanh-GELU MLP), "
        "tied LM head, cross-entropy; forward+backward",
        _gpt2,
    ),
    "bert": Example(
        "BERT: embeddings + LN, a post-LN layer (padding mask, exact-GELU MLP), masked-LM head "
        "(tied decoder), cross-entropy; forward+backward",
        _bert,
    ),
    "llama": Example(
        "LLaMA: token embedding, a decoder layer (RMSNorm, rotary causal SDPA, SwiGLU MLP, no "
        "biases), final RMSNorm, untied LM head, cross-entropy; forward+backward",
        _llama,
    ),
}
