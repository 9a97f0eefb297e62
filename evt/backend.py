"""The `torch.compile` backend: `torch.compile(model, backend="evt")`.

Capture: evt rewrites the *joint* forward+backward graph, before AOTAutograd splits it, so the
min-cut partitioner sees each region as one opaque op (never recomputed, never split) and values a
forward region stores for the backward become ordinary saved tensors.

Two routes, one pipeline (`evt.pipeline.fuse`):
- `rest="inductor"` (default): Inductor's `joint_custom_pre_pass` hook. It is called on the joint
  graph in training and on the forward graph in inference, and Inductor then compiles everything
  outside the regions. Chosen over a custom `partition_fn` because Inductor keeps its own
  partitioner, caches, CUDA graphs and codegen, and we only swap its decomposition table for one
  that keeps `gelu`, `silu`, their backwards and the other activation backwards whole (so each
  maps to one CUTLASS functor).
- `rest="eager"`: AOTAutograd with a `partition_fn` that runs the same pipeline and then the
  min-cut partitioner; the rest runs op by op. No C++ compiler needed: fast for tests and debugging.

Training never crashes because of evt: any failure in the pipeline leaves the graph (or the
failing region) unfused, with one warning saying why.
"""

from __future__ import annotations

import functools
import hashlib
import os
import warnings
from collections.abc import Callable
from dataclasses import replace

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch.fx import Graph

from evt import debug, pipeline
from evt.graph import lower_regions
from evt.graph.decompose_kept_ops import KEPT, decompose_kept_ops
from evt.graph.snapshot import Snapshot
from evt.report import GraphReport
from evt.runtime import dispatch, fast
from evt.sources import source_hash

EVT_OPTIONS = {"rest": ("inductor", "eager")}
_listeners: list[Callable[[GraphReport], None]] = []
DRAW = False  # set by `evt.explain(..., draw=True)`: reports carry a picture of each partition


@functools.cache
def decompositions() -> dict:
    """Inductor's decomposition table, keeping the ops evt maps to single CUTLASS functors
    (`evt.graph.decompose_kept_ops.KEPT`: decomposed after the pipeline where no region took them)."""
    from torch._inductor.decomposition import select_decomp_table

    return DecompTable({op: fn for op, fn in select_decomp_table().items() if op not in KEPT})


class DecompTable(dict):
    """The table, pickled as a reference to `decompositions`: Inductor's FX graph cache keys on
    the table it is given (torch >= 2.13), and one of its entries (`aten.alias_copy`'s, a pybind
    function) has no stable key, so every evt graph bypassed the cache. The table is a function
    of torch's version and evt's sources, both in the key already."""

    def __reduce_ex__(self, protocol):
        return decompositions, ()


# EVT_* variables that change neither the rewritten graph nor what the passes log: where kernels
# are built and cached, how many compilers run, whether a call waits for its build, progress
# bars, the benchmark's own settings. Every other EVT_* variable is part of the pass uuid (a new
# one included by default).
GRAPH_NEUTRAL_ENV = ("EVT_CACHE_DIR", "EVT_COMPILE_JOBS", "EVT_WAIT_KERNELS", "EVT_PROGRESS", "EVT_BENCH_")


def settings_hash() -> str:
    """Hash of the EVT_* environment variables that steer the passes (EVT_RECOMPUTE_INSIDE,
    EVT_TRIM, EVT_SAVED_BUDGET_MB, EVT_DEBUG's logs, ...): part of the pass uuid, read at each
    compile, so Inductor's FX graph cache and AOTAutograd's cache never replay a graph rewritten
    under other settings (session 26: `EVT_RECOMPUTE_INSIDE=1` silently got the graph cached
    without it)."""
    items = sorted((k, v) for k, v in os.environ.items()
                   if k.startswith("EVT_") and not k.startswith(GRAPH_NEUTRAL_ENV))
    return hashlib.sha256(repr(items).encode()).hexdigest()[:12]


def fuse_graph(graph: Graph, autotune: bool = False, rest: str = "inductor") -> GraphReport | None:
    """Run the pipeline; on any failure warn once and put the graph back as it came (the passes
    rewrite it in place: a half-rewritten graph is not left behind). With `autotune`, each
    region's config is measured and regions slower than the unfused path (as route `rest` runs
    it) stay unfused (`evt.runtime.autotune`)."""
    keep = prepare = None
    if autotune:
        from evt.runtime import autotune as tuner

        keep = functools.partial(tuner.decide, rest=rest)
        prepare = functools.partial(tuner.prefetch, rest=rest)
    before = Snapshot(graph)
    try:
        report = pipeline.fuse(graph, check=debug.level() >= 2, draw=DRAW, keep=keep, prepare=prepare)
    except Exception as e:  # noqa: BLE001 - training must not crash because of evt
        before.restore(graph)
        warnings.warn(f"evt: graph left unfused: {type(e).__name__}: {e}", stacklevel=2)
        return None
    try:
        problems = prefetch_kernels(graph)
    except Exception as e:  # noqa: BLE001 - the kernels then build at their first call
        warnings.warn(f"evt: kernels not prefetched: {type(e).__name__}: {e}", stacklevel=2)
        problems = {}
    report.regions = [replace(r, problem=problems.get(r.spec.name)) for r in report.regions]
    for listener in _listeners:
        listener(report)
    return report


