"""Partition stage: split the joint graph into fusible regions (one GEMM + an epilogue DAG).

`partition(graph)` is the interface (the ILP partitioner; `greedy.partition` is its baseline and
fallback); `validate(graph, regions)` checks any partition independently of how it was found.
"""

from evt.partition.ilp import partition
from evt.partition.region import Region
from evt.partition.validate import validate

__all__ = ["Region", "partition", "validate"]
