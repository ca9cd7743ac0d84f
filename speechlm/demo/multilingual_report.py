"""The multilingual demo's report (`speechlm demo --languages ...`): what a trained model does on the
held-out clips of the multilingual corpus (shards/multilingual_demo.yaml), per language and task.

Three passes over the test split's speech clips, each clip's labels read from its shard JSON:
- pinned: each clip transcribed with its own language given (`language=xx`): WER per language and
  part (CER for ja; speechlm.scoring.languages), and the pinning count: answers whose words are
  another language's (`answer_language`: kana means ja, else the lexicon language with most of the
  answer's words), which a pin must never give;
- detected: no language given: language ID per language (the opening "language Spanish: " the model
  writes), and the non-speech clips' share answered with nothing. Only the opening and a word or two are
  generated (`detection_tokens`): neither figure reads further, and an answerer that has not learned to
  stop (the test's reference, an untrained one) would otherwise write to its budget;
- translate: the `translate` clips (es/de/fr/ja sentences of shapes never trained) asked for English:
  chrF and BLEU against the English, beside the baseline of the issue: the pinned transcript of the
  same clip translated word by word with the training lexicon (`word_by_word`).
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from speechlm.demo import lexicon as L
from speechlm.demo import multilingual_sentences as M
from speechlm.scoring import by_part
from speechlm.scoring import languages as S

TRANSCRIBED_PARTS = ("seen", "unseen", "random")

# The templates' function words (multilingual.TRAIN), English for each: with the lexicon's entries they
# are the training lexicon the word-by-word baseline translates with. Japanese particles have none.
FUNCTION_WORDS = {
    "es": {"el": "the", "la": "the", "es": "is", "está": "is", "en": "in", "y": "and", "visitó": "visited",
           "visitaron": "visited"},
    "de": {"der": "the", "die": "the", "das": "the", "den": "the", "ist": "is", "in": "in", "und": "and",
           "besuchte": "visited", "besuchten": "visited", "sah": "saw"},
    "fr": {"le": "the", "la": "the", "est": "is", "à": "in", "et": "and", "a visité": "visited",
           "ont visité": "visited"},
    "ja": {"です": "is", "います": "is", "あります": "is", "いきました": "visited", "みました": "saw"},
}  # fmt: skip


def lexicon_table(lang: str) -> dict[str, str]:
    """Each form of `lang` the training lexicon holds (lower case; multi-word forms whole), and its English."""
    i = M.LANG_INDEX[lang]
    table: dict[str, str] = {}
    for en, ja in L.NAMES.items():
        table[(ja if lang == "ja" else en).lower()] = en
    for group in (L.PLACES_BY_LANGUAGE, L.VERBS_BY_LANGUAGE, L.TIMES_BY_LANGUAGE):
        for en, forms in group.items():
            table[forms[i].lower()] = en
    for n in L.NOUNS_BY_LANGUAGE:
        table[getattr(n, lang).lower()] = n.en
    for a in L.ADJECTIVES_BY_LANGUAGE:
        forms = getattr(a, lang)
        for f in [forms] if isinstance(forms, str) else forms:
            table[f.lower()] = a.en
        if lang == "de":  # attributive: the weak endings
            table[f"{a.de}e".lower()] = table[f"{a.de}en".lower()] = a.en
    return {**table, **FUNCTION_WORDS[lang]}


def word_by_word(text: str, lang: str) -> str:
    """`text` (a transcript in `lang`) turned into English one lexicon entry at a time, longest match
    first (two words, then one; Japanese: the longest kana prefix); a word not in the lexicon is kept as
    it is (a name), a kana run not in it is dropped (a particle); the first word capitalized, and the
    source's end mark (a question's "?", else ".") at the end, as the English references have them."""
    end = "?" if text.strip().endswith(("?", "か。", "か")) else "." if text.strip() else ""
    return _sentence(_words(text, lang), end)


def _sentence(words: list[str], end: str) -> str:
    """Words as an English sentence: the first capitalized, the end mark of the source."""
    out = " ".join(words)
    return out[:1].upper() + out[1:] + end if out else ""


def _words(text: str, lang: str) -> list[str]:
    table = lexicon_table(lang)
    out: list[str] = []
    if lang == "ja":
        s = "".join(c for c in text if "\u3040" <= c <= "\u30ff")
        longest = max(len(k) for k in table)
        while s:
            hit = next((s[:k] for k in range(min(longest, len(s)), 0, -1) if s[:k] in table), None)
            if hit:
                out.append(table[hit])
            s = s[len(hit) if hit else 1 :]
        return out
    words = [w.strip("¿?¡!.,;:").lower() for w in text.split()]
    words = [w for w in words if w]
    i = 0
    while i < len(words):
        pair = " ".join(words[i : i + 2])
        if i + 1 < len(words) and pair in table:
            out.append(table[pair])
            i += 2
            continue
        out.append(table.get(words[i], words[i]))
        i += 1
    return out


ENGLISH_FUNCTION_WORDS = ("the", "is", "in", "and", "visited", "did", "see")


def _held_out_forms(lang: str) -> list[str]:
    ho = L.HELD_OUT_BY_LANGUAGE
    if lang == "en":
        return [
            *ho["names"],
            *ho["places"],
            *ho["verbs"],
            *(n.en for n in ho["nouns"]),
            *(a.en for a in ho["adjectives"]),
        ]
    i = M.LANG_INDEX[lang]
    forms = [ja if lang == "ja" else en for en, ja in ho["names"].items()]
    forms += [v[i] for v in ho["places"].values()] + [v[i] for v in ho["verbs"].values()]
    forms += [getattr(n, lang) for n in ho["nouns"]]
    for a in ho["adjectives"]:
        forms += (
            [a.de, f"{a.de}e", f"{a.de}en"]
            if lang == "de"
            else [getattr(a, lang)]
            if lang == "ja"
            else [*getattr(a, lang)]
        )
    return forms


def vocabularies() -> dict[str, set[str]]:
    """Per language, the words its transcripts are made of (lower case): its training words, the
    templates' function words and the held-out words: the word-list test of an answer's language."""
    out = {}
    for lang in L.LANGUAGES:
        extra = ENGLISH_FUNCTION_WORDS if lang == "en" else [w for k in FUNCTION_WORDS[lang] for w in k.split()]
        forms = [*M.training_words(lang), *extra, *_held_out_forms(lang)]
        out[lang] = {w.lower() for f in forms for w in f.split()} | set(lexicon_table(lang) if lang != "en" else ())
    return out


def answer_language(hyp: str, vocab: dict[str, set[str]]) -> str | None:
    """The language an answer is written in: ja if it holds kana, else the language with most words of
    its own in the answer (words that no other language's vocabulary holds: names and "Berlin" say
    nothing); None when no language leads (no such word, or a tie)."""
    if any("\u3040" <= c <= "\u30ff" for c in hyp):
        return "ja"
    words = [w.strip("¿?¡!.,;:").lower() for w in hyp.split()]
    latin = {lang: v for lang, v in vocab.items() if lang != "ja"}
    hits = {}
    for lang, v in latin.items():
        others = set().union(*(o for k, o in latin.items() if k != lang))
        hits[lang] = sum(w in v and w not in others for w in words)
    ranked = sorted(hits.values(), reverse=True)
    if ranked[0] == 0 or ranked[0] == ranked[1]:
        return None
    return max(hits, key=hits.get)


def clip_labels(shards: Path, split: str) -> dict[str, dict]:
    """clip id -> its JSON (language, task, target_text, text) from the split's tars."""
    out = {}
    for tar in sorted(Path(shards).glob(f"*-{split}-*.tar")):
        with tarfile.open(tar) as t:
            for m in t.getmembers():
                if m.name.endswith(".json"):
                    meta = json.loads(t.extractfile(m).read())
                    out[meta["id"]] = meta
    return out


