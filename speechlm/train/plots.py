"""Plots of a training run from its metrics.jsonl: `write_plots(RUN_DIR)` ->
RUN_DIR/plots/{overview,loss,learning_rate,grad_norm,throughput}.png (`speechlm report RUN_DIR`), plus
listening.png (WER per held-out part), languages.png and translation.png (scores per language and
task) when the run logged them.

One glance should tell whether the loss fell in the first few hundred steps.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: pods, CI, Slurm nodes
import matplotlib.pyplot as plt  # noqa: E402

from speechlm.config import ConfigError  # noqa: E402
from speechlm.model.folder.card_languages import is_language_key  # noqa: E402


def _language_score(k: str) -> bool:
    """A transcription or language-ID score per language (speechlm.scoring.languages), a fraction."""
    return is_language_key(k, "eval/") and k.startswith(("eval/wer/", "eval/cer/", "eval/lid"))


PANELS = {
    "loss": ("Loss", lambda k: k in ("train/loss", "eval/loss"), False),
    # training.eval_transcribe_clips: WER per part of the held-out split, and the share of
    # non-speech transcribed as empty (speechlm.scoring.by_part), beside the loss
    "listening": (
        "Held-out WER per part; non-speech said empty",
        lambda k: k.startswith(("eval/wer", "eval/empty_share")) and not is_language_key(k, "eval/"),
        False,
    ),
    # clips that state their language and task (issue 38): WER / CER and language ID per language, and
    # the translations' BLEU and chrF (0-100) per language pair
    "languages": ("Held-out WER / CER per language; language ID", _language_score, False),
    "translation": (
        "Translation BLEU and chrF per language pair",
        lambda k: k.startswith(("eval/bleu/", "eval/chrf/")),
        False,
    ),
    "learning_rate": ("Learning rate", lambda k: k.startswith("train/learning_rate"), False),
    "grad_norm": ("Gradient norm (before clipping)", lambda k: k == "train/grad_norm", True),
    "throughput": ("Throughput", lambda k: k.startswith("perf/") and k.endswith("_per_s"), True),
}


def read_metrics(path: Path) -> dict[str, tuple[list[int], list[float]]]:
    """Series by metric name: (steps, values). Non-numeric and non-finite values are left out."""
    series: dict[str, tuple[list[int], list[float]]] = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a kill mid-write; the rest is still good
        step = row.get("step")
        if not isinstance(step, int):
            continue
        for k, v in row.items():
            if k == "step" or not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                continue
            xs, ys = series.setdefault(k, ([], []))
            xs.append(step)
            ys.append(float(v))
    return series


def _draw(ax, series, title, match, logy):
    drawn = 0
    for k in sorted(series):
        if match(k):
            xs, ys = series[k]
            style = "o-" if len(xs) < 30 else "-"
            ax.plot(xs, ys, style, label=k, markersize=3)
            drawn += 1
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=7)
        if logy and all(v > 0 for k in series if match(k) for v in series[k][1]):
            ax.set_yscale("log")
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    return drawn


def write_plots(run_dir: str | Path) -> list[Path]:
    run_dir = Path(run_dir)
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        raise ConfigError(f"no metrics.jsonl in {run_dir}")
    series = read_metrics(metrics)
    if not any(m(k) for k in series for _, m, _ in PANELS.values()):
        raise ConfigError(f"{metrics} holds no training metrics yet")
    out = run_dir / "plots"
    out.mkdir(exist_ok=True)
    written = []
    optional = ("listening", "languages", "translation")  # drawn only when the run logged them
    panels = {k: v for k, v in PANELS.items() if k not in optional or any(v[1](s) for s in series)}
    cols = 3 if len(panels) > 4 else 2
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols if cols == 3 else 11, 3.5 * rows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.axis("off")
    for ax, (name, (title, match, logy)) in zip(axes.flat, panels.items()):
        _draw(ax, series, title, match, logy)
        one, ax1 = plt.subplots(figsize=(6, 4))
        _draw(ax1, series, title, match, logy)
        one.tight_layout()
        one.savefig(out / f"{name}.png", dpi=100)
        plt.close(one)
        written.append(out / f"{name}.png")
    fig.suptitle(run_dir.name)
    fig.tight_layout()
    fig.savefig(out / "overview.png", dpi=100)
    plt.close(fig)
    return [out / "overview.png"] + written
