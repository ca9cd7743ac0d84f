#!/usr/bin/env python
"""A model's held-out scores per language and part on the multilingual corpus (shards/multilingual_demo),
with today's single-task, single-prompt model: the feasibility figures of docs/languages.md.

    python bench/multilingual_parts.py -m RUN/final [--data shards/multilingual_demo] [--split test] [--n 0]

Clip ids name the language (the source: `es_test-random-00003`) and the part (speechlm.by_part). WER
after Whisper's normalizers (English: speechlm.wer; others: BasicTextNormalizer); ja CER over the text
without spaces or punctuation. `translate` clips are scored as transcripts here: today's model only
transcribes. Non-speech: the share answered with nothing. Language of the answer (a proxy for
language ID until the model writes one): the share of answers whose script and words are the
clip's language's (kana for ja; a word of the language's lexicon, not of another's, otherwise).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _score(lang: str, refs: list[str], hyps: list[str]) -> float:
    import jiwer
    from transformers.models.whisper.english_normalizer import BasicTextNormalizer

    from speechlm.scoring import wer

    if lang == "en":
        return wer.score(refs, hyps)["wer"]
    norm = BasicTextNormalizer()
    if lang == "ja":
        squash = lambda s: "".join(norm(s).split())  # noqa: E731
        return jiwer.cer([squash(r) for r in refs], [squash(h) or "-" for h in hyps])
    return jiwer.wer([norm(r) for r in refs], [norm(h) for h in hyps])


def answer_language(hyp: str, vocab: dict[str, set[str]]) -> str | None:
    """The language whose lexicon words make most of the answer (kana means ja); None if none."""
    if any("\u3040" <= c <= "\u30ff" for c in hyp):
        return "ja"
    words = {w.strip("¿?.,").lower() for w in hyp.split()}
    hits = {lang: len(words & v) for lang, v in vocab.items() if lang != "ja"}
    best = max(hits, key=hits.get)
    return best if hits[best] else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--data", default="shards/multilingual_demo")
    ap.add_argument("--split", default="test")
    ap.add_argument("--n", type=int, default=0, help="clips (0: all)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()

    from speechlm.demo import lexicon, multilingual_sentences
    from speechlm.inference import evaluate, load_model
    from speechlm.scoring import by_part

    model = load_model(args.model)
    result = evaluate(model, args.data, n=args.n or None, split=args.split, batch_size=16)
    vocab = {lang: {w.lower() for w in multilingual_sentences.training_words(lang)} for lang in lexicon.LANGUAGES}
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in result["rows"]:
        lang, part = r["id"].split("_", 1)[0], by_part.part_of(r["id"], args.split)
        groups.setdefault((lang, part), []).append(r)
    out = {}
    for (lang, part), rows in sorted(groups.items()):
        if lang == "nonspeech":
            out[f"{lang}/{part}"] = {"empty": sum(not r["hypothesis"].strip() for r in rows) / len(rows)}
            continue
        said = [answer_language(r["hypothesis"], vocab) for r in rows]
        out[f"{lang}/{part}"] = {
            "clips": len(rows),
            "cer" if lang == "ja" else "wer": round(
                _score(lang, [r["reference"] for r in rows], [r["hypothesis"] for r in rows]), 3
            ),
            "answer_language": round(sum(s == lang for s in said) / len(rows), 3),
        }
    for k, v in out.items():
        print(k, json.dumps(v))
    examples = [
        (r["id"], r["reference"], r["hypothesis"]) for r in result["rows"][:: max(1, len(result["rows"]) // 12)]
    ]
    for e in examples:
        print("  ", *e, sep=" | ")
    if args.json:
        Path(args.json).write_text(json.dumps({"parts": out, "examples": examples}, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
