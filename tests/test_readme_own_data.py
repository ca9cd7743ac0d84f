"""README, "Train on your own data", run as written (issue 35): a folder of espeak-ng WAVs with CSV lists,
then the section's files (its ```yaml blocks whose first line is `# FILE`) written and its ```bash blocks
run word for word with `speechlm` on the PATH: shards, training from the offline real weights, a
fine-tune with model.init_from, eval on the test split and on a list, transcription, export.

Slow: it trains twice on the demo's real weights (Whisper tiny.en + SmolLM2-135M, converted offline)."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from paths import REPO

SECTION = "## Train on your own data"
SENTENCES = [
    "The cat sat on the mat.",
    "Yes, we open at nine.",
    "A dog ran in the park.",
    "We like green apples.",
    "She reads a long book.",
    "They walk to the shop.",
    "My friend plays the piano.",
    "It is cold today.",
    "Open the red door.",
    "Birds sing in the morning.",
    "He drinks hot tea.",
    "The train leaves at noon.",
]
SPLITS = {"train": 40, "eval": 10, "test": 10}
VOICES = ["en-us", "en-gb", "en-us+f3"]


def section() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start : end if end > 0 else len(text)]


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced block, in order."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w+)\n(.*?)^```$", text, re.M | re.S)]


def make_clips(root: Path) -> None:
    """my_data/wavs/<split>/NNN.wav spoken by espeak-ng, and my_data/<split>.csv, as the README shows."""
    k = 0
    for split, n in SPLITS.items():
        (root / "wavs" / split).mkdir(parents=True)
        with open(root / f"{split}.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["audio", "text"])
            for i in range(n):
                text, voice = SENTENCES[k % len(SENTENCES)], VOICES[k % len(VOICES)]
                rel = f"wavs/{split}/{i:03d}.wav"
                subprocess.run(["espeak-ng", "-v", voice, "-s", "150", "-w", str(root / rel), text], check=True)
                w.writerow([rel, text])
                k += 1


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed (make setup installs it)")
def test_the_readme_section_runs_as_written(tmp_path):
    text = section()
    files = [(body.split("\n", 1)[0][2:].strip(), body) for lang, body in blocks(text) if lang == "yaml"]
    commands = [body for lang, body in blocks(text) if lang == "bash"]
    assert [f for f, _ in files] == ["my_data.yaml", "my_run.yaml"] and len(commands) == 4
    make_clips(tmp_path / "my_data")
    for name, body in files:
        (tmp_path / name).write_text(body)
    # as a user's shell runs them: no notice switch (speechlm.quiet) or warning filter the test process may carry
    shell = {k: v for k, v in os.environ.items() if k not in ("SPEECHLM_VERBOSE", "PYTHONWARNINGS")}
    env = dict(
        shell,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # the venv's `speechlm`
        HF_HUB_OFFLINE="1",
        OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"),
    )
    for body in commands:
        r = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", body], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert r.returncode == 0, f"{body}\n--- stderr:\n{r.stderr[-4000:]}"
        (tmp_path / f"out-{commands.index(body)}.txt").write_text(r.stdout + r.stderr)

    man = json.loads((tmp_path / "shards/my_data/manifest.json").read_text())
    assert {s: v["clips"] for s, v in man["splits"].items()} == SPLITS and man["drops"]["total"] == 0
    for run in ("my_run", "my_run_ft"):
        assert (tmp_path / "outputs" / run / "final" / "config.json").is_file()
    log = (tmp_path / "out-2.txt").read_text()  # the fine-tune
    assert "model.init_from outputs/my_run/final: projector, LoRA loaded" in log
    evals = (tmp_path / "out-3.txt").read_text()
    assert evals.count("WER") >= 2  # the shard set's test split and the CSV list
    assert (tmp_path / "outputs/my_run_ft-merged/decoder/config.json").is_file()
    # the library notices that said nothing to a user are gone from the commands' output
    seen = {k: os.environ.get(k) for k in ("SPEECHLM_VERBOSE", "PYTHONWARNINGS")}
    assert "Setting accelerator to CPU" not in log and "FutureWarning" not in log, (seen, log[:600])
