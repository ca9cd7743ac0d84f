"""Inference that stops (speechlm.model.generation, issue 20): a token budget that follows the clip's
duration, and a loop rule that stops a repeating n-gram and keeps one copy; the rules alone, then
on a decoder that loops for sure."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speechlm import config as config_mod
from speechlm.config import Config
from speechlm.model import build_model
from speechlm.model.generation import loop_at, token_budget


def test_token_budget_and_loop_rule_units():
    assert token_budget([1.0, 3.2], 8.0, 8, 40) == [16, 34]
    assert token_budget([10.0], 8.0, 8, 40) == [40] and token_budget([1.0, 2.0], 0, 8, 40) == [40, 40]
    assert loop_at([5, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3], 4, 4) == (3, 1)
    assert loop_at([1, 2, 3, 1, 2, 3, 1, 2, 3], 4, 4) is None  # three repeats are not a loop at 4
    assert loop_at([7, 7, 7, 7], 4, 4) == (1, 0) and loop_at([1, 2, 3, 4], 4, 2) is None


@pytest.fixture(scope="module")
def looping_model():
    """The tiny twin with every decoder block's output projections zeroed: each position's state
    is its own token's embedding, so the tied LM head repeats the last token forever."""
    cfg = config_mod.load(
        Config, "tiny", None, ["model.text_model_id=tiny/llama3", "model.max_new_tokens=30", "model.loop_max_ngram=0"]
    )
    model = build_model(cfg)
    with torch.no_grad():
        for name, p in model.decoder.named_parameters():
            if name.endswith(
                ("o_proj.base_layer.weight", "down_proj.base_layer.weight", "o_proj.weight", "down_proj.weight")
            ):
                p.zero_()
    return model


def _waves(*seconds):
    g = np.random.default_rng(0)
    return [0.1 * g.standard_normal(int(s * 16000)).astype(np.float32) for s in seconds]


def test_token_budget_follows_the_clip_duration_on_a_looping_decoder(looping_model):
    m = looping_model
    m.cfg.loop_max_ngram, m.cfg.tokens_per_second, m.cfg.new_tokens_margin = 0, 4.0, 2
    out = m.transcribe(_waves(1.0, 3.0), details=True)
    assert [o["capped"] for o in out] == [True, True] and not any(o["loop"] for o in out)
    assert [o["tokens"] for o in out] == [6, 14]  # 2 + 4 x 1 s, 2 + 4 x 3 s
    m.cfg.tokens_per_second = 0  # off: the fixed ceiling for every clip
    fixed = m.transcribe(_waves(1.0), details=True)[0]
    assert fixed["capped"] and fixed["tokens"] == 30


def test_loop_rule_stops_and_keeps_one_copy(looping_model):
    m = looping_model
    m.cfg.tokens_per_second, m.cfg.loop_max_ngram, m.cfg.loop_min_repeats = 0, 4, 4
    out = m.transcribe(_waves(2.0, 1.0), details=True)
    # stopped after 4 repeats of the one-token loop, one copy kept
    assert [(o["loop"], o["capped"], o["tokens"]) for o in out] == [(True, False, 1)] * 2
    m.cfg.loop_max_ngram = 0
    looping = m.transcribe(_waves(2.0), details=True)[0]
    assert (looping["loop"], looping["capped"], looping["tokens"]) == (False, True, 30)


def test_a_prefix_spends_the_budget_and_takes_part_in_the_loop_rule_units():
    assert token_budget([1.0, 3.2], 8.0, 8, 40, given=[5, 0]) == [11, 34]  # 16 - 5; 34
    assert token_budget([10.0], 8.0, 8, 40, given=[38]) == [2]  # the ceiling bounds the whole answer
    assert token_budget([1.0], 8.0, 8, 40, given=[30]) == [1]  # past the budget: one token, to close the turn
    assert token_budget([1.0], 0, 8, 40, given=[10]) == [30]
    with pytest.raises(ValueError, match="2 prefix lengths for 1 clips"):
        token_budget([1.0], 8.0, 8, 40, given=[1, 2])


def test_a_prefix_spends_the_token_budget_on_a_looping_decoder(looping_model):
    m = looping_model
    m.cfg.loop_max_ngram, m.cfg.tokens_per_second, m.cfg.new_tokens_margin = 0, 4.0, 2
    out = m.transcribe(_waves(3.0, 3.0), details=True, prefixes=["", [100, 101, 102, 103, 104]])
    # 14 tokens for 3 s whatever the prefix: 14 new, then 5 given + 9 new
    assert [(o["capped"], o["tokens"], len(o["ids"])) for o in out] == [(True, 14, 14), (True, 9, 14)]
    assert out[1]["ids"][:5] == [100, 101, 102, 103, 104]


def test_a_loop_the_model_goes_on_with_from_its_prefix_is_cut_among_the_new_tokens(looping_model):
    m = looping_model
    m.cfg.tokens_per_second, m.cfg.loop_max_ngram, m.cfg.loop_min_repeats = 0, 4, 4
    # the looping decoder repeats its last token: after three copies of 107 the first new one makes four
    looped = m.transcribe(_waves(2.0), details=True, prefixes=[[100, 107, 107, 107]])[0]
    assert (looped["loop"], looped["tokens"], looped["ids"]) == (True, 0, [100, 107, 107, 107])
    # one given copy: the loop is found after three new ones, one copy kept (the given one)
    once = m.transcribe(_waves(2.0), details=True, prefixes=[[100, 107]])[0]
    assert (once["loop"], once["tokens"], once["ids"]) == (True, 0, [100, 107])
    with pytest.raises(ValueError, match="2 prefixes for 1 clips"):
        m.transcribe(_waves(1.0), prefixes=["a", "b"])
    with pytest.raises(ValueError, match="not text tokens"):
        m.transcribe(_waves(1.0), prefixes=[[10**7]])


def test_generation_continues_a_prefix_of_its_own_answer_exactly():
    """Greedy decoding after the first k tokens of its own answer, given as a prefix, is the same
    answer: the prefix is read as the model's own turn, and the stop rules bound the whole answer.
    fp32: under bf16 autocast a prefill and a step-by-step decode round differently, which flips
    near-tied argmaxes of a random twin."""
    from model_helpers import trained_looking, waves

    m = trained_looking("tiny/whisper", "tiny/qwen3_5", bf16=False)
    m.cfg.max_new_tokens = 12
    clips = waves((16000 * 2, 16000), seed=3)
    whole = m.transcribe(clips, details=True, timestamps=True)
    assert [o["tokens"] for o in whole] == [12, 12]
    for k in (1, 5):
        got = m.transcribe(clips, details=True, timestamps=True, prefixes=[o["ids"][:k] for o in whole])
        assert [g["ids"] for g in got] == [o["ids"] for o in whole]
        assert [g["text"] for g in got] == [o["text"] for o in whole]
        assert [g["tokens"] for g in got] == [12 - k, 12 - k]
        assert [g["words"] for g in got] == [o["words"] for o in whole]  # the whole answer's words
    # a text prefix is the answer's first tokens, tokenized as training tokenizes a transcript
    text = "the quick brown fox"
    out = m.transcribe(clips[:1], details=True, prefixes=[text])[0]
    assert out["ids"][: len(m.tokenizer(text)["input_ids"])] == m.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert out["text"].startswith(text) and out["tokens"] >= 1
