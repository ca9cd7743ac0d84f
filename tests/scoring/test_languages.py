"""Scores per language and task (issue 38): the standard normalizers (English's only for English), CER
for languages written without spaces, BLEU and chrF for translations, language-ID accuracy."""

from __future__ import annotations

import pytest

from speechlm.scoring import languages as L


def test_english_rules_touch_only_english():
    # Whisper's English normalizer spells out and respells; other languages keep their words and accents
    assert L.normalize("Mr. Smith's colour", "en") == L.normalize("mister smith's color", "en")
    assert L.normalize("Él está aquí, ¿verdad?", "es") == "él está aquí verdad"
    assert L.normalize("Straße, Größe!", "de") == "straße größe"
    assert L.normalize("いぬ が はしる。", "ja") == "いぬがはしる"  # CER languages lose their spaces


def test_wer_per_language_and_cer_where_words_have_no_spaces():
    assert L.error_rate(["el perro corre"], ["el gato corre"], "es") == ("wer", pytest.approx(1 / 3))
    metric, value = L.error_rate(["いぬ が はしる"], ["いぬ が はしった"], "ja")
    assert metric == "cer" and value == pytest.approx(2 / 6)  # る -> った: one substitution, one insertion
    # diacritics count in Spanish (no English normalizer strips them)
    assert L.error_rate(["está"], ["esta"], "es") == ("wer", 1.0)
    assert L.error_rate([""], [""], "es") == ("wer", 0.0) and L.error_rate(["", ""], ["", "x"], None)[1] == 0.5
    with pytest.raises(ValueError, match="need as many"):
        L.error_rate(["a"], [], "es")


def test_translation_scores_are_sacrebleus():
    refs = ["the dog runs in the park", "good morning to everyone"]
    assert L.translation_scores(refs, refs) == {"bleu": pytest.approx(100.0), "chrf": pytest.approx(100.0)}
    half = L.translation_scores(refs, ["the dog runs in the garden", "hello"])
    assert half == {"bleu": pytest.approx(47.627, abs=1e-3), "chrf": pytest.approx(40.979, abs=1e-3)}


def test_scores_by_language_task_and_language_id():
    rows = [
        {
            "language": "es",
            "task": "transcribe",
            "reference": "hola amigo",
            "hypothesis": "hola amigo",
            "detected": "es",
        },
        {"language": "es", "task": "transcribe", "reference": "el perro", "hypothesis": "el gato", "detected": "pt"},
        {"language": "ja", "task": "transcribe", "reference": "いぬ", "hypothesis": "いぬ", "detected": "ja"},
        {
            "language": "de",
            "task": "translate",
            "reference": "good morning to all of you",
            "hypothesis": "good morning to all of you",
            "detected": "de",
        },
        {"reference": "", "hypothesis": ""},  # non-speech, no language
    ]
    got = L.score_rows(rows)
    assert got["wer/es"] == pytest.approx(1 / 4) and got["cer/ja"] == 0.0
    assert got["bleu/de-en"] == pytest.approx(100.0) and got["chrf/de-en"] == pytest.approx(100.0)
    assert got["wer/unknown"] == 0.0 and got["clips/transcribe/es"] == 2 and got["clips/translate/de-en"] == 1
    assert got["lid/es"] == 0.5 and got["lid"] == pytest.approx(3 / 4)
    assert "lid" not in L.score_rows([{**r, "detected": None} for r in rows[:3]])
    pinned = [
        {"pinned": "es", "detected": "es"},
        {"pinned": "es", "detected": "fr"},
        {"pinned": "de", "detected": "de"},
    ]
    assert L.other_language_answers(pinned) == {"es": 1, "de": 0}


def test_a_translation_names_its_pair_and_a_custom_task_its_own():
    rows = [
        {"language": "es", "task": "translate", "target_language": "fr", "reference": "le chien", "hypothesis": "le"},
        {"language": "es", "task": "describe", "reference": "a dog barks", "hypothesis": "a dog barks"},
    ]
    got = L.score_rows(rows)
    assert set(got) == {"bleu/es-fr", "chrf/es-fr", "clips/translate/es-fr", "bleu/describe/es", "chrf/describe/es"} | {
        "clips/describe/es"
    }
    assert got["chrf/describe/es"] == pytest.approx(100.0)


def test_a_pinned_answer_in_another_language_is_counted_by_its_words():
    """The pin writes the opening ("language Spanish: "), so the model's named language is always the pinned one: the
    answer's words decide, against the word lists of the set's own references."""
    rows = [
        {"language": "es", "task": "transcribe", "reference": "el perro come pan", "hypothesis": "el perro come"},
        {"language": "de", "task": "transcribe", "reference": "der Hund isst Brot", "hypothesis": "der Hund"},
        {"language": "ja", "task": "transcribe", "reference": "いぬ が はしる", "hypothesis": "いぬ"},
    ]
    pinned = [{**r, "pinned": r["language"], "detected": r["language"]} for r in rows]
    pinned[0]["hypothesis"] = "der Hund isst"  # es pinned, answered in German
    pinned[1]["hypothesis"] = "いぬ が"  # de pinned, answered in Japanese
    got = L.score_rows(L.mark_answer_languages(pinned))
    assert [r["answer_language"] for r in pinned] == ["de", "ja", "ja"]
    assert {k: v for k, v in got.items() if k.startswith("other_language/")} == {
        "other_language/de": 1,
        "other_language/es": 1,
        "other_language/ja": 0,
    }
    vocab = L.vocabularies(rows)
    assert L.answer_language("el", vocab, "es") == "es" and L.answer_language("xyz", vocab, "es") is None
    assert L.answer_language("", vocab, "es") is None
