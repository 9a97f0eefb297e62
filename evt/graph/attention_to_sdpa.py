"""Rewrite attention written out as matmuls and a softmax into one
`F.scaled_dot_product_attention` call, on Dynamo's graph before AOTAutograd traces it.

    dropout(softmax(q @ kᵀ · s [causal mask | + mask], dim=-1), p) @ v
        ->   sdpa(q, k, v, attn_mask=mask, dropout_p=p, is_causal=…, scale=s)

Hugging Face's "eager" attention, nanoGPT's slow path and many hand-written blocks spell
attention out like this: two batched GEMMs around a softmax whose [.., S, S] scores and
probabilities go through memory in both directions, forward and backward. evt fuses the scores'
epilogue (scale, mask, the softmax's statistics) but still writes them; a flash-attention kernel
never does (H200, session 39: the written-out forward at 0.53 of the two bare GEMMs, SDPA at 2.7x
them). AOTAutograd then traces SDPA's own forward and backward, which run outside evt's regions.

Rewritten only where the result is the same function (two exceptions below):
- the chain between the two matmuls is casts, one scale by a Python number (`*` or `/`), at most
  one mask (causal or additive), the softmax over the last dim and at most one dropout of the
  probabilities, each value used only by the next step (the scores or probabilities used
  anywhere else, say returned, keep the chain as is);
- a causal mask is built in the graph from `ones(S, S, dtype=bool)` with `tril()` / `triu(1)`
  (or their negation) and S the queries' and keys' length, filled with -inf or at most the
  scores' dtype's lowest value (Hugging Face's `finfo.min`), which a softmax turns into the same
  zeros: SDPA's `is_causal`. A boolean mask from a buffer or an input is not proven causal and
  is left alone;
- an additive mask (BERT's padding mask, `scores + mask`, after any scale) is a tensor of the
  scores' dtype, q's too, that broadcasts to the scores and needs no gradient: SDPA's float
  `attn_mask`;
- a dropout of the probabilities has a Python-number p and training flag: SDPA's `dropout_p`
  (0 where not training);
- the scale and p may also be floats Dynamo traced as SymFloats (a module's float attributes
  under `dynamic=True`): the rewrite takes their traced values and guards on them (`_number`);
- q, k, v are [.., S, D] tensors of one float dtype with the same batch dims, the probabilities
  are cast back to it before `@ v` (SDPA's result has q's dtype);
- `torch.use_deterministic_algorithms` is off (the written-out chain is deterministic, SDPA's
  fused backwards are not all).
Casts inside the chain are dropped: SDPA computes in its own precision (fp32 accumulation and
softmax for bf16/fp16 inputs), which is at least that of the chain it replaces. The exceptions:
dropout keeps its distribution, but SDPA draws its own random numbers (as Inductor's compiled
dropout does too), so a seeded step does not reproduce eager's mask; and where an additive
mask removes every key of a row with -inf, eager's softmax gives NaN and SDPA zeros.

On by default since session 40 (H200: GPT-2's step with its attention written out 1.34 ->
0.87 ms under CUDA graphs, 1.71x `torch.compile`); `EVT_SDPA=0` turns it off, which keeps evt's
own kernels for such attention (the scores' epilogue, heads read in place).
"""

from __future__ import annotations

import math
import operator
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.fx import GraphModule, Node
from torch.fx.experimental.symbolic_shapes import guard_float, statically_known_true

from evt import debug
from evt.graph.dynamo_nodes import example_value as _val
from evt.graph.dynamo_nodes import is_call as _is
from evt.graph.dynamo_nodes import traced_number as _number

MATMULS = {operator.matmul, torch.matmul, "matmul"}
SOFTMAXES = {torch.softmax, F.softmax, "softmax"}
CASTS = {"float", "half", "bfloat16", "to", "type_as"}
TRANSPOSES = {torch.transpose, "transpose"}
MULS, DIVS = {operator.mul, torch.mul, "mul"}, {operator.truediv, torch.div, "div"}
ADDS = {operator.add, torch.add, "add"}
DROPOUTS = {F.dropout: ("input", "p", "training", "inplace"), torch.dropout: ("input", "p", "train")}
FILLS, WHERES = {"masked_fill", torch.masked_fill}, {torch.where}
NOTS = {operator.invert, torch.logical_not, torch.bitwise_not, "logical_not", "bitwise_not"}
TRIANGLES = {torch.triu, torch.tril, "triu", "tril"}


