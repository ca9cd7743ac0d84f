"""The multilingual demo's report and command, without a model: the word-list test of an answer's
language (the pinning count rests on it), the word-by-word baseline of translation, the figures from
rows, and `--languages` (checked, and a corpus of only those languages)."""

from __future__ import annotations

import random

import pytest
import yaml

from speechlm.config import ConfigError
from speechlm.demo import lexicon, multilingual, multilingual_report, multilingual_sentences, multilingual_stages
from speechlm.scoring import languages as S


def _cfg(lang: str) -> multilingual.MultilingualConfig:
    translate = 0 if lang == "en" else 20
    return multilingual.MultilingualConfig(
        language=lang, train=40, eval=0, test=60, unseen_test=10, random_test=10, translate_test=translate
    )


@pytest.mark.parametrize("lang", lexicon.LANGUAGES)
def test_every_transcript_is_told_its_own_language(lang):
    """The word-list test names each language's transcripts (sentences, random orders, held-out words)
    as that language: a pin's answer counted as "another language" is never a correct transcript."""
    vocab = multilingual_report.vocabularies()
    texts = [t for rows in multilingual.texts(_cfg(lang)).values() for _, t, _ in rows]
    assert len(texts) == 100
    said = [multilingual_report.answer_language(t, vocab) for t in texts]
    assert set(said) <= {lang, None}
    # only a word list of names and places shared by the languages (a random order) names none
    undecided = [t for t, s in zip(texts, said) if s is None]
    assert len(undecided) <= 5, undecided


def test_another_languages_answer_is_caught():
    vocab = multilingual_report.vocabularies()
    rng = random.Random(0)
    for lang in ("es", "de", "fr"):
        words = multilingual_sentences.training_words(lang)
        said = multilingual.random_sequence(rng, words)
        assert multilingual_report.answer_language(said, vocab) == lang
    # a Spanish clip answered by its English translation, or in kana, is another language
    assert multilingual_report.answer_language("Anna saw the dog yesterday.", vocab) == "en"
    assert multilingual_report.answer_language("アンナがいぬをみました。", vocab) == "ja"
    assert multilingual_report.answer_language("", vocab) is None


def test_word_by_word_translates_with_the_lexicon():
    assert multilingual_report.word_by_word("Ayer, Anna vio el perro rojo.", "es") == "Yesterday Anna saw the dog red."
    assert multilingual_report.word_by_word("Gestern sah Anna den roten Hund.", "de") == (
        "Yesterday saw Anna the red dog."
    )
    assert multilingual_report.word_by_word("Anna a vu le chien rouge?", "fr") == "Anna saw the dog red?"
    # kana without spaces: the longest lexicon entry first, particles dropped
    assert (
        multilingual_report.word_by_word("きのう、アンナがあかいいぬをみましたか。", "ja")
        == "Yesterday Anna red dog saw?"
    )
    assert multilingual_report.word_by_word("", "es") == ""


@pytest.mark.parametrize("lang", ["es", "de", "fr", "ja"])
def test_the_baseline_on_true_transcripts_is_a_real_bar(lang):
    """Word by word from the true transcripts of the held-out translate sentences: far above nothing,
    below a perfect translation (the figures the demo's model has to beat are of this kind)."""
    rows = [r for r in multilingual.texts(_cfg(lang))["test"] if r[0] == "translate"]
    refs = [en for _, _, en in rows]
    base = S.translation_scores(refs, [multilingual_report.word_by_word(t, lang) for _, t, _ in rows])
    assert 35 < base["chrf"] < 95, base
    assert S.translation_scores(refs, refs)["chrf"] == pytest.approx(100)


def _row(cid, lang, part, ref, pinned, detected, detected_language, target=None, translated=None):
    r = {"id": cid, "language": lang, "part": part, "reference": ref, "target": target or ref}
    r.update(pinned=pinned, detected=detected, detected_language=detected_language)
    if translated is not None:
        r["translated"] = translated
    return r


