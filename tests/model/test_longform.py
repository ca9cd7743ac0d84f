"""Long-form cutting and joining (speechlm.inference: longform, cut, stitch, batching): windows within the
limit, cuts in pauses, seams merged without dropping or repeating words, every window transcribed once,
in order; the settings as one LongForm that refuses a bad value by its name."""

import argparse
import ast
import sys
from pathlib import Path

import numpy as np
import pytest

from speechlm.config import ConfigError
from speechlm.inference import add_long_form_args, long_form_from_args
from speechlm.model.longform import settings as lf_mod
from speechlm.model.longform.batching import transcribe_long
from speechlm.model.longform.cut import overlap_windows, pause_windows, runs, segment_windows, silent_frames
from speechlm.model.longform.settings import LongForm
from speechlm.model.longform.stitch import merge_seam, sound_ends, timed_clip

SR = 16000


def _bursts(lengths_s, pauses_s, seed=0):
    """Noise 'words' separated by silent pauses; returns the wave and each burst's (start, end)."""
    rng = np.random.default_rng(seed)
    parts, spans, pos = [], [], 0
    for i, length in enumerate(lengths_s):
        n = int(length * SR)
        parts.append(0.3 * rng.standard_normal(n).astype(np.float32))
        spans.append((pos, pos + n))
        pos += n
        gap = int(pauses_s[i % len(pauses_s)] * SR)
        parts.append(np.zeros(gap, np.float32))
        pos += gap
    return np.concatenate(parts), spans


def test_pause_windows_stay_under_the_limit_and_cut_only_in_pauses():
    wave, spans = _bursts([1.3, 0.7, 2.1, 0.9, 1.6] * 12, [0.15, 0.4, 0.25])
    wins = pause_windows(wave, 8.0)
    assert wins[0][0] == 0 and wins[-1][1] == len(wave)
    assert all(a[1] == b[0] for a, b in zip(wins, wins[1:]))  # contiguous: nothing dropped or repeated
    assert all(e - s <= 8 * SR for s, e in wins) and len(wins) > 1
    for s, _ in wins[1:]:
        assert not any(a < s < b for a, b in spans), f"cut at {s / SR:.2f} s falls inside a burst"


def test_pause_windows_short_audio_is_one_window():
    wave = np.zeros(5 * SR, np.float32)
    assert pause_windows(wave, 20.0) == [(0, 5 * SR)]


def test_overlap_windows_cover_with_the_given_overlap():
    wave = np.zeros(65 * SR, np.float32)
    wins = overlap_windows(wave, 20.0, 2.0)
    assert wins[0] == (0, 20 * SR) and wins[-1][1] == len(wave)
    assert all(b[0] == a[1] - 2 * SR for a, b in zip(wins, wins[1:]))
    with pytest.raises(ValueError, match="overlap_seconds"):
        overlap_windows(wave, 10.0, 10.0)


@pytest.mark.parametrize(
    "left,right,joined",
    [
        # the overlap heard twice: joined once
        ("the dog saw a red car", "a red car in london", "the dog saw a red car in london"),
        # a word cut at both seam edges (garbled on each side) is dropped with its halves
        ("john liked the gree", "reen house today", "john liked the gree reen house today"),
        (
            "mary found the old book yesterday",
            "Book, yesterday. Peter sold it",
            "mary found the old book yesterday. Peter sold it",
        ),
        ("we met in pa", "in paris today", "we met in paris today"),
        # a lone common word deeper in the next window is no overlap: nothing is dropped
        ("anna washed the", "car and then the dog ran", "anna washed the car and then the dog ran"),
    ],
)
def test_merge_seam(left, right, joined):
    assert " ".join(merge_seam(left.split(), right.split())) == joined


def test_transcribe_long_transcribes_each_window_once_in_order_and_sorted_batches():
    # a "transcriber" that names the samples it was given: the wave holds each sample's index / 1e7
    waves = [np.arange(n, dtype=np.float64) / 1e7 for n in (50 * SR, 3 * SR, 41 * SR)]
    calls = []

    def name(batch):
        calls.append([len(w) for w in batch])
        return [f"{int(round(w[0] * 1e7))}:{int(round(w[-1] * 1e7)) + 1}" for w in batch]

    out = transcribe_long(name, waves, LongForm(strategy="pause", window_seconds=20.0), batch_size=2)
    for text, w in zip(out, waves):
        spans = [tuple(map(int, s.split(":"))) for s in text.split()]
        assert spans[0][0] == 0 and spans[-1][1] == len(w)
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
        assert all(e - s <= 20 * SR for s, e in spans)
    lengths = [n for c in calls for n in c]
    assert lengths == sorted(lengths, reverse=True) and all(len(c) <= 2 for c in calls)
    assert len(lengths) == sum(len(t.split()) for t in out) and out[1] == f"0:{3 * SR}"  # each window once


