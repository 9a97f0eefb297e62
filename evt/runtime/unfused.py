"""A region's unfused path, run the way the rest of the graph runs, for max-autotune to time
against the region's fused kernel (`evt.runtime.autotune`).

On evt's default route Inductor compiles everything outside the regions: a region left unfused
becomes an extern cuBLAS call (or, under Inductor's max-autotune, whichever GEMM it measures
fastest) and one or two Triton kernels for the ops after it, not one kernel per op. So the
region's nodes are copied into a small `GraphModule` (`module`: the region's inputs become
placeholders, except those the graph computes from no input, such as a causal mask from `iota`,
which it computes as the graph does (`constant_producers`); its outputs read outside the region
become the outputs; `evt::softmax_sum` is turned
back into aten as `restore_statistics` does for an unfused graph) and compiled with Inductor
under the settings of the compile that is running (`mode="max-autotune"`'s included), minus evt's
own pass and Inductor's CUDA graphs (max-autotune captures and replays both sides itself,
`evt.runtime.autotune.pick_timer`).
If Inductor fails to compile it, the nodes run one by one as eager runs them, with a warning, and
the baseline says so. On `rest="eager"` the rest does run op by op, so that is the baseline.

Compiling costs about 2-5 s per region (more under max-autotune, which times GEMM choices);
max-autotune decides each distinct region once per process and caches the decision on disk.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch.fx import Graph, GraphModule, Node

from evt.errors import first_line
from evt.graph.fake import draws_random
from evt.graph.restore_statistics import restore_statistics
from evt.runtime.timing import random_like

# Inductor settings that change the kernels of the unfused path (the ones `mode=` sets but
# CUDA graphs): a decision made under other values is measured again
INDUCTOR_FLAGS = ("max_autotune", "max_autotune_gemm", "max_autotune_pointwise",
                  "coordinate_descent_tuning")  # fmt: skip


@dataclass(frozen=True)
class Runner:
    run: Callable[[], tuple[torch.Tensor, ...]]  # the region's outputs on fixed random inputs
    by: str  # what runs it: "inductor[ flags]", "eager" or "eager, Inductor failed: ..."


def baseline(rest: str) -> str:
    """The unfused path the compile that is running would take: "eager" on `rest="eager"`, else
    "inductor" followed by the Inductor flags from `INDUCTOR_FLAGS` that are on."""
    if rest == "eager":
        return "eager"
    from torch._inductor import config

    return " ".join(["inductor", *(f for f in INDUCTOR_FLAGS if getattr(config, f))])


def runner(region, wanted: str, device: str = "cuda") -> Runner | None:
    """The region's unfused path as `wanted` (a `baseline`) runs it, on random inputs laid out
    as the graph's; None where an input is not a tensor of static shape (nothing is timed then)."""
    inputs = random_inputs(region, device)
    if inputs is None:
        return None
    if wanted.startswith("inductor"):
        try:
            return Runner(inductor(region, inputs), wanted)
        except Exception as e:  # noqa: BLE001 - any failure: time the eager path instead
            warnings.warn(f"evt: max-autotune: Inductor failed to compile the unfused path of the "
                          f"region at {region.anchor.format_node()} ({type(e).__name__}: {e}); "
                          f"timing it op by op in eager instead", stacklevel=2)  # fmt: skip
            why = first_line(e, 160)
            return Runner(eager(region, inputs), f"eager, Inductor failed: {why}")
    return Runner(eager(region, inputs), "eager")


def timeable(region) -> bool:
    """Whether every input is a tensor of static shape (a SymInt input, or a symbolic size whose
    hint need not be the shape that runs, is not timed)."""
    vals = [n.meta.get("val") for n in arguments(region)]
    return all(isinstance(v, torch.Tensor) and not _symbolic(v) for v in vals)


def random_inputs(region, device: str) -> list[torch.Tensor] | None:
    """Random tensors for the region's `arguments` (laid out as the graph's), or None where one is
    not a tensor of static shape."""
    if not timeable(region):
        return None
    return [random_like(n.meta["val"], device) for n in arguments(region)]


def arguments(region) -> list[Node]:
    """The region's inputs its unfused path takes as arguments: all but those the graph computes
    from no input at all (`constant_producers`), which it computes itself."""
    computed = set(constant_producers(region))
    return [n for n in region.inputs() if n not in computed]


