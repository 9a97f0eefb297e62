"""Rewrite the tanh GELU written out in ops into one `F.gelu(x, approximate="tanh")` call, on
Dynamo's graph before AOTAutograd traces it.

    0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))   ->   gelu(x, approximate="tanh")

Hugging Face's `gelu_new` (GPT-2's activation, `NewGELUActivation`) and `gelu_fast`
(`x · 0.7978845608 · (1 + 0.044715 · x · x)` inside the tanh), nanoGPT's `new_gelu` and many
hand-written blocks spell the tanh GELU out like this. Written out, the forward is eight ops and
AOTAutograd's backward about fifteen more: evt's kernels compute them one functor at a time,
libm's tanhf among them (17 instructions), where the native op is evt's `GeluTanh` and
`GeluTanhBackward` functors (tanh.approx.f32, the form CUTLASS's and cuBLASLt's GELU epilogues
take: 4 FMUL and 5 FFMA an element for the backward). On an H200 the fused up projection with
the written-out GELU ran 1.15x slower than cuBLAS plus Inductor's kernel (session 63).

Rewritten only where the result is the same function to within its dtype's rounding:
- the root is a product whose factors are 0.5 (all number factors together), x once and
  (1 + tanh(u)) once; u a polynomial in x (numbers, x, products, sums, `pow(x, n)` for whole
  n) equal to √(2/π) · x + √(2/π) · 0.044715 · x³, each coefficient within 1e-6 relatively
  (GPT-2's constants, and `gelu_fast`'s 0.7978845608); a number may be a float Dynamo traced
  as a SymFloat (`math.pi` under `dynamic=True`): the rewrite takes its traced value and guards
  on it;
- x is a bf16 or fp16 tensor and every step of the chain keeps its dtype: tanh.approx.f32's
  relative error (2^-11) is a quarter of the result's rounding (2^-9) there, and the native op
  computes in float32 where the written-out chain rounds to 16 bits after every op; a float32
  chain stays as it is (libm's tanhf, as eager).
Intermediate values the program also uses elsewhere stay computed for those uses.

`EVT_TANH_GELU=0` turns it off.
"""

from __future__ import annotations

import math
import operator
import os

import torch
import torch.nn.functional as F
from torch.fx import GraphModule, Node
from torch.fx.experimental.symbolic_shapes import guard_float

from evt import debug
from evt.graph.dynamo_nodes import example_value as _val
from evt.graph.dynamo_nodes import is_call as _is
from evt.graph.dynamo_nodes import traced_number

MULS = {operator.mul, torch.mul, "mul"}
ADDS = {operator.add, torch.add, "add"}
POWS = {operator.pow, torch.pow, "pow"}
TANHS = {torch.tanh, "tanh"}
K0 = math.sqrt(2.0 / math.pi)
K1 = 0.044715
RTOL = 1e-6
DTYPES = (torch.bfloat16, torch.float16)

Poly = dict[int, float]  # degree -> coefficient


def enabled() -> bool:
    return os.environ.get("EVT_TANH_GELU", "1") != "0"


def tanh_gelu_to_native(gm: GraphModule) -> int:
    """Rewrite every match in place; returns how many."""
    if not enabled():
        return 0
    done = 0
    for node in list(gm.graph.nodes):
        if node._erased or not _is(node, MULS):
            continue  # (erased with an earlier match's chain)
        chain: set[Node] = set()
        if (x := match(node, chain)) is None:
            continue
        _specialize(chain)
        with gm.graph.inserting_after(node):
            gelu = gm.graph.call_function(F.gelu, (x,), {"approximate": "tanh"})
        gelu.meta.update(node.meta)
        node.replace_all_uses_with(gelu)
        for n in reversed(gm.graph.nodes):  # the chain's steps nothing else reads
            if n in chain and not n.users:
                gm.graph.erase_node(n)
        done += 1
    if done:
        gm.graph.lint()
        gm.recompile()
        debug.log(1, f"tanh_gelu_to_native: {done} tanh GELU(s) written out in ops -> F.gelu(approximate='tanh')")
    return done


def _number(v, chain: set[Node] | None = None) -> float | None:
    """`traced_number(v)`; a traced SymFloat node (√(2/π) under `dynamic=True` is
    `_sym_sqrt(2 / pi.item())`) joins `chain`, and a rewrite guards on its value (`_specialize`)."""
    number = traced_number(v)
    if number is not None and chain is not None and isinstance(v, Node):
        chain.add(v)
    return number


