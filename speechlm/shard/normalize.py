"""Label normalization, done once at shard time so every reader sees the same text.

Rule: Unicode NFKC; control/format characters become spaces, except the zero-width joiner and
non-joiner in a language other than English (they shape Persian and Indic words); bracketed annotation
tags such as `<unk>`, `<noise>`, `[laughter]` are dropped (tags: drop) or kept verbatim (tags: keep),
and the space a dropped tag leaves before punctuation goes (before . and , only in French, whose
typography puts a space before ; : ! ?); runs of whitespace collapse to one space and the ends are
stripped. A label that is empty afterwards is a counted drop ("empty_text"). No rule rewrites letters:
case, diacritics and scripts stay as the source wrote them.
"""

from __future__ import annotations

import re
import unicodedata

# one tag: no nested brackets, at most 40 characters, so a long bracketed sentence is not eaten
TAG = re.compile(r"<[^<>\s][^<>]{0,39}>|\[[^\[\]]{1,40}\]")
SPACE = re.compile(r"\s+")
# a space left before punctuation by a dropped tag ("hello <noise> ." -> "hello .")
SPACE_BEFORE_PUNCT = re.compile(r"\s+([.,!?;:])")
SPACE_BEFORE_STOP = re.compile(r"\s+([.,])")  # French keeps its space before ; : ! ?
JOINERS = {"\u200c", "\u200d"}  # zero-width non-joiner and joiner: letters of fa, hi, ... (not of en)

# drop reasons, as counted in manifest.json
EMPTY_TEXT = "empty_text"
NOT_UTF8 = "text_not_utf8"
DUPLICATE_ID = "duplicate_id"
UNDECODABLE = "undecodable_audio"
NOT_FOUND = "audio_not_found"
TOO_SHORT = "too_short"
TOO_LONG = "too_long"


def normalize_text(text: str, tags: str = "drop", language: str | None = None) -> str:
    """`language`: the label's ISO 639-1 code, when known (see the module's rule)."""
    text = unicodedata.normalize("NFKC", text or "")
    keep = JOINERS if language not in (None, "en") else set()
    text = "".join(" " if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") and c not in keep else c for c in text)
    if tags == "drop":
        text = TAG.sub(" ", text)
        text = (SPACE_BEFORE_STOP if language == "fr" else SPACE_BEFORE_PUNCT).sub(r"\1", text)
    return SPACE.sub(" ", text).strip()


def is_uncased(labels) -> bool:
    """True when no label mixes cases: every cased letter is lowercase, or every one is uppercase."""
    lower = upper = False
    for text in labels:
        for c in text:
            if c.islower():
                lower = True
            elif c.isupper():
                upper = True
            if lower and upper:
                return False
    return lower or upper