# the ops a chain of `constant_producers` may start from: each makes the same tensor every call
CONSTANT_SOURCES = {torch.ops.prims.iota.default, torch.ops.aten.full.default,
                    torch.ops.aten.arange.default, torch.ops.aten.arange.start,
                    torch.ops.aten.arange.start_step, torch.ops.aten.scalar_tensor.default,
                    torch.ops.aten.zeros.default, torch.ops.aten.ones.default}  # fmt: skip
MAX_CONSTANT_NODES = 16


def constant_producers(region) -> list[Node]:
    """The nodes, in graph order, of the region's inputs that the graph computes from no input
    (a causal mask from `iota`: `ge(iota[None, :] - iota[:, None], 1)`), with what they read:
    the unfused path computes them as the graph does, where Inductor can fold them into the
    kernel that reads them, instead of loading them as arguments. ViT's scores, their mask a
    loaded argument, timed 0.083 ms unfused in max-autotune's rounds, where Inductor ran evt's
    whole graph, the region left unfused, in 0.054 (H200, sessions 44-45). An input whose chain
    reads a graph input, a random op or more than `MAX_CONSTANT_NODES` nodes stays an argument."""
    chosen: set[Node] = set()
    for node in region.inputs():
        chain: set[Node] = set()
        if _constant(node, chain):
            chosen |= chain
    return [n for n in region.anchor.graph.nodes if n in chosen] if chosen else []


def _constant(node: Node, chain: set[Node]) -> bool:
    """Whether `node` is computed from `CONSTANT_SOURCES` alone, deterministically (its nodes
    added to `chain`, at most `MAX_CONSTANT_NODES`)."""
    if node in chain:
        return True
    if node.op != "call_function" or len(chain) >= MAX_CONSTANT_NODES:
        return False
    target = node.target
    if draws_random(target):
        return False
    if not node.all_input_nodes and target not in CONSTANT_SOURCES:
        return False
    chain.add(node)
    return all(_constant(a, chain) for a in node.all_input_nodes)


def _symbolic(t: torch.Tensor) -> bool:
    return any(isinstance(x, torch.SymInt) for x in (*t.shape, *t.stride()))


def module(region) -> GraphModule:
    """The region's nodes as a module of its `arguments`, computing the rest (`constant_producers`),
    returning its outputs read outside it."""
    graph, env = Graph(), {}
    for node in arguments(region):
        env[node] = graph.placeholder(node.name)
        env[node].meta = dict(node.meta)
    for node in [*constant_producers(region), *region.nodes]:
        env[node] = graph.node_copy(node, env.__getitem__)
    graph.output(tuple(env[n] for n in region.outputs()))
    restore_statistics(graph)  # traces on the nodes' fake values: metadata dropped after it
    for node in graph.nodes:
        node.meta = {k: v for k, v in node.meta.items() if k == "stack_trace"}
    graph.lint()
    return GraphModule(torch.nn.Module(), graph)


def eager(region, inputs: list[torch.Tensor]) -> Callable[[], tuple[torch.Tensor, ...]]:
    """The region's nodes called one by one, as eager runs them, after the inputs it computes
    (`constant_producers`); `inputs` are the values of its `arguments`."""
    start: dict[Node, Any] = dict(zip(arguments(region), inputs, strict=True))
    nodes = [*constant_producers(region), *region.nodes]

    def run() -> tuple[torch.Tensor, ...]:
        values = dict(start)
        for node in nodes:
            args, kwargs = torch.fx.map_arg((node.args, node.kwargs), values.__getitem__)
            values[node] = node.target(*args, **kwargs)
        return tuple(values[n] for n in region.outputs())

    return run


def compile_inductor(gm: GraphModule, inputs: list[torch.Tensor]) -> Callable:
    from torch._inductor.compile_fx import compile_fx

    return cast(Callable, compile_fx(gm, inputs))


def inductor(region, inputs: list[torch.Tensor]) -> Callable[[], tuple[torch.Tensor, ...]]:
    """`module(region)` compiled by Inductor (`compile_inductor`) for `inputs`, and run once
    (some of its kernels compile at their first call: a failure there is a compile failure)."""
    with _apart():
        compiled = compile_inductor(module(region), inputs)
    compiled(*inputs)
    return lambda: tuple(compiled(*inputs))


@contextlib.contextmanager
def _apart() -> Iterator[None]:
    """A compile of its own inside the one running evt's pass: no tracing context (its fake mode
    and shape environment are the enclosing graph's), no autograd, the enclosing Inductor settings
    minus evt's pass (it would fuse the region again) and CUDA graphs."""
    from torch._inductor import config

    patches = {"joint_custom_pre_pass": None, "triton.cudagraphs": False}
    with torch._guards.tracing(None), torch.no_grad(), config.patch(patches):
        yield
