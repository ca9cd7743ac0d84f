"""Prompts and answers of languages and tasks (issue 38), through the decoder's own chat template, for two
decoder families (a Llama-style template and Qwen's ChatML): the prompt states the task and the given
language; the detect-or-pin answer opens with the language; a share of prompts leaves it out; a clip with
neither is prompted exactly as before."""

from __future__ import annotations

import numpy as np
import pytest

from speechlm import text
from speechlm.config import Config, ConfigError, DataSet
from speechlm.data import Collator
from speechlm.data.collate import IGNORE, Languages
from speechlm.model import tiny
from speechlm.model.encoders import family_for

PROMPT = "Transcribe the audio."
CLIPS = [
    {"id": "es-1", "text": "hola a todos", "language": "es", "task": "transcribe"},
    {"id": "de-1", "text": "guten Morgen", "language": "de", "task": "translate", "target_text": "good morning"},
    {"id": "en-1", "text": "hello there"},  # a clip of a set built before: no language, no task
    {"id": "ja-1", "text": "いぬ が はしる", "language": "ja", "task": "describe", "target_text": "a dog runs"},
]


@pytest.fixture(scope="module", params=["llama3", "qwen3_5"])
def tok(request):
    return text.load_tokenizer(str(tiny.ensure(request.param)), "<audio>")


def collator(tok, **languages):
    templates = {**text.TASK_TEMPLATES, "describe": "Describe what you hear."}
    return Collator(
        tok,
        prompt=PROMPT,
        audio_token="<audio>",
        family=family_for("tiny/granite_speech5"),
        pool_stride=1,
        languages=Languages(templates, **languages),
    )


def batch(c, clips):
    rng = np.random.default_rng(0)
    return c([dict(s, audio=rng.standard_normal(8000).astype(np.float32) * 0.1) for s in clips])


def turns(tok, b, i) -> tuple[str, str]:
    """(the decoded prompt, the decoded answer without its end-of-turn) of row i of a batch."""
    ids, labels = b["input_ids"][i], b["labels"][i]
    start = int((labels != IGNORE).nonzero()[0])
    answer = [int(t) for t in labels if t != IGNORE][:-1]
    return tok.decode(ids[:start]), tok.decode(answer)


def test_prompts_state_task_and_language_in_the_decoders_template(tok):
    c = collator(tok)
    b = batch(c, CLIPS)
    got = [turns(tok, b, i) for i in range(4)]
    assert "Transcribe the audio. The speech is in Spanish." in got[0][0] and got[0][1] == "hola a todos"
    assert "Translate the audio into English. The speech is in German." in got[1][0]
    assert got[1][1] == "good morning"
    assert got[3][1] == "a dog runs" and "Describe what you hear. The speech is in Japanese." in got[3][0]
    # the old clip: exactly the prompt and transcript of before tasks existed
    n = c.num_audio_tokens(8000)
    assert b["input_ids"][2][: len(c.prompt_ids(n))].tolist() == text.prompt_ids(tok, n, PROMPT)
    assert got[2][1] == "hello there" and "speech is in" not in got[2][0]
    # every turn is the template's own rendering of the conversation
    user = "<audio>" * n + "\nTranscribe the audio. The speech is in Spanish."
    conv = [{"role": "user", "content": user}]
    rendered = tok.apply_chat_template(conv, add_generation_prompt=True, tokenize=False, enable_thinking=False)
    assert got[0][0] == rendered


def test_the_answer_opens_with_the_language_and_a_pin_is_its_prefix(tok):
    c = collator(tok, answer_language=True)
    b = batch(c, CLIPS)
    assert turns(tok, b, 0)[1] == "language Spanish: hola a todos"
    # a translation's opening names the spoken language and the target: after "language German:" comes German
    assert turns(tok, b, 1)[1] == "language German to English: good morning"
    assert turns(tok, b, 2)[1] == "hello there"  # no language known: no opening
    # a pin writes the opening's tokens; the training answer starts with exactly those tokens
    opening = tok(text.answer_prefix("es").strip(), add_special_tokens=False)["input_ids"]
    answer = [int(t) for t in b["labels"][0] if t != IGNORE]
    assert answer[: len(opening)] == opening
    assert text.split_answer("language Spanish: hola a todos") == ("es", "hola a todos")
    assert text.split_answer("language German to English: good morning") == ("de", "good morning")
    assert text.answer_prefix("de", "en") == "language German to English: "
    assert text.split_answer("language Klingon: hola") == (None, "language Klingon: hola")
    assert text.split_answer("hola") == (None, "hola")