def test_unknown_strategy_is_refused():
    with pytest.raises(ValueError, match="strategy"):
        LongForm(strategy="vad")


# ---- "segments": a cut in every pause, merged up to merge_seconds, silence left out


def _tones(lengths_s, pauses_s, level=0.3, noise=0.0, seed=0):
    """Tone bursts (a 220 Hz tone with a 4 Hz syllable-like swell) separated by silences; returns the
    wave, each burst's (start, end) and each pause's (start, end)."""
    rng = np.random.default_rng(seed)
    parts, bursts, pauses, pos = [], [], [], 0
    for i, length in enumerate(lengths_s):
        t = np.arange(int(length * SR)) / SR
        parts.append((level * np.sin(2 * np.pi * 220 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 4 * t))).astype(np.float32))
        bursts.append((pos, pos + len(t)))
        pos += len(t)
        if i < len(lengths_s) - 1:
            gap = int(pauses_s[i % len(pauses_s)] * SR)
            parts.append(np.zeros(gap, np.float32))
            pauses.append((pos, pos + gap))
            pos += gap
    wave = np.concatenate(parts)
    if noise:
        wave = wave + (noise * rng.standard_normal(len(wave))).astype(np.float32)
    return wave, bursts, pauses


def _tiles(spans, n):
    return spans[0][0] == 0 and spans[-1][1] == n and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))


LENGTHS = [1.2, 0.6, 2.3, 0.9, 1.7, 3.1, 0.8, 1.4]
PAUSES = [0.1, 0.35, 0.2, 0.6, 1.5, 0.25, 4.0]  # the 0.1, 0.2 and 0.25 s gaps are shorter than min_pause


@pytest.mark.parametrize(
    "level,noise",
    [(0.3, 0.0), (0.3, 1e-4), (0.003, 0.0), (0.003, 3e-5)],  # loud; low (-50 dBFS) over a noise floor 36 dB down
)
def test_segments_cut_in_every_pause_and_nowhere_else(level, noise):
    wave, bursts, pauses = _tones(LENGTHS, PAUSES, level, noise)
    tiles = segment_windows(
        wave, LongForm(window_seconds=20.0, min_pause_seconds=0.3, merge_seconds=0), keep_silent=True
    )
    assert _tiles(tiles, len(wave))
    cuts = [s for s, _ in tiles[1:]]
    for a, b in bursts:
        assert not any(a <= c <= b for c in cuts), f"a cut inside the burst at {a / SR:.2f}-{b / SR:.2f} s"
    for a, b in pauses:
        inside = [c for c in cuts if a < c < b]
        assert bool(inside) == (b - a >= 0.3 * SR), f"pause of {(b - a) / SR:.2f} s: cuts {inside}"
    # left out: only silence, and all of it but the silence kept after and before each burst
    kept = segment_windows(wave, LongForm(window_seconds=20.0, min_pause_seconds=0.3, merge_seconds=0))
    assert len(kept) == 5  # the bursts grouped by the short gaps
    assert all(any(s <= a and b <= e for s, e in kept) for a, b in bursts)  # every burst whole in one range
    assert all(a[1] <= b[0] for a, b in zip(kept, kept[1:]))
    for (_, end), (start, _) in zip(kept, kept[1:]):
        assert np.max(np.abs(wave[end:start]), initial=0.0) <= 5 * noise + 1e-9  # what is left out is silence
    # the 4 s pause: keep_after_seconds after the burst before it, keep_before_seconds before the
    # burst after it (give or take the 50 ms smoothing)
    (a, b) = pauses[-1]
    assert kept[-2][1] == pytest.approx(a + lf_mod.KEEP_AFTER_SECONDS * SR, abs=480)
    assert kept[-1][0] == pytest.approx(b - lf_mod.KEEP_BEFORE_SECONDS * SR, abs=480)
    # a pause shorter than both together (the 0.35 s one) is cut where it splits in their ratio
    before, after = lf_mod.KEEP_BEFORE_SECONDS, lf_mod.KEEP_AFTER_SECONDS
    (a, b), ratio = pauses[1], after / (after + before)
    (cut,) = [c for c in cuts if a < c < b]
    assert cut == pytest.approx(a + ratio * (b - a), abs=480)