def test_figures_from_rows():
    rows = [
        _row("en_test-seen-0", "en", "seen", "Anna saw the dog.", "Anna saw the dog.", "Anna saw the dog.", "en"),
        _row("en_test-random-1", "en", "random", "dog red cat", "dog red", "dog red", "en"),
        _row("es_test-random-2", "es", "random", "perro rojo gato", "perro rojo gato", "perro rojo gato", "fr"),
        # pinned to es, answered in English: one pinned answer in another language
        _row("es_test-seen-3", "es", "seen", "Anna vio el perro.", "Anna saw the dog.", "x", "es"),
        _row(
            "es_test-translate-4",
            "es",
            "translate",
            "Ayer, Anna vio el perro.",
            "Ayer, Anna vio el perro.",
            "Ayer",
            "es",
            target="Yesterday, Anna saw the dog.",
            translated="Yesterday, Anna saw the dog.",
        ),
        _row("ja_test-seen-5", "ja", "seen", "アンナがいぬをみました。", "アンナがいぬをみました。", "", "ja"),
        _row("nonspeech_test-00000", None, None, "", "", "", None),
        _row("nonspeech_test-00001", None, None, "", "", "noise", None),
    ]
    fig = multilingual_report.figures(rows)
    en, es, ja = (fig["languages"][x] for x in ("en", "es", "ja"))
    assert en["seen"] == {"clips": 1, "wer": 0.0} and en["random"]["wer"] == pytest.approx(1 / 3)
    assert es["random"]["wer"] == 0.0 and ja["seen"] == {"clips": 1, "cer": 0.0}
    assert es["pinned_other_language"] == 1 and es["pinned_clips"] == 3 and fig["pinned_other_language"] == 1
    assert fig["lid"]["lid/es"] == pytest.approx(2 / 3) and fig["lid"]["lid"] == pytest.approx(5 / 6)
    assert fig["translate"]["es"]["chrf"] == pytest.approx(100) and fig["translate"]["es"]["clips"] == 1
    assert fig["translate"]["es"]["word_by_word_chrf"] < 100
    assert fig["nonspeech_empty_share"] == 0.5 and fig["nonspeech_pinned_empty_share"] == 1.0
    # random orders against English's: es 0 of 3 words wrong against en's 1 of 3; no ja random part
    assert fig["random_vs_english"] == {"es": 0.0}
    lines = multilingual_report.summary_lines(fig)
    assert lines[1].split()[:2] == ["en", "WER"] and "1 of 3" in lines[2] and lines[3].split()[1] == "CER"
    assert any(x.startswith("language ID (no language given): 83.3%") for x in lines)
    assert "random orders against English's (goal <= 1.5x): es 0.00x" in lines
    assert lines[-1] == "held-out nonspeech: 50.0% answered with nothing (100.0% with a language pinned)"


def test_languages_are_checked_naming_the_option():
    assert multilingual_stages.parse_languages("ja, en,es") == ["en", "es", "ja"]
    with pytest.raises(ConfigError, match=r"--languages: .*'en,zh' \(zh not among them\)"):
        multilingual_stages.parse_languages("en,zh")
    with pytest.raises(ConfigError, match="--languages"):
        multilingual_stages.parse_languages(" , ")


def test_a_subset_of_languages_gets_a_corpus_of_its_own(tmp_path):
    every = multilingual_stages.corpus_recipe("multilingual_demo", list(lexicon.LANGUAGES), tmp_path)
    assert every == (str(multilingual_stages.REPO_ROOT / "shards" / "multilingual_demo.yaml"), False)
    path, derived = multilingual_stages.corpus_recipe("multilingual_demo", ["en", "ja"], tmp_path)
    recipe = yaml.safe_load(open(path))
    assert derived and [s["name"] for s in recipe["sources"]] == ["en", "ja", "nonspeech"]
    with pytest.raises(ConfigError, match=r"--languages: es not in the corpus"):
        multilingual_stages.corpus_recipe(path, ["en", "es"], tmp_path)


class _Batches:
    """A model's `transcribe` as `_decode` calls it, answering each wave with its length and keeping the
    batches it was asked: the order of the decode is what is tested, not a model."""

    def __init__(self):
        self.batches: list[list[int]] = []
        self.caps: list = []

    def transcribe(self, waves, max_new_tokens, details, language, task):
        self.batches.append([len(w) for w in waves])
        self.caps.append(max_new_tokens)
        langs = language if isinstance(language, list) else [language] * len(waves)
        return [{"text": str(len(w)), "language": lang, "task": task} for w, lang in zip(waves, langs)]


def test_clips_are_decoded_by_cost_and_answered_in_their_own_order():
    rng = random.Random(0)
    waves = [[0.0] * rng.randrange(1, 500) for _ in range(37)]
    langs = [rng.choice(["en", "ja"]) for _ in waves]
    model = _Batches()
    cost = [(lang == "ja", len(w)) for lang, w in zip(langs, waves)]
    out = multilingual_report._decode(model, waves, langs, "transcribe", 8, cost)
    assert [o["text"] for o in out] == [str(len(w)) for w in waves]  # each answer back at its clip
    assert [o["language"] for o in out] == langs
    assert [len(b) for b in model.batches] == [8, 8, 8, 8, 5]
    asked = [n for b in model.batches for n in b]
    assert asked == [n for _, n in sorted(cost)]  # English first, each language by length
    model.batches.clear()
    multilingual_report._decode(model, waves, None, "translate", 10)  # by length when no cost is given
    assert [n for b in model.batches for n in b] == sorted(len(w) for w in waves)
    assert set(model.caps) == {None}  # the model's own budget
    multilingual_report._decode(model, waves, None, "transcribe", 10, None, 7)
    assert model.caps[-4:] == [7] * 4  # a cap asked for reaches every batch
