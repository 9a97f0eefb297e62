"""Random epilogue DAGs for differential testing: `generate(seed)` -> a valid `KernelSpec`.

A spec reads the accumulator, aux loads (bf16/f16/f32 and bool masks), row/column broadcasts and
scalars; computes with every op of `COMPUTE_OPS` but four (`FORMS`, `LATER`; some results cast to
bf16/f16); reuses values (shared subexpressions, so most specs are DAGs); writes several outputs
(aux stores, bool mask stores of comparisons, row reductions, [N] or [1, N]), some read through by
later nodes as `evt.codegen.tree` emits them; and stores D as bf16, f32, f16 (f16 GEMMs) or bool (a
mask). Then, from a stream of their own (so older seeds keep their specs), 0-2 more reductions of
any kind: row/col/scalar sum or max, softmax statistics, Welford statistics; after them, from the
same stream (so the specs without one keep theirs), in a fraction (`COLUMN_WELFORD`) of the specs
that may reduce over M, Welford statistics over M (BatchNorm1d's).
A fraction (`NESTED`) of seeds, decided by a stream of their own (the other seeds keep their
specs), get a GEMM with a nested batch (L = L1 x L2, `ir.Gemm.nested`) instead: drawn with
0-2 reductions, none over M (column and scalar reductions, softmax and Welford statistics;
`ir.NOT_NESTED`), some aux loads read by every batch (`broadcast_l`, an [M, N] tensor).
Domain safety and mask stability come from `evt.testing.facts`; `check` verifies a spec.
"""

from __future__ import annotations

import dataclasses
import random

from evt import ir
from evt.testing.facts import ACC, COMPARE, LOAD, Fact, infer
from evt.testing.spec_check import MAX_AUX, check, facts_of, live

__all__ = ["COMPARE", "check", "facts_of", "generate", "live"]

SCALARS = (0.0, 0.5, 1.0, -1.0, 2.0, 3.0, -0.25, 0.1)
# every op but the forms evt picks in one situation, so the seeds keep the specs they had before:
# the exact GELU's 16-bit forms (a cheaper formula, which the rules pick only for a GELU the graph
# rounds to 16 bits: tests/test_functors_host.py and the node catalog's gelu_bf16 / gelu_f16
# cover them) and SiLU's backward from a shared sigmoid (`evt.codegen.tree.share_sigmoids`: the
# catalog's swiglu)
FORMS = ("gelu_for_bf16", "gelu_for_f16", "silu_backward_sigmoid")
# ops added after the seeds' specs were fixed: drawing them would change every seed's spec and the
# GPU tier's kernels with it. The node catalog's gelu_written (HF GPT-2's tanh GELU) covers cube
LATER = ("cube",)
# node kinds the fuzzer does not draw, for the same reason: a 0-d tensor input (`ScalarLoad`,
# session 57; the node catalog's learned_scale and tests/test_scalar_loads.py cover it)
NOT_DRAWN = ("scalar_load",)
WEIGHTS = {op: 1.0 for op in ir.COMPUTE_OPS if op not in FORMS + LATER} | {
    "add": 3.0, "mul": 2.0, "where": 2.0, "sub": 1.5}  # fmt: skip
REPAIR = {"log": 0, "rsqrt": 0, "div": 1, "exp": 0}  # op -> argument to make positive/small
NESTED = 0.15  # the fraction of seeds with a nested batch
COLUMN_WELFORD = 0.15  # the chance of Welford statistics over M in a spec that may reduce over M
EVERY_BATCH = 0.4  # the chance that a nested spec's aux load is one [M, N] tensor every batch reads