def test_segments_merge_neighbours_up_to_merge_seconds():
    wave, bursts, _ = _tones([1.0] * 12, [0.4])  # a segment per burst, 1.4 s apart
    alone = segment_windows(wave, LongForm(window_seconds=20.0, merge_seconds=0))
    assert len(alone) == 12
    for merge in (3.0, 5.0, 8.0):
        merged = segment_windows(wave, LongForm(window_seconds=20.0, merge_seconds=merge))
        assert all(e - s <= merge * SR for s, e in merged) and _tiles(merged, len(wave))
        assert all(any(s <= a and b <= e for s, e in merged) for a, b in bursts)  # no burst split
        # greedy: each range could not have taken the next one too
        assert all(b[1] - a[0] > merge * SR for a, b in zip(merged, merged[1:]))
        assert len(merged) < len(alone)
    # merging is capped by the window
    assert all(e - s <= 4 * SR for s, e in segment_windows(wave, LongForm(window_seconds=4.0, merge_seconds=60.0)))


def test_segments_silence_between_merged_speech_is_kept_but_never_at_the_ends():
    wave, bursts, _ = _tones([1.0, 1.0, 1.0], [2.0])  # pauses long enough to leave silence out
    (span,) = segment_windows(wave, LongForm(window_seconds=20.0, merge_seconds=10.0))
    before, after = lf_mod.KEEP_BEFORE_SECONDS * SR, lf_mod.KEEP_AFTER_SECONDS * SR
    assert span[0] == 0 and span[1] == len(wave)  # no silence before the first or after the last burst
    spans = segment_windows(
        wave, LongForm(window_seconds=20.0, merge_seconds=4.5)
    )  # the first two bursts and 2 s between them
    assert len(spans) == 2 and spans[0][0] == 0 and spans[0][1] == pytest.approx(bursts[1][1] + after, abs=480)
    assert spans[1] == (pytest.approx(bursts[2][0] - before, abs=480), len(wave))


def test_segments_a_click_is_never_a_segment_of_its_own():
    clicks = np.zeros(6 * SR, np.float32)
    at = (np.arange(0.5, 5.5, 0.45) * SR).astype(int)
    clicks[at] = 0.8  # 0.45 s of silence apart: each between two pauses
    pauses = [r for r in runs(silent_frames(clicks, lf_mod.THRESHOLD_DB)) if r[1] - r[0] >= 30]
    assert len(pauses) == len(at) + 1
    (span,) = segment_windows(
        clicks, LongForm(window_seconds=20.0)
    )  # one window: the clicks and the silence between them
    assert span[0] <= at[0] and span[1] > at[-1]
    wave, bursts, _ = _tones([1.5, 2.0, 1.0], [3.0])
    wave[int(0.6 * SR) + bursts[1][1]] = 0.8  # a click in the pause, 0.6 s after the second burst
    spans = segment_windows(wave, LongForm(window_seconds=20.0))
    assert len(spans) == 3 and spans[1][0] < bursts[1][0] and spans[1][1] > bursts[1][1] + 0.6 * SR


def test_segments_without_a_pause_fall_back_to_pause_windows():
    rng = np.random.default_rng(1)
    noisy = (0.1 * rng.standard_normal(50 * SR)).astype(np.float32)  # a noisy room: no frame far below the rest
    assert segment_windows(noisy, LongForm(window_seconds=20.0)) == pause_windows(noisy, 20.0)
    wave, _, _ = _tones([2.0, 2.0], [0.5], noise=0.05)  # a noise floor within threshold_db of the tones
    assert segment_windows(wave, LongForm(window_seconds=20.0)) == [(0, len(wave))]
    assert segment_windows(np.zeros(100, np.float32), LongForm()) == [(0, 100)]  # shorter than a frame


