"""Scores per language and task (issue 38), as peers report them: WER after Whisper's
EnglishTextNormalizer for English and its BasicTextNormalizer for every other language (no English
rule touches them); CER for the languages written without spaces between words (zh, ja, th, lo, my,
yue); BLEU and chrF (sacrebleu) for translations; language-ID accuracy of a model that names the
language it heard.

A row is a dict with "reference", "hypothesis", and where known "language" (the clip's, ISO 639-1),
"task" (transcribe, translate, ...), "target_language" (a translation's; English when not said),
"detected" (the language the model named, None for none) and "pinned" (the language the caller gave).
Keys: `wer/es`, `cer/ja`, `bleu/de-en`, `chrf/de-en` (a translation from de into en; a custom task's
`bleu/<task>/<lang>`, `chrf/<task>/<lang>`), `lid/es` and `lid` (all languages), each a fraction (BLEU and
chrF on sacrebleu's 0-100 scale); `other_language/es`: the answers to clips pinned to es written in
another language (a count; `answer_language` reads it off the answer's words, not off the opening the
pin wrote for it); `clips/<task>/<lang>`: the clips each figure was measured on.
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


def group_name(row: dict) -> str:
    """The name a row's scores go under: its language (`es`), a translation's pair (`es-en`), a custom
    task's `<task>/<language>`."""
    lang, task = row.get("language") or UNKNOWN, row.get("task") or "transcribe"
    if task == "transcribe":
        return lang
    if task == "translate":
        return f"{lang}-{row.get('target_language') or 'en'}"
    return f"{task}/{lang}"


def _groups(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    out: dict = {}
    for r in rows:
        out.setdefault((r.get("task") or "transcribe", group_name(r)), []).append(r)
    return dict(sorted(out.items()))


def score_rows(rows: list[dict]) -> dict:
    """Per language and task, its scores (see the module's keys), and the clips scored in each group
    (`clips/<task>/<lang>`, a translation's `clips/translate/<src>-<tgt>`); language ID where rows say
    what the model detected; the pinned answers in another language where rows were pinned."""
    out: dict = {}
    for (task, name), group in _groups(rows).items():
        refs, hyps = [r["reference"] for r in group], [r["hypothesis"] for r in group]
        out[f"clips/{task}/{name.split('/')[-1]}"] = len(group)
        if task == "transcribe":
            metric, value = error_rate(refs, hyps, group[0].get("language"))
            out[f"{metric}/{name}"] = value
        else:
            for k, v in translation_scores(refs, hyps).items():
                out[f"{k}/{name}"] = v
    out.update(language_id(rows))
    out.update({f"other_language/{k}": v for k, v in sorted(other_language_answers(rows).items())})
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
    """Per language, the answers to clips pinned to it that are in another language (a pin's failures):
    {lang: count} over rows with "pinned" set, judged by the row's "answer_language" (the words of the
    answer: `mark_answer_languages`) where it has one, else by the language the model named."""
    out: dict = {}
    for r in rows:
        if r.get("pinned") and (r.get("task") or "transcribe") == "transcribe":
            said = r["answer_language"] if "answer_language" in r else r.get("detected")
            out.setdefault(r["pinned"], 0)
            if said not in (None, r["pinned"]):
                out[r["pinned"]] += 1
    return out


def _tokens(text: str, language: str) -> set[str]:
    """The units an answer is matched on: a CER language's characters, another's words (normalized)."""
    norm = normalize(text, language)
    return set(norm) if language in CER_LANGUAGES else set(norm.split())


def vocabularies(rows: list[dict]) -> dict[str, set[str]]:
    """Per language, the words (a CER language: the characters) of the references of its transcription
    rows: the word lists an answer's language is read by."""
    out: dict[str, set[str]] = {}
    for r in rows:
        lang = r.get("language")
        if lang and (r.get("task") or "transcribe") == "transcribe":
            out.setdefault(lang, set()).update(_tokens(r["reference"], lang))
    return out


def answer_language(hyp: str, vocab: dict[str, set[str]], pinned: str | None = None) -> str | None:
    """The language whose word list covers the largest share of the answer's words (a tie goes to
    `pinned`, then to the first in name order); None for an answer that no list covers at all."""
    shares = {}
    for lang, words in sorted(vocab.items()):
        mine = _tokens(hyp, lang)
        shares[lang] = len(mine & words) / len(mine) if mine else 0.0
    if not shares or max(shares.values()) == 0:
        return None
    best = max(shares.values())
    return pinned if shares.get(pinned) == best else next(k for k, v in shares.items() if v == best)


def mark_answer_languages(rows: list[dict]) -> list[dict]:
    """Sets "answer_language" on every pinned transcription row, read off its answer's words against the
    word lists of the rows' references (`vocabularies`): a pin that was answered in another language is
    counted even though the model's opening named the pinned one (the pin wrote it)."""
    vocab = vocabularies(rows)
    for r in rows:
        if r.get("pinned") and (r.get("task") or "transcribe") == "transcribe":
            r["answer_language"] = answer_language(r["hypothesis"], vocab, r["pinned"])
    return rows
