"""`evt.explain(fn, *args)`: compile `fn` with evt, run it once, report what was fused."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from evt.report import GraphReport, RegionReport, format_table


@dataclass
class Report:
    graphs: list[GraphReport] = field(default_factory=list)

    @property
    def regions(self) -> list[RegionReport]:
        return [r for g in self.graphs for r in g.regions]

    @property
    def unfused_gemms(self) -> int:
        return sum(g.unfused_gemms for g in self.graphs)

    def __str__(self) -> str:
        return format_table(self.regions, self.unfused_gemms)


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
    backend._listeners.append(report.graphs.append)
    backend.DRAW = draw
    try:
        with torch._inductor.config.patch(fx_graph_cache=False), torch._functorch.config.patch(
            enable_autograd_cache=False
        ):
            torch.compile(fn, backend=backend.evt_backend, options=options)(*args, **kwargs)
    finally:
        backend.DRAW = False
        backend._listeners.remove(report.graphs.append)
        torch._dynamo.reset()
    return report