def test_segments_never_exceed_the_window():
    # a 31 s burst with no pause of its own, between short ones; windows of 8 s
    wave, bursts, _ = _tones([1.0, 31.0, 2.0, 1.5], [0.5, 0.8, 0.4])
    for merge in (0.0, 6.0, 100.0):
        tiles = segment_windows(wave, LongForm(window_seconds=8.0, merge_seconds=merge), keep_silent=True)
        assert _tiles(tiles, len(wave)) and all(e - s <= 8 * SR for s, e in tiles)
        kept = segment_windows(wave, LongForm(window_seconds=8.0, merge_seconds=merge))
        assert all(e - s <= 8 * SR for s, e in kept) and len(kept) >= 6
    # and through windows() / transcribe_long: every window at most window_seconds, silence not transcribed
    seen = []
    transcribe_long(lambda b: seen.extend(len(w) for w in b) or [""] * len(b), [wave], LongForm(window_seconds=8.0))
    assert max(seen) <= 8 * SR and sum(seen) < len(wave)


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"threshold_db": 0}, "threshold_db"),
        ({"threshold_db": -35.0}, "threshold_db"),
        ({"min_pause_seconds": 0}, "min_pause_seconds"),
        ({"merge_seconds": -1.0}, "merge_seconds"),
        ({"merge_seconds": float("nan")}, "merge_seconds"),
        ({"keep_before_seconds": -0.1}, "keep_before_seconds"),
        ({"keep_after_seconds": -0.1}, "keep_after_seconds"),
        ({"window_seconds": 0.01}, "window_seconds"),
    ],
)
def test_segment_settings_out_of_range_are_refused_by_name(kwargs, name):
    args = {"window_seconds": 20.0, **kwargs}
    with pytest.raises(ValueError, match=f"^{name} "):
        LongForm(**args)
    with pytest.raises(ValueError, match=f"^{name} "):  # whatever the strategy: a bad flag fails at once
        LongForm(strategy="pause", **args)


def test_segments_is_the_default_and_joins_segment_texts_in_order():
    assert LongForm().strategy == lf_mod.DEFAULT_STRATEGY == "segments" and "segments" in lf_mod.STRATEGIES
    wave, _, _ = _tones([1.0, 2.0, 1.5], [0.6, 0.9])
    spans = segment_windows(wave, LongForm(window_seconds=20.0))
    assert len(spans) == 3
    got = []

    def name(batch):  # a "transcriber" that names each window by its length
        got.extend(len(w) for w in batch)
        return [str(len(w)) for w in batch]

    out = transcribe_long(name, [wave], batch_size=2)  # the default settings
    assert out[0] == " ".join(str(e - s) for s, e in spans)  # each segment once, texts in order
    assert got == sorted(got, reverse=True)


def test_word_ends_move_to_where_their_sound_ends():
    """The CTC head gives a word's onset; its end is where the sound before the next word stops."""
    t = np.arange(16000) / 16000
    tone = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    # sound 0.2-0.7 s and 1.0-1.4 s, silence elsewhere
    wave = np.zeros(24000, np.float32)
    wave[3200:11200] = tone[:8000]
    wave[16000:22400] = tone[:6400]
    words = [
        {"text": "one", "start": 0.2, "end": 0.28, "confidence": 0.9},
        {"text": "lost", "start": None, "end": None, "confidence": 0.0},
        {"text": "two", "start": 1.0, "end": 1.08, "confidence": 0.9},
    ]
    sound_ends(words, wave)
    assert words[0]["end"] == pytest.approx(0.7, abs=0.03) and words[2]["end"] == pytest.approx(1.4, abs=0.03)
    assert words[1]["start"] is None and words[1]["end"] is None  # an unplaced word stays unplaced
    early = [{"text": "x", "start": 0.2, "end": 0.9, "confidence": 1.0}]
    assert sound_ends(early, wave)[0]["end"] == 0.9  # never earlier than the aligner put it