def _specialize(chain: set[Node]) -> None:
    """Guard on each traced float the match read (another value recompiles: Dynamo builds its
    guards after the backend returns), and take the nodes computing it into `chain` (erased
    with it where nothing else reads them)."""
    todo = [n for n in chain if isinstance(_val(n), torch.SymFloat)]
    for n in todo:
        guard_float(_val(n))
    while todo:
        n = todo.pop()
        chain.add(n)
        todo += [a for a in n.all_input_nodes if a.op != "placeholder" and a not in chain]


def match(root: Node, chain: set[Node] | None = None) -> Node | None:
    """x, where `root` computes the tanh GELU of x as the module's doc says; else None. `chain`
    collects the nodes between x and `root`, `root` included."""
    chain = set() if chain is None else chain
    numbers, nodes = _factors(root, chain)
    if nodes is None or not math.isclose(math.prod(numbers), 0.5, rel_tol=RTOL):
        return None
    shifted = [n for n in nodes if _tanh_of(n) is not None]
    if len(nodes) != 2 or len(shifted) != 1:
        return None
    x = next(n for n in nodes if n is not shifted[0])
    u = _tanh_of(shifted[0], chain)
    poly = _poly(u, x, chain) if _same_dtype(root, x) else None
    if poly is None:
        return None
    want = {1: K0, 3: K0 * K1}
    if set(poly) != set(want) or not all(math.isclose(poly[d], c, rel_tol=RTOL) for d, c in want.items()):
        return None
    return x


def _factors(node: Node, chain: set[Node]) -> tuple[list[float], list[Node] | None]:
    """The number and node factors of a product tree of binary muls (None: something else)."""
    numbers: list[float] = []
    nodes: list[Node] = []
    todo = [node]
    while todo:
        n = todo.pop()
        chain.add(n)
        if len(n.args) != 2 or n.kwargs:
            return numbers, None
        for a in n.args:
            if (c := _number(a, chain)) is not None:
                numbers.append(c)
            elif _is(a, MULS) and len(a.users) == 1:
                todo.append(a)  # 0.5 * x inside the product (x itself, read in u too, is not)
            elif isinstance(a, Node):
                nodes.append(a)
            else:
                return numbers, None
    return numbers, nodes


def _tanh_of(node: Node, chain: set[Node] | None = None) -> Node | None:
    """u of `1 + tanh(u)` / `tanh(u) + 1`, else None."""
    if not _is(node, ADDS) or len(node.args) != 2 or node.kwargs:
        return None
    a, b = node.args
    one, t = (a, b) if _number(a) is not None else (b, a)
    if _number(one, chain) != 1.0 or not _is(t, TANHS) or len(t.args) != 1 or t.kwargs:
        return None
    if chain is not None:
        chain.update((node, t))
    return t.args[0] if isinstance(t.args[0], Node) else None


def _same_dtype(root: Node, x: Node) -> bool:
    rv, xv = _val(root), _val(x)
    return (isinstance(rv, torch.Tensor) and isinstance(xv, torch.Tensor) and xv.dtype in DTYPES
            and rv.dtype == xv.dtype and rv.shape == xv.shape)  # fmt: skip


def _poly(node, x: Node, chain: set[Node], depth: int = 0) -> Poly | None:
    """`node` as a polynomial in x (every step of x's dtype), or None where it is not one; its
    steps join `chain`."""
    if depth > 12:
        return None
    if node is x:
        return {1: 1.0}
    if (c := _number(node, chain)) is not None:
        return {0: c}
    if not isinstance(node, Node) or len(node.args) != 2 or node.kwargs:
        return None
    val = _val(node)
    if not (isinstance(val, torch.Tensor) and val.dtype == _val(x).dtype):
        return None
    chain.add(node)
    a, b = node.args
    if _is(node, POWS):
        base, n = _poly(a, x, chain, depth + 1), _number(b, chain)
        if base is None or n is None or n != int(n) or not 1 <= n <= 4:
            return None
        out: Poly = {0: 1.0}
        for _ in range(int(n)):
            out = _times(out, base)
        return out
    pa, pb = _poly(a, x, chain, depth + 1), _poly(b, x, chain, depth + 1)
    if pa is None or pb is None:
        return None
    if _is(node, ADDS):
        return {d: pa.get(d, 0.0) + pb.get(d, 0.0) for d in set(pa) | set(pb)}
    if _is(node, MULS):
        return _times(pa, pb)
    return None


def _times(p: Poly, q: Poly) -> Poly:
    out: Poly = {}
    for i, a in p.items():
        for j, b in q.items():
            out[i + j] = out.get(i + j, 0.0) + a * b
    return {d: c for d, c in out.items() if c != 0.0}
