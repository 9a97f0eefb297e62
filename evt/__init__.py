"""evt: fuse the work around matrix multiplies into CUTLASS SM90 epilogue-visitor-tree kernels.

Use it as `torch.compile(model, backend="evt")` (registered through the `torch_dynamo_backends`
entry point); `evt.explain(fn, *args)` reports what it fused.
"""

__version__ = "0.1.0"

from evt.explain import Report, explain  # noqa: E402
from evt.runtime import ops as _ops  # noqa: E402,F401  (registers evt::fused_gemm)


def wait_for_kernels(timeout: float | None = None) -> bool:
    """Wait until every kernel build this process started has ended (built or failed); False if
    some still run after `timeout` seconds. Under `EVT_WAIT_KERNELS=0` regions run their reference
    path while their kernels build: call this before timing steps."""
    from evt.runtime import build

    return build.wait_all(timeout)


__all__ = ["Report", "__version__", "explain", "wait_for_kernels"]
