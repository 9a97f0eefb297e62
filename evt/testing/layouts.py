"""Check, on the CPU, that every region call gets its inputs in the layouts its kernel was built
for: no input laid out against it (`guards.against_layout`), and the kernel's launch guards
(`evt.runtime.guards.check`) on each call's inputs as a launch would pass them, where the
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
    """Inside: each region call's name goes to the first list and, where an input arrived laid
    out against the kernel or the inputs (aux rows copied as a launch copies them) fail its
    guards, "region: why" to the second."""
    calls: list[str] = []
    failed: list[str] = []
    run = reference.run

    def checked(spec, inputs, *args, **kwargs):
        calls.append(spec.name)
        turned = guards.against_layout(spec, inputs)
        if turned:
            failed.append(f"{spec.name}: laid out against the kernel: {', '.join(turned)}")
        # as a launch does: aux rows TMA cannot read as they are (a bool [S, S] mask) are copied
        # into padded rows first, by design
        padded = guards.copy_into_rows(spec, inputs) or inputs
        try:
            guards.check(spec, [guards.TensorInfo.of(t) for t in padded], store_align=None)
        except LaunchError as e:
            failed.append(f"{spec.name}: {e}")
        return run(spec, inputs, *args, **kwargs)

    reference.run = checked
    try:
        yield calls, failed
    finally:
        reference.run = run
