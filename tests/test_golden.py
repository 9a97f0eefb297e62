"""Generated C++ for the golden graphs must equal the committed files (see tests/golden.py)."""

import pytest

from tests.golden import GRAPHS, ROOT, generate


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_generated_kernels_match_the_golden_set(name):
    want = {p.name: p.read_text() for p in sorted((ROOT / name).glob("*.cu"))}
    got = generate(name)
    assert sorted(got) == sorted(want), "kernel set changed: run `python -m tests.golden`"
    for file, text in got.items():
        assert text == want[file], f"{name}/{file} is stale: review the diff, then run `python -m tests.golden`"
