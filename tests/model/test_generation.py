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
