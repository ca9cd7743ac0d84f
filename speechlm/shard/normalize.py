"""Label normalization, done once at shard time so every reader sees the same text.

Rule: Unicode NFKC; control/format characters become spaces; bracketed annotation tags such as
`<unk>`, `<noise>`, `[laughter]` are dropped (tags: drop) or kept verbatim (tags: keep); runs of
whitespace collapse to one space and the ends are stripped. A label that is empty afterwards is a
counted drop ("empty_text").
"""

from __future__ import annotations

import re
import unicodedata

# one tag: no nested brackets, at most 40 characters, so a long bracketed sentence is not eaten
TAG = re.compile(r"<[^<>\s][^<>]{0,39}>|\[[^\[\]]{1,40}\]")
SPACE = re.compile(r"\s+")
# a space left before punctuation by a dropped tag ("hello <noise> ." -> "hello .")
SPACE_BEFORE_PUNCT = re.compile(r"\s+([.,!?;:])")

# drop reasons, as counted in manifest.json
EMPTY_TEXT = "empty_text"
NOT_UTF8 = "text_not_utf8"
DUPLICATE_ID = "duplicate_id"
UNDECODABLE = "undecodable_audio"
NOT_FOUND = "audio_not_found"
TOO_SHORT = "too_short"
TOO_LONG = "too_long"


def normalize_text(text: str, tags: str = "drop") -> str:
    text = unicodedata.normalize("NFKC", text or "")
    text = "".join(" " if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") else c for c in text)
    if tags == "drop":
        text = TAG.sub(" ", text)
        text = SPACE_BEFORE_PUNCT.sub(r"\1", text)
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
