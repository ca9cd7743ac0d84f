"""The multilingual listening corpus (kind `multilingual`, shards/multilingual_demo.yaml): parallel
sentences in en/es/de/fr/ja with English translations, the English demo's held-out parts per
language, espeak-ng checked per language, and language/task/target_text in each clip's JSON."""

from __future__ import annotations

import json
import tarfile

import pytest

from speechlm.config import ConfigError
from speechlm.demo import lexicon, multilingual, multilingual_sentences
from speechlm.scoring import by_part
from speechlm.shard import build, load_recipe


def _cfg(lang: str, **kw) -> multilingual.MultilingualConfig:
    translate = 0 if lang == "en" else 6
    kw = {"train": 60, "eval": 8, "test": 24, "unseen_test": 6, "random_test": 6, "translate_test": translate, **kw}
    return multilingual.MultilingualConfig(language=lang, **kw)


@pytest.mark.parametrize("lang", lexicon.LANGUAGES)
def test_splits_are_disjoint_seeded_and_hold_every_part(lang):
    cfg = _cfg(lang, translate_share=0.5 if lang != "en" else 0.0)
    a = {s: multilingual.rows(cfg, s) for s in ("train", "eval", "test")}
    assert a == {s: multilingual.rows(cfg, s) for s in ("train", "eval", "test")}
    train = {t for _, t, _ in a["train"]}
    held = [t for s in ("eval", "test") for _, t, _ in a[s]]
    assert len(train) == 60 and not train & set(held) and len(set(held)) == len(held)
    parts = {}
    for oid, _, _ in a["test"]:
        parts[by_part.part_of(f"{lang}_{oid}")] = parts.get(by_part.part_of(f"{lang}_{oid}"), 0) + 1
    want = (
        {"seen": 6, "unseen": 6, "random": 6, "translate": 6}
        if lang != "en"
        else {"seen": 12, "unseen": 6, "random": 6}
    )
    assert parts == want
    words = set(multilingual_sentences.training_words(lang))
    for oid, text, ref in a["test"] + a["train"]:
        labels = ref["labels"]
        assert labels["language"] == lang and labels["task"] in ("transcribe", "translate")
        if "-random-" in oid or (oid.startswith("train") and labels["task"] == "transcribe" and text[-1] not in ".?。"):
            assert set(text.split()) <= words, text  # random orders: training words only
        if labels["task"] == "translate":
            assert lang != "en" and labels["target_text"] and labels["target_text"] != text
        else:
            assert labels["target_text"] == text
    assert sum(r["labels"]["task"] == "translate" for _, _, r in a["train"]) == (
        15 if lang != "en" else 0
    )  # half of the 30 sentences


def test_one_draw_says_the_same_thing_in_every_language():
    import random

    d = multilingual_sentences.draw(random.Random(3))
    shape = multilingual_sentences.TRAIN[-1]  # "{N} {v} {ao}.": name, verb and an adjective with a noun
    said = {lang: shape[lang].format(**multilingual_sentences.slots(lang, d)) for lang in lexicon.LANGUAGES}
    noun, adj = d["noun"], d["adj"]
    assert noun.en in said["en"] and adj.en in said["en"]
    assert noun.es in said["es"] and adj.es[noun.es_g == "f"] in said["es"]
    assert noun.de in said["de"] and noun.fr in said["fr"] and noun.ja in said["ja"] and adj.ja in said["ja"]
    assert " " not in said["ja"] and said["ja"].endswith("。")


def test_agreement_and_case():
    dog, car = lexicon.NOUNS_BY_LANGUAGE[0], lexicon.NOUNS_BY_LANGUAGE[2]  # m everywhere; es m, de n, fr f
    red, small = lexicon.ADJECTIVES_BY_LANGUAGE[0], lexicon.ADJECTIVES_BY_LANGUAGE[2]
    assert multilingual_sentences.noun_phrase("de", dog, "acc", red) == "den roten Hund"
    assert multilingual_sentences.noun_phrase("de", dog, "nom", red) == "der rote Hund"
    assert multilingual_sentences.noun_phrase("de", car, "acc", red) == "das rote Auto"
    assert multilingual_sentences.noun_phrase("fr", car, "acc", small) == "la petite voiture"
    assert multilingual_sentences.noun_phrase("fr", car, "acc", red) == "la voiture rouge"
    assert multilingual_sentences.noun_phrase("es", car, "acc", small) == "el coche pequeño"
    assert multilingual_sentences.predicate("es", lexicon.NOUNS_BY_LANGUAGE[4], small) == "pequeña"  # la casa


