"""The long-form cut: the (start, end) sample ranges of a recording that are transcribed, as a
`LongForm` (longform.py) says, and the 10 ms frame energies the cut and `stitch.sound_ends` read.

numpy and the standard library only: the export carries this file verbatim (see longform.py).
"""

from __future__ import annotations

import math

import numpy as np

from .settings import FRAME, MIN_SOUND_SECONDS, SAMPLE_RATE, LongForm


def frame_energy_db(wave: np.ndarray) -> np.ndarray:
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
    energy = frame_energy_db(wave)
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


def silent_frames(wave: np.ndarray, threshold_db: float, smooth_seconds: float = 0.05) -> np.ndarray:
    """Per 10 ms frame: True where the power over `smooth_seconds` around it is more than
    `threshold_db` below the recording's loud level (its 95th-percentile frame), so the same setting
    works at any recording level; a noise floor within `threshold_db` of the speech has no silence.
    Power, not dB, is averaged: a frame beside a loud one is not silent, so a pause never reaches
    into the speech around it."""
    energy = frame_energy_db(wave)
    k = max(1, round(smooth_seconds * SAMPLE_RATE / FRAME))
    padded = np.pad(10.0 ** (energy / 10), (k // 2, k - 1 - k // 2), mode="edge")  # edges: no zeros averaged in
    smooth = 10.0 * np.log10(np.convolve(padded, np.ones(k) / k, mode="valid"))
    return smooth < np.percentile(smooth, 95) - threshold_db


def runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of every run of True in `mask`."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.nonzero(edges == 1)[0].tolist(), np.nonzero(edges == -1)[0].tolist()))


def segment_windows(
    wave: np.ndarray, long_form: LongForm, keep_silent: bool = False, silent: np.ndarray | None = None
) -> list[tuple[int, int]]:
    """(start, end) sample ranges of the speech in `wave`, cut in pauses, each at most `window_seconds`
    (the fields named here are `long_form`'s).

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
    transcribed), so what remains is in order, disjoint, and misses only silence.

    `silent`: the frames' `silent_frames` when the caller measured them against more audio than `wave`
    (a live stream's window, whose loud level is the stream's: streaming.py), one per whole frame."""
    lf = long_form
    max_len = int(lf.window_seconds * SAMPLE_RATE)
    n = len(wave) // FRAME
    if n == 0:
        return [(0, len(wave))]
    if silent is None:
        silent = silent_frames(wave, lf.threshold_db)
    elif len(silent) != n:
        raise ValueError(f"{len(silent)} silent flags for {n} frames")
    cuts = _pause_cuts(silent, lf.min_pause_seconds, lf.keep_before_seconds, lf.keep_after_seconds)
    if not cuts:
        return pause_windows(wave, lf.window_seconds)
    bounds = [0] + [c * FRAME for c in cuts] + [len(wave)]
    merge_len = min(int(lf.merge_seconds * SAMPLE_RATE), max_len)
    merged = _merge_segments(list(zip(bounds[:-1], bounds[1:])), silent, merge_len, max_len)
    out: list[tuple[int, int]] = []
    for s, e in merged:
        whole = e - s <= max_len
        out += [(s, e)] if whole else [(s + a, s + b) for a, b in pause_windows(wave[s:e], lf.window_seconds)]
    return out if keep_silent else [(s, e) for s, e in out if not _all_silent(silent, s, e)]


def _pause_cuts(silent: np.ndarray, min_pause_seconds: float, keep_before: float, keep_after: float) -> list[int]:
    """Frame indices where `segment_windows` cuts: in each pause, by the kept silence on either side."""
    n = len(silent)
    min_run = max(1, round(min_pause_seconds * SAMPLE_RATE / FRAME))
    before = round(keep_before * SAMPLE_RATE / FRAME)
    after = round(keep_after * SAMPLE_RATE / FRAME)
    cuts = []
    for a, b in runs(silent):
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


def windows(wave: np.ndarray, long_form: LongForm) -> list[tuple[int, int]]:
    """The (start, end) ranges of `wave` that `long_form.strategy` transcribes."""
    if long_form.strategy == "segments":
        return segment_windows(wave, long_form)
    if long_form.strategy == "pause":
        return pause_windows(wave, long_form.window_seconds)
    return overlap_windows(wave, long_form.window_seconds, long_form.overlap_seconds)  # LongForm checked the name


def clip_spans(wave: np.ndarray, long_form: LongForm, min_samples: int = FRAME) -> list[tuple[int, int]]:
    """The (start, end) ranges of one clip that `batching.transcribe_long` transcribes, in order: `windows`
    less those shorter than `min_samples` (a sliver at the end; a clip made only of slivers keeps its
    first). A server that batches the ranges of many requests itself cuts with this, as transcribe_long does."""
    spans = windows(wave, long_form)
    return [s for s in spans if s[1] - s[0] >= min_samples] or spans[:1]
