"""Long-form quality on the demo's trained real-weights model (slow: it needs that model).

A ~3-minute recording of the held-out test sentences (never in training) with pauses, transcribed
whole (`speechlm transcribe`'s long-form path, speechlm.inference, its default cut), against the same sentences one by
one: WER within a margin of the measured ratio (below), every cut inside a pause, a cut in every pause
between sentences, no sample transcribed twice, and no more words inserted or dropped than one by one
(+25%, +2 each).

The model: `$SPEECHLM_DEMO_RUN` (a finished `python -m speechlm.demo` run folder) when set, else the
run tests/demo/test_demo.py's slow test keeps (`make test-all` runs it first), else the demo is trained
here as `make demo` runs it.
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from paths import REPO
from speechlm import audio
from speechlm import inference as ev
from speechlm.inference import long_form_for, transcribe_waves
from speechlm.model.longform.cut import windows
from speechlm.scoring import wer

sys.path.insert(0, str(REPO / "bench"))
from longform import recording  # noqa: E402  (bench/longform.py: the same recording it measures)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    given = os.environ.get("SPEECHLM_DEMO_RUN")
    if given:
        return Path(given)
    kept = REPO / "outputs" / "test-demo"
    if (kept / "checkpoints" / "latest").is_file():
        return kept
    out = tmp_path_factory.mktemp("demo")
    env = {**os.environ, "OMP_NUM_THREADS": str(os.cpu_count() or 1)}
    r = subprocess.run(
        [sys.executable, "-m", "speechlm.demo", "--out", str(out), "--name", "demo"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=5400,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return out / "demo"


@pytest.mark.slow
def test_three_minutes_of_held_out_sentences_transcribe_as_well_as_one_by_one(demo_run):
    model = ev.load_model(str(demo_run))
    # the demo's own test split (built by the demo run); its non-speech clips have empty references
    _, clips = ev.dataset_clips(str(REPO / "shards" / "demo"), "test")
    data = [(wave, ref) for _, wave, ref in clips if ref]  # decoded by the training reader
    wave, reference, n = recording([w for w, _ in data], [r for _, r in data], 180.0)
    assert 150 <= len(wave) / audio.SAMPLE_RATE <= 200 and n >= 30
    singles = transcribe_waves(model, [w for w, _ in data[:n]])
    one_by_one = wer.score([r for _, r in data[:n]], singles)
    whole = transcribe_waves(model, [wave])[0]
    long = wer.score([reference], [whole])
    # Measured with the default "segments" cut (docs/benchmarks.md, "Long-form"): on the shipped
    # recipe's model, its clips opening and closing with 0-0.3 s of silence (2026-12-04), 27.2% whole
    # vs 28.4% one by one (0.96x); on round 1's demo model 0.96x. Windows of 20 s cut at their quietest
    # point ("pause", the default before) gave 1.56x: the demo trains on single sentences and stops
    # after the first sentence of a window holding several.
    assert long["wer"] <= 1.2 * one_by_one["wer"] + 1e-9, (long, one_by_one, whole)  # the bound
    # nothing repeated at the seams: no sample is transcribed twice (the segments are disjoint, and each
    # cut falls in a pause: below), and no more words are inserted than one by one, within the bound the
    # deletions get. The segments are not the clips (their silence margins differ), so a few answers
    # differ either way: 11 whole against 11 one by one on one host's model, 15 against 12 on another's
    # (CI, 2026-12-06), where "+ 2" alone failed with the WER at 0.9x
    spans = windows(wave, long_form_for(model))  # the default cut
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans
    assert long["insertions"] <= 1.25 * one_by_one["insertions"] + 2
    # nothing dropped: 20 words whole against 19 one by one. When the cut kept 0.25 s of silence before
    # each segment (more than most of the model's training clips open with) it was 34 against 19, whole
    # sentences answered with nothing (docs/benchmarks.md, "Silence kept before and after speech")
    assert long["deletions"] <= 1.25 * one_by_one["deletions"] + 2
    # every cut falls in a pause (no word is split across windows), and every pause between two
    # sentences is cut (each sentence its own segment)
    assert len(spans) >= n
    energy = np.abs(wave)
    for cut in {x for span in spans for x in span} - {0, len(wave)}:
        around = energy[max(0, cut - 800) : cut + 800]  # 50 ms either side of the cut
        assert around.max() < 0.02, f"cut at {cut / audio.SAMPLE_RATE:.2f} s is not in a pause"


@pytest.mark.slow
def test_the_recording_streamed_live_ends_as_well_as_offline_and_takes_nothing_back(demo_run):
    """The same recording through a live stream (speechlm.model.longform.streaming, its defaults), fed in
    0.1 s pieces: the final text scores within the issue's 1.15x of the offline long-form WER
    (measured 1.00x: docs/benchmarks.md, "Live transcription"), every event only adds, and the
    deltas join into the final text."""
    from speechlm.inference import stream_wave

    model = ev.load_model(str(demo_run))
    _, clips = ev.dataset_clips(str(REPO / "shards" / "demo"), "test")
    data = [(wave, ref) for _, wave, ref in clips if ref]
    wave, reference, _ = recording([w for w, _ in data], [r for _, r in data], 180.0)
    offline = wer.score([reference], transcribe_waves(model, [wave]))
    events = list(stream_wave(model, wave))
    texts = [""] + [e.text for e in events]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))  # nothing taken back
    assert events[-1].final and "".join(e.delta for e in events) == events[-1].text
    assert sum(bool(e.delta) for e in events[:-1]) >= 30  # committed as it went, not at the end
    streamed = wer.score([reference], [events[-1].text])
    assert streamed["wer"] <= 1.15 * offline["wer"] + 1e-9, (streamed, offline, events[-1].text)
