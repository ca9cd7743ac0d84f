"""Word error rate: jiwer after the Whisper English normalizer, plus an orthographic WER.

The normalized WER is the number people compare across papers (case, punctuation, spelling
variants and fillers don't count); the orthographic WER keeps case and punctuation, so it shows
whether the model learned to write properly cased, punctuated text.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jiwer
from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

# British -> American spelling map from openai-whisper (MIT licence), shipped so that scoring works
# offline exactly like Whisper's own normalizer.
_SPELLING = Path(__file__).parents[1] / "assets" / "whisper_english_spelling.json"


@functools.lru_cache(maxsize=1)
def normalizer() -> EnglishTextNormalizer:
    return EnglishTextNormalizer(json.loads(_SPELLING.read_text()))


def normalize(text: str) -> str:
    return normalizer()(text)


def _orthographic(text: str) -> str:
    return " ".join(text.split())


def score(refs: list[str], hyps: list[str]) -> dict:
    """Corpus WER (normalized and orthographic) with error counts."""
    if len(refs) != len(hyps):
        raise ValueError(f"{len(refs)} references but {len(hyps)} hypotheses")
    if not refs:
        raise ValueError("nothing to score: no references")
    norm = jiwer.process_words([normalize(r) for r in refs], [normalize(h) for h in hyps])
    ortho = jiwer.process_words([_orthographic(r) for r in refs], [_orthographic(h) for h in hyps])
    ref_words = norm.hits + norm.substitutions + norm.deletions
    return {
        "clips": len(refs),
        "ref_words": ref_words,
        "wer": norm.wer,
        "substitutions": norm.substitutions,
        "deletions": norm.deletions,
        "insertions": norm.insertions,
        "orthographic_wer": ortho.wer,
    }


def clip_errors(ref: str, hyp: str) -> int:
    """Word errors of one clip after normalization (to rank the worst examples)."""
    r, h = normalize(ref), normalize(hyp)
    if not r and not h:
        return 0
    o = jiwer.process_words(r, h)
    return o.substitutions + o.deletions + o.insertions
