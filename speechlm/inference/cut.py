"""Long-form audio: cut a recording of any length into windows the model takes, transcribe every
window of every file as one sorted, batched job, and put the text back together.

Three ways to cut (`docs/benchmarks.md` compares them on concatenated espeak-ng sentences):
- `"segments"` (voice-activity style, as WhisperX / Silero-VAD pipelines cut): a cut in the middle of
  every pause (a run of frames far below the recording's loud level), neighbouring segments merged
  while they fit `merge_seconds`, anything longer than `window_seconds` cut further as `"pause"` does,
  and segments of nothing but silence left out. No pause at all: `"pause"`'s windows.
- `"pause"`: cut at the quietest point (the middle of a pause) within the last part
  of each window, so no word is cut in two and the texts simply join. Windows never exceed
  `window_seconds`.
- `"overlap"`: fixed windows of `window_seconds` that overlap by `overlap_seconds`; words at the
  seams are heard twice (or cut in two) and the texts are merged where their words agree.

This module needs only numpy and the standard library: the exported model's pipeline uses this very
file (copied into the export folder), so `transformers.pipeline` and `speechlm.transcribe` cut alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

SAMPLE_RATE = 16000
FRAME = 160  # 10 ms energy frames
STRATEGIES = ("segments", "pause", "overlap")
# The defaults every route shares (speechlm.transcribe / eval, the export's model and pipeline); chosen
# by measurement, docs/benchmarks.md "Long-form".
DEFAULT_STRATEGY = "segments"
THRESHOLD_DB = 35.0  # a frame is silent this far below the recording's loud level (its 95th percentile)
MIN_PAUSE_SECONDS = 0.3  # a silent run at least this long is a pause (a cut)
MERGE_SECONDS = 0.0  # neighbouring segments merge while they fit this (0: one segment per pause)
# at most this much of a pause stays before the speech that follows it, and after the speech it
# follows: the silence a model heard around speech in training (the demo's clips open within 0-0.29 s
# of speech, median 0.15 s, and end 0.18-0.68 s after it; more before, or less after, makes it answer
# more segments with nothing: docs/benchmarks.md, "Silence kept before and after speech")
KEEP_BEFORE_SECONDS = 0.15
KEEP_AFTER_SECONDS = 0.25
MIN_SOUND_SECONDS = 0.25  # a segment with less sound than this (a click) joins its neighbour
WORD_GAP_SECONDS = 0.05  # silence that ends a word's sound (sound_ends); 0.03-0.1 s measured alike on shards/timed


def _frame_energy_db(wave: np.ndarray) -> np.ndarray:
    """Mean power per 10 ms frame in dB (floored at -100)."""
    n = len(wave) // FRAME
    frames = wave[: n * FRAME].astype(np.float64).reshape(n, FRAME)
    return 10.0 * np.log10(np.maximum((frames**2).mean(axis=1), 1e-10))


def pause_windows(
    wave: np.ndarray, window_seconds: float, min_window_seconds: float | None = None, smooth_seconds: float = 0.2
) -> list[tuple[int, int]]:
    """(start, end) sample ranges covering `wave`, each at most `window_seconds` long, cut at the
    quietest point between `min_window_seconds` (default: half the window) and the window's end.

    Energy is smoothed over `smooth_seconds`, so the cut lands in the middle of a pause rather than
    on a quiet instant inside a word (a stop consonant's closure)."""
    max_len = int(window_seconds * SAMPLE_RATE)
    if max_len < FRAME * 10:
        raise ValueError(f"window_seconds must be at least 0.1 s, got {window_seconds}")
    if len(wave) <= max_len:
        return [(0, len(wave))]
    min_len = int((window_seconds / 2 if min_window_seconds is None else min_window_seconds) * SAMPLE_RATE)
    energy = _frame_energy_db(wave)
    k = max(1, int(smooth_seconds * SAMPLE_RATE / FRAME))
    smooth = np.convolve(energy, np.ones(k) / k, mode="same")
    out, start = [], 0
    while len(wave) - start > max_len:
        lo = (start + min_len) // FRAME
        hi = (start + max_len) // FRAME  # frame hi ends at or before start + max_len
        seg = smooth[lo:hi]
        # the quietest frame; among equally quiet ones (digital silence) the latest, for longer windows
        best = lo + len(seg) - 1 - int(np.argmin(seg[::-1]))
        cut = best * FRAME + FRAME // 2
        out.append((start, cut))
        start = cut
    out.append((start, len(wave)))
    return out


def overlap_windows(wave: np.ndarray, window_seconds: float, overlap_seconds: float) -> list[tuple[int, int]]:
    """Fixed windows of `window_seconds` starting every `window_seconds - overlap_seconds`."""
    size, overlap = int(window_seconds * SAMPLE_RATE), int(overlap_seconds * SAMPLE_RATE)
    if not 0 <= overlap < size:
        raise ValueError(f"overlap_seconds must be in [0, window_seconds), got {overlap_seconds} for {window_seconds}")
    if len(wave) <= size:
        return [(0, len(wave))]
    step = size - overlap
    n = math.ceil((len(wave) - size) / step) + 1
    return [(i * step, min(i * step + size, len(wave))) for i in range(n)]


def _silent_frames(wave: np.ndarray, threshold_db: float, smooth_seconds: float = 0.05) -> np.ndarray:
    """Per 10 ms frame: True where the power over `smooth_seconds` around it is more than
    `threshold_db` below the recording's loud level (its 95th-percentile frame), so the same setting
    works at any recording level; a noise floor within `threshold_db` of the speech has no silence.
    Power, not dB, is averaged: a frame beside a loud one is not silent, so a pause never reaches
    into the speech around it."""
    energy = _frame_energy_db(wave)
    k = max(1, round(smooth_seconds * SAMPLE_RATE / FRAME))
    padded = np.pad(10.0 ** (energy / 10), (k // 2, k - 1 - k // 2), mode="edge")  # edges: no zeros averaged in
    smooth = 10.0 * np.log10(np.convolve(padded, np.ones(k) / k, mode="valid"))
    return smooth < np.percentile(smooth, 95) - threshold_db


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of every run of True in `mask`."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.nonzero(edges == 1)[0].tolist(), np.nonzero(edges == -1)[0].tolist()))


def check_segment_settings(
    window_seconds: float,
    threshold_db: float,
    min_pause_seconds: float,
    merge_seconds: float,
    keep_before_seconds: float = KEEP_BEFORE_SECONDS,
    keep_after_seconds: float = KEEP_AFTER_SECONDS,
):
    if not window_seconds * SAMPLE_RATE >= FRAME * 10:
        raise ValueError(f"window_seconds must be at least 0.1 s, got {window_seconds}")
    if not threshold_db > 0:
        raise ValueError(f"threshold_db must be positive (dB below the recording's loud level), got {threshold_db}")
    if not min_pause_seconds >= FRAME / SAMPLE_RATE:
        raise ValueError(f"min_pause_seconds must be at least 0.01 s (one frame), got {min_pause_seconds}")
    if not merge_seconds >= 0:
        raise ValueError(f"merge_seconds must be >= 0 (0: one segment per pause), got {merge_seconds}")
    if not keep_before_seconds >= 0:
        raise ValueError(f"keep_before_seconds must be >= 0, got {keep_before_seconds}")
    if not keep_after_seconds >= 0:
        raise ValueError(f"keep_after_seconds must be >= 0, got {keep_after_seconds}")


def segment_windows(
    wave: np.ndarray,
    window_seconds: float,
    threshold_db: float = THRESHOLD_DB,
    min_pause_seconds: float = MIN_PAUSE_SECONDS,
    merge_seconds: float = MERGE_SECONDS,
    keep_before_seconds: float = KEEP_BEFORE_SECONDS,
    keep_after_seconds: float = KEEP_AFTER_SECONDS,
    keep_silent: bool = False,
) -> list[tuple[int, int]]:
    """(start, end) sample ranges of the speech in `wave`, cut in pauses, each at most `window_seconds`.

    A 10 ms frame is silent when the power over the 50 ms around it is more than `threshold_db` below
    the recording's 95th-percentile frame; every run of silent frames at least `min_pause_seconds`
    long is a pause, cut where it splits in the ratio `keep_after_seconds` : `keep_before_seconds`; a
    pause longer than their sum is cut `keep_after_seconds` after the speech before it and
    `keep_before_seconds` before the speech after it instead, its middle a segment of silence of its
    own (the speech keeps as much silence around it as the clips a model trains on). Segments with sound are
    merged left to right, with any silence between them, while the merged span stays within
    `merge_seconds` (and `window_seconds`; 0: no merging, one segment per pause); silence is never
    merged onto the ends of a span. A segment with less than `MIN_SOUND_SECONDS` of frames that are
    not silent (a click, a breath) joins its neighbour whatever `merge_seconds` (within
    `window_seconds`). A span still longer than `window_seconds` is cut further by `pause_windows`.
    No pause at all (a noisy room, a short clip): `pause_windows(wave, window_seconds)`.

    With `keep_silent=True` the ranges tile `wave` exactly (no gap, no overlap); by default the
    ranges made of nothing but silent frames are left out (silence between sentences is not
    transcribed), so what remains is in order, disjoint, and misses only silence."""
    check_segment_settings(
        window_seconds, threshold_db, min_pause_seconds, merge_seconds, keep_before_seconds, keep_after_seconds
    )
    max_len = int(window_seconds * SAMPLE_RATE)
    n = len(wave) // FRAME
    if n == 0:
        return [(0, len(wave))]
    silent = _silent_frames(wave, threshold_db)
    cuts = _pause_cuts(silent, min_pause_seconds, keep_before_seconds, keep_after_seconds)
    if not cuts:
        return pause_windows(wave, window_seconds)
    bounds = [0] + [c * FRAME for c in cuts] + [len(wave)]
    merge_len = min(int(merge_seconds * SAMPLE_RATE), max_len)
    merged = _merge_segments(list(zip(bounds[:-1], bounds[1:])), silent, merge_len, max_len)
    out: list[tuple[int, int]] = []
    for s, e in merged:
        out += [(s + a, s + b) for a, b in pause_windows(wave[s:e], window_seconds)] if e - s > max_len else [(s, e)]
    return out if keep_silent else [(s, e) for s, e in out if not _all_silent(silent, s, e)]


def _pause_cuts(silent: np.ndarray, min_pause_seconds: float, keep_before: float, keep_after: float) -> list[int]:
    """Frame indices where `segment_windows` cuts: in each pause, by the kept silence on either side."""
    n = len(silent)
    min_run = max(1, round(min_pause_seconds * SAMPLE_RATE / FRAME))
    before = round(keep_before * SAMPLE_RATE / FRAME)
    after = round(keep_after * SAMPLE_RATE / FRAME)
    cuts = []
    for a, b in _runs(silent):
        if b - a < min_run:
            continue
        if b - a > before + after:
            cuts += [a + after, b - before]
        else:
            cuts.append(a + (b - a) * after // (before + after) if before + after else (a + b) // 2)
    return [c for c in cuts if 0 < c < n]


def _all_silent(silent: np.ndarray, s: int, e: int) -> bool:
    frames = silent[s // FRAME : min(len(silent), -(-e // FRAME))]
    return len(frames) > 0 and bool(frames.all())


def _merge_segments(segments, silent: np.ndarray, merge_len: int, max_len: int) -> list[tuple[int, int]]:
    """Segments with sound merged left to right while the span stays within `merge_len` (a click or a
    breath within `max_len`); silent segments stay apart (see `segment_windows`)."""
    min_sound = round(MIN_SOUND_SECONDS * SAMPLE_RATE / FRAME)
    merged: list[tuple[int, int]] = []
    group = None  # index in `merged` of the last segment with sound: the next one may join it
    group_sound = 0
    for s, e in segments:
        if _all_silent(silent, s, e):
            merged.append((s, e))
            continue
        k = int((~silent[s // FRAME : min(len(silent), -(-e // FRAME))]).sum())  # frames of sound in s:e
        # a click or a breath between pauses is no segment of its own: it joins its neighbour (within
        # the window) rather than being transcribed alone, which makes a model say anything
        short = k < min_sound or group_sound < min_sound
        if group is not None and e - merged[group][0] <= (max_len if short else merge_len):
            merged[group:] = [(merged[group][0], e)]  # with the silence between them
            group_sound += k
        else:
            merged.append((s, e))
            group, group_sound = len(merged) - 1, k
    return merged


def _norm(word: str) -> str:
    return "".join(c for c in word.lower() if c.isalnum())


def merge_seam(left: list[str], right: list[str], max_words: int = 8) -> list[str]:
    """Join two word lists whose ends overlap in audio: find the longest run of words the end of
    `left` and the start of `right` agree on (case and punctuation ignored) and join there, keeping
    `left` up to the middle of the run and `right` after it. The run must end within the last few
    words of `left` and start within the first `max_words` of `right` (the overlap holds a few words,
    and a lone common word further in, "the", is no evidence); a single-word run counts only right at
    both edges. No agreement: plain concatenation (the overlap held no whole word)."""
    a, b = left[-max_words:], right[:max_words]
    na, nb = [_norm(w) for w in a], [_norm(w) for w in b]
    best = (0, 0, 0)  # (length, end in a, end in b)
    for i in range(len(na)):
        for j in range(len(nb)):
            n = 0
            while i + n < len(na) and j + n < len(nb) and na[i + n] and na[i + n] == nb[j + n]:
                n += 1
            edge = i + n >= len(na) - 2  # reaches the end of `left` but for a word cut by the window
            if n == 1 and not (edge and j <= 1):
                continue
            if n > best[0] and edge:
                best = (n, i + n, j + n)
    n, ea, eb = best
    if n == 0:
        return left + right
    half = n // 2
    cut_a = len(left) - len(a) + ea - n + half  # keep left's first half of the run
    return left[:cut_a] + right[eb - n + half :]


def windows(
    wave: np.ndarray,
    strategy: str,
    window_seconds: float,
    overlap_seconds: float = 2.0,
    threshold_db: float = THRESHOLD_DB,
    min_pause_seconds: float = MIN_PAUSE_SECONDS,
    merge_seconds: float = MERGE_SECONDS,
    keep_before_seconds: float = KEEP_BEFORE_SECONDS,
    keep_after_seconds: float = KEEP_AFTER_SECONDS,
) -> list[tuple[int, int]]:
    """The (start, end) ranges of `wave` that `strategy` transcribes (the segment settings apply to
    `"segments"` only, but are checked whatever the strategy, so a bad flag fails at once)."""
    keep = (keep_before_seconds, keep_after_seconds)
    check_segment_settings(window_seconds, threshold_db, min_pause_seconds, merge_seconds, *keep)
    if strategy == "segments":
        return segment_windows(wave, window_seconds, threshold_db, min_pause_seconds, merge_seconds, *keep)
    if strategy == "pause":
        return pause_windows(wave, window_seconds)
    if strategy == "overlap":
        return overlap_windows(wave, window_seconds, overlap_seconds)
    raise ValueError(f"long-form strategy must be one of {STRATEGIES}, got {strategy!r}")


def clip_spans(
    wave: np.ndarray,
    strategy: str,
    window_seconds: float,
    overlap_seconds: float = 2.0,
    min_samples: int = FRAME,
    threshold_db: float = THRESHOLD_DB,
    min_pause_seconds: float = MIN_PAUSE_SECONDS,
    merge_seconds: float = MERGE_SECONDS,
    keep_before_seconds: float = KEEP_BEFORE_SECONDS,
    keep_after_seconds: float = KEEP_AFTER_SECONDS,
) -> list[tuple[int, int]]:
    """The (start, end) ranges of one clip that `transcribe_long` transcribes, in order: `windows`
    less those shorter than `min_samples` (a sliver at the end; a clip made only of slivers keeps its
    first). A server that batches the ranges of many requests itself cuts with this, as transcribe_long does."""
    spans = windows(
        wave,
        strategy,
        window_seconds,
        overlap_seconds,
        threshold_db,
        min_pause_seconds,
        merge_seconds,
        keep_before_seconds,
        keep_after_seconds,
    )
    return [s for s in spans if s[1] - s[0] >= min_samples] or spans[:1]


def timed_texts(spans: Sequence[tuple[int, int]], texts: Sequence[str]) -> list[dict]:
    """Subtitle-style segments of one clip: {"start", "end" (seconds), "text"} for each range that
    `clip_spans` gave and its window's text, those with no text left out. With `"overlap"` windows
    the segments overlap in time and in words (`join` merges them; the segments do not)."""
    return [
        {"start": s / SAMPLE_RATE, "end": e / SAMPLE_RATE, "text": t.strip()}
        for (s, e), t in zip(spans, texts)
        if t.strip()
    ]


def join(texts: Sequence[str], strategy: str) -> str:
    if strategy == "overlap":
        words: list[str] = []
        for t in texts:
            words = merge_seam(words, t.split()) if words else t.split()
        return " ".join(words)
    return " ".join(t.strip() for t in texts if t.strip())


def transcribe_long(
    transcribe_batch: Callable[[list[np.ndarray]], list[str]],
    waves: Sequence[np.ndarray],
    window_seconds: float,
    strategy: str = DEFAULT_STRATEGY,
    **cut,
) -> list[str]:
    """Transcribe clips of any length: each is cut into windows, all windows of all clips are sorted
    by length and transcribed `batch_size` at a time (little padding, one job), then each clip's
    window texts are joined in order. `cut`: the rest of `transcribe_windows`' settings (batch size,
    overlap, the `"segments"` cut's thresholds). A window shorter than `min_samples` (a sliver at the
    end) is dropped: it holds no speech the previous window did not end with. `"segments"` transcribes
    no range of silence alone (`segment_windows`)."""
    _, outs = transcribe_windows(transcribe_batch, waves, window_seconds, strategy, **cut)
    return [join(texts, strategy) for texts in outs]


def transcribe_windows(
    transcribe_batch: Callable[[list[np.ndarray]], list],
    waves: Sequence[np.ndarray],
    window_seconds: float,
    strategy: str = DEFAULT_STRATEGY,
    overlap_seconds: float = 2.0,
    batch_size: int = 16,
    min_samples: int = FRAME,
    threshold_db: float = THRESHOLD_DB,
    min_pause_seconds: float = MIN_PAUSE_SECONDS,
    merge_seconds: float = MERGE_SECONDS,
    keep_before_seconds: float = KEEP_BEFORE_SECONDS,
    keep_after_seconds: float = KEEP_AFTER_SECONDS,
) -> tuple[list[list[tuple[int, int]]], list[list]]:
    """(per clip its windows' (start, end) samples, per clip what `transcribe_batch` gave each window, in
    order): the cut and the length-sorted batches of `transcribe_long`, before any joining."""
    if strategy not in STRATEGIES:
        raise ValueError(f"long-form strategy must be one of {STRATEGIES}, got {strategy!r}")
    keep = (keep_before_seconds, keep_after_seconds)
    check_segment_settings(window_seconds, threshold_db, min_pause_seconds, merge_seconds, *keep)
    cut = (threshold_db, min_pause_seconds, merge_seconds, *keep)
    spans = [clip_spans(np.asarray(w), strategy, window_seconds, overlap_seconds, min_samples, *cut) for w in waves]
    pieces = [(c, i, waves[c][s:e]) for c, clip in enumerate(spans) for i, (s, e) in enumerate(clip)]
    order = sorted(range(len(pieces)), key=lambda k: -len(pieces[k][2]))  # longest first: an OOM shows at once
    results: list = [None] * len(pieces)
    for b in range(0, len(order), batch_size):
        idx = order[b : b + batch_size]
        for k, r in zip(idx, transcribe_batch([pieces[k][2] for k in idx])):
            results[k] = r
    outs, k = [], 0
    for clip in spans:
        outs.append(results[k : k + len(clip)])
        k += len(clip)
    return spans, outs


def timed_clip(
    spans: Sequence[tuple[int, int]], outs: Sequence[dict], strategy: str, wave: np.ndarray | None = None
) -> dict:
    """One clip's {"text", "segments", "words"} from its windows and their {"text", "words"} results (word
    times in the window): times move to the recording's clock; an unplaced word stays unplaced. With
    overlapping windows a word is kept by the window whose share of the recording it starts in (cut in
    the middle of each overlap), so no word is counted twice. With the clip's `wave`, each word's end
    moves to where its sound ends (`sound_ends`)."""
    texts = [o["text"] for o in outs]
    bounds = [(s / SAMPLE_RATE, e / SAMPLE_RATE) for s, e in spans]
    owned = [(-np.inf, np.inf)] * len(bounds)
    if strategy == "overlap":
        mids = [(bounds[i][1] + bounds[i + 1][0]) / 2 for i in range(len(bounds) - 1)]
        owned = list(zip([-np.inf, *mids], [*mids, np.inf]))
    words, segments = [], []
    for (start, end), (lo, hi), o in zip(bounds, owned, outs):
        mine = []
        for w in o.get("words", []):
            moved = dict(w)
            if w["start"] is not None:
                moved["start"], moved["end"] = round(start + w["start"], 4), round(start + w["end"], 4)
                if not lo <= moved["start"] < hi:
                    continue
            mine.append(moved)
        words += mine
        if o["text"].strip():
            segments.append({"start": start, "end": end, "text": o["text"].strip(), "words": mine})
    if wave is not None:
        sound_ends(words, wave)
    return {"text": join(texts, strategy), "segments": segments, "words": words}


def sound_ends(words: list[dict], wave: np.ndarray, threshold_db: float = THRESHOLD_DB) -> list[dict]:
    """Each placed word's end moved, in place, to the end of the sound that follows its start, before
    the next word starts. The CTC head places a word by its onset: its tokens' frames fire as the word
    begins and blanks fill the rest, so the aligned end falls early (by ~300 ms on the timed test set);
    the audio says where the word stops. Silence is `_silent_frames`' (the long-form cut's); an end is
    never moved earlier than the aligner put it."""
    silent = _silent_frames(np.asarray(wave, dtype=np.float32), threshold_db) if len(wave) >= FRAME else None
    if silent is None:
        return words
    placed = [w for w in words if w["start"] is not None]
    frame_s = FRAME / SAMPLE_RATE
    gap = round(WORD_GAP_SECONDS / frame_s)
    for w, nxt in zip(placed, placed[1:] + [None]):
        lo = int(w["start"] / frame_s)
        hi = min(len(silent), int(nxt["start"] / frame_s) if nxt else len(silent))
        sound = np.flatnonzero(~silent[lo:hi])
        if not len(sound):
            continue
        # the word's sound runs until the first silence of at least WORD_GAP_SECONDS (a stop consonant's
        # closure is shorter), not to the next word's onset
        end = sound[-1] + 1
        for a, b in _runs(silent[lo:hi]):
            if a > sound[0] and b - a >= gap:
                end = a
                break
        w["end"] = round(float(max(w["end"], (lo + end) * frame_s)), 4)
    return words
