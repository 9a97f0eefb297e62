"""Everything evt is measured against, in the same process and run, and evt itself.

Each baseline belongs to a stage (a baseline family, `STAGES` in run order): stages run one at a
time, append their results as they finish and are skipped by a rerun once complete, so a slow
peer (max-autotune, Inductor's CUTLASS backend) cannot eat the run. A baseline that does not
apply to a case (cuBLASLt has no exact-GELU epilogue) is not planned; one that is planned and
fails is reported n/a with the exception text.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from evt.bench import in_turn, inductor_cutlass, observe
from evt.bench.workload import Case, Workload

STAGES = (
    "eager",
    "evt",
    "compile",
    "in-turn",
    "max-autotune",
    "inductor-cutlass",
    "evt-max-autotune",
)


def _cuda(device: str) -> bool:
    return device.startswith("cuda")


@dataclass(frozen=True)
class Baseline:
    name: str
    stage: str
    doc: str
    # (workload, device) -> callable(*inputs); None: the baseline builds others (in-turn)
    build: Callable[[Workload, str], Callable] | None
    applies: Callable[[Case, str], bool] = lambda case, device: True
    compiled: bool = False  # compile time is measured (cold and warm)
    gemm_only: bool = False  # computes the bare GEMM, checked against the GEMM's reference
    # its records hold a time of its own (False: in-turn, whose record compares two others and
    # has no column in the per-baseline tables)
    timed: bool = True
    opt_in: bool = False  # planned only where `--baselines` names it (not in the full suite)

    @property
    def is_evt(self) -> bool:
        """evt itself, in any of its modes."""
        return self.name in ("evt", "evt-max-autotune")

    def observe(self, notes: dict) -> contextlib.AbstractContextManager:
        """Around the whole measurement: warnings (compiled baselines), evt's kernels."""
        if self.is_evt:
            return evt_observe(notes)
        return observe.warnings_seen(notes) if self.compiled else contextlib.nullcontext()

    def observe_compile(self, notes: dict) -> contextlib.AbstractContextManager:
        """Around the cold compile only: the regions evt formed."""
        return observe.evt_regions(notes) if self.is_evt else contextlib.nullcontext()


@contextlib.contextmanager
def evt_observe(notes: dict):
    with observe.warnings_seen(notes), observe.evt_runtime(notes), observe.evt_autotune(notes):
        yield


def _compile(target: Callable, **kwargs) -> Callable:
    """torch.compile of `target`, static shapes, in a process where Dynamo raises when it hits its
    recompile limit: by default it runs the frame eager from then on, without an error, and a
    compiled baseline would be timed as eager code (session 43: a script's third step, whose
    models share one forward with the first two, ran eager under evt and torch.compile)."""
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    return torch.compile(target, dynamic=False, **kwargs)


def compiled(**kwargs) -> Callable[[Workload, str], Callable]:
    """torch.compile of the workload's target, static shapes (each case is compiled afresh)."""
    return lambda w, device: w.wrap(_compile(w.target, **kwargs))


def _evt(w: Workload, device: str, autotune: bool = False) -> Callable:
    """`torch.compile(backend="evt")`, through the backend function (the same thing the "evt"
    entry point names), so it runs from a checkout that pip never installed. With `autotune` on
    CUDA, `mode="max-autotune-no-cudagraphs"`, as the max-autotune peer: evt times its regions'
    configs and Inductor autotunes the rest. Off CUDA there is no kernel and no C++ compiler to
    assume: the rest runs op by op.

    Each build compiles through a backend function of its own: Dynamo keeps compiled code per
    backend, and the model's code object is the same, so a second build through the backend
    itself could be handed the first one's graphs, compiled under other settings
    (scripts/step_variants.py builds evt under several EVT_* settings in one process)."""
    from evt.backend import evt_backend

    mode = "max-autotune-no-cudagraphs" if autotune and _cuda(device) else None
    options = {} if _cuda(device) else {"rest": "eager", **({"autotune": True} if autotune else {})}

    def backend(gm, example_inputs):
        return evt_backend(gm, example_inputs, options=dict(options), mode=mode)

    return w.wrap(_compile(w.target, backend=backend))


def _evt_autotune(w: Workload, device: str) -> Callable:
    return _evt(w, device, autotune=True)


def _inductor_cutlass(w: Workload, device: str) -> Callable:
    return compiled(options=inductor_cutlass.options())(w, device)


def _variant(name: str) -> Callable[[Workload, str], Callable]:
    return lambda w, device: w.variants[name]


BASELINES: dict[str, Baseline] = {
    b.name: b
    for b in (
        Baseline("eager", "eager", "the computation as written, op by op", lambda w, d: w.eager),
        Baseline(
            "mm",
            "eager",
            "the GEMM alone (cuBLAS), no epilogue: speed of light",
            lambda w, d: w.gemm,
            lambda case, device: case.kind == "op",
            gemm_only=True,
        ),
        Baseline(
            "cublaslt",
            "eager",
            "cuBLASLt fused epilogue: torch._addmm_activation / addmm with bias",
            _variant("cublaslt"),
            lambda case, device: "cublaslt" in case.variants and _cuda(device),
        ),
        Baseline(
            "sdpa",
            "eager",
            "F.scaled_dot_product_attention (attention only)",
            _variant("sdpa"),
            lambda case, device: "sdpa" in case.variants,
        ),
        Baseline("evt", "evt", 'torch.compile(backend="evt")', _evt, compiled=True),
        Baseline("compile", "compile", "torch.compile, default mode", compiled(), compiled=True),
        Baseline(
            "in-turn",
            "in-turn",
            "evt and torch.compile on a training step, built in one process and timed in turn "
            f"({in_turn.ROUNDS} rounds: as run and the host's time per step), so that a step the "
            "host paces compares the compilers, not two processes' hosts",
            None,
            lambda case, device: case.kind == "step",
            compiled=True,
            timed=False,
        ),
        Baseline(
            "in-turn-ops",
            "in-turn",
            "the same for a GEMM+epilogue case, where the run names it (`--baselines in-turn-ops`): "
            "on the largest GEMMs the GPU's power cap moves the clock by up to 25% between the "
            "stages' processes, so their ratios carry the clocks; in turn, each round's two "
            "timings run back to back",
            None,
            lambda case, device: case.kind == "op",
            compiled=True,
            timed=False,
            opt_in=True,
        ),
        Baseline(
            "max-autotune",
            "max-autotune",
            'torch.compile(mode="max-autotune-no-cudagraphs") with torch\'s own autotuning '
            "configuration, not reduced; its compile time is bounded only by the per-item limit "
            "(Stages table): a case that did not compile, check and run within it is `timeout`",
            compiled(mode="max-autotune-no-cudagraphs"),
            compiled=True,
        ),
        Baseline(
            "inductor-cutlass",
            "inductor-cutlass",
            inductor_cutlass.DOC,
            _inductor_cutlass,
            lambda case, device: _cuda(device) and case.name in inductor_cutlass.CASES,
            compiled=True,
        ),
        Baseline(
            "evt-max-autotune",
            "evt-max-autotune",
            'torch.compile(backend="evt", mode="max-autotune-no-cudagraphs"): each region\'s top '
            "configs built and timed with its epilogue on the real shapes, the region kept fused "
            "only where its kernel beats the unfused path as Inductor compiles it in that mode "
            "(evt.runtime.autotune), and Inductor's max-autotune for the rest; its cold compile "
            "includes those builds, compiles and timings",
            _evt_autotune,
            compiled=True,
        ),
    )
}
