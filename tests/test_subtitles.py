"""Subtitle and JSON writers (parsed back with the maintained `srt` and `webvtt-py` libraries) and
boundary error scoring on hand-made cases."""

import html
import json

import pytest
import srt
import webvtt

from speechlm.model.align import Word
from speechlm.scoring.boundaries import BoundaryErrors, normalize_word, score_boundaries
from speechlm.subtitles import cues, to_json, to_srt, to_vtt, transformers_chunks

WORDS = [
    Word("Hello", 0.32, 0.64, 0.9),
    Word("<world>", 0.72, 1.2, 0.8),
    Word("&", None, None, 0.0),  # unplaced
    Word("again.", 1.28, 1.6, 0.7),
    Word("Later", 3.5, 3.9, 0.95),  # after a 1.9 s pause: a new line
    Word("on,", 3661.04, 3661.5, 0.6),  # past an hour
]


def test_srt_parses_with_the_srt_library():
    subs = list(srt.parse(to_srt(WORDS)))
    placed = [w for w in WORDS if w.placed]
    assert [s.content for s in subs] == [w.text for w in placed]  # the unplaced word has no cue
    assert [s.index for s in subs] == list(range(1, len(placed) + 1))
    for s, w in zip(subs, placed):
        assert s.start.total_seconds() == pytest.approx(w.start, abs=5e-4)
        assert s.end.total_seconds() == pytest.approx(w.end, abs=5e-4)
    lines = list(srt.parse(to_srt(cues(WORDS))))
    assert [s.content for s in lines] == ["Hello <world> & again.", "Later", "on,"]
    assert lines[0].start.total_seconds() == 0.32 and lines[0].end.total_seconds() == 1.6
    assert to_srt([]) == ""


def test_vtt_parses_with_webvtt_py():
    captions = webvtt.from_string(to_vtt(cues(WORDS))).captions
    # webvtt-py hands the cue text back as written: escaped, so no "<world>" reads as a tag
    assert captions[0].text == "Hello &lt;world&gt; &amp; again."
    assert [html.unescape(c.text) for c in captions] == ["Hello <world> & again.", "Later", "on,"]
    assert [c.start for c in captions] == ["00:00:00.320", "00:00:03.500", "01:01:01.040"]
    assert captions[0].end_in_seconds == 1 and captions[2].end == "01:01:01.500"
    words = webvtt.from_string(to_vtt(WORDS)).captions
    assert len(words) == 5


def test_cues_split_on_length_and_pause():
    many = [Word(f"word{i}", i * 0.5, i * 0.5 + 0.4, 1.0) for i in range(20)]
    lines = cues(many, max_chars=20, max_seconds=5.0)
    assert all(len(c.text) <= 20 for c in lines)
    assert " ".join(c.text for c in lines) == " ".join(w.text for w in many)  # nothing lost or repeated
    assert all(a.end <= b.start for a, b in zip(lines, lines[1:]))
    assert cues([Word("x", None, None, 0.0)]) == []  # no time for it: no cue


def test_json_and_transformers_chunks():
    doc = json.loads(to_json(WORDS, text="Hello <world> & again. Later on,"))
    assert doc["text"] == "Hello <world> & again. Later on,"
    assert doc["words"][2] == {"text": "&", "start": None, "end": None, "confidence": 0.0}
    assert doc["words"][0] == {"text": "Hello", "start": 0.32, "end": 0.64, "confidence": 0.9}
    assert [s["text"] for s in doc["segments"]] == ["Hello <world> & again.", "Later", "on,"]
    chunks = transformers_chunks(WORDS)
    assert chunks[0] == {"text": "Hello", "timestamp": (0.32, 0.64)}
    assert chunks[2]["timestamp"] == (None, None)


REF = [
    {"text": "John", "start": 0.20, "end": 0.50},
    {"text": "went", "start": 0.60, "end": 0.90},
    {"text": "to", "start": 1.00, "end": 1.10},
    {"text": "Paris.", "start": 1.30, "end": 1.80},
]


def test_boundaries_exact_and_shifted():
    hyp = [Word(r["text"], r["start"], r["end"], 1.0) for r in REF]
    e = score_boundaries(REF, hyp)
    assert e.start == [0, 0, 0, 0] and e.end == [0, 0, 0, 0] and e.matched == 4
    shifted = [Word(w.text.lower().strip("."), w.start + 0.08, w.end - 0.16, 1.0) for w in hyp]
    e = score_boundaries(REF, shifted)  # case and punctuation don't stop a match
    assert e.start == pytest.approx([0.08] * 4) and e.end == pytest.approx([0.16] * 4)
    s = e.summary()
    assert s["start_median_ms"] == 80.0 and s["end_p90_ms"] == 160.0 and s["scored"] == 4


def test_boundaries_count_what_does_not_match():
    hyp = [
        Word("John", 0.25, 0.5, 1.0),
        Word("want", 0.6, 0.9, 1.0),  # substituted
        Word("to", None, None, 0.0),  # matched but unplaced
        Word("the", 1.2, 1.25, 1.0),  # inserted
        Word("Paris", 1.4, 1.9, 1.0),
    ]
    e = score_boundaries(REF, hyp)
    assert e.matched == 3 and e.unplaced == 1 and e.substituted == 1 and e.inserted == 1 and e.deleted == 0
    assert e.start == pytest.approx([0.05, 0.1]) and e.end == pytest.approx([0.0, 0.1])
    e2 = score_boundaries(REF, hyp[:1])
    assert e2.deleted == 3 and e2.matched == 1
    total = sum([e, e2], BoundaryErrors())
    assert total.matched == 4 and total.deleted == 3 and len(total.start) == 3
    assert score_boundaries(REF, []).deleted == 4 and score_boundaries([], hyp).inserted == 5
    empty = BoundaryErrors().summary()
    assert empty["start_median_ms"] is None and empty["scored"] == 0


def test_p90_over_many():
    ref = [{"text": f"w{i}", "start": float(i), "end": i + 0.5} for i in range(10)]
    hyp = [{"text": f"w{i}", "start": i + 0.01 * (i + 1), "end": i + 0.5} for i in range(10)]
    s = score_boundaries(ref, hyp).summary()
    assert s["start_median_ms"] == 55.0 and s["start_p90_ms"] == 91.0 and s["end_median_ms"] == 0.0


def test_normalize_word():
    assert normalize_word("Paris.") == "paris" and normalize_word("don't") == "don't"
    assert normalize_word("'quoted'") == "quoted" and normalize_word("—") == ""
