"""The OpenAI-compatible server (speechlm.serve), started in a subprocess on 127.0.0.1 and spoken to
with the official `openai` client: the texts `speechlm transcribe` gives, for clips and a long-form
recording, under concurrent load; subtitles that subtitle libraries read; word timestamps; the CLI's
checks. Bad input: test_serve_errors.py; replicas, hang-ups and SIGTERM: test_serve_replicas.py; the
batcher alone: test_batcher.py; the shared server: tests/serve/conftest.py."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import soundfile as sf
import srt
import webvtt

from serve_helpers import transcribe


# ---------------------------------------------------------------------------- what good requests get
def test_concurrent_requests_get_speechlm_transcribes_texts(server, clips, reference):
    paths, recording = clips
    client = server.client()
    files = [recording, *paths, *paths]  # the long one first: the clips batch beside its segments
    fmts = ["text", "json"] * len(files)
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda a: transcribe(client, *a), zip(files, fmts)))
    assert got == [reference[p.name] for p in files]
    stats = server.health()["batcher"]
    assert stats["largest_batch"] > 1 and stats["segments"] > len(files)  # shared batches, the recording cut


def test_subtitles_and_verbose_json_carry_the_long_form_segments(server, clips, reference):
    _, recording = clips
    client = server.client()
    verbose = client.audio.transcriptions.create(
        model="twin",
        file=recording.read_bytes(),
        response_format="verbose_json",
        timestamp_granularities=["segment"],
        language="en",
        temperature=0,
    )
    duration = sf.info(recording).duration
    assert verbose.text == reference[recording.name] and abs(verbose.duration - duration) < 0.01
    segs = verbose.segments
    assert len(segs) >= 20  # 24 sentences, cut in their pauses
    assert all(0 <= s.start < s.end <= duration + 1e-3 for s in segs)
    assert all(a.end <= b.start for a, b in zip(segs, segs[1:]))  # in order, silence between them left out
    assert " ".join(s.text for s in segs) == verbose.text

    cues = list(srt.parse(transcribe(client, recording, "srt")))
    assert [c.content for c in cues] == [s.text for s in segs]
    assert [round(c.start.total_seconds(), 3) for c in cues] == [s.start for s in segs]
    assert [round(c.end.total_seconds(), 3) for c in cues] == [s.end for s in segs]
    vtt = webvtt.from_string(transcribe(client, recording, "vtt"))
    assert [c.text for c in vtt] == [s.text for s in segs]
    assert [c.start for c in vtt] == [srt.timedelta_to_srt_timestamp(c.start).replace(",", ".") for c in cues]


def test_verbose_json_has_word_timestamps_when_asked(server, clips, reference):
    _, recording = clips
    verbose = server.client().audio.transcriptions.create(
        model="twin", file=recording.read_bytes(), response_format="verbose_json", timestamp_granularities=["word"]
    )
    words = verbose.words
    assert verbose.text == reference[recording.name]
    assert [w.word for w in words] == verbose.text.split()  # every word of the text, in order
    placed = [w for w in words if w.start is not None]
    assert placed and [w.start for w in placed] == sorted(w.start for w in placed)
    assert all(0 <= w.start <= w.end <= verbose.duration + 1e-3 for w in placed)


def test_models_and_health(server):
    models = server.client().models.list()
    assert [m.id for m in models.data] == ["twin"]
    h = server.health()
    assert h["status"] == "ok" and h["model"] == "twin" and h["requests_in_flight"] == 0


# ---------------------------------------------------------------------------- the command line
def test_cli_checks_its_settings_before_loading_anything(twin, capsys):
    from speechlm.commands.serve import main

    for flags, msg in (
        (["--max-batch", "0"], "--max-batch must be at least 1"),
        (["--max-upload-mb", "0"], "--max-upload-mb must be a finite positive number"),
        (["--threshold-db", "-1"], "--threshold-db must be positive"),
    ):
        with pytest.raises(SystemExit) as e:
            main([str(twin), *flags])
        assert e.value.code == 2 and msg in capsys.readouterr().err


def test_help_shows_examples():
    from speechlm.commands.serve import build_parser

    text = build_parser().format_help()
    assert "examples:" in text and "curl" in text and "SPEECHLM_API_KEY" in text
