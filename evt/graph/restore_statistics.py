"""Turn each `evt::softmax_sum` no region took back into the aten ops it stands for.

    evt::softmax_sum(x, k, z)  ->  sum(exp(x - c), [-1], k),  c = amax(x, [-1], True),
                                   or where(abs(c) == inf, 0, c) with z (logsumexp)

so that Inductor compiles softmax as it would have without evt (the op has no lowering of its
own). Runs after `lower_regions`; `recognize_statistics` wrote the op.
"""

from __future__ import annotations

from torch.fx import Graph

from evt.graph.decompose_kept_ops import inline
from evt.graph.statistics_ops import SOFTMAX_SUM, softmax_sum


def restore_statistics(graph: Graph) -> Graph:
    for node in list(graph.find_nodes(op="call_function", target=SOFTMAX_SUM)):
        inline(graph, node, softmax_sum)  # the op's own decomposition, traced to aten
    return graph