def test_long_form_is_one_frozen_value_and_the_window_is_capped_to_an_encoders_limit():
    lf = LongForm(strategy="pause", window_seconds=40.0)
    with pytest.raises(AttributeError):
        lf.window_seconds = 10.0  # frozen: a setting changes by making a new one
    assert lf.capped(30.0) == LongForm(strategy="pause", window_seconds=30.0)
    assert lf.capped(None) is lf and lf.capped(60.0).window_seconds == 40.0
    # overlap must fit the window, checked for "overlap" only (and again when a window is capped)
    with pytest.raises(ValueError, match="^overlap_seconds "):
        LongForm(strategy="overlap", window_seconds=2.0, overlap_seconds=2.0)
    assert LongForm(strategy="segments", window_seconds=1.5).overlap_seconds == 2.0
    with pytest.raises(ValueError, match="^overlap_seconds "):
        LongForm(strategy="overlap", window_seconds=20.0, overlap_seconds=5.0).capped(4.0)


def _flags(*argv):
    ap = argparse.ArgumentParser()
    add_long_form_args(ap)
    return ap.parse_args(list(argv))


def test_flags_become_one_long_form_and_a_bad_value_names_its_flag():
    assert long_form_from_args(_flags()) == LongForm()  # the flags' defaults are LongForm's
    got = long_form_from_args(
        _flags("--long-form", "overlap", "--window-seconds", "12", "--threshold-db", "30", "--merge-seconds", "4")
    )
    assert got == LongForm(strategy="overlap", window_seconds=12.0, threshold_db=30.0, merge_seconds=4.0)
    for argv, flag in [
        (["--threshold-db", "0"], "--threshold-db must be positive"),
        (["--min-pause-seconds", "0"], "--min-pause-seconds must be at least"),
        (["--merge-seconds", "-1"], "--merge-seconds must be >= 0"),
        (["--window-seconds", "0.5"], "--window-seconds must be at least 1 s"),
    ]:
        with pytest.raises(ConfigError, match=f"^{flag}"):
            long_form_from_args(_flags(*argv))


LONG_FORM_MODULES = ["settings", "cut", "stitch", "batching"]


def test_the_long_form_modules_import_only_numpy_the_standard_library_and_each_other():
    """The export copies them verbatim (speechlm.model.folder.generate.VERBATIM), beside transformers alone;
    the one other speechlm module they read, the sample rate's home, travels verbatim too."""
    from speechlm.model.folder.generate import VERBATIM

    assert {f"speechlm.model.longform.{m}" for m in LONG_FORM_MODULES} <= set(VERBATIM.values())
    folder = Path(lf_mod.__file__).parent
    for m in LONG_FORM_MODULES:
        for node in ast.walk(ast.parse((folder / f"{m}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1 and node.module in LONG_FORM_MODULES, (m, node.module)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
                for n in names:
                    top = n.split(".")[0]
                    assert (
                        n == "speechlm.audio_checks"
                        or top == "numpy"
                        or top in sys.stdlib_module_names
                        or top == "__future__"
                    ), (m, n)


def _w(text, start):
    return {"text": text, "start": start, "end": None if start is None else start + 0.2, "confidence": 1.0}


def test_overlap_text_and_words_come_from_one_seam_rule():
    """Issue 36, server finding 10: with overlapping windows `text` was merged where the words agree and
    `words` by which half of the overlap a word starts in; on an 81 s recording they disagreed (48 words
    vs 51). Here the aligner puts "d" past the overlap's middle in the first window and before it in the
    second, so the old rule dropped it from both; now `words` spells `text`."""
    spans = [(0, 5 * 16000), (3 * 16000, 8 * 16000)]  # overlap 3..5 s, middle 4 s
    outs = [
        {"text": "a b c d", "words": [_w("a", 0.5), _w("b", 1.5), _w("c", 3.2), _w("d", 4.1)]},
        {"text": "c d e f", "words": [_w("c", 0.3), _w("d", 0.9), _w("e", 1.5), _w("f", 3.0)]},
    ]
    got = timed_clip(spans, outs, "overlap")
    assert got["text"] == "a b c d e f" and [w["text"] for w in got["words"]] == got["text"].split()
    assert [w["start"] for w in got["words"]] == [0.5, 1.5, 3.2, 3.9, 4.5, 6.0]  # d from the second window
    assert [len(s["words"]) for s in got["segments"]] == [3, 3]
    # a window whose words do not spell its text keeps its text's words, unplaced
    outs[1]["words"] = outs[1]["words"][:3]
    got = timed_clip(spans, outs, "overlap")
    assert [w["text"] for w in got["words"]] == got["text"].split()
    assert [w["start"] for w in got["words"]][3:] == [None, None, None]
