"""Long-form audio: cut a recording of any length into windows the model takes, transcribe every
window of every file as one sorted, batched job, and put the text back together.

Two ways to cut (`docs/benchmarks.md` compares them on concatenated espeak-ng sentences):
- `"pause"` (the default): cut at the quietest point (the middle of a pause) within the last part
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
STRATEGIES = ("pause", "overlap")


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


def windows(wave: np.ndarray, strategy: str, window_seconds: float, overlap_seconds: float) -> list[tuple[int, int]]:
    if strategy == "pause":
        return pause_windows(wave, window_seconds)
    if strategy == "overlap":
        return overlap_windows(wave, window_seconds, overlap_seconds)
    raise ValueError(f"long-form strategy must be one of {STRATEGIES}, got {strategy!r}")


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
    strategy: str = "pause",
    overlap_seconds: float = 2.0,
    batch_size: int = 16,
    min_samples: int = FRAME,
) -> list[str]:
    """Transcribe clips of any length: each is cut into windows, all windows of all clips are sorted
    by length and transcribed `batch_size` at a time (little padding, one job), then each clip's
    window texts are joined in order. A window shorter than `min_samples` (a sliver at the end) is
    dropped: it holds no speech the previous window did not end with."""
    pieces: list[tuple[int, int, np.ndarray]] = []  # (clip, window index, samples)
    counts = []
    for c, w in enumerate(waves):
        spans = windows(np.asarray(w), strategy, window_seconds, overlap_seconds)
        spans = [s for s in spans if s[1] - s[0] >= min_samples] or spans[:1]
        counts.append(len(spans))
        pieces += [(c, i, w[s:e]) for i, (s, e) in enumerate(spans)]
    order = sorted(range(len(pieces)), key=lambda k: -len(pieces[k][2]))  # longest first: an OOM shows at once
    texts: list[str] = [""] * len(pieces)
    for b in range(0, len(order), batch_size):
        idx = order[b : b + batch_size]
        for k, t in zip(idx, transcribe_batch([pieces[k][2] for k in idx])):
            texts[k] = t
    out, k = [], 0
    for n in counts:
        out.append(join(texts[k : k + n], strategy))
        k += n
    return out