@dataclass
class Attention:
    q: Node
    k: Node
    v: Node
    scale: float = 1.0
    causal: bool = False
    mask: Node | None = None  # additive, broadcast to the scores: SDPA's float attn_mask
    dropout_p: float = 0.0
    traced: tuple = ()  # the SymFloats scale and dropout_p were read from (`_number`)


def attention_to_sdpa(gm: GraphModule) -> int:
    """Rewrite every match in place; returns how many."""
    if os.environ.get("EVT_SDPA", "1") == "0" or torch.are_deterministic_algorithms_enabled():
        return 0  # (flash attention's backward accumulates with atomics: not deterministic)
    done = 0
    for node in list(gm.graph.nodes):
        if _is(node, MATMULS) and (found := match(node)) is not None:
            attention, chain = found
            _replace(gm, node, attention, chain)
            done += 1
    if done:
        gm.graph.lint()
        gm.recompile()
    return done


def _only_user(node: Node, user: Node) -> bool:
    return list(node.users) == [user]


def match(out: Node) -> tuple[Attention, list[Node]] | None:
    """`out` = probs @ v, walked back to q @ kᵀ: the attention and the chain it replaces."""
    if len(out.args) != 2 or out.kwargs:
        return None
    x, v = out.args
    chain: list[Node] = [out]
    scale, scaled, causal, softmax = 1.0, False, False, None
    mask, dropout_p, traced = None, None, []
    while isinstance(x, Node) and _only_user(x, chain[-1]):
        step = None
        if _is(x, CASTS):
            step = _cast_input(x)
        elif softmax is None and dropout_p is None and _is(x, DROPOUTS):
            found = _dropout_input(x)
            if found is not None:
                step, dropout_p = found
                traced += _traced(x.args[1:], x.kwargs.values())
        elif softmax is None and _is(x, SOFTMAXES):
            step = _softmax_input(x)
            softmax = x
        elif softmax is not None and not (causal or scaled) and mask is None and _is(x, FILLS | WHERES):
            # (walking back) a mask before any scale: a scale after the mask would scale its
            # fill value too, and a small one could lift a finite fill into the softmax's range
            step = _masked_input(x)
            causal = step is not None
        elif softmax is not None and not (causal or scaled) and mask is None and _is(x, ADDS):
            # an additive mask, after any scale too (a scale after it would scale the mask)
            found = _added_mask(x)
            if found is not None:
                step, mask = found
        elif softmax is not None and _is(x, MULS | DIVS):
            found = _scaled_input(x)
            if found is not None:
                step, factor = found
                scale, scaled = scale * factor, True
                traced += _traced(x.args)
        elif softmax is not None and _is(x, MATMULS):
            chain.append(x)
            break
        if step is None:
            return None
        chain.append(x)
        x = step
    else:
        return None
    qk = chain[-1]
    if len(qk.args) != 2 or qk.kwargs or not _is(qk.args[1], TRANSPOSES):
        return None
    q, kt = qk.args
    k = _transposed_last_two(kt)
    attention = (Attention(q, k, v, scale, causal, mask, dropout_p or 0.0, tuple(traced))
                 if k is not None else None)  # fmt: skip
    return (attention, chain) if attention is not None and _shapes_fit(attention, out) else None


def _cast_input(node: Node) -> Node | None:
    """A dtype cast's input (`.float()`, `.to(dtype)`, `.type_as(t)`), else None."""
    if node.target == "to" and (len(node.args) != 2 or node.kwargs or not isinstance(node.args[1], torch.dtype)):
        return None
    if node.target in ("float", "half", "bfloat16") and (len(node.args) != 1 or node.kwargs):
        return None
    before, after = _val(node.args[0]), _val(node)
    if before is None or after is None or before.device != after.device or not after.is_floating_point():
        return None
    return node.args[0]


