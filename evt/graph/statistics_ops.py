"""`evt::softmax_sum(x, keepdim, zero_inf_max)`: softmax's sum of exponentials as one op of `x`.

Softmax, log_softmax, cross-entropy and logsumexp decompose into `m = amax(x, -1, keepdim=True)`
and `sum(exp(x - m), -1)`. The sum reads `x` only through `x - m`, which needs the whole row's max:
no kernel can compute it next to `m` that way. As one op of `x` it can: an epilogue computes both
in one pass (online softmax). `recognize_statistics` writes it where an epilogue could take it;
`restore_statistics` turns the ones left outside a region back into the aten ops they came from.

    s = sum_j exp(x[..., j] - c),  c = amax(x, -1) or, with zero_inf_max (logsumexp), c = 0
                                   where that max is +-inf
"""

from __future__ import annotations

import torch

import evt.runtime.ops  # noqa: F401  (defines the evt namespace first)

_lib = torch.library.Library("evt", "FRAGMENT")
_lib.define("softmax_sum(Tensor x, bool keepdim, bool zero_inf_max) -> Tensor")


def softmax_sum(x: torch.Tensor, keepdim: bool, zero_inf_max: bool) -> torch.Tensor:
    """The aten decomposition the op stands for (also its eager implementation)."""
    m = torch.amax(x, -1, keepdim=True)
    if zero_inf_max:
        m = torch.where(m.abs() == float("inf"), 0.0, m)
    return torch.exp(x - m).sum(-1, keepdim=keepdim)


_lib.impl("softmax_sum", softmax_sum, "CompositeExplicitAutograd")


@torch.library.register_fake("evt::softmax_sum")
def _softmax_sum_fake(x: torch.Tensor, keepdim: bool, zero_inf_max: bool) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], 1) if keepdim else x.shape[:-1])


SOFTMAX_SUM = torch.ops.evt.softmax_sum.default
