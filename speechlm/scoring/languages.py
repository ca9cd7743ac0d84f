"""Scores per language and task (issue 38), as peers report them: WER after Whisper's
EnglishTextNormalizer for English and its BasicTextNormalizer for every other language (no English
rule touches them); CER for the languages written without spaces between words (zh, ja, th, lo, my,
yue); BLEU and chrF (sacrebleu) for translations; language-ID accuracy of a model that names the
language it heard.

A row is a dict with "reference", "hypothesis", and where known "language" (the clip's, ISO 639-1),
"task" (transcribe, translate, ...) and "detected" (the language the model named, None for none).
Keys: `wer/es`, `cer/ja`, `bleu/de`, `chrf/de` (a translation from de; a custom task's `chrf/<task>/<lang>`),
`lid/es` and `lid` (all languages), each a fraction (BLEU and chrF on sacrebleu's 0-100 scale).
"""

from __future__ import annotations

import functools

import jiwer

from speechlm.scoring import wer

CER_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "my", "yue"})
UNKNOWN = "unknown"  # the group of rows whose clip states no language: English's normalizer, as before


@functools.lru_cache(maxsize=1)
def _basic():
    from transformers.models.whisper.english_normalizer import BasicTextNormalizer  # the scorer's own

    return BasicTextNormalizer()


def normalize(text: str, language: str | None) -> str:
    """Whisper's EnglishTextNormalizer for en (and a clip of no stated language), its BasicTextNormalizer
    (lower case, symbols and brackets dropped, diacritics kept) for every other; a CER language loses its
    spaces too (they are no word boundaries in its script; the corpus may space its words)."""
    if language in (None, "en", UNKNOWN):
        return wer.normalize(text)
    out = _basic()(text)
    return "".join(out.split()) if language in CER_LANGUAGES else " ".join(out.split())


def error_rate(refs: list[str], hyps: list[str], language: str | None) -> tuple[str, float]:
    """("cer" or "wer", the corpus error rate) of one language's references and hypotheses."""
    if len(refs) != len(hyps) or not refs:
        raise ValueError(f"{len(refs)} references and {len(hyps)} hypotheses: need as many, at least one")
    r = [normalize(x, language) for x in refs]
    h = [normalize(x, language) for x in hyps]
    metric = "cer" if language in CER_LANGUAGES else "wer"
    kept = [(a, b) for a, b in zip(r, h) if a]  # jiwer refuses an empty reference
    if not kept:  # non-speech: the share of clips answered with anything
        return metric, sum(bool(b) for b in h) / len(h)
    score = jiwer.cer if metric == "cer" else jiwer.wer
    return metric, score([a for a, _ in kept], [b for _, b in kept])


def translation_scores(refs: list[str], hyps: list[str]) -> dict:
    """Corpus BLEU and chrF (sacrebleu's defaults, 0-100) of translations against one reference each."""
    import sacrebleu  # the translation metrics only

    if len(refs) != len(hyps) or not refs:
        raise ValueError(f"{len(refs)} references and {len(hyps)} hypotheses: need as many, at least one")
    return {
        "bleu": sacrebleu.corpus_bleu(hyps, [refs]).score,
        "chrf": sacrebleu.corpus_chrf(hyps, [refs]).score,
    }


def _groups(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    out: dict = {}
    for r in rows:
        out.setdefault((r.get("language") or UNKNOWN, r.get("task") or "transcribe"), []).append(r)
    return dict(sorted(out.items()))


def score_rows(rows: list[dict]) -> dict:
    """Per language and task, its scores (see the module's keys), and the clips scored in each group
    (`clips/<task>/<lang>`); language ID where rows say what the model detected."""
    out: dict = {}
    for (lang, task), group in _groups(rows).items():
        refs, hyps = [r["reference"] for r in group], [r["hypothesis"] for r in group]
        out[f"clips/{task}/{lang}"] = len(group)
        if task == "transcribe":
            metric, value = error_rate(refs, hyps, lang)
            out[f"{metric}/{lang}"] = value
        else:
            prefix = "" if task == "translate" else f"{task}/"
            for k, v in translation_scores(refs, hyps).items():
                out[f"{k}/{prefix}{lang}"] = v
    out.update(language_id(rows))
    return out


def language_id(rows: list[dict]) -> dict:
    """`lid/<lang>` and `lid` (all): the share of clips of a known language whose detected language is it,
    over the rows that carry a detection (a model that names no language: no keys)."""
    scored = [r for r in rows if "detected" in r and r.get("language")]
    if not scored or all(r["detected"] is None for r in scored):
        return {}
    out = {}
    for lang in sorted({r["language"] for r in scored}):
        mine = [r for r in scored if r["language"] == lang]
        out[f"lid/{lang}"] = sum(r["detected"] == lang for r in mine) / len(mine)
    out["lid"] = sum(r["detected"] == r["language"] for r in scored) / len(scored)
    return out


def other_language_answers(rows: list[dict]) -> dict:
    """Per language, the answers to clips pinned to it that name another language (a pin's failures):
    {lang: count} over rows with "pinned" set."""
    out: dict = {}
    for r in rows:
        if r.get("pinned"):
            out.setdefault(r["pinned"], 0)
            if r.get("detected") not in (None, r["pinned"]):
                out[r["pinned"]] += 1
    return out