class _Gen:
    def __init__(self, rng: random.Random, gemm_dtype: str):
        self.rng, self.gemm_dtype = rng, gemm_dtype
        self.nodes: list[ir.Node] = [ir.AccFetch("acc")]
        self.facts: dict[str, Fact] = {"acc": Fact(*ACC)}
        self.inputs, self.aux = 2, 0

    def add(self, node: ir.Node, fact: Fact) -> str:
        self.nodes.append(node)
        self.facts[node.name] = fact
        return node.name

    def leaf(self) -> str:
        r, i = self.rng, len(self.nodes)
        kinds = ["scalar", "row", "col"] + ["aux"] * 2 * (self.aux < MAX_AUX - 1)
        kind = r.choice(kinds)
        if kind == "scalar":
            v = r.choice(SCALARS)
            return self.add(ir.ScalarBroadcast(f"c{i}", v), Fact(v, v))
        dtype, self.inputs = r.choice(("bf16", "bf16", "f16", "f32")), self.inputs + 1
        name = f"in{self.inputs - 1}"
        if kind == "aux":
            self.aux += 1
            if r.random() < 0.25:
                return self.add(ir.AuxLoad(name, self.inputs - 1, "b8", r.choice("nm")),
                                Fact(0.0, 1.0, mask=True))  # fmt: skip
            node: ir.Node = ir.AuxLoad(name, self.inputs - 1, dtype, r.choice("nnm"))
        else:
            cls = ir.RowBroadcast if kind == "row" else ir.ColBroadcast
            node = cls(f"{name}_{kind}", self.inputs - 1, dtype)
        return self.add(node, Fact(*LOAD))

    def pick(self, want_mask: bool = False) -> str:
        """An existing value (recent ones more often: depth; any: shared subexpressions)."""
        values = [n.name for n in self.nodes if not isinstance(n, ir.WRITERS)]
        masks = [v for v in values if self.facts[v].mask]
        if want_mask and masks and self.rng.random() < 0.8:
            return self.rng.choice(masks)
        if self.rng.random() < 0.2:
            return self.leaf()
        read = {a for n in self.nodes for a in ir.node_args(n)}
        unread = [v for v in values if v not in read and v != "acc"]
        if unread and self.rng.random() < 0.5:
            return self.rng.choice(unread)
        return self.rng.choice(values[-3:] if self.rng.random() < 0.5 else values)

    def compute(self, op: str, args: list[str]) -> str | None:
        fact = infer(op, [self.facts[a] for a in args])
        if fact is None:
            return None
        dtype = "f32"
        if self.rng.random() < 0.15:
            dtype = self.rng.choice(("bf16", "f16") if self.gemm_dtype == "f16" else ("bf16",))
        name = f"v{len(self.nodes)}_{op}"
        return self.add(ir.Compute(name, op, tuple(args), dtype), fact)

    def positive(self, x: str) -> str:
        """A value in [0.36, 2.8] or [0.5, 1.5] made from `x` (a safe log/rsqrt/div argument)."""
        if self.rng.random() < 0.5:
            return self.sure("exp", [self.sure("tanh", [x])])
        c = self.add(ir.ScalarBroadcast(f"c{len(self.nodes)}", 0.5), Fact(0.5, 0.5))
        return self.sure("add", [self.sure("sigmoid", [x]), c])

    def sure(self, op: str, args: list[str]) -> str:
        name = self.compute(op, args)
        assert name is not None, (op, args)
        return name

    def step(self) -> str | None:
        op = self.rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
        arity = ir.COMPUTE_OPS[op].arity
        args = [self.pick(want_mask=op == "where" and i == 0) for i in range(arity)]
        if op == "threshold_backward":
            args[2] = self.add(ir.ScalarBroadcast(f"c{len(self.nodes)}", 0.0), Fact(0.0, 0.0))
        if op in REPAIR and infer(op, [self.facts[a] for a in args]) is None:
            k = REPAIR[op]
            args[k] = self.positive(args[k])
        return self.compute(op, args)


def generate(seed: int, max_ops: int = 12) -> ir.KernelSpec:
    """The spec of `seed`: the first draw that `check` accepts (a draw that only hits a known
    codegen limit is drawn again from a derived seed)."""
    nested = random.Random(f"{seed}/nested").random() < NESTED
    for attempt in range(100):
        rng = random.Random(seed if attempt == 0 else f"{seed}/{attempt}")
        spec = _draw(rng, max_ops, seed, nested)
        problems = check(spec)
        if not problems:
            return spec
        assert all(p.startswith("known limit") for p in problems), (seed, problems)
    raise AssertionError(f"seed {seed}: no valid draw in 100 attempts")


def _draw(rng: random.Random, max_ops: int, seed: int, nested: bool) -> ir.KernelSpec:
    gemm_dtype = rng.choice(("bf16", "bf16", "f16"))
    g = _Gen(rng, gemm_dtype)
    for _ in range(rng.randint(1, max_ops)):
        for _ in range(10):  # an op that is unsafe on the arguments drawn: draw again
            if g.step() is not None:
                break
    _add_outputs(g, reductions=not nested)
    d = _fold_dead(g)
    reduces = any(isinstance(n, ir.RowReduction) for n in g.nodes)  # see spec_check's known limits
    mask = g.facts[d].mask and not reduces and rng.random() < 0.8
    d_dtype = "b8" if mask else rng.choice(("bf16", "f32", gemm_dtype))
    a_in, b_in = (0, 1) if rng.random() < 0.8 else (1, 0)
    gemm = ir.Gemm(ir.Operand(a_in, rng.random() < 0.5, rng.choice("km")),
                   ir.Operand(b_in, rng.random() < 0.5, rng.choice("kn")), gemm_dtype)  # fmt: skip
    if nested:  # no reductions over M (ir.NOT_NESTED)
        _add_reductions(g, random.Random(f"{rng.random()}/reductions"), row=False)
        spec = ir.KernelSpec(f"fuzz_{seed}", gemm, tuple(g.nodes), d, d_dtype, g.inputs)
        return _nest(spec, random.Random(f"{rng.random()}/nested"))
    _add_reductions(g, random.Random(f"{rng.random()}/reductions"), row=d_dtype != "b8")
    return ir.KernelSpec(f"fuzz_{seed}", gemm, tuple(g.nodes), d, d_dtype, g.inputs)


