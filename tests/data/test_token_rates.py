"""Tokens per second per spoken language (issue 38, speechlm.data.token_rates): measured on the training
shards with the decoder's tokenizer, so a character language gets the larger budget it needs; the
generation budget takes one rate per clip (its language's; the largest for a language not given)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from data_helpers import language_shards
from speechlm import text
from speechlm.config import ConfigError, DataSet
from speechlm.data import token_rates
from speechlm.model import generation
from speechlm.model import ids as model_ids

ROWS = [  # (text, language, seconds)
    ("hola a todos", "es", 1.0),
    ("el perro corre por el parque", "es", 2.0),
    ("いぬ が こうえん を はしる", "ja", 1.5),
    ("ねこ が いぬ を みる", "ja", 1.0),
    ("the dog runs", "en", 1.0),
]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    shards = language_shards(tmp_path_factory.mktemp("rates"), ROWS)
    return shards


@pytest.fixture(scope="module")
def tok():
    return text.load_tokenizer(model_ids.resolve("tiny/qwen3"))


def test_rates_are_measured_per_language_from_the_shards(shards, tok):
    sets = [DataSet(path=str(shards), split="train")]
    got = token_rates.sample(sets)
    assert {k: sorted(v) for k, v in got.items()} == {
        lang: sorted((t, pytest.approx(s, abs=1e-3)) for t, lng, s in ROWS if lng == lang)
        for lang in ("es", "ja", "en")
    }
    rates = token_rates.measure(sets, tok)
    for lang in ("es", "ja"):  # by hand: max(2 x tokens / seconds, the 95th percentile clip), a tenth up
        n = np.array([len(tok(t, add_special_tokens=False)["input_ids"]) for t, lng, _ in ROWS if lng == lang])
        s = np.array([sec for _, lng, sec in ROWS if lng == lang])
        want = max(2 * n.sum() / s.sum(), np.percentile(n / s, 95))
        assert want <= rates[lang] < want + 0.1 + 1e-9
    assert rates["ja"] > 2 * rates["es"]  # kana cost several byte-level tokens each
    assert token_rates.sample(sets, per_language=1)["ja"] == [(ROWS[2][0], pytest.approx(1.5, abs=1e-3))]


def test_a_multilingual_model_gets_measured_rates_and_a_config_keeps_its_own(shards, tok):
    sets = [DataSet(path=str(shards), split="train")]
    model = SimpleNamespace(
        cfg=SimpleNamespace(languages=["es", "ja"], tokens_per_second_by_language={}), tokenizer=tok
    )
    token_rates.fill(model, sets)
    assert model.cfg.tokens_per_second_by_language == token_rates.measure(sets, tok)
    given = SimpleNamespace(
        cfg=SimpleNamespace(languages=["es"], tokens_per_second_by_language={"es": 3.0}), tokenizer=tok
    )
    token_rates.fill(given, sets)
    assert given.cfg.tokens_per_second_by_language == {"es": 3.0}
    english = SimpleNamespace(cfg=SimpleNamespace(languages=[], tokens_per_second_by_language={}), tokenizer=tok)
    token_rates.fill(english, sets)  # an English-only model keeps model.tokens_per_second alone
    assert english.cfg.tokens_per_second_by_language == {}


def test_the_budget_is_per_clip_by_language(tmp_path):
    from model_helpers import tiny_config
    from speechlm.model.build import build_model

    assert generation.token_budget([1.0, 1.0, 2.0], [5.0, 20.0, 0.0], 8, 100) == [13, 28, 100]
    assert generation.token_budget([1.0], 8.0, 8, 100) == [16]  # one rate for all, as before
    with pytest.raises(ValueError, match="2 rates for 1 clips"):
        generation.token_budget([1.0], [1.0, 2.0], 8, 100)
    model = build_model(tiny_config())
    assert model.token_rates([None, "es"]) == model.cfg.tokens_per_second  # no table: the one rate
    model.cfg.tokens_per_second_by_language = {"es": 5.0, "ja": 20.0}
    # a language not measured, and one the model detects, get the largest rate
    assert model.token_rates(["es", "ja", None, "fr"]) == [5.0, 20.0, 20.0, 20.0]
    cfg = tiny_config()
    cfg.model.tokens_per_second_by_language = {"ja": -1}
    with pytest.raises(ConfigError, match=r"model.tokens_per_second_by_language: rates must be numbers > 0"):
        cfg.validate()
