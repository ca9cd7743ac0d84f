"""The embedded default end to end: shard -> weights -> train (DeepSpeed, CPU) -> eval -> plots.

The default suite runs a shortened demo (a small corpus, a few steps, the tiny Whisper and Llama-3
twins in place of the real weights) and checks every artefact; the slow test runs the real
`make demo` path on the real weights and requires it to learn (WER per test half, below).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml

from paths import REPO
from speechlm import audio, inference
from speechlm.commands import demo, transcribe
from speechlm.commands import eval as ev

# the slow test's bounds: a margin above the measured run (docs/benchmarks.md, "The demo learns to listen")
# (the shipped recipe, 300 CTC + 80 LM steps: try e3 in the tries table; the seen part alone moved
# 11-24% between close recipes, so its margin is the widest)
MAX_WER = {"seen": 0.45, "unseen": 0.50, "random": 0.65}  # measured 0.261 / 0.310 / 0.410
MIN_EMPTY_SHARE = 0.75  # measured 1.00
# word times on shards/timed (issue 31's goal: medians <= 80 ms) plus a 40 ms margin; measured on the
# demo model of 2026-12-04: starts 36-44 ms, ends 28-29 ms (docs/benchmarks.md, "Word timestamps")
MAX_WORD_MEDIAN_MS = 80 + 40


def _small_recipe(tmp: Path) -> Path:
    """shards/demo.yaml scaled down: speech with all three test parts, and non-speech."""
    recipe = yaml.safe_load((REPO / "shards" / "demo.yaml").read_text())
    recipe["sources"][0]["synthetic"].update(train=32, eval=6, test=6, unseen_test=2, random_test=2)
    recipe["sources"][1]["synthetic"].update(train=6, eval=2, test=2)
    recipe["output"]["shard_clips"] = 16
    path = tmp / "demo_small.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def _last_json(text: str):
    """The JSON array `--json` printed last (two eval runs print one each)."""
    return json.loads(text[text.rindex("\n[") + 1 :] if "\n[" in text else text)


def _stereo_44k(wave16k: np.ndarray, path: Path) -> Path:
    import soxr

    up = soxr.resample(wave16k, 16000, 44100)
    sf.write(path, np.stack([up, 0.5 * up], axis=1), 44100)
    return path


def _small_timed(tmp: Path) -> Path:
    """shards/timed.yaml scaled down: a few clips with true word times."""
    recipe = yaml.safe_load((REPO / "shards" / "timed.yaml").read_text())
    recipe["sources"][0]["timed"].update(test=4, voices=["en-us"], max_words=6)
    path = tmp / "timed_small.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


@pytest.fixture(scope="module")
def short_demo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("demo")
    out = demo.main(
        [
            "--shards",
            str(_small_recipe(tmp)),
            "--timed",
            str(_small_timed(tmp)),
            "--out",
            str(tmp / "outputs"),
            "--name",
            "short",
            "model.audio_model_id=tiny/whisper",
            "model.text_model_id=tiny/llama3",
            "model.projector_hidden_dim=64",
            "model.lora_rank=4",
            "model.lora_alpha=8",
            "training.max_steps=6",
            "training.eval_steps=3",
            "training.save_steps=3",
            "training.warmup_steps=2",
            "training.ctc_warmup_steps=2",
            "training.eval_transcribe_clips=8",
            "model.max_new_tokens=8",
        ]
    )
    return tmp, out


def test_short_demo_writes_every_artefact(short_demo):
    tmp, out = short_demo
    run = Path(out["run_dir"])
    assert (run / "config.yaml").is_file() and (run / "metrics.jsonl").is_file()
    assert len(out["train_loss"]) >= 2 and len(out["eval_loss"]) == 2  # eval at step 3 and at the end
    assert all(np.isfinite(out["train_loss"]))
    latest = (run / "checkpoints" / "latest").read_text().strip()
    assert latest == "step-6" and inference.resolve_model_dir(run) == run / "checkpoints" / "step-6" / "model"
    assert out["result"]["clips"] == 8 and 0.0 <= out["wer"]
    # the test split's four parts, scored apart: WER for speech, the share said empty for non-speech
    assert set(out["parts"]) == {"seen", "unseen", "random", "nonspeech"}
    assert all(0.0 <= r["wer"] for p, r in out["parts"].items() if p != "nonspeech")
    assert 0.0 <= out["parts"]["nonspeech"]["empty_share"] <= 1.0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "eval/wer/random" in r] == [3, 6]  # per-part WER at every evaluation
    for p in out["plots"]:
        assert Path(p).read_bytes()[:4] == b"\x89PNG" and Path(p).stat().st_size > 5000
    # word times: scored against the timed clips' true times, and subtitles of a long recording
    assert {"matched", "start_median_ms", "end_p90_ms"} <= set(out["word_times"]["boundaries"])
    import srt

    list(srt.parse(Path(out["word_times"]["srt"]).read_text()))  # a well-formed SRT (empty if nothing is said)


def test_eval_is_deterministic_and_writes_hypotheses(short_demo, capsys):
    tmp, out = short_demo
    args = ["-m", out["run_dir"], "-d", out["shards"], "--split", "test", "-n", "5", "--out", str(tmp / "ev"), "--json"]
    first = ev.main(args)
    second = ev.main(args)
    assert [r["wer"] for r in first] == [r["wer"] for r in second]
    rows = [json.loads(line) for line in (tmp / "ev" / f"{Path(out['shards']).name}.jsonl").read_text().splitlines()]
    assert len(rows) == 5 and {"id", "reference", "hypothesis", "errors"} <= set(rows[0])
    printed = _last_json(capsys.readouterr().out)
    assert printed[0]["wer"] == second[0]["wer"] and "rows" not in printed[0]


def test_transcribe_resamples_44k_stereo(short_demo, tmp_path):
    _, out = short_demo
    manifest = json.loads((Path(out["shards"]) / "manifest.json").read_text())
    clip_id = manifest["splits"]["test"]["shards"][0]["ids"][0]
    _, clips = inference.dataset_clips(out["shards"], "test")
    wave = next(w for cid, w, _ in clips if cid == clip_id)  # decoded by the training reader
    path = _stereo_44k(wave, tmp_path / "clip.wav")
    loaded = audio.load(path)
    assert abs(len(loaded) - len(wave)) <= 2  # resampled back to 16 kHz mono, same duration
    n = min(len(loaded), len(wave))
    assert np.corrcoef(loaded[:n], wave[:n])[0, 1] > 0.99
    assert np.std(loaded[:n]) / np.std(wave[:n]) == pytest.approx(0.75, abs=0.02)  # mono = mean of the channels
    texts = transcribe.main(["-m", out["run_dir"], str(path)])
    assert len(texts) == 1 and isinstance(texts[0], str)


# The full demo's run is kept here (git-ignored), so the slow long-form test reuses its model instead of
# training the demo a second time (make test-all runs this test first).
DEMO_RUN = REPO / "outputs" / "test-demo"


@pytest.mark.slow
def test_full_demo_learns(tmp_path):
    """`make demo` as a user runs it: the listening corpus, real Whisper tiny.en + SmolLM2-135M (LoRA).

    The bounds are a margin above what the one measured run reached (docs/benchmarks.md, "The demo
    learns to listen"), not the issue's goals: they catch a broken pipeline, not a weak recipe."""
    # every core, as `make demo` gets them (conftest pins the test process itself to one thread)
    env = {**os.environ, "OMP_NUM_THREADS": str(os.cpu_count() or 1)}
    r = subprocess.run(
        [sys.executable, "-m", "speechlm.demo", "--out", str(DEMO_RUN.parent), "--name", DEMO_RUN.name],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=5400,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    # the demo's own summary (time per stage, WER per part) in the log: make test-all shows it (-rP)
    print("\n".join(x for x in r.stdout.splitlines() if x.startswith(("time:", "held-out", "train loss", "word"))))
    wers = {
        x.split()[2].rstrip(":"): float(x.split()[3].rstrip("%")) / 100
        for x in r.stdout.splitlines()
        if x.startswith("held-out WER ") and x.split()[2].endswith(":")
    }
    empty = [
        float(x.split()[2].rstrip("%")) / 100 for x in r.stdout.splitlines() if x.startswith("held-out nonspeech:")
    ]
    assert set(wers) == {"seen", "unseen", "random"} and len(empty) == 1, r.stdout[-3000:]
    for part, bound in MAX_WER.items():
        assert wers[part] <= bound, (part, r.stdout[-3000:])
    assert empty[0] >= MIN_EMPTY_SHARE, r.stdout[-3000:]
    times = json.loads(next(x for x in r.stdout.splitlines() if x.startswith("word times on")).split(": ", 1)[1])
    assert times["matched"] >= 100, times  # most of the timed clips' words were recognized and scored
    assert times["start_median_ms"] <= MAX_WORD_MEDIAN_MS and times["end_median_ms"] <= MAX_WORD_MEDIAN_MS, times
    assert (DEMO_RUN / "longform.srt").read_text().count(" --> ") >= 5  # subtitle lines of the long recording
    # a trained model: batched decoding equals one clip at a time, and a file gives the transcript of
    # the samples it holds. A file goes through the long-form cut (speech segments, the silence around
    # them trimmed), so it is compared with the cut's route on the same samples, not with
    # model.transcribe on the whole clip: the CI run of 2026-12-04 heard "important green" in the
    # trimmed clip and "important Berlin green" in the whole one. A 44.1 kHz stereo file's mix is 0.75x
    # as loud and 16-bit: its transcript is that of the samples the reader gives
    # (test_transcribe_resamples_44k_stereo checks those samples against the clip).
    model = inference.load_model(str(DEMO_RUN))
    _, clips = inference.dataset_clips(str(REPO / "shards" / "demo"), "test", n=6)
    waves = [wave for _, wave, _ in clips]  # decoded by the training reader
    batched = model.transcribe(waves)
    assert batched == [model.transcribe([w])[0] for w in waves]
    same = tmp_path / "clip16k.wav"
    sf.write(same, waves[0], 16000, subtype="FLOAT")  # lossless: the same samples come back
    assert inference.transcribe_files(model, [str(same)]) == inference.transcribe_waves(model, [waves[0]])
    path = _stereo_44k(waves[0], tmp_path / "clip.wav")
    assert inference.transcribe_files(model, [str(path)]) == inference.transcribe_waves(model, [audio.load(path)])
