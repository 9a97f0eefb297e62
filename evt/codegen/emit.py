"""Render a KernelSpec to one CUDA translation unit: a CUTLASS 3.x SM90 GEMM whose epilogue is the
spec's EVT, plus the `extern "C"` launcher.

Python makes the decisions (C names, element types, stride types, tree or DAG, tile config) and
builds a small view model, one dict per EVT node; `templates/gemm_sm90.cu.j2` holds the C++.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache

import jinja2

from evt.codegen.config import SCHEDULERS, SCHEDULES, TileConfig, default_config, fence_free_reason
from evt.codegen.nvcc import TEMPLATES
from evt.codegen.visitor import plan_visitor
from evt.errors import CodegenError
from evt.ir import (
    COMPUTE_OPS,
    DTYPES,
    LOADS,
    NOT_NESTED,
    ROW_STATISTICS,
    TWO_OUTPUT_STATISTICS,
    WRITERS,
    AuxLoad,
    AuxStore,
    ColBroadcast,
    ColReduction,
    ColumnWelfordStats,
    Compute,
    KernelSpec,
    Node,
    RowBroadcast,
    RowReduction,
    ScalarBroadcast,
    ScalarLoad,
    ScalarReduction,
    SoftmaxStats,
    WelfordStats,
    format_tree,
    node_args,
    stat_outputs,
)

__all__ = ["TileConfig", "c_identifier", "default_config", "render", "signature"]

# layout tag of each operand major; B is N x K in CUTLASS's terms
LAYOUT_A = {"k": "cutlass::layout::RowMajor", "m": "cutlass::layout::ColumnMajor"}
LAYOUT_B = {"k": "cutlass::layout::ColumnMajor", "n": "cutlass::layout::RowMajor"}
# CuTe stride type (M, N, L) of an aux tensor by its major; broadcasts have fixed ones
STRIDE_AUX = {
    "n": "cute::Stride<int64_t, cute::_1, int64_t>",
    "m": "cute::Stride<cute::_1, int64_t, int64_t>",
}
# an [M, N] aux tensor every batch reads: a static L stride of 0 (TMA leaves the mode out)
STRIDE_AUX_EVERY_L = {
    "n": "cute::Stride<int64_t, cute::_1, cute::_0>",
    "m": "cute::Stride<cute::_1, int64_t, cute::_0>",
}
# a nested batch L = (L1, L2): every L stride is a pair, and A, B and D take CuTe strides in place
# of layout tags (CUTLASS's GETT, example 51)
NESTED_L = "cute::Stride<int64_t, int64_t>"
STRIDE_A_NESTED = {"k": f"cute::Stride<int64_t, cute::_1, {NESTED_L}>",
                   "m": f"cute::Stride<cute::_1, int64_t, {NESTED_L}>"}  # fmt: skip
STRIDE_B_NESTED = {"k": f"cute::Stride<int64_t, cute::_1, {NESTED_L}>",
                   "n": f"cute::Stride<cute::_1, int64_t, {NESTED_L}>"}  # fmt: skip
STRIDE_AUX_NESTED = {
    "n": f"cute::Stride<int64_t, cute::_1, {NESTED_L}>",
    "m": f"cute::Stride<cute::_1, int64_t, {NESTED_L}>",
}
STRIDE_AUX_EVERY_L_NESTED = {
    "n": "cute::Stride<int64_t, cute::_1, cute::Stride<cute::_0, cute::_0>>",
    "m": "cute::Stride<cute::_1, int64_t, cute::Stride<cute::_0, cute::_0>>",
}
STRIDE_ROW_NESTED = f"cute::Stride<cute::_0, cute::_1, {NESTED_L}>"
STRIDE_COL_NESTED = f"cute::Stride<cute::_1, cute::_0, {NESTED_L}>"
STRIDE_ROW = "cute::Stride<cute::_0, cute::_1, int64_t>"
STRIDE_COL = "cute::Stride<cute::_1, cute::_0, int64_t>"
STRIDE_ROW_SUM = "cute::Stride<cute::_0, cute::_1, cute::_0>"  # an N-vector, summed over M and L
STRIDE_COL_OUT = "cute::Stride<cute::_1, cute::_0, int64_t>"  # an M-vector per batch
# a reduction's op -> (CUTLASS functor for Sm90Row/ColReduction, its identity)
REDUCE_FNS = {
    "sum": ("cutlass::plus", "ElementCompute(0)"),
    "max": ("cutlass::maximum_with_nan_propagation", "-std::numeric_limits<ElementCompute>::infinity()"),
}
STATISTICS = (  # evt_statistics.h (ColumnWelfordStats: evt_column_statistics.h)
    RowReduction, ColReduction, ScalarReduction, SoftmaxStats, WelfordStats, ColumnWelfordStats,
)  # fmt: skip
# finished by a kernel after the GEMM from per-tile partials in the launcher's workspace
DEFERRED = (RowReduction, ColumnWelfordStats, *ROW_STATISTICS)


def c_identifier(name: str) -> str:
    """A C identifier for an IR or kernel name: unsafe characters become `_`."""
    out = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return f"_{out}" if not out or out[0].isdigit() else out


def signature(spec: KernelSpec, config: TileConfig) -> str:
    """What `evt_<name>_signature()` returns: the loader compares it with this."""
    return f"{c_identifier(spec.name)};{config.label};{spec.signature()}"


def render(spec: KernelSpec, config: TileConfig | None = None) -> str:
    config = config or default_config(spec)
    plan = plan_visitor(spec)
    names = _type_names(plan.nodes)
    order = {n.name: i for i, n in enumerate(plan.nodes)}
    kernel_schedule, epilogue_schedule, _ = SCHEDULES[config.schedule]
    g = spec.gemm
    if g.nested and config.scheduler == "streamk":
        raise CodegenError(f"kernel {spec.name}: CUTLASS's stream-K scheduler takes one batch "
                           "mode, not a nested batch (L1 x L2): use the persistent scheduler")  # fmt: skip
    if g.nested and config.staged_stores:
        raise CodegenError(f"kernel {spec.name}: staged stores (_ss) take a flat batch, not a "
                           "nested one (L1 x L2): use a config without _ss")  # fmt: skip
    if g.nested and (node := next((n for n in plan.nodes if isinstance(n, NOT_NESTED)), None)):
        raise CodegenError(f"node {node.name}: a nested batch (L1 x L2) has no reductions over M "
                           "yet; give the kernel a flat batch (the heads' contiguous copy)")  # fmt: skip
    nodes = [_node_view(n, names, order, g.nested, config) for n in plan.nodes]
    return _template().render(
        kernel=c_identifier(spec.name),
        signature=json.dumps(signature(spec, config)),
        config=config,
        kernel_schedule=kernel_schedule,
        epilogue_schedule=epilogue_schedule,
        tile_scheduler=SCHEDULERS[config.scheduler],
        epilogue_tile=_epilogue_tile(config),
        element_ab=DTYPES[g.dtype][1],
        element_d=DTYPES[spec.d_dtype][1],
        a=g.a, b=g.b, nested=g.nested, **_layouts(spec),
        nodes=nodes,
        host_scalars=[n for n in nodes if n["kind"] == "scalar_load"],  # (in the launch's key)
        store_d=_store_d(spec, config),
        root=names[plan.root],
        dag=plan.dag,
        num_inputs=spec.num_inputs,
        num_outputs=spec.num_outputs,
        statistics=any(isinstance(n, STATISTICS) for n in plan.nodes),
        column_statistics=any(isinstance(n, ColumnWelfordStats) for n in plan.nodes),
        # Compute and the stores use kRound
        rounds=config.store_align or config.staged_stores
        or any(isinstance(n, (Compute, AuxStore)) for n in plan.nodes),
        deferred=any(isinstance(n, DEFERRED) for n in plan.nodes),
        # CUTLASS's grid dependency control (programmatic dependent launches, EVT_PDL): not with
        # its stream-K scheduler, whose is_last_tile (called only under that control) does not
        # compile in CUTLASS 4.2 (a const member passes a member by non-const reference). Such a
        # kernel launches its GEMM the plain way; its finishing kernel waits for it either way.
        grid_dependency=config.scheduler != "streamk",
        tree=_tree_text(spec),
        inlined=_inlined(spec, config),
    )  # fmt: skip


def _inlined(spec: KernelSpec, config: TileConfig) -> list[str]:
    """The C++ of evt's experimental visitors and collectives, and of the functors added after
    most kernels were built, this kernel uses (evt/templates/*.inc): inlined, so that only these
    kernels' sources (and cache keys) hold it."""
    if reason := fence_free_reason(spec, config):
        raise CodegenError(reason)
    loads = any(isinstance(n, AuxLoad) for n in spec.nodes)
    files = (["evt_register_loads.inc"] * bool(loads and config.register_loads)
             + ["evt_fence_free.inc"] * config.fence_free
             + ["evt_aux_prefetch.inc"] * (loads and config.aux_prefetch)
             + ["evt_aux_evict_first.inc"] * (loads and config.aux_evict_first)
             + ["evt_staged_store.inc"] * config.staged_stores
             + ["evt_cube.inc"] * any(isinstance(n, Compute) and n.op == "cube" for n in spec.nodes))  # fmt: skip
    return [(TEMPLATES / f).read_text() for f in files]


def _layouts(spec: KernelSpec) -> dict:
    """A, B and D's layout tags, or with a nested batch their CuTe strides; the batch: the
    launcher's parameters, its type and value in the problem shape, the number of batches, and
    how many strides each tensor has in the ABI."""
    g = spec.gemm
    if not g.nested:
        return dict(layout_a=LAYOUT_A[g.a.major], layout_b=LAYOUT_B[g.b.major],
                    layout_d="cutlass::layout::RowMajor", batch=["L"], batch_type="int",
                    batch_value="L", batch_count="L", strides_per_tensor=3)  # fmt: skip
    return dict(layout_a=STRIDE_A_NESTED[g.a.major], layout_b=STRIDE_B_NESTED[g.b.major],
                layout_d=STRIDE_AUX_NESTED["n"], batch=["L1", "L2"],
                batch_type="cute::Shape<int, int>", batch_value="cute::make_shape(L1, L2)",
                batch_count="L1 * L2", strides_per_tensor=4)  # fmt: skip


def _epilogue_tile(config: TileConfig) -> str:
    """CUTLASS's automatic epilogue subtile, or the config's explicit one."""
    if not config.epi_n:
        return "cutlass::epilogue::collective::EpilogueTileAuto"
    m, n = config.epilogue_tile
    return f"cute::Shape<cute::Int<{m}>, cute::Int<{n}>>"


def _type_names(nodes: tuple[Node, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for n in nodes:
        base = name = "evt_" + c_identifier(n.name).lstrip("_")
        i = 2
        while name in out.values():
            name, i = f"{base}_{i}", i + 1
        out[n.name] = name
    return out


def _store_d(spec: KernelSpec, config: TileConfig) -> dict | None:
    """D stored by the tree's root (`TileConfig.store_align`: from registers; `staged_stores`:
    through shared memory by the epilogue's threads): the element type is void for CUTLASS's
    collective (no TMA store) and an Sm90AuxStore of 0 stages (`align` elements per store) or an
    `evt::Sm90AuxStoreStaged` at the root of the tree writes output 0; None for D through TMA."""
    if config.staged_stores:
        return {"staged": True}
    if not config.store_align:
        return None
    return {"staged": False, "align": _store_vector(config, spec.d_dtype)}


def _store_vector(config: TileConfig, dtype: str) -> int:
    """Elements per register store of an output of `dtype`: the config's alignment, at most 16
    bytes."""
    return min(config.store_align, 16 // DTYPES[dtype][0].itemsize)


def _node_view(n: Node, names: dict[str, str], order: dict[str, int], nested: bool,
               config: TileConfig) -> dict:
    args = node_args(n)
    view: dict = {
        "kind": n.kind,
        "name": names[n.name],
        "comment": _comment(n),
        "children": [names[a] for a in args],
        "edges": [order[a] for a in args],
    }
    if isinstance(n, LOADS):
        view["input"] = n.input
    if isinstance(n, ScalarLoad):  # where its strides start in the ABI's (a value in host memory?)
        view["strides_at"] = n.input * (4 if nested else 3)
    if isinstance(n, AuxLoad) and config.register_loads:
        view["in_flight"] = config.register_loads
        view["comment"] += f"; loaded into registers, {config.register_loads} subtile(s) in flight"
    if isinstance(n, AuxLoad) and config.aux_prefetch:
        view["prefetch"] = True
        view["comment"] += "; each tile prefetched into L2 first"
    if isinstance(n, AuxLoad) and config.aux_evict_first:
        view["evict_first"] = True
        view["comment"] += "; its lines evicted from L2 first"
    if isinstance(n, (AuxStore, RowReduction, ColReduction, ScalarReduction)):
        view["output"] = n.output
    if isinstance(n, AuxStore) and config.staged_stores:  # its descriptor's stages
        view["staged"] = True
        view["comment"] += "; through shared memory, copied out by the epilogue's threads"
    elif isinstance(n, AuxStore):  # CUTLASS's 0 stages: registers straight to global memory
        direct = config.direct_aux or config.store_align
        view["stages"] = "0" if direct else f"{names[n.name]}_desc::Stages"
        view["comment"] += "; stored from registers" if direct else ""
        if config.store_align:
            view["align"] = _store_vector(config, n.dtype)
            view["comment"] += f", {view['align']} element(s) a store"
    if isinstance(n, (*LOADS, Compute, *WRITERS)):
        view["element"] = DTYPES[n.dtype][1]
    if isinstance(n, (RowReduction, ColReduction, ScalarReduction)):
        view["reduce_fn"], view["identity"] = REDUCE_FNS[n.op]
        view["max"] = n.op == "max"
    if isinstance(n, TWO_OUTPUT_STATISTICS):
        view.update(_statistic(n))
    view["deferred"] = isinstance(n, DEFERRED)
    if nested and isinstance(n, (AuxLoad, AuxStore, RowBroadcast, ColBroadcast)):
        view["stride"] = _nested_stride(n)
    elif isinstance(n, AuxLoad) and n.broadcast_l:
        view["stride"] = STRIDE_AUX_EVERY_L[n.major]
    elif isinstance(n, (AuxLoad, AuxStore)):
        view["stride"] = STRIDE_AUX[n.major]
    elif isinstance(n, (RowReduction, ColumnWelfordStats)):
        view["stride"] = STRIDE_ROW_SUM
    elif isinstance(n, ROW_STATISTICS):
        view["stride"] = STRIDE_COL_OUT
    elif isinstance(n, (RowBroadcast, ColBroadcast)):
        view["stride"] = STRIDE_ROW if isinstance(n, RowBroadcast) else STRIDE_COL
    elif isinstance(n, ScalarBroadcast):
        view["value"] = _float_literal(n.value)
    elif isinstance(n, Compute):
        view["functor"] = _functor(n)
    return view


def _nested_stride(n: AuxLoad | AuxStore | RowBroadcast | ColBroadcast) -> str:
    """The CuTe stride type of a load or store in a kernel with a nested batch L = (L1, L2)."""
    if isinstance(n, AuxLoad) and n.broadcast_l:
        return STRIDE_AUX_EVERY_L_NESTED[n.major]
    if isinstance(n, (AuxLoad, AuxStore)):
        return STRIDE_AUX_NESTED[n.major]
    return STRIDE_ROW_NESTED if isinstance(n, RowBroadcast) else STRIDE_COL_NESTED


def _statistic(n: SoftmaxStats | WelfordStats | ColumnWelfordStats) -> dict:
    """The statistic's policy type and its two output pointers (nullptr where not written); the
    output whose strides the launcher passes (both have the same)."""
    if isinstance(n, SoftmaxStats):
        stat = f"evt::SoftmaxStat<{'true' if n.zero_inf_max else 'false'}>"
    else:
        stat = f"evt::WelfordStat<{n.correction}>"
    outs = stat_outputs(n)
    element = DTYPES[n.dtype][1]
    pointers = [f"out_ptr<{element}>(outputs, {i})" if i is not None else "nullptr" for i in outs]
    return {"stat": stat, "pointers": pointers, "output": next(i for i in outs if i is not None)}


def _functor(n: Compute) -> str:
    op = COMPUTE_OPS.get(n.op)
    if op is None:
        raise CodegenError(f"node {n.name}: no CUTLASS functor for op {n.op!r}")
    if op.arity != len(n.args):
        raise CodegenError(f"node {n.name}: {n.op} takes {op.arity} args, got {len(n.args)}")
    return op.functor


def _float_literal(value: float) -> str:
    if math.isnan(value):
        return "std::numeric_limits<float>::quiet_NaN()"
    if math.isinf(value):
        return ("-" if value < 0 else "") + "std::numeric_limits<float>::infinity()"
    return f"static_cast<float>({value!r})"


def _comment(n: Node) -> str:
    text = f"{n.name}: {type(n).__name__}"
    if isinstance(n, Compute):
        return f"{text} {n.op}({', '.join(n.args)}) -> {n.dtype}"
    if isinstance(n, AuxStore):
        return f"{text}({n.arg}) -> output {n.output}, {n.dtype}, {n.major}-major"
    if isinstance(n, RowReduction):
        done = "summed" if n.op == "sum" else "reduced"
        return (f"{text}({n.op} over M of {n.arg}) -> output {n.output}, {n.dtype}; fp32 partials "
                f"per M tile, {done} in a fixed order after the GEMM (deterministic)")  # fmt: skip
    if isinstance(n, ColReduction):
        return (f"{text}({n.op} over N of {n.arg}) -> output {n.output}, {n.dtype}; fp32 partials "
                "per N tile, reduced in a fixed order after the GEMM (deterministic)")  # fmt: skip
    if isinstance(n, ScalarReduction):
        return (f"{text}({n.op} over L, M, N of {n.arg}) -> output {n.output}, {n.dtype}; fp32 "
                "partials per tile, reduced in a fixed order by the last CTA (deterministic)")  # fmt: skip
    if isinstance(n, (SoftmaxStats, WelfordStats)):
        return (f"{text} of {n.arg} -> {_stat_text(n)}; fp32 partials per N tile, combined in a "
                "fixed order after the GEMM (deterministic)")  # fmt: skip
    if isinstance(n, ColumnWelfordStats):
        return (f"{text} over M of {n.arg} -> {_stat_text(n)}; fp32 partials per M tile, combined "
                "in a fixed order after the GEMM (deterministic)")  # fmt: skip
    if isinstance(n, ScalarBroadcast):
        return f"{text} {n.value!r}"
    if isinstance(n, AuxLoad):
        every = ", the same for every batch" if n.broadcast_l else ""
        return f"{text}(input {n.input}, {n.dtype}, {n.major}-major{every})"
    if isinstance(n, (RowBroadcast, ColBroadcast)):
        return f"{text}(input {n.input}, {n.dtype})"
    if isinstance(n, ScalarLoad):
        return f"{text}(input {n.input}, {n.dtype}, a 0-d tensor read once per tile)"
    return text


def _stat_text(n: SoftmaxStats | WelfordStats | ColumnWelfordStats) -> str:
    names = ("max", "sum exp(x - max)") if isinstance(n, SoftmaxStats) else ("mean", "var")
    outs = [f"{what}: output {i}" for what, i in zip(names, stat_outputs(n)) if i is not None]
    return ", ".join(outs) + f", {n.dtype}"


def _tree_text(spec: KernelSpec) -> str:
    return format_tree(spec).replace("*/", "* /")


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("evt", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    return env.get_template("gemm_sm90.cu.j2")