def prefetch_kernels(graph: Graph) -> dict[str, tuple[int, int, int, int] | None]:
    """Start building every region's kernel (in parallel, while Inductor works on the rest), its
    tile config chosen for the shapes the graph carries; returns each region's problem shape.
    Regions an earlier compile lowered (compiled autograd traces the backward graph's calls into
    a graph of its own) carry no spec here: their kernels were prefetched then."""
    problems = {}
    if dispatch.sm90_available():
        fast.prefetch()  # the C++ launch path builds beside the kernels (once per machine)
    for node in graph.find_nodes(op="call_function", target=lower_regions.FUSED_GEMM):
        if "evt_spec" not in node.meta:
            continue
        problems[node.meta["evt_spec"].name] = dispatch.prefetch_for(
            node.meta["evt_spec"], lower_regions.input_values(node))
    return problems


class JointPass(CustomGraphPass):
    """Inductor's `joint_custom_pre_pass`: evt's pipeline on the joint (or inference) graph."""

    def __init__(self, autotune: bool = False):
        self.autotune = autotune

    def __call__(self, graph: Graph) -> None:
        fuse_graph(graph, self.autotune)
        # Inductor cannot lower the ops evt kept whole (fused or not, the pipeline may have failed)
        try:
            decompose_kept_ops(graph)
        except Exception as e:  # noqa: BLE001 - newer Inductors run them as fallback kernels
            warnings.warn(f"evt: kept activations left whole for Inductor: {type(e).__name__}: {e}",
                          stacklevel=2)  # fmt: skip

    def uuid(self) -> str:
        return f"evt-{source_hash()}-{settings_hash()}{'-autotune' if self.autotune else ''}"


class SplitPass(CustomGraphPass):
    """Inductor's `post_grad_custom_post_pass`: evt's split passes (`pipeline.SPLIT_PASSES`) on
    the forward and the backward graph after the split."""

    def __call__(self, graph: Graph) -> None:
        pipeline.after_split(graph)

    def uuid(self) -> str:
        return f"evt-split-{source_hash()}-{settings_hash()}"


def evt_backend(gm: torch.fx.GraphModule, example_inputs, options=None, mode=None):
    options = dict(options or {})
    rest = options.pop("rest", "inductor")
    autotune = bool(options.pop("autotune", False)) or (mode or "").startswith("max-autotune")
    if rest not in EVT_OPTIONS["rest"]:
        raise ValueError(f"evt: options['rest'] must be one of {EVT_OPTIONS['rest']}, got {rest!r}")
    pipeline.before_aot(gm)
    if rest == "eager":
        compiled = _eager(gm, example_inputs, autotune)
    else:
        compiled = _inductor(gm, example_inputs, options, mode, autotune)
    if dispatch.sm90_available():  # between compiles, never inside an op call
        if not fast.ensure(wait=dispatch.calls_wait()) and fast.pending():
            compiled = load_launch_path_later(compiled)
    return compiled


def load_launch_path_later(compiled):
    """`compiled`, loading the C++ launch path before a call once its build has ended: under
    `EVT_WAIT_KERNELS=0` the compile does not wait for that build (about 7 s on a new machine,
    session 61). The load runs before the graph's ops, outside any op call; after it (or after a
    failed build) each call costs one more check."""

    @functools.wraps(compiled)  # keeps its attributes: _boxed_call, named_parameters, ...
    def call(*args, **kwargs):
        if fast.pending():
            fast.ensure(wait=False)
        return compiled(*args, **kwargs)

    return call


def _inductor(gm, example_inputs, options: dict, mode: str | None, autotune: bool = False):
    from torch._inductor import list_mode_options
    from torch._inductor.compile_fx import compile_fx

    patches = {**(list_mode_options(mode) if mode else {}), **options}
    patches["joint_custom_pre_pass"] = JointPass(autotune)
    patches["post_grad_custom_post_pass"] = SplitPass()
    return compile_fx(gm, example_inputs, config_patches=patches, decompositions=decompositions())


def _eager(gm, example_inputs, autotune: bool = False):
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd

    def partition_fn(joint, joint_inputs, **kwargs):
        fuse_graph(joint.graph, autotune, rest="eager")
        joint.recompile()
        return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)

    def inference(module, inputs):
        fuse_graph(module.graph, autotune, rest="eager")
        module.recompile()
        return make_boxed_func(module.forward)

    def run(module, inputs):
        pipeline.after_split(module.graph)
        module.recompile()
        return make_boxed_func(module.forward)

    return aot_autograd(
        fw_compiler=run,
        bw_compiler=run,
        inference_compiler=inference,
        partition_fn=partition_fn,
        decompositions=decompositions(),
    )(gm, example_inputs)