def test_no_speech_is_answered_language_none_or_a_pins_opening_alone(tok):
    """Non-speech (no language, no text): asked no language, "language None:" and the end of the turn, as
    Qwen3-ASR answers it; asked one (a pin a caller may put on silence), that language's opening alone,
    while the CTC head aligns nothing to it either way (nothing was said)."""
    c = collator(tok, answer_language=True, dropout=0.5, served=("es", "de"))
    silent = [{"id": f"noise-{i}", "text": ""} for i in range(40)]
    b = batch(c, silent)
    got = [turns(tok, b, i) for i in range(len(silent))]
    none = [a for p, a in got if "speech is in" not in p]
    pinned = [(p, a) for p, a in got if "speech is in" in p]
    assert none and pinned  # both kinds, by the clip's fixed dropout draw
    assert set(none) == {"language None:"}
    for p, a in pinned:
        name = a.removeprefix("language ").removesuffix(":")
        assert name in ("Spanish", "German") and f"The speech is in {name}." in p, (p, a)
    assert {a for _, a in pinned} == {"language Spanish:", "language German:"}
    # every answer's last token is the end of the turn, right after the colon
    eot = text.end_of_turn_id(tok)
    for i in range(len(silent)):
        answer = [int(t) for t in b["labels"][i] if t != IGNORE]
        assert answer[-1] == eot and tok.decode(answer[-2:-1]).endswith(":")
    # what the CTC head aligns is what was said, pinned or not: nothing (all blank)
    assert (b["ctc_labels"][:, 1:] == IGNORE).all() and (b["ctc_labels"][:, 0] == text.end_of_turn_id(tok)).all()
    # a model not trained to open with the language keeps the empty answer
    plain = batch(collator(tok), silent[:2])
    assert [turns(tok, plain, i)[1] for i in range(2)] == ["", ""]
    # reading answers: the no-speech opening names no language and leaves no text
    assert text.split_answer("language None:") == (None, "")
    assert text.opens("language None:") and text.opens("language French: oui") and not text.opens("language None")
    assert not text.opens("language Klingon: hola") and not text.opens("hola")


def test_a_share_of_prompts_leaves_the_language_out():
    lang = Languages(dict(text.TASK_TEMPLATES), dropout=0.3)
    ids = [f"clip-{i}" for i in range(2000)]
    share = np.mean([lang.dropped(i) for i in ids])
    assert 0.27 < share < 0.33  # a fixed choice per clip id
    assert [lang.dropped(i) for i in ids[:50]] == [lang.dropped(i) for i in ids[:50]]
    dropped = next(i for i in ids if lang.dropped(i))
    instruction, _ = lang.turns({"id": dropped, "text": "hola", "language": "es"}, PROMPT)
    assert instruction == PROMPT
    kept = next(i for i in ids if not lang.dropped(i))
    assert lang.turns({"id": kept, "text": "hola", "language": "es"}, PROMPT)[0].endswith("in Spanish.")
    assert not Languages().dropped(dropped)


def test_a_task_without_its_answer_or_template_is_an_error(tok):
    c = collator(tok)
    with pytest.raises(ValueError, match="clip x: task translate has no target_text"):
        batch(c, [{"id": "x", "text": "hola", "language": "es", "task": "translate"}])
    with pytest.raises(ValueError, match=r"task 'summarize' has no prompt template .*model.task_prompts"):
        batch(c, [{"id": "x", "text": "hola", "task": "summarize", "target_text": "hi"}])
    with pytest.raises(ValueError, match="language: unknown language 'xx'"):
        text.task_prompt(PROMPT, language="xx")


def test_the_config_carries_the_settings():
    cfg = Config()
    assert cfg.model.answer_language is False and cfg.model.language_dropout == 0.0 and cfg.model.task_prompts == {}


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("model.language_dropout", 1.5, r"model.language_dropout: a share in \[0, 1\], got 1.5"),
        ("model.task_prompts", {"describe": ""}, r"model.task_prompts.describe: a prompt template"),
        ("data.train", [DataSet("x", languages={"es": -1})], r"data.train\[0\].languages: factors must be numbers"),
    ],
)
def test_bad_language_settings_name_the_key(key, value, message):
    cfg = Config()
    section, name = key.split(".")
    setattr(getattr(cfg, section), name, value)
    with pytest.raises(ConfigError, match=message):
        cfg.validate()


def test_ctc_aligns_what_was_said_not_a_translation_or_an_opening(tok):
    """The CTC head aligns sound to text in order: a clip's CTC target is its transcript, not a translation
    and not the answer's opening (a language's name is not said); a batch of a model without openings
    whose answers are all what was said carries no ctc_labels."""
    c = collator(tok, answer_language=True)
    b = batch(c, CLIPS)
    said = [tok.decode([int(t) for t in row if t != IGNORE][:-1]) for row in b["ctc_labels"]]
    assert turns(tok, b, 0)[1] == "language Spanish: hola a todos" and said[0] == "hola a todos"
    assert said[1] == "guten Morgen" and turns(tok, b, 1)[1] == "language German to English: good morning"
    assert said[3] == "いぬ が はしる"  # a task of one's own whose clip has a transcript
    assert said[2] == "hello there" == turns(tok, b, 2)[1]  # no language stated: no opening
    plain = collator(tok)
    assert "ctc_labels" not in batch(plain, [CLIPS[0], CLIPS[2]])
    said = [tok.decode([int(t) for t in row if t != IGNORE][:-1]) for row in batch(plain, CLIPS)["ctc_labels"]]
    assert said[1] == "guten Morgen" and said[0] == "hola a todos"
    # a transcription with its language but no words: nothing to align, not its opening
    empty = batch(c, [dict(CLIPS[0], text=""), CLIPS[1]])["ctc_labels"][0]
    assert int(empty[0]) == text.end_of_turn_id(tok) and (empty[1:] == IGNORE).all()
    no_words = dict(CLIPS[3], text="")  # a task's clip with no transcript: the CTC head keeps its answer
    assert "ctc_labels" not in batch(plain, [no_words])
