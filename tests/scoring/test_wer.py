import pytest

from speechlm.scoring import wer


def test_normalizer_effects_do_not_count_as_errors():
    # the Whisper normalizer also writes number words as digits
    assert wer.normalize("one two three") == "123"
    # case, punctuation, a filler word, a contraction and British spelling are all normalized away
    s = wer.score(["Mr. Smith won't colour it."], ["mister smith um will not color it"])
    assert s["wer"] == 0.0
    assert s["orthographic_wer"] > 0.5


def test_hand_computed_counts():
    # ref: 6 words; hyp: one substitution (sat->sit), one deletion (the), one insertion (very)
    s = wer.score(["the cat sat on the mat"], ["the cat sit on very mat"])
    # alignment: the cat [sat->sit] on [the->very] mat => 2 substitutions, WER 2/6
    assert (s["substitutions"], s["deletions"], s["insertions"]) == (2, 0, 0)
    assert s["wer"] == pytest.approx(2 / 6)
    s = wer.score(["red green blue black"], ["red blue black white pink"])
    assert (s["substitutions"], s["deletions"], s["insertions"]) == (0, 1, 2)
    assert s["wer"] == pytest.approx(3 / 4)


def test_empty_hypotheses_are_all_deletions():
    s = wer.score(["hello there world", "good morning"], ["", ""])
    assert s["deletions"] == 5 and s["wer"] == 1.0
    assert s["ref_words"] == 5


def test_corpus_wer_pools_words_over_clips_not_clip_average():
    # clip 1: 1 error / 1 word; clip 2: 0 errors / 9 words => corpus 1/10, not mean(1, 0) = 0.5
    refs = ["yes", "a b c d e f g h i"]
    hyps = ["no", "a b c d e f g h i"]
    assert wer.score(refs, hyps)["wer"] == pytest.approx(0.1)


def test_mismatched_lengths_and_empty_input_raise():
    with pytest.raises(ValueError, match="2 references but 1 hypotheses"):
        wer.score(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="nothing to score"):
        wer.score([], [])


def test_clip_errors_ranks_worst_examples():
    assert wer.clip_errors("The cat.", "the cat") == 0
    assert wer.clip_errors("the cat sat", "a dog") == 3