def detection_tokens(model) -> int:
    """New tokens the detected pass needs: the longest opening of the model's languages (or the no-speech
    one) as its tokenizer cuts it, and two more, so that a word run into the opening's end is whole."""
    from speechlm import text  # transformers: the report's module stays light until a model is scored

    openings = [text.answer_prefix(x) for x in model.cfg.languages] + [text.answer_prefix(None)]
    return max(len(model.tokenizer(o.strip(), add_special_tokens=False)["input_ids"]) for o in openings) + 2


def _decode(model, waves, language, task, batch_size: int, cost=None, max_new_tokens=None) -> list[dict]:
    """model.transcribe's details per clip (text, language), in the clips' order, decoded `batch_size`
    clips at a time in the order of `cost` (per clip; default its samples): a batch generates until its
    longest answer ends, so clips of like answer length batched together spend fewer steps padding the
    short ones (kana answers are ~4x English's tokens): a quarter of the report's time on the demo."""
    cost = [len(w) for w in waves] if cost is None else cost
    order = sorted(range(len(waves)), key=lambda i: cost[i])
    out: list = [None] * len(waves)
    for i in range(0, len(order), batch_size):
        idx = order[i : i + batch_size]
        lang = [language[k] for k in idx] if isinstance(language, list) else language
        asked = [waves[k] for k in idx]
        answers = model.transcribe(asked, max_new_tokens=max_new_tokens, details=True, language=lang, task=task)
        for k, o in zip(idx, answers):
            out[k] = o
    return out