def _nest(spec: ir.KernelSpec, r: random.Random) -> ir.KernelSpec:
    """`spec` with a nested batch: its GEMM batched over L = L1 x L2, some aux loads read by
    every batch."""
    gemm = dataclasses.replace(spec.gemm, batched=True, nested=True)
    nodes = tuple(dataclasses.replace(n, broadcast_l=r.random() < EVERY_BATCH)
                  if isinstance(n, ir.AuxLoad) else n for n in spec.nodes)  # fmt: skip
    return dataclasses.replace(spec, gemm=gemm, nodes=nodes)


def _add_reductions(g: _Gen, r: random.Random, row: bool) -> None:
    """0-2 reductions or statistics of computed values (`row`: a row reduction may be drawn),
    each right after its value, numbered after the other outputs."""
    values = [n.name for n in g.nodes if isinstance(n, (ir.Compute, ir.AccFetch))]
    out = 1 + sum(len(ir.writes(n)) for n in g.nodes)
    kinds = ["col", "col", "scalar", "softmax", "welford"] + ["row"] * row
    for _ in range(r.choice((0, 1, 1, 2))):
        v, dtype, kind = r.choice(values), r.choice(("f32", "f32", "bf16")), r.choice(kinds)
        op, keepdim = r.choice(ir.REDUCE_OPS), r.random() < 0.5
        if kind in ("row", "col", "scalar"):
            cls = {"row": ir.RowReduction, "col": ir.ColReduction, "scalar": ir.ScalarReduction}[kind]
            w: ir.Node = cls(f"{kind}_{op}{out}", v, out, dtype, keepdim, op)
            out += 1
        else:
            both = r.random() < 0.6
            first, second = (out, out + 1) if both else r.choice(((out, None), (None, out)))
            out += 1 + both
            keep = (keepdim, keepdim != both)  # the outputs' shapes differ in some (no new draw)
            if kind == "softmax":
                w = ir.SoftmaxStats(f"softmax{out}", v, dtype, first, second, keep, r.random() < 0.3)
            else:
                w = ir.WelfordStats(f"welford{out}", v, dtype, first, second, keep, r.choice((0, 1)))
        _insert_after(g, v, w)
    if row and r.random() < COLUMN_WELFORD:
        v, dtype, keepdim = r.choice(values), r.choice(("f32", "f32", "bf16")), r.random() < 0.5
        first, second = r.choice(((out, out + 1), (out, None), (None, out)))
        keep = (keepdim, keepdim if r.random() < 0.7 else not keepdim)
        _insert_after(g, v, ir.ColumnWelfordStats(f"batch_stats{out}", v, dtype, first, second, keep,
                                                  r.choice((0, 1))))  # fmt: skip


def _insert_after(g: _Gen, v: str, w: ir.Node) -> None:
    """Writer `w` of value `v` right after it."""
    at = next(i for i, n in enumerate(g.nodes) if n.name == v) + 1
    g.nodes.insert(at, w)
    g.facts[w.name] = g.facts[v]


def _add_outputs(g: _Gen, reductions: bool = True) -> None:
    """0-2 aux stores and 0-2 row reductions (with `reductions`), each right after its value;
    later readers read through some of them."""
    r, out = g.rng, 1
    values = [n.name for n in g.nodes if isinstance(n, (ir.Compute, ir.AccFetch))]
    writers: list[ir.AuxStore | ir.RowReduction] = []
    for _ in range(r.randint(0, min(2, MAX_AUX - g.aux))):
        v = r.choice(values)
        dtype = "b8" if g.facts[v].mask and r.random() < 0.7 else r.choice(("bf16", "f32"))
        writers.append(ir.AuxStore(f"out{out}", v, out, dtype))
        out += 1
    for _ in range(r.randint(0, 2) if reductions else 0):
        v = r.choice(values)
        writers.append(ir.RowReduction(f"sum{out}", v, out, r.choice(("f32", "bf16")),
                                       r.random() < 0.5))  # fmt: skip
        out += 1
    for w in writers:
        at = next(i for i, n in enumerate(g.nodes) if n.name == w.arg) + 1
        through = r.random() < 0.5
        rest = [_rename(n, w.arg, w.name) if through else n for n in g.nodes[at:]]
        g.nodes[at:] = [w, *rest]
        g.facts[w.name] = g.facts[w.arg]


def _rename(n: ir.Node, old: str, new: str) -> ir.Node:
    if isinstance(n, ir.Compute):
        return dataclasses.replace(n, args=tuple(new if a == old else a for a in n.args))
    return n


def _fold_dead(g: _Gen) -> str:
    """D is the last computed value; values that reach neither D nor an output are folded into D (by
    `maximum` where another op would leave the safe range)."""
    d = next(n.name for n in reversed(g.nodes) if isinstance(n, ir.Compute | ir.AccFetch))
    spec = ir.KernelSpec("k", ir.Gemm(ir.Operand(0, False, "k"), ir.Operand(1, False, "k"), "bf16"),
                         tuple(g.nodes), d, "f32", g.inputs)  # fmt: skip
    alive = live(spec)
    for n in list(g.nodes):
        if n.name not in alive:
            op = g.rng.choice(("add", "sub", "mul", "maximum", "minimum"))
            d = g.compute(op, [d, n.name]) or g.compute("maximum", [d, n.name]) or d
    return d
