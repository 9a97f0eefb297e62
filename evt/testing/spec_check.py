"""The fuzzer's spec verifier: `check(spec)` lists what makes a spec one the fuzzer must not run.

It holds every rule the generator follows, so the minimizer can try any rewrite and keep the valid
ones: names unique and read after they are defined, one accumulator, ops of the table with their
arity, inputs 0..n-1 each read once, outputs 1..k, at most `MAX_AUX` aux loads + stores, bool only
for mask loads and stores of masks (and D when it is a mask), no dead nodes, a batch only as a
nested one (L = L1 x L2) and then no reductions over M (as `evt.runtime.guards` refuses
them), aux loads read by every batch only in a batched kernel, and the domain and stability rules
of `evt.testing.facts`. (The accumulator may go unread: the minimizer makes such
specs, D = a function of the loads alone.) Plus the codegen's known limits, found by the fuzzer
and excluded until fixed (`_known_codegen_limits`).
"""

from __future__ import annotations

from evt import ir
from evt.codegen.config import default_config, mainloop_stages
from evt.errors import CodegenError
from evt.testing.facts import ACC, LOAD, Fact, infer

MAX_AUX = 4  # aux loads + stores per kernel: evt.partition.greedy.MAX_AUX_TENSORS
FLOATS = ("bf16", "f16", "f32")
WRITERS = ir.WRITERS
LOADS = ir.LOADS


def facts_of(spec: ir.KernelSpec) -> dict[str, Fact | None]:
    """Each node's fact; None where an op is unsafe on its arguments (or reads an unsafe value)."""
    out: dict[str, Fact | None] = {}
    for n in spec.nodes:
        out[n.name] = _fact(n, out)
    return out


def _fact(n: ir.Node, known: dict[str, Fact | None]) -> Fact | None:
    if isinstance(n, ir.AccFetch):
        return Fact(*ACC)
    if isinstance(n, ir.ScalarBroadcast):
        return Fact(n.value, n.value)
    if isinstance(n, LOADS):
        return Fact(0.0, 1.0, mask=True) if n.dtype == "b8" else Fact(*LOAD)
    args = [known.get(a) for a in ir.node_args(n)]
    if any(a is None for a in args):
        return None
    if isinstance(n, WRITERS):
        return args[0]
    assert isinstance(n, ir.Compute)
    return infer(n.op, args)  # type: ignore[arg-type]


def live(spec: ir.KernelSpec) -> set[str]:
    """The nodes D or an output depends on."""
    alive = {spec.d} | {n.name for n in spec.nodes if isinstance(n, WRITERS)}
    for n in reversed(spec.nodes):
        if n.name in alive:
            alive.update(ir.node_args(n))
    return alive


def check(spec: ir.KernelSpec) -> list[str]:
    problems = _structure(spec)
    if problems:
        return problems
    facts = facts_of(spec)
    problems += [f"{n}: unsafe (domain or unstable mask)" for n, f in facts.items() if f is None]
    if problems:
        return problems
    for n in spec.nodes:
        if isinstance(n, ir.AuxStore) and n.dtype == "b8" and not facts[n.arg].mask:  # type: ignore[union-attr]
            problems.append(f"{n.name}: a bool store of a value that is not a mask")
    if spec.d_dtype == "b8" and not facts[spec.d].mask:  # type: ignore[union-attr]
        problems.append("D is bool but not a mask")
    problems += _known_codegen_limits(spec)
    alive = live(spec)
    dead = [n.name for n in spec.nodes if n.name not in alive and not isinstance(n, ir.AccFetch)]
    return problems + [f"dead nodes {dead}"] * bool(dead)


def _known_codegen_limits(spec: ir.KernelSpec) -> list[str]:
    """Specs the codegen cannot build today (fuzzer findings, excluded until fixed)."""
    p: list[str] = []
    if spec.d_dtype == "b8" and any(isinstance(n, ir.RowReduction) for n in spec.nodes):
        # Sm90RowReduction reuses D's shared memory for its fp32 partials: 1-byte D is too small
        # ("smem reduction buffer not large enough, use a larger epilogue tile")
        p.append("known limit: a row reduction with a bool D does not compile")
    if isinstance(spec.node(spec.d), (*LOADS, ir.ScalarBroadcast)):
        # the DAG's root is then a leaf: Sm90TopologicalVisitor fails to instantiate
        # (cute::get: "no instance of overloaded function"); regions always compute D
        p.append("known limit: D is a load or a scalar")
    try:
        cfg = default_config(spec)  # narrows the tile until the mainloop keeps 2 stages
    except CodegenError:
        p.append("known limit: no tile leaves the mainloop 2 stages")
    else:
        assert mainloop_stages(spec, cfg) >= 2, cfg
    return p


def _structure(spec: ir.KernelSpec) -> list[str]:
    p: list[str] = []
    seen: set[str] = set()
    for n in spec.nodes:
        p += [f"{n.name}: reads {a} before it is defined" for a in ir.node_args(n) if a not in seen]
        seen.add(n.name)
        if isinstance(n, ir.Compute):
            op = ir.COMPUTE_OPS.get(n.op)
            p += [f"{n.name}: bad op or arity"] * (op is None or op.arity != len(n.args))
            p += [f"{n.name}: compute dtype {n.dtype}"] * (n.dtype not in FLOATS)
        if isinstance(n, (ir.RowBroadcast, ir.ColBroadcast, *ir.REDUCTIONS)):
            p += [f"{n.name}: dtype {n.dtype}"] * (n.dtype not in FLOATS)
        if isinstance(n, ir.AuxStore):
            p += [f"{n.name}: {n.major}-major store"] * (n.major != "n")
    p += ["D is not a node"] * (spec.d not in seen)
    p += ["not exactly one AccFetch"] * (sum(isinstance(n, ir.AccFetch) for n in spec.nodes) != 1)
    loads = [n.input for n in spec.nodes if isinstance(n, LOADS)]
    used = sorted([spec.gemm.a.input, spec.gemm.b.input, *loads])
    if used != list(range(spec.num_inputs)):
        p.append(f"inputs {used}, expected 0..{spec.num_inputs - 1} once each")
    outs = [o.index for o in spec.outputs()]
    p += [f"outputs {outs}, expected 1..{len(outs)}"] * (outs != list(range(1, len(outs) + 1)))
    aux = sum(isinstance(n, (ir.AuxLoad, ir.AuxStore)) for n in spec.nodes)
    p += [f"{aux} aux loads + stores, at most {MAX_AUX}"] * (aux > MAX_AUX)
    return p + _batch(spec)


def _batch(spec: ir.KernelSpec) -> list[str]:
    g, p = spec.gemm, []
    p += ["a nested batch in a GEMM that is not batched"] * (g.nested and not g.batched)
    p += ["flat batched GEMMs are not fuzzed yet (only nested ones)"] * (g.batched and not g.nested)
    if g.nested:
        p += [f"{n.name}: a reduction over M with a nested batch (no kernel has one)"
              for n in spec.nodes if isinstance(n, ir.NOT_NESTED)]  # fmt: skip
    every = [n.name for n in spec.nodes if isinstance(n, ir.AuxLoad) and n.broadcast_l]
    return p + [f"{name}: read by every batch of an unbatched GEMM" for name in every
                if not g.batched]  # fmt: skip