def passes(model, shards: Path, split: str = "test", batch_size: int = 16) -> list[dict]:
    """One row per clip of the split: id, language, part, reference, target, and the answers of the
    three passes (`pinned`, `detected` with `detected_language`, `translated` for translate clips)."""
    from speechlm.inference import dataset_clips  # the model stack, only with a model

    labels = clip_labels(shards, split)
    _, clips = dataset_clips(str(shards), split, None, batch_size)
    rows, waves = [], []
    for cid, wave, ref in clips:
        meta = labels.get(cid, {})
        rows.append(
            {
                "id": cid,
                "language": meta.get("language"),
                "part": by_part.part_of(cid, split),
                "reference": ref,
                "target": meta.get("target_text", ref),
            }
        )
        waves.append(wave)
    speech = [i for i, r in enumerate(rows) if r["language"]]
    langs = [rows[i]["language"] for i in speech]
    # a language's answers cost its tokens per second: grouped by language, then by length
    by_language = [(langs[k], len(waves[i])) for k, i in enumerate(speech)]
    pinned = _decode(model, [waves[i] for i in speech], langs, "transcribe", batch_size, by_language)
    for i, o in zip(speech, pinned):
        rows[i]["pinned"] = o["text"]
    # the clips' lengths order the pass that detects: it writes a few tokens each, its prompts decide
    for r, o in zip(rows, _decode(model, waves, None, "transcribe", batch_size, None, detection_tokens(model))):
        r["detected"], r["detected_language"] = o["text"], o.get("language")
    silent, served = [i for i, r in enumerate(rows) if not r["language"]], list(model.cfg.languages)
    if silent and served:  # a caller may pin a language on silence too: each clip pinned to one in turn
        asked = [served[k % len(served)] for k in range(len(silent))]
        for i, o in zip(silent, _decode(model, [waves[i] for i in silent], asked, "transcribe", batch_size)):
            rows[i]["pinned"] = o["text"]
    tr = [i for i in speech if rows[i]["part"] == "translate"]
    outs = _decode(model, [waves[i] for i in tr], [rows[i]["language"] for i in tr], "translate", batch_size)
    for i, o in zip(tr, outs):
        rows[i]["translated"] = o["text"]
    return rows


def _wer_table(rows: list[dict], vocab) -> dict:
    out: dict = {}
    for lang in L.LANGUAGES:
        mine = [r for r in rows if r["language"] == lang]
        if not mine:
            continue
        for part in TRANSCRIBED_PARTS + ("translate",):
            sel = [r for r in mine if r["part"] == part]
            if sel:  # a translate clip's transcript too: a held-out sentence, pinned
                metric, value = S.error_rate([r["reference"] for r in sel], [r["pinned"] for r in sel], lang)
                out.setdefault(lang, {})[part] = {"clips": len(sel), metric: value}
        said = [answer_language(r["pinned"], vocab) for r in mine]
        out[lang]["pinned_other_language"] = sum(s not in (None, lang) for s in said)
        out[lang]["pinned_clips"] = len(mine)
    return out


