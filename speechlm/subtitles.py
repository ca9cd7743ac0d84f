"""Subtitles and timestamp JSON from timed words (speechlm.model.align.Word, or dicts with "text",
"start", "end" in seconds).

- `cues(words, max_chars, max_seconds, max_gap)`: words grouped into subtitle lines, in order; a cue
  closes before a word that would make it too long, or after a pause longer than `max_gap`. A word the
  aligner could not place (start None) joins the cue around it: the cue's times come from its placed
  words only, so no word gets a time it doesn't have; a cue with no placed word is not written.
- `to_srt(items)`, `to_vtt(items)`: one cue per item (words for word-level subtitles, or `cues(...)`
  for lines); items without times are left out (a subtitle needs a time).
- `to_json(words, text)`: the transcript, its words with start/end (null when unplaced) and
  confidence, and the cues as segments; `transformers_chunks(words)` gives the ASR pipeline's
  convention, `[{"text", "timestamp": (start, end)}]`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass
class Cue:
    text: str
    start: float
    end: float

    def to_dict(self) -> dict:
        return {"text": self.text, "start": self.start, "end": self.end}


def _get(item, key):
    return item[key] if isinstance(item, dict) else getattr(item, key)


def cues(words, max_chars: int = 42, max_seconds: float = 5.0, max_gap: float = 1.0) -> list[Cue]:
    """Words grouped into subtitle lines (42 characters and 5 s at most, a new line after a 1 s pause)."""
    out: list[Cue] = []
    texts: list[str] = []
    start = end = None

    def close():
        if texts and start is not None:
            out.append(Cue(" ".join(texts), start, end))

    for w in words:
        text, s, e = _get(w, "text"), _get(w, "start"), _get(w, "end")
        if texts and s is not None and start is not None:
            too_long = len(" ".join(texts)) + 1 + len(text) > max_chars or e - start > max_seconds
            if too_long or s - end > max_gap:
                close()
                texts, start, end = [], None, None
        texts.append(text)
        if s is not None:
            start = s if start is None else start
            end = e if end is None else max(end, e)
    close()
    return out


def _clock(seconds: float, sep: str) -> str:
    ms = max(0, round(seconds * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def _timed(items) -> list[tuple[str, float, float]]:
    rows = []
    for it in items:
        s, e = _get(it, "start"), _get(it, "end")
        if s is None or e is None:
            continue
        text = " ".join(str(_get(it, "text")).split())  # one line: a blank line would end the cue
        rows.append((text, float(s), max(float(e), float(s))))
    return rows


def to_srt(items) -> str:
    """SubRip: numbered cues `HH:MM:SS,mmm --> HH:MM:SS,mmm`, each followed by a blank line."""
    blocks = [
        f"{i}\n{_clock(s, ',')} --> {_clock(e, ',')}\n{text}\n" for i, (text, s, e) in enumerate(_timed(items), 1)
    ]
    return "\n".join(blocks)


def _vtt_text(text: str) -> str:
    # WebVTT cue text is markup: escape what would start a tag or entity; "-->" may not appear
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_vtt(items) -> str:
    """WebVTT: the header, then cues `HH:MM:SS.mmm --> HH:MM:SS.mmm` with escaped text."""
    blocks = [f"{_clock(s, '.')} --> {_clock(e, '.')}\n{_vtt_text(text)}\n" for text, s, e in _timed(items)]
    return "WEBVTT\n\n" + "\n".join(blocks)


def _word_dict(w) -> dict:
    conf = _get(w, "confidence") if (isinstance(w, dict) and "confidence" in w) or hasattr(w, "confidence") else None
    return {"text": _get(w, "text"), "start": _get(w, "start"), "end": _get(w, "end"), "confidence": conf}


def to_json(words, text: str | None = None, **cue_settings) -> str:
    """`{"text", "words": [{"text", "start", "end", "confidence"}], "segments": [{"text", "start", "end"}]}`;
    an unplaced word keeps its place with null times."""
    words = list(words)
    doc = {
        "text": text if text is not None else " ".join(_get(w, "text") for w in words),
        "words": [_word_dict(w) for w in words],
        "segments": [c.to_dict() for c in cues(words, **cue_settings)],
    }
    return json.dumps(doc, ensure_ascii=False, indent=1)


def transformers_chunks(items) -> list[dict]:
    """transformers' ASR pipeline convention: `[{"text", "timestamp": (start, end)}]` (None when unplaced)."""
    return [{"text": _get(it, "text"), "timestamp": (_get(it, "start"), _get(it, "end"))} for it in items]