@pytest.mark.parametrize("lang", lexicon.LANGUAGES)
def test_held_out_words_occur_only_in_the_unseen_part(lang):
    # every sentence's English rendering names its words; random orders use training words only
    for split, rows in multilingual.texts(_cfg(lang)).items():
        for part, text, english in rows:
            assert multilingual_sentences._holds_held_out(english) == (part == "unseen"), (split, text, english)
            held = {n.ja for n in lexicon.HELD_OUT_BY_LANGUAGE["nouns"]} | set(
                lexicon.HELD_OUT_BY_LANGUAGE["names"].values()
            )
            assert lang != "ja" or part == "unseen" or not any(w in text for w in held)


def test_settings_are_checked_naming_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    for section, match in [
        ("{language: xx}", r"sources\[0\].multilingual.language"),
        ("{language: en, translate_test: 2}", r"sources\[0\].multilingual.translate_test"),
        ("{language: es, test: 10, unseen_test: 5, random_test: 5, translate_test: 5}", r"multilingual.test"),
        ("{language: es, random_share: 2}", r"multilingual.random_share"),
    ]:
        bad.write_text(f"sources: [{{name: s, kind: multilingual, multilingual: {section}}}]\n")
        with pytest.raises(ConfigError, match=match):
            load_recipe(str(bad))


def test_espeak_is_checked_per_language():
    ja = [t for rows in multilingual.texts(_cfg("ja")).values() for _, t, _ in rows]
    multilingual.check_voices("ja", multilingual.VOICES["ja"], ja, "k")
    # espeak-ng's Mandarin voice reads Spanish words by its English rules: caught before any clip
    with pytest.raises(ConfigError, match=r"k.voices: espeak-ng voice 'cmn' reads \['el', 'perro'\] as English"):
        multilingual.check_voices("es", ["cmn"], ["el perro"], "k")
    with pytest.raises(ConfigError, match=r"k.voices: espeak-ng has no voice 'nope'"):
        multilingual.check_voices("es", ["nope+f3"], ["el perro"], "k")


def test_shipped_recipe_builds_clips_carrying_language_task_and_target(tmp_path):
    recipe, _ = load_recipe("multilingual_demo")
    assert [s.name for s in recipe.sources] == ["en", "es", "de", "fr", "ja", "nonspeech"]
    for src in recipe.sources:
        if src.kind == "multilingual":
            assert src.settings.language == src.name
            for k, v in {"train": 2, "eval": 0, "test": 4, "unseen_test": 1, "random_test": 1}.items():
                setattr(src.settings, k, v)
            src.settings.translate_test = 0 if src.name == "en" else 1
        else:
            src.settings.train, src.settings.eval, src.settings.test = 1, 0, 1
    recipe.output.shard_clips = 8
    out = build(recipe, tmp_path / "ml", workers=1)
    clips = {}
    for tar in sorted(out.glob("*-test-*.tar")):
        with tarfile.open(tar) as t:
            for m in t.getmembers():
                if m.name.endswith(".json"):
                    meta = json.loads(t.extractfile(m).read())
                    clips[meta["id"]] = meta
    speech = {k: v for k, v in clips.items() if not k.startswith("nonspeech")}
    assert len(speech) == 20 and {m["language"] for m in speech.values()} == set(lexicon.LANGUAGES)
    for cid, m in speech.items():
        assert cid.startswith(m["language"] + "_") and m["text"]
        if by_part.part_of(cid) == "translate":
            assert m["task"] == "translate" and m["target_text"] != m["text"] and m["target_text"].isascii()
        else:
            assert m["task"] == "transcribe" and m["target_text"] == m["text"]
    assert sum(m.get("task") == "translate" for m in clips.values()) == 4
