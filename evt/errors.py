"""The exception hierarchy. Messages say where (region, FX node, user source line) and what to do."""

from __future__ import annotations

import torch.fx


class EvtError(RuntimeError):
    """Base class of every error evt raises on purpose."""


class UnsupportedPattern(EvtError):
    """A graph pattern evt cannot fuse; the nodes involved stay outside any region."""


class GraphVerifyError(EvtError):
    """A pass left the graph in a state that breaks an invariant (an evt bug)."""


class PartitionError(EvtError):
    """A partition violates a constraint (one GEMM per region, acyclic, one side)."""


class CodegenError(EvtError):
    """A region could not be rendered to C++."""


class CompileError(EvtError):
    """nvcc (or NVRTC) failed on a generated kernel."""


class LaunchError(EvtError):
    """A compiled kernel could not be loaded, failed a guard, or failed to launch."""


def describe_node(node: torch.fx.Node) -> str:
    """`node.format_node()` plus the user's source line when the tracer recorded it."""
    text = node.format_node()
    trace = node.meta.get("stack_trace")
    if trace:
        last = [ln.strip() for ln in trace.strip().splitlines() if ln.strip()][-2:]
        text += "\n  from: " + " | ".join(last)
    return text


def first_line(e: BaseException, limit: int = 200) -> str:
    """`Type: the message's first line`, at most `limit` characters: an error quoted in a
    warning, a log line or a recorded decision."""
    text = str(e)
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"[:limit]
