"""The golden set: generated `.cu` for a few fixed graphs, so a refactor can prove it changed no
kernel. Regenerate (after an intended codegen change) with:

    python -m tests.golden
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import evt
from evt.codegen.config import default_config
from evt.codegen.emit import render
from evt.examples import MLP
from tests.graphs import Arith, LinearAct, LinearStatistics

ROOT = Path(__file__).parent / "golden"


BF16 = torch.bfloat16


def _step(model, out_shape):
    """A training step whose loss gradient is a real tensor (a `.sum()` loss would hand the
    backward a stride-0 expand, which no GEMM can read: nothing to fuse there)."""
    probe = torch.randn(out_shape, dtype=BF16)
    return lambda *a: (model(*a) * probe).float().sum().backward()


def _mlp():
    x = torch.randn(64, 256, dtype=BF16, requires_grad=True)
    return _step(MLP(256, 1024).bfloat16(), (64, 256)), (x,)


def _linear_gelu_tanh():
    x = torch.randn(32, 64, dtype=BF16, requires_grad=True)
    return _step(LinearAct(64, 128, "gelu_tanh").bfloat16(), (32, 128)), (x,)


def _arith():
    x = torch.randn(32, 64, dtype=BF16, requires_grad=True)
    return _step(Arith(64, 128).bfloat16(), (32, 128)), (x, torch.randn(32, 128, dtype=BF16))


def _linear_statistics(kind: str):
    """softmax's statistics (cross-entropy) or LayerNorm's (with a residual) after a Linear."""
    x = torch.randn(16, 32, dtype=BF16, requires_grad=True)
    out = () if kind == "cross_entropy" else (16, 64)
    return lambda: (_step(LinearStatistics(kind).bfloat16(), out), (x,))


def _ce_backward_one_hot():
    """The logits' gradient recomputed from x, W and the log-sum-exp, its one-hot compared with
    the column index in the epilogue (`rewrite_one_hot_scatters`)."""
    from evt.bench.patterns import ce_backward

    x, w = torch.randn(64, 32, dtype=BF16), torch.randn(96, 32, dtype=BF16)
    t = torch.randint(0, 96, (64,))
    return ce_backward, (x, w, t, torch.logsumexp((x @ w.t()).float(), dim=1))


GRAPHS = {"mlp": _mlp, "linear_gelu_tanh": _linear_gelu_tanh, "arith": _arith,
          "linear_cross_entropy": _linear_statistics("cross_entropy"),
          "linear_layer_norm": _linear_statistics("layer_norm"),
          "ce_backward_one_hot": _ce_backward_one_hot}  # fmt: skip


def generate(name: str) -> dict[str, str]:
    """Kernel file name -> generated source, for one golden graph."""
    fn, args = GRAPHS[name]()
    report = evt.explain(fn, *args)
    return {f"{r.name}.cu": render(r.spec, default_config(r.spec)) for r in report.regions}


def update() -> None:
    for name in GRAPHS:
        folder = ROOT / name
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.cu"):
            old.unlink()
        for file, text in generate(name).items():
            (folder / file).write_text(text)
        print(f"wrote {folder}")


if __name__ == "__main__":
    update()
    sys.exit(0)