def _softmax_input(node: Node) -> Node | None:
    args = {**dict(zip(("input", "dim"), node.args)), **node.kwargs}
    if set(args) - {"input", "dim", "dtype", "_stacklevel"} or not isinstance(args.get("dim"), int):
        return None
    x = args["input"]
    ndim = _val(x).dim() if _val(x) is not None else 0
    dtype = args.get("dtype")
    if args["dim"] not in (-1, ndim - 1) or (dtype is not None and not dtype.is_floating_point):
        return None
    return x


def _scaled_input(node: Node) -> tuple[Node, float] | None:
    if len(node.args) != 2 or node.kwargs:
        return None
    a, b = node.args
    if _is(node, MULS) and _number(b) is None:
        a, b = b, a
    number = _number(b)
    if not (isinstance(a, Node) and number is not None and 0 < number < math.inf):
        return None
    return (a, 1.0 / number) if _is(node, DIVS) else (a, number)


def _traced(*args) -> list:
    """The SymFloats of `args`' nodes (`_number`)."""
    return [_val(a) for group in args for a in group if isinstance(_val(a), torch.SymFloat)]


def _dropout_input(node: Node) -> tuple[Node, float] | None:
    """(input, p) of `F.dropout(x, p, training)` / `torch.dropout(x, p, train)`, p 0 where it is
    not training; else None (an inplace dropout, or p or training not Python constants)."""
    names = DROPOUTS[node.target]
    if len(node.args) > len(names):
        return None
    args = {**dict(zip(names, node.args)), **node.kwargs}
    p, training = _number(args.get("p", 0.5)), args.get("training", args.get("train", True))
    if set(args) - {"input", *names} or args.get("inplace", False) is not False:
        return None
    if p is None or not 0 <= p < 1 or type(training) is not bool:
        return None
    return (args["input"], p if training else 0.0) if isinstance(args.get("input"), Node) else None


def _added_mask(node: Node) -> tuple[Node, Node] | None:
    """(scores, mask) of `scores + mask` / `mask + scores`: the mask a tensor of the scores' dtype
    that broadcasts to them and needs no gradient (SDPA's fused kernels give none), the scores
    the operand that leads back to the first matmul through casts and scales; else None."""
    if len(node.args) != 2 or node.kwargs or not all(isinstance(a, Node) for a in node.args):
        return None
    leads = [a for a in node.args if _reaches_matmul(a)]
    if len(leads) != 1:
        return None
    scores = leads[0]
    mask = node.args[1] if scores is node.args[0] else node.args[0]
    s, m, out = _val(scores), _val(mask), _val(node)
    if not all(isinstance(t, torch.Tensor) for t in (s, m, out)):
        return None
    if not (m.dtype == s.dtype == out.dtype and m.dtype.is_floating_point) or m.requires_grad:
        return None
    if m.dim() > s.dim() or out.dim() != s.dim():
        return None
    broadcasts = all(statically_known_true(a == 1) or statically_known_true(a == b)
                     for a, b in zip(reversed(m.shape), reversed(s.shape)))  # fmt: skip
    same = all(statically_known_true(a == b) for a, b in zip(out.shape, s.shape))
    return (scores, mask) if broadcasts and same else None


def _reaches_matmul(node) -> bool:
    """`node` is a matmul, or one through casts and scales by Python numbers."""
    while isinstance(node, Node) and not _is(node, MATMULS):
        if _is(node, CASTS):
            node = _cast_input(node)
        elif _is(node, MULS | DIVS) and (found := _scaled_input(node)) is not None:
            node = found[0]
        else:
            return False
    return isinstance(node, Node)


def _masked_input(node: Node) -> Node | None:
    """The scores a causal mask fills (`masked_fill(triu(ones, 1), -inf)`,
    `where(tril(ones), scores, finfo.min)`), else None."""
    if len(node.args) != 3 or node.kwargs:
        return None
    if _is(node, FILLS):
        scores, mask, fill = node.args
        upper = True
    else:
        mask, scores, fill = node.args
        upper = False
    val = _val(scores)
    if not isinstance(scores, Node) or val is None or type(fill) not in (int, float):
        return None
    if not (fill == -math.inf or fill <= torch.finfo(val.dtype).min):
        return None
    return scores if _is_causal_mask(mask, upper, val) else None


