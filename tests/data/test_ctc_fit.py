"""Clips the CTC head cannot align (speechlm.data.ctc_fit): a target with more tokens than the projector
has frames gets a CTC loss of 0 and teaches nothing, so the start of a run counts them per language and
says which stride would fit them, rather than leaving them silent (kana at stride 4 in the demo)."""

from __future__ import annotations

import functools
import logging
from types import SimpleNamespace

import pytest

from data_helpers import language_shards
from speechlm import text
from speechlm.config import DataSet
from speechlm.data import ctc_fit
from speechlm.data.collate import Languages
from speechlm.model import ids as model_ids
from speechlm.model.encoders import family_for

KANA = "いぬ が こうえん を はしる ねこ が いぬ を みる"
ROWS = [  # (text, language, seconds): the kana clips are short for their tokens, as fast speech is
    ("the dog runs", "en", 3.0),
    ("el perro corre", "es", 3.0),
    (KANA, "ja", 2.0),
    (KANA, "ja", 4.0),
    (KANA[:9], "ja", 1.0),
]


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    shards = language_shards(tmp_path_factory.mktemp("fit"), ROWS)
    return [DataSet(path=str(shards), split="train")]


@functools.cache
def parts():
    return text.load_tokenizer(model_ids.resolve("tiny/qwen3")), family_for("tiny/whisper")


def model(stride: int, answer_language: bool = True):
    tok, family = parts()  # the model's parts the check reads: its tokenizer, its encoder's frame arithmetic
    cfg = SimpleNamespace(projector_pool_stride=stride, answer_language=answer_language)
    return SimpleNamespace(cfg=cfg, tokenizer=tok, family=family)


def by_hand(m, stride: int) -> dict[str, int]:
    out: dict[str, int] = {}
    languages = Languages(answer_language=m.cfg.answer_language)
    for said, lang, seconds in ROWS:
        # the collator's CTC target of the clip: what was said, not the answer's opening
        sample = {"id": lang, "text": said, "language": lang}
        spoken = languages.spoken(sample)
        target = spoken if spoken is not None else languages.turns(sample, "Transcribe.")[1]
        ids = m.tokenizer(target.strip(), add_special_tokens=False)["input_ids"]
        need = len(ids) + sum(a == b for a, b in zip(ids, ids[1:]))
        out[lang] = out.get(lang, 0) + (m.family.audio_token_count(int(16000 * seconds), stride) < need)
    return out


def test_misfits_are_counted_per_language_and_the_fitting_stride_named(sets, caplog):
    assert ctc_fit.needed_frames([5, 5, 7, 7, 7]) == 5 + 3  # a blank between each pair of equal tokens
    m = model(stride=8)
    want = by_hand(m, 8)
    assert want["ja"] >= 2 and want["en"] == 0  # the setting this test is for: kana overflow, English fits
    with caplog.at_level(logging.WARNING, logger="speechlm.data.ctc_fit"):
        got = ctc_fit.check(m, sets)
    assert got == {"en": (0, 1), "es": (want["es"], 1), "ja": (want["ja"], 3)}
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == len([k for k, (bad, _) in got.items() if bad])
    line = next(w for w in warned if " ja clips " in w)
    fits = next(s for s in range(7, 0, -1) if not by_hand(model(s), s)["ja"])
    assert f"{want['ja']} of 3 sampled ja clips" in line and "model.projector_pool_stride=8" in line
    assert f"at stride {fits} every sampled clip fits" in line
    # the opening is not said: a model that opens its answers with the language needs the same frames
    plain = model(stride=8, answer_language=False)
    assert ctc_fit.check(plain, sets) == got and by_hand(plain, 8) == want


def test_clips_that_fit_say_nothing(sets, caplog):
    with caplog.at_level(logging.WARNING, logger="speechlm.data.ctc_fit"):
        got = ctc_fit.check(model(stride=1), sets)
    assert all(bad == 0 for bad, _ in got.values()) and not caplog.records
