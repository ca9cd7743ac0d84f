"""Word boundary error: hypothesis word times against reference word times (a timed shard set's
`"words"`, speechlm.demo.timed).

Words are matched by a word alignment of the normalized texts (jiwer's: lowercase, punctuation
stripped; the same alignment that WER counts). Only words aligned as equal are matched; for each
matched word that the aligner placed, |hyp start - ref start| and |hyp end - ref end| are errors.
Substituted, deleted and inserted words are counted, and so are matched words left unplaced (no time
to score). `BoundaryErrors` from many clips add up (`sum(..., BoundaryErrors())`); `summary()` gives
medians and 90th percentiles in milliseconds, the figures issue 31 sets goals on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import jiwer
import numpy as np

COUNTS = ("matched", "unplaced", "substituted", "deleted", "inserted")
_PUNCT = re.compile(r"[^\w\s']|(?<!\w)'|'(?!\w)")


def normalize_word(text: str) -> str:
    """Lowercase, punctuation gone (an apostrophe inside a word stays: "don't")."""
    return "".join(_PUNCT.sub("", str(text).lower()).split())  # one token for the word alignment


def _get(item, key):
    return item[key] if isinstance(item, dict) else getattr(item, key)


@dataclass
class BoundaryErrors:
    start: list[float] = field(default_factory=list)  # seconds, one per matched placed word
    end: list[float] = field(default_factory=list)
    matched: int = 0  # words aligned as equal (placed or not)
    unplaced: int = 0  # of those, words the aligner could not place
    substituted: int = 0
    deleted: int = 0  # reference words with no hypothesis word
    inserted: int = 0  # hypothesis words with no reference word

    def __add__(self, other: BoundaryErrors) -> BoundaryErrors:
        return BoundaryErrors(
            self.start + other.start,
            self.end + other.end,
            *(getattr(self, k) + getattr(other, k) for k in COUNTS),
        )

    def summary(self) -> dict:
        """Median and p90 of the start and end errors in ms (None with no scored word), and the counts."""

        def ms(xs, q):
            return round(float(np.percentile(xs, q)) * 1000, 1) if xs else None

        return {
            "start_median_ms": ms(self.start, 50),
            "start_p90_ms": ms(self.start, 90),
            "end_median_ms": ms(self.end, 50),
            "end_p90_ms": ms(self.end, 90),
            "scored": len(self.start),
            "matched": self.matched,
            "unplaced": self.unplaced,
            "substituted": self.substituted,
            "deleted": self.deleted,
            "inserted": self.inserted,
        }


def score_boundaries(ref_words, hyp_words) -> BoundaryErrors:
    """Start/end errors of the hypothesis words matched to reference words (dicts or objects with
    text, start, end; a hypothesis start of None is an unplaced word)."""
    ref = [(normalize_word(_get(w, "text")), w) for w in ref_words]
    hyp = [(normalize_word(_get(w, "text")), w) for w in hyp_words]
    ref = [r for r in ref if r[0]]  # a word that is only punctuation has nothing to match
    hyp = [h for h in hyp if h[0]]
    out = BoundaryErrors()
    if not ref or not hyp:
        out.deleted, out.inserted = len(ref), len(hyp)
        return out
    chunks = jiwer.process_words(" ".join(r[0] for r in ref), " ".join(h[0] for h in hyp)).alignments[0]
    for c in chunks:
        if c.type == "equal":
            for i, j in zip(range(c.ref_start_idx, c.ref_end_idx), range(c.hyp_start_idx, c.hyp_end_idx)):
                out.matched += 1
                r, h = ref[i][1], hyp[j][1]
                if _get(h, "start") is None or _get(h, "end") is None:
                    out.unplaced += 1
                    continue
                out.start.append(abs(_get(h, "start") - _get(r, "start")))
                out.end.append(abs(_get(h, "end") - _get(r, "end")))
        elif c.type == "substitute":
            out.substituted += c.ref_end_idx - c.ref_start_idx
        elif c.type == "delete":
            out.deleted += c.ref_end_idx - c.ref_start_idx
        elif c.type == "insert":
            out.inserted += c.hyp_end_idx - c.hyp_start_idx
    return out
