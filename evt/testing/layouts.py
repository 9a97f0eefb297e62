"""Check, on the CPU, that every region call gets its inputs in the layouts its kernel was built
for: the kernel's launch guards (`evt.runtime.guards.check`) on each call's inputs, where the
reference path otherwise runs any layout. Under Inductor this is what the op's layout constraint
(`evt.graph.record_input_layouts`) must hold; on a GPU an input that failed it would be copied
into rows (`guards.RELAID`) or, where even that cannot help, the region would run unfused."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from evt.errors import LaunchError
from evt.runtime import guards, reference


@contextlib.contextmanager
def checked_layouts() -> Iterator[tuple[list[str], list[str]]]:
    """Inside: each region call's name goes to the first list and, where its inputs fail the
    kernel's guards, "region: why" to the second."""
    calls: list[str] = []
    failed: list[str] = []
    run = reference.run

    def checked(spec, inputs, *args, **kwargs):
        calls.append(spec.name)
        try:
            guards.check(spec, [guards.TensorInfo.of(t) for t in inputs], store_align=None)
        except LaunchError as e:
            failed.append(f"{spec.name}: {e}")
        return run(spec, inputs, *args, **kwargs)

    reference.run = checked
    try:
        yield calls, failed
    finally:
        reference.run = run
