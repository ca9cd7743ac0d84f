"""Putting a long recording back together from its windows: their texts joined in order (seams of
overlapping windows merged where their words agree), timed segments, and word times moved to the
recording's clock, each word's end where its sound ends.

numpy and the standard library only: the export carries this file verbatim (see longform.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .cut import runs, silent_frames
from .settings import FRAME, SAMPLE_RATE, THRESHOLD_DB, WORD_GAP_SECONDS


def _norm(word: str) -> str:
    return "".join(c for c in word.lower() if c.isalnum())


def seam(left: list[str], right: list[str], max_words: int = 8) -> tuple[int, int]:
    """Where two word lists whose ends overlap in audio join: (words of `left` kept, words of `right`
    skipped). Finds the longest run of words the end of `left` and the start of `right` agree on (case
    and punctuation ignored) and joins there, keeping `left` up to the middle of the run and `right`
    after it. The run must end within the last few words of `left` and start within the first
    `max_words` of `right` (the overlap holds a few words, and a lone common word further in, "the", is
    no evidence); a single-word run counts only right at both edges. No agreement: (len(left), 0),
    plain concatenation (the overlap held no whole word)."""
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
        return len(left), 0
    half = n // 2
    return len(left) - len(a) + ea - n + half, eb - n + half  # left's first half of the run, right after it


def merge_seam(left: list[str], right: list[str], max_words: int = 8) -> list[str]:
    """`left` and `right` joined at their `seam`."""
    keep, skip = seam(left, right, max_words)
    return left[:keep] + right[skip:]


def timed_texts(spans: Sequence[tuple[int, int]], texts: Sequence[str]) -> list[dict]:
    """Subtitle-style segments of one clip: {"start", "end" (seconds), "text"} for each range that
    `cut.clip_spans` gave and its window's text, those with no text left out. With `"overlap"` windows
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


def _moved(w: dict, start: float) -> dict:
    moved = dict(w)
    if w["start"] is not None:
        moved["start"], moved["end"] = round(start + w["start"], 4), round(start + w["end"], 4)
    return moved


def _overlap_words(bounds: list[tuple[float, float]], outs: Sequence[dict]) -> list[list[dict]]:
    """Each overlapping window's words that the clip keeps, cut at the very seams `join` cuts the text
    at (`seam` over the same word lists), so `words` spells `text`. A window whose words do not spell its
    text word for word keeps its text's words, unplaced."""
    merged: list[tuple[int, dict]] = []  # (window, word)
    for k, ((start, _), o) in enumerate(zip(bounds, outs)):
        ws = [_moved(w, start) for w in o.get("words", [])]
        spelled = o["text"].split()
        if [w["text"] for w in ws] != spelled:
            ws = [{"text": t, "start": None, "end": None, "confidence": 0.0} for t in spelled]
        if merged:
            keep, skip = seam([w["text"] for _, w in merged], spelled)
            merged, ws = merged[:keep], ws[skip:]
        merged += [(k, w) for w in ws]
    per_window: list[list[dict]] = [[] for _ in outs]
    for k, w in merged:
        per_window[k].append(w)
    return per_window


def timed_clip(
    spans: Sequence[tuple[int, int]], outs: Sequence[dict], strategy: str, wave: np.ndarray | None = None
) -> dict:
    """One clip's {"text", "segments", "words"} from its windows and their {"text", "words"} results (word
    times in the window): times move to the recording's clock; an unplaced word stays unplaced. With
    overlapping windows the words are kept as the text is (`_overlap_words`: one seam rule), so no word
    is counted twice and `words` spells `text`. With the clip's `wave`, each word's end moves to where
    its sound ends (`sound_ends`)."""
    texts = [o["text"] for o in outs]
    bounds = [(s / SAMPLE_RATE, e / SAMPLE_RATE) for s, e in spans]
    timed = any("words" in o for o in outs)
    if strategy == "overlap" and timed:
        kept = _overlap_words(bounds, outs)
    else:
        kept = [[_moved(w, start) for w in o.get("words", [])] for (start, _), o in zip(bounds, outs)]
    words, segments = [], []
    for (start, end), o, mine in zip(bounds, outs, kept):
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
    the audio says where the word stops. Silence is `silent_frames`' (the long-form cut's); an end is
    never moved earlier than the aligner put it."""
    silent = silent_frames(np.asarray(wave, dtype=np.float32), threshold_db) if len(wave) >= FRAME else None
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
        for a, b in runs(silent[lo:hi]):
            if a > sound[0] and b - a >= gap:
                end = a
                break
        w["end"] = round(float(max(w["end"], (lo + end) * frame_s)), 4)
    return words