def _random_vs_english(table: dict) -> dict[str, float]:
    """Each other language's random-order error over English's (issue 38's goal: at most 1.5x; ja's CER
    against English's WER); empty without English's random part, inf where English's is 0 and another's is not."""
    en = table.get("en", {}).get("random", {}).get("wer")
    if en is None:
        return {}
    out = {}
    for lang, v in table.items():
        mine = v.get("random", {}).get("cer" if lang in S.CER_LANGUAGES else "wer")
        if lang != "en" and mine is not None:
            out[lang] = mine / en if en else (0.0 if mine == 0 else float("inf"))
    return out


def figures(rows: list[dict]) -> dict:
    """The report's numbers from `passes`' rows: per language its parts' WER (or CER), the pinned answers
    in another language, language ID, translation chrF/BLEU and the word-by-word baseline's, non-speech."""
    vocab = vocabularies()
    out = {"languages": _wer_table(rows, vocab)}
    speech = [r for r in rows if r["language"]]
    out["lid"] = S.language_id([{"language": r["language"], "detected": r["detected_language"]} for r in speech])
    out["pinned_other_language"] = sum(v["pinned_other_language"] for v in out["languages"].values())
    tr = {}
    for lang in L.LANGUAGES:
        sel = [r for r in speech if r["language"] == lang and "translated" in r]
        if sel:
            refs = [r["target"] for r in sel]
            model_scores = S.translation_scores(refs, [r["translated"] for r in sel])
            base = S.translation_scores(refs, [word_by_word(r["pinned"], lang) for r in sel])
            tr[lang] = {
                "clips": len(sel),
                **model_scores,
                "word_by_word_chrf": base["chrf"],
                "word_by_word_bleu": base["bleu"],
            }
    out["translate"] = tr
    out["random_vs_english"] = _random_vs_english(out["languages"])
    ns = [r for r in rows if not r["language"]]
    if ns:
        out["nonspeech_empty_share"] = sum(not r["detected"].strip() for r in ns) / len(ns)
        pinned = [r for r in ns if "pinned" in r]
        if pinned:
            out["nonspeech_pinned_empty_share"] = sum(not r["pinned"].strip() for r in pinned) / len(pinned)
    return out


def summary_lines(fig: dict) -> list[str]:
    """The report as the demo prints it: one line per language, then LID, pins, translation, non-speech."""
    lines = ["language  metric  seen    unseen  random  | pinned answers in another language"]
    for lang, v in fig["languages"].items():
        metric = "cer" if lang in S.CER_LANGUAGES else "wer"
        cells = [f"{100 * v[p][metric]:5.1f}%" if p in v else "   -  " for p in TRANSCRIBED_PARTS]
        lines.append(
            f"{lang:9} {metric.upper():7} {'  '.join(cells)}  | {v['pinned_other_language']} of {v['pinned_clips']}"
        )
    lid = fig["lid"]
    per = ", ".join(f"{k[4:]} {100 * v:.0f}%" for k, v in lid.items() if k != "lid")
    lines.append(f"language ID (no language given): {100 * lid.get('lid', 0):.1f}% ({per})")
    lines.append(f"pinned answers in another language: {fig['pinned_other_language']}")
    if fig.get("random_vs_english"):
        ratios = ", ".join(f"{k} {v:.2f}x" for k, v in fig["random_vs_english"].items())
        lines.append(f"random orders against English's (goal <= 1.5x): {ratios}")
    for lang, t in fig["translate"].items():
        lines.append(
            f"translate {lang}->en: chrF {t['chrf']:.1f} "
            f"(word by word with the lexicon: {t['word_by_word_chrf']:.1f}), "
            f"BLEU {t['bleu']:.1f} ({t['word_by_word_bleu']:.1f}) on {t['clips']} clips"
        )
    if "nonspeech_empty_share" in fig:
        pinned = fig.get("nonspeech_pinned_empty_share")
        also = f" ({100 * pinned:.1f}% with a language pinned)" if pinned is not None else ""
        lines.append(f"held-out nonspeech: {100 * fig['nonspeech_empty_share']:.1f}% answered with nothing{also}")
    return lines
