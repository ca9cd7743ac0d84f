"""bench/before_after.py's verdict on given numbers (the timed runs themselves are the benchmark's)."""

from __future__ import annotations

import importlib.util

import pytest

from paths import REPO

SPEC = importlib.util.spec_from_file_location("before_after", REPO / "bench" / "before_after.py")
before_after = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(before_after)


def test_a_difference_within_the_runs_spread_is_unchanged():
    r = before_after.compare([100.0, 110.0, 105.0], [108.0, 104.0, 112.0])
    assert r["median_before"] == 105.0 and r["median_after"] == 108.0
    assert r["ratio"] == pytest.approx(108 / 105)
    assert r["spread_before"] == [100.0, 110.0] and r["spread_after"] == [104.0, 112.0]
    assert r["noise"] == pytest.approx(10 / 105 + 8 / 108)  # each side's (max - min) / median, added
    assert r["verdict"] == "unchanged within noise"


def test_a_difference_beyond_the_spread_is_named_with_its_size():
    r = before_after.compare([100.0, 101.0, 102.0], [120.0, 121.0, 119.0])
    assert r["ratio"] == pytest.approx(120 / 101)
    assert r["verdict"] == "changed: +18.8% beyond the runs' spread (+-3.6%)", r["verdict"]


def test_one_run_a_side_is_not_judged():
    assert "not judged" in before_after.compare([100.0], [150.0])["verdict"]


def test_table_has_a_row_per_measure_with_medians_ratio_and_spreads():
    results = {"train_step_ms": before_after.compare([180.0, 190.0], [185.0, 186.0])}
    lines = before_after.table(results, ("abc123", "working tree")).splitlines()
    assert lines[0].startswith("| measure | median abc123 | median working tree | after/before |")
    assert lines[2] == (
        "| train step, tiny twin, batch 8 (ms, lower is better) | 185.0 | 185.5 | 1.003 | 180.0-190.0 | "
        "185.0-186.0 | unchanged within noise |"
    )
