import json
import math
import subprocess
import sys

import matplotlib.pyplot as plt

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


def test_scores_per_language_get_their_panels_and_parts_keep_theirs(tmp_path):
    """Issue 38: WER/CER and language ID per language on one panel, BLEU/chrF per pair on another; a
    part's WER stays on the listening panel; an English-only run draws neither new panel."""
    rows = [
        {"step": s, "train/loss": 1.0 / s, "train/learning_rate": 1e-3, "train/grad_norm": 1.0} for s in range(1, 9)
    ]
    rows += [{"step": s, "perf/samples_per_s": 5.0} for s in range(1, 9)]
    scores = {"eval/wer/seen": 0.3, "eval/wer/es": 0.4, "eval/cer/ja": 0.2, "eval/lid": 0.9, "eval/lid/es": 1.0}
    scores.update({"eval/chrf/es-en": 30.0, "eval/bleu/es-en": 12.0, "eval/empty_share/nonspeech": 1.0})
    rows += [{"step": s, **scores} for s in (4, 8)]
    paths = report.write_plots(_fake_run(tmp_path, rows))
    assert {p.name for p in paths} >= {"listening.png", "languages.png", "translation.png"}
    keys = sorted(scores)
    drawn = {name: [k for k in keys if match(k)] for name, (_, match, _) in report.PANELS.items()}
    assert drawn["listening"] == ["eval/empty_share/nonspeech", "eval/wer/seen"]
    assert drawn["languages"] == ["eval/cer/ja", "eval/lid", "eval/lid/es", "eval/wer/es"]
    assert drawn["translation"] == ["eval/bleu/es-en", "eval/chrf/es-en"]
    english = [r for r in rows if "eval/wer/es" not in r] + [{"step": 4, "eval/wer/seen": 0.3}]
    (tmp_path / "en").mkdir()
    names = {p.name for p in report.write_plots(_fake_run(tmp_path / "en", english))}
    assert "languages.png" not in names and "translation.png" not in names and "listening.png" in names
    # the English-only overview keeps its 2 x 3 grid (15 x 7 in at 100 dpi); the multilingual one grows a row
    assert plt.imread(tmp_path / "en" / "plots" / "overview.png").shape[:2] == (700, 1500)
    assert plt.imread(tmp_path / "plots" / "overview.png").shape[:2] == (1050, 1500)
