"""Label normalization and truecasing (speechlm.shard.normalize / truecase)."""

import pytest

from speechlm.demo import grammar
from speechlm.demo.grammar import SyntheticConfig
from speechlm.scoring.by_part import part_of
from speechlm.shard import normalize as N
from speechlm.shard import truecase


def test_normalize_nfkc_controls_tags_whitespace():
    assert N.normalize_text("  ﬁne\u00a0day\t\n\u200bnow ") == "fine day now"  # NFKC ligature, nbsp, ZWSP
    assert N.normalize_text("hello <unk> world [laughter] again <noise>.") == "hello world again."
    assert N.normalize_text("hello <unk> world", tags="keep") == "hello <unk> world"
    assert N.normalize_text("a\x00b\x1fc") == "a b c"
    for empty in ("", "   ", "<noise>", "[laughter] <unk>", "\x00\t"):
        assert N.normalize_text(empty) == ""
    # a long bracketed passage is text, not a tag
    long = "[" + " ".join(["word"] * 20) + "]"
    assert N.normalize_text(long) == long


def test_uncased_detection():
    assert N.is_uncased(["JOHN WENT", "TO LONDON"])
    assert N.is_uncased(["john went", "to london 2"])
    assert not N.is_uncased(["JOHN WENT", "to london"])  # both cases across the source: cased
    assert not N.is_uncased(["John went to London."])
    assert not N.is_uncased(["123", "..."])  # nothing to re-case


def test_truecaser_restores_names_and_capitalizes_first_word(tmp_path):
    cased = [
        "Yesterday John went to London.",
        "Mary and John went to Paris today.",
        "The dog went to the river.",
        "Did Peter see the car in London?",
    ]
    tc = truecase.train(cased, tmp_path / "tc.model")
    assert (tmp_path / "tc.model").is_file()
    assert truecase.apply(tc, "JOHN WENT TO LONDON") == "John went to London"
    assert truecase.apply(tc, "did peter see the dog in paris?") == "Did Peter see the dog in Paris?"
    # a saved model file reloads to the same result
    tc2 = truecase.load(tmp_path / "tc.model", tmp_path / "copy.model")
    assert truecase.apply(tc2, "THE CAR WENT TO LONDON") == "The car went to London"


def test_builtin_english_model_is_plain_text_and_recases(tmp_path):
    import gzip

    first = gzip.open(truecase.BUILTIN, "rt", encoding="utf-8").readline()
    assert first.split()[1].startswith("(")  # the Moses text format, nothing to execute
    assert truecase.BUILTIN.stat().st_size < 2_000_000
    tc = truecase.builtin(tmp_path / "tc.model")
    assert truecase.apply(tc, "JOHN MET MARY IN LONDON ON MONDAY") == "John met Mary in London on Monday"
    # "I", acronyms, and every sentence of a multi-sentence label starts with a capital
    assert truecase.apply(tc, "however i told the fbi? it was in paris") == "However I told the FBI? It was in Paris"
    assert truecase.apply(tc, '"the end," he said') == '"The end," he said'


def test_synthetic_sentences_cased_punctuated_and_disjoint():
    cfg = SyntheticConfig(train=300, eval=40, test=40, seed=3)
    rows = {s: grammar.rows(cfg, s) for s in ("train", "eval", "test")}
    texts = {s: {r[1] for r in v} for s, v in rows.items()}
    assert [len(texts[s]) for s in ("train", "eval", "test")] == [300, 40, 40]
    assert not (texts["train"] & texts["eval"]) and not (texts["train"] & texts["test"])
    assert not (texts["eval"] & texts["test"])
    words = set()
    for t in texts["train"] | texts["eval"]:
        assert t[0].isupper() and t[-1] in ".?", t
        n = len(t.split())
        assert 3 <= n <= 10, t
        words |= {w.strip(",.?").lower() for w in t.split()}
    assert words <= {w.lower() for w in grammar.VOCABULARY} and 40 <= len(words) <= 52
    assert grammar.rows(cfg, "eval") == rows["eval"]  # deterministic for a seed
    assert grammar.rows(SyntheticConfig(seed=4), "eval") != grammar.rows(SyntheticConfig(seed=3), "eval")


def test_synthetic_test_split_has_seen_and_unseen_word_halves():
    cfg = SyntheticConfig(train=300, eval=20, test=40, unseen_test=20, seed=3)
    rows = {s: grammar.rows(cfg, s) for s in ("train", "eval", "test")}
    vocab = {w.lower() for w in grammar.VOCABULARY}
    heard = {w.strip(",.?").lower() for s in ("train", "eval") for r in rows[s] for w in r[1].split()}
    assert heard <= vocab and not heard & {w.lower() for w in grammar.HELD_OUT_WORDS}
    halves = {"seen": [], "unseen": []}
    for oid, t, _ in rows["test"]:
        halves[part_of(oid)].append(t)
    assert len(halves["seen"]) == len(halves["unseen"]) == 20
    for t in halves["seen"]:
        assert {w.strip(",.?").lower() for w in t.split()} <= heard, t
    for t in halves["unseen"]:
        assert {w.strip(",.?").lower() for w in t.split()} - heard, t  # at least one word never heard
    train_only = grammar.rows(SyntheticConfig(train=300, eval=20, test=40, seed=3), "train")
    assert train_only == rows["train"]  # the unseen half does not reshuffle the other splits
    assert part_of("synthetic_train-00001") is None


def test_unseen_test_larger_than_test_is_a_config_error(tmp_path):
    from speechlm.config import ConfigError
    from speechlm.shard import load_recipe

    path = tmp_path / "r.yaml"
    path.write_text("sources: [{name: s, kind: synthetic, synthetic: {test: 4, unseen_test: 5}}]\n")
    with pytest.raises(ConfigError, match=r"sources\[0\].synthetic.unseen_test: must be between 0 and"):
        load_recipe(path)


def test_bad_voice_is_a_config_error():
    from speechlm.config import ConfigError

    with pytest.raises(ConfigError, match=r"sources\[0\].synthetic.voices.*'zzz'"):
        grammar.check_espeak(["en-us", "zzz"], "sources[0]")