def _is_causal_mask(mask, upper: bool, scores) -> bool:
    """`mask` is ones(S, S, bool) with the part above the diagonal (`upper`) or on and below it
    selected, S the scores' last two dims."""
    while _is(mask, NOTS) and len(mask.args) == 1 and not mask.kwargs:
        mask, upper = mask.args[0], not upper
    if not _is(mask, TRIANGLES) or set(mask.kwargs) - {"diagonal"}:
        return False
    name = mask.target if isinstance(mask.target, str) else mask.target.__name__
    diagonal = mask.kwargs.get("diagonal", mask.args[1] if len(mask.args) > 1 else 0)
    if (name, diagonal) != (("triu", 1) if upper else ("tril", 0)) or len(mask.args) > 2:
        return False
    ones = mask.args[0]
    if not (isinstance(ones, Node) and ones.op == "call_function" and ones.target is torch.ones):
        return False
    val = _val(ones)
    if val is None or val.dtype != torch.bool or val.dim() != 2:
        return False
    return all(statically_known_true(a == b) for a, b in zip(val.shape, scores.shape[-2:]))


def _transposed_last_two(node: Node) -> Node | None:
    """k of `k.transpose(-2, -1)`, else None."""
    if len(node.args) != 3 or node.kwargs:
        return None
    k, a, b = node.args
    ndim = _val(k).dim() if _val(k) is not None else 0
    if ndim < 2 or type(a) is not int or type(b) is not int:
        return None
    return k if {a % ndim, b % ndim} == {ndim - 2, ndim - 1} else None


def _shapes_fit(att: Attention, out: Node) -> bool:
    """q, k, v: [.., S, D] of one float dtype and the same batch dims; a causal mask needs as
    many queries as keys; the result has q's dtype and SDPA's shape."""
    q, k, v, o = (_val(n) for n in (att.q, att.k, att.v, out))
    if any(t is None or not isinstance(t, torch.Tensor) for t in (q, k, v, o)):
        return False
    if not (q.dtype == k.dtype == v.dtype == o.dtype and q.dtype.is_floating_point):
        return False
    if not (q.dim() == k.dim() == v.dim() >= 3 and q.device == k.device == v.device):
        return False
    same = lambda a, b: len(a) == len(b) and all(statically_known_true(x == y) for x, y in zip(a, b))  # noqa: E731
    fits = same(q.shape[:-2], k.shape[:-2]) and same(k.shape[:-1], v.shape[:-1])
    fits = fits and same(q.shape[-1:], k.shape[-1:])
    fits = fits and same(o.shape, (*q.shape[:-1], v.shape[-1]))
    fits = fits and (att.mask is None or _val(att.mask).dtype == q.dtype)
    return fits and (not att.causal or same(q.shape[-2:-1], k.shape[-2:-1]))


def _replace(gm: GraphModule, out: Node, att: Attention, chain: list[Node]) -> None:
    graph = gm.graph
    for value in att.traced:  # a guard: another value recompiles (Dynamo's guards are built
        guard_float(value)  # after the backend returns)
    with graph.inserting_before(out):
        sdpa = graph.call_function(
            F.scaled_dot_product_attention, (att.q, att.k, att.v),
            {"attn_mask": att.mask, "dropout_p": att.dropout_p, "is_causal": att.causal,
             "scale": att.scale},
        )  # fmt: skip
    sdpa.meta.update(out.meta)
    out.replace_all_uses_with(sdpa)
    masks = [a for n in chain for a in n.args if isinstance(a, Node) and a not in chain]
    for node in chain:  # from the output back: each one's only user is gone by then
        graph.erase_node(node)
    _erase_unused(graph, masks)
    mask = f"attn_mask={att.mask.name}, " if att.mask is not None else ""
    debug.log(1, f"attention at {out.name}: scaled_dot_product_attention({mask}dropout_p="
                 f"{att.dropout_p:g}, is_causal={att.causal}, scale={att.scale:.6g})")  # fmt: skip


def _erase_unused(graph, nodes: list[Node]) -> None:
    """The mask's construction (ones, tril, ~), kᵀ and a traced scale's or dropout p's `.item()`,
    where nothing else reads them."""
    while nodes:
        node = nodes.pop()
        if not node.users and _is(node, {torch.ones, "item"} | TRIANGLES | TRANSPOSES | NOTS):
            nodes += [a for a in node.args if isinstance(a, Node)]
            graph.erase_node(node)
