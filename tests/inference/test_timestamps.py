"""Word timestamps from the model's own CTC head, in every route: speechlm (transcribe_timed, the
transcribe CLI's JSON / SRT / WebVTT) and the exported folder (AutoModel, pipeline's `chunks`), for a
tiny twin of each encoder family; long-form words on the recording's clock; unplaced words unplaced."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf
import srt
import torch
import webvtt

from model_helpers import trained_looking, waves
from speechlm.inference import transcribe_timed, transcribe_waves


def _long_clip() -> np.ndarray:
    """Two bursts of sound split by a second of silence: the long-form cut makes two segments."""
    a, b = waves((16000 * 3, 16000 * 2), seed=5)
    return np.concatenate([a, np.zeros(16000, np.float32), b])


def _check_words(result: dict, seconds: float) -> None:
    words = result["words"]
    assert words and {tuple(sorted(w)) for w in words} == {("confidence", "end", "start", "text")}
    placed = [w for w in words if w["start"] is not None]
    assert placed and all(0 <= w["start"] <= w["end"] <= seconds + 1e-6 for w in placed)
    assert [w["start"] for w in placed] == sorted(w["start"] for w in placed)
    assert all(0 <= w["confidence"] <= 1 for w in words)
    # the words are the text's words: the long-form segments' words, in the recording's clock
    assert " ".join(w["text"] for w in words).split() == result["text"].split()
    assert sum(len(s["words"]) for s in result["segments"]) == len(words)


@pytest.mark.parametrize("encoder", ["tiny/granite_speech5", "tiny/whisper"])
def test_timed_transcripts_have_words_in_order_on_the_recordings_clock(encoder):
    model = trained_looking(encoder, "tiny/qwen3_5")
    clips = [waves((16000 * 2,), seed=1)[0], _long_clip()]
    timed = transcribe_timed(model, clips)
    assert [t["text"] for t in timed] == transcribe_waves(model, clips)  # the same text as without times
    for t, c in zip(timed, clips):
        _check_words(t, len(c) / 16000)
    first, second = timed[1]["segments"]
    assert second["start"] >= 4.0 - 0.3  # the second burst starts after 3 s of sound and 1 s of silence
    assert all(w["start"] is None or w["start"] >= second["start"] for w in second["words"])


def test_a_word_the_head_cannot_place_is_reported_unplaced():
    model = trained_looking("tiny/granite_speech5", "tiny/qwen3_5")
    feats, mask = model.features(waves((4000,)))
    with torch.no_grad():
        projected = model.encode_audio(feats, mask)
    frames = int(projected[1][0])
    ids = model.tokenizer(" one two three four five six seven eight nine ten" * 2, add_special_tokens=False)
    ids = ids["input_ids"]
    assert len(ids) > frames  # more tokens than frames: no CTC path exists
    words = model.word_times(projected, [ids])[0]
    assert words and all(w["start"] is None and w["end"] is None and w["confidence"] == 0 for w in words)


def test_transcribe_cli_writes_json_srt_and_vtt_that_subtitle_readers_parse(tmp_path):
    from speechlm.commands import transcribe
    from speechlm.model import save_pretrained

    model = trained_looking("tiny/whisper", "tiny/qwen3_5")
    folder = save_pretrained(model, tmp_path / "model")
    clip = tmp_path / "talk.wav"
    sf.write(clip, _long_clip(), 16000)
    for fmt in ("json", "srt", "vtt"):
        transcribe.main(["-m", str(folder), str(clip), "--format", fmt, "--out-dir", str(tmp_path / "out")])
    doc = json.loads((tmp_path / "out" / "talk.json").read_text())
    _check_words({**doc, "segments": [{"words": doc["words"]}]}, 6.0)
    subs = list(srt.parse((tmp_path / "out" / "talk.srt").read_text()))
    captions = webvtt.read(str(tmp_path / "out" / "talk.vtt"))
    assert subs and len(subs) == len(captions)
    assert " ".join(s.content for s in subs).split() == [w["text"] for w in doc["words"] if w["start"] is not None]
    h, m, sec = captions[0].start.split(":")  # webvtt-py's start_in_seconds drops the milliseconds
    assert all(s.start < s.end for s in subs)
    assert subs[0].start.total_seconds() == pytest.approx(3600 * int(h) + 60 * int(m) + float(sec), abs=1e-3)


def test_eval_scores_word_times_against_a_timed_set_and_counts_unsupported_words(tmp_path):
    """`speechlm eval` on a shard set whose labels carry true word times (kind timed): boundary errors
    and the hallucination signal's counts are reported; dropping unsupported words changes hypotheses
    only by leaving words out."""
    from speechlm import inference as ev
    from speechlm import shard

    recipe, _ = shard.load_recipe("timed")
    recipe.sources[0].settings.test = 4
    out = shard.build(recipe, tmp_path / "timed", workers=1)
    model = trained_looking("tiny/whisper", "tiny/qwen3_5")
    kept = ev.evaluate(model, str(out), split="test", word_threshold=0.5)
    dropped = ev.evaluate(model, str(out), split="test", word_threshold=0.5, drop_unsupported=True)
    b = kept["boundaries"]
    assert b["matched"] + b["substituted"] + b["deleted"] > 0 and set(b) >= {"start_median_ms", "end_p90_ms"}
    u = kept["unsupported_words"]
    assert u["threshold"] == 0.5 and 0 <= u["flagged"] <= u["words"] and u["words"] > 0
    for a, d in zip(kept["rows"], dropped["rows"]):
        assert set(d["hypothesis"].split()) <= set(a["hypothesis"].split())
