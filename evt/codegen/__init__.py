"""Stage 3: an EVT KernelSpec -> CUTLASS C++ (`emit`) -> a shared library (`nvcc`)."""

from evt.codegen.config import TileConfig, default_config
from evt.codegen.emit import render, signature

__all__ = ["TileConfig", "default_config", "render", "signature"]
