import json
import math
import subprocess
import sys

from speechlm.train import plots as report


def _fake_run(tmp_path, rows):
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return tmp_path


def test_report_writes_nonempty_pngs_and_skips_bad_lines(tmp_path):
    rows = [
        {
            "step": s,
            "train/loss": 4 * math.exp(-s / 20),
            "train/learning_rate": 1e-3 * min(1, s / 10),
            "train/grad_norm": 2.0,
            "perf/samples_per_s": 10.0,
        }
        for s in range(1, 60)
    ]
    rows.append({"step": 50, "eval/loss": 0.5})
    run = _fake_run(tmp_path, rows)
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 61, "train/lo')  # a line cut short by a kill
    series = report.read_metrics(run / "metrics.jsonl")
    assert len(series["train/loss"][0]) == 59 and series["eval/loss"] == ([50], [0.5])
    paths = report.write_plots(run)
    assert {p.name for p in paths} == {
        "overview.png",
        "loss.png",
        "learning_rate.png",
        "grad_norm.png",
        "throughput.png",
    }
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000


def test_report_cli_errors_are_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "speechlm.report", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip() == f"error: no metrics.jsonl in {tmp_path}"


def test_non_finite_values_are_left_out(tmp_path):
    run = _fake_run(tmp_path, [{"step": 1, "train/loss": float("nan")}, {"step": 2, "train/loss": 1.0}])
    assert report.read_metrics(run / "metrics.jsonl")["train/loss"] == ([2], [1.0])
