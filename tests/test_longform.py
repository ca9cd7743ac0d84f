"""Long-form cutting and joining (speechlm.longform): windows within the limit, cuts in pauses,
seams merged without dropping or repeating words, every window transcribed once, in order."""

import numpy as np
import pytest

from speechlm import longform

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
    wins = longform.pause_windows(wave, 8.0)
    assert wins[0][0] == 0 and wins[-1][1] == len(wave)
    assert all(a[1] == b[0] for a, b in zip(wins, wins[1:]))  # contiguous: nothing dropped or repeated
    assert all(e - s <= 8 * SR for s, e in wins) and len(wins) > 1
    for s, _ in wins[1:]:
        assert not any(a < s < b for a, b in spans), f"cut at {s / SR:.2f} s falls inside a burst"


def test_pause_windows_short_audio_is_one_window():
    wave = np.zeros(5 * SR, np.float32)
    assert longform.pause_windows(wave, 20.0) == [(0, 5 * SR)]


def test_overlap_windows_cover_with_the_given_overlap():
    wave = np.zeros(65 * SR, np.float32)
    wins = longform.overlap_windows(wave, 20.0, 2.0)
    assert wins[0] == (0, 20 * SR) and wins[-1][1] == len(wave)
    assert all(b[0] == a[1] - 2 * SR for a, b in zip(wins, wins[1:]))
    with pytest.raises(ValueError, match="overlap_seconds"):
        longform.overlap_windows(wave, 10.0, 10.0)


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
    assert " ".join(longform.merge_seam(left.split(), right.split())) == joined


def test_transcribe_long_transcribes_each_window_once_in_order_and_sorted_batches():
    # a "transcriber" that names the samples it was given: the wave holds each sample's index / 1e7
    waves = [np.arange(n, dtype=np.float64) / 1e7 for n in (50 * SR, 3 * SR, 41 * SR)]
    calls = []

    def name(batch):
        calls.append([len(w) for w in batch])
        return [f"{int(round(w[0] * 1e7))}:{int(round(w[-1] * 1e7)) + 1}" for w in batch]

    out = longform.transcribe_long(name, waves, window_seconds=20.0, strategy="pause", batch_size=2)
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
        longform.transcribe_long(lambda b: [""] * len(b), [np.zeros(SR)], 20.0, strategy="vad")
