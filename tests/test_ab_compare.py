"""scripts/ab_compare.py: two variants' evt ÷ bare-GEMM ratios from alternating bench runs."""

from __future__ import annotations

import json

import pytest

from scripts import ab_compare


def _run(folder, evt_ms: dict[str, float], mm_ms: float = 1.0, key: str = "graph_ms"):
    folder.mkdir()
    records = [{"case": c, "kind": "gemm", "baseline": "evt", "status": "ok", key: t}
               for c, t in evt_ms.items()]  # fmt: skip
    records += [{"case": c, "kind": "gemm", "baseline": "mm", "status": "ok", key: mm_ms}
                for c in evt_ms]  # fmt: skip
    records.append({"case": "x/y", "kind": "gemm", "baseline": "evt", "status": "n/a", key: None})
    (folder / "results.json").write_text(json.dumps({"results": records}))
    return folder


def test_the_table_compares_the_geomeans_of_each_variants_runs(tmp_path, capsys):
    a = [_run(tmp_path / "a1", {"p/s": 1.25, "q/s": 2.0}), _run(tmp_path / "a2", {"p/s": 1.25, "q/s": 2.0})]
    b = [_run(tmp_path / "b1", {"p/s": 2.5, "q/s": 2.0})]
    md = ab_compare.table(a, b, ("new", "old"), "graph_ms")
    assert "| p/s | 0.800 | 0.800 | 0.400 | 0.800 | 0.400 | 2.000 |" in md
    assert "| q/s | 0.500 | 0.500 | 0.500 | 0.500 | 0.500 | 1.000 |" in md
    assert "new ÷ old, geomean over 2 cases: 1.414" in md and "x/y" not in md
    with pytest.raises(SystemExit, match="no case"):
        ab_compare.table(a, b, ("new", "old"), "time_ms")  # not timed as run
    assert ab_compare.main(["--a", f"{a[0]},{a[1]}", "--b", str(b[0]), "--labels", "new,old"]) == 0
    assert "new ÷ old" in capsys.readouterr().out
