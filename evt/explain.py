"""`evt.explain(fn, *args)`: compile `fn` with evt, run it once, report what was fused."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from evt.report import GraphReport, RegionReport, format_table, note_pruned
from evt.runtime import dispatch


@dataclass
class Report:
    graphs: list[GraphReport] = field(default_factory=list)

    @property
    def regions(self) -> list[RegionReport]:
        return [r for g in self.graphs for r in g.regions]

    fallbacks: dict[str, str] = field(default_factory=dict)  # region -> why it ran unfused

    def kernels(self) -> list[tuple]:
        """(spec, problem) of each kernel the run launches (`GraphReport.kernels`)."""
        return [k for g in self.graphs for k in g.kernels()]

    @property
    def unfused_gemms(self) -> int:
        return sum(g.unfused_gemms for g in self.graphs)

    @property
    def unfused(self) -> list[tuple[str, str, str]]:
        """(GEMM node, side, why no region anchors it), forward and backward."""
        return [u for g in self.graphs for u in g.unfused]

    def __str__(self) -> str:
        lines = [format_table(self.regions, self.unfused_gemms, self.unfused)]
        lines += [f"ran unfused: {name}: {why}" for name, why in self.fallbacks.items()]
        return "\n".join(lines)


@contextlib.contextmanager
def recording(reports: list[GraphReport]) -> Iterator[list[GraphReport]]:
    """Inside, each graph evt compiles appends its `GraphReport` to `reports` (the backend's
    listeners), and each kernel the forward/backward split prunes is noted in its graph's
    report (`prune_unused_outputs.LISTENERS`, `note_pruned`): `explain` and the tests'
    `compile_reports`."""
    import evt.graph.prune_unused_outputs as prune
    from evt import backend

    pruned = note_pruned(reports)
    backend._listeners.append(reports.append)
    prune.LISTENERS.append(pruned)
    try:
        yield reports
    finally:
        backend._listeners.remove(reports.append)
        prune.LISTENERS.remove(pruned)


def explain(fn, *args, options: dict | None = None, draw: bool = False, **kwargs) -> Report:
    """Compile `fn` with the evt backend (Inductor's and AOTAutograd's caches off, so every graph
    is really captured), call it once on `args`, and return what evt did, forward and backward.

    `fn` is typically a training step: forward, loss and `loss.backward()`. `options` are the
    backend's (default `{"rest": "eager"}`: the regions do not depend on how the rest runs).
    With `draw`, each graph report carries a pydot picture of its partition (`.drawing`).
    """
    from evt import backend

    report = Report()
    options = {"rest": "eager", **(options or {})}
    torch._dynamo.reset()
    dispatch.FALLBACKS.clear()  # what this run falls back on, nothing older
    backend.DRAW = draw
    try:
        with recording(report.graphs), torch._inductor.config.patch(fx_graph_cache=False), \
                torch._functorch.config.patch(enable_autograd_cache=False):  # fmt: skip
            torch.compile(fn, backend=backend.evt_backend, options=options)(*args, **kwargs)
    finally:
        backend.DRAW = False
        torch._dynamo.reset()
    names = {r.name for r in report.regions}
    report.fallbacks = {k: v for k, v in dispatch.FALLBACKS.items() if k in names}
    return report
