"""scripts/step_variants.py: evt under several settings on one training step, timed in turn
(on the CPU, tiny shapes: the timer only has to run)."""

from __future__ import annotations

import os

import pytest

from scripts import step_variants


def test_a_variant_is_a_label_and_evt_settings():
    assert step_variants.parse_variant("default:") == ("default", {})
    assert step_variants.parse_variant(" nostats : EVT_STATISTICS=0 EVT_TRIM=0") == (
        "nostats", {"EVT_STATISTICS": "0", "EVT_TRIM": "0"})  # fmt: skip
    for bad in ("nolabel", ": EVT_X=1", "x: PATH=/bin", "x: EVT_X"):
        with pytest.raises(SystemExit, match="step_variants"):
            step_variants.parse_variant(bad)


def test_the_environment_is_put_back(monkeypatch):
    monkeypatch.setenv("EVT_TRIM", "1")
    monkeypatch.delenv("EVT_STATISTICS", raising=False)
    with step_variants.environment({"EVT_TRIM": "0", "EVT_STATISTICS": "0"}):
        assert (os.environ["EVT_TRIM"], os.environ["EVT_STATISTICS"]) == ("0", "0")
    assert os.environ["EVT_TRIM"] == "1" and "EVT_STATISTICS" not in os.environ


def test_each_variant_compiles_under_its_own_settings(capsys):
    """The MLP step's LayerNorm statistics region is formed by default and not with
    EVT_STATISTICS=0: the second variant compiled its own graphs (through the backend itself,
    Dynamo handed it the first variant's)."""
    argv = ["--steps", "step/mlp", "--device", "cpu", "--small", "--rounds", "1",
            "--variant", "default:", "--variant", "nostats: EVT_STATISTICS=0"]  # fmt: skip
    assert step_variants.main(argv) == 0
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    assert {"default", "nostats", "compile"} <= set(rows)
    regions = {line[2:].split(": ", 1)[0]: set(line.split(": ", 1)[1].split("; "))
               for line in out.splitlines() if line.startswith("- ")}  # fmt: skip
    stats = {r for r in regions["default"] if "aten.pow" in r}  # LayerNorm's statistics
    assert len(stats) == 1 and len(regions["default"]) == 4
    assert regions["nostats"] == regions["default"] - stats


def test_every_step_compiles_not_only_the_first_few(capsys):
    """Dynamo keeps 8 compiled entries per code object and the steps share the models' forward:
    without a reset between steps, the ninth compile on ran eager with no error (session 43:
    the third step's torch.compile, and the fourth step's 'no region' for every variant). Four
    steps here: torch.compile's later builds of the same step reuse its first entry (Inductor
    is one backend callable), so the ninth compile comes later."""
    argv = ["--steps", "step/mlp,step/mlp,step/mlp,step/mlp", "--device", "cpu", "--small",
            "--rounds", "1", "--variant", "default:", "--variant", "nostats: EVT_STATISTICS=0"]  # fmt: skip
    assert step_variants.main(argv) == 0
    out = capsys.readouterr().out
    defaults = [line for line in out.splitlines() if line.startswith("- default: ")]
    assert len(defaults) == 4 and all("no region" not in line for line in defaults)
