"""speechlm's stop rules as the vLLM plugin applies them (vllm_plugin/speechlm_vllm/stops.py), against
speechlm's own: the budget from a clip's placeholder count, the loop cut on token ids and on text, and
the folder checks. No vLLM here: stops.py reads the rules from the folder's own code."""

import numpy as np
import pytest
import torch

from speechlm import text
from speechlm.model import generation, save_pretrained
from vllm_helpers import tiny_folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from speechlm_vllm.folder import load

    model, path = tiny_folder(tmp_path_factory.mktemp("vllm") / "model", max_new_tokens=64)
    return model, load(path)


def test_the_placeholder_budget_is_the_longest_clips_budget(folder):
    from speechlm_vllm import stops

    model, f = folder
    for n in (1, 7, 50, 149, 1499):
        longest = stops.longest_clip(f, n)
        assert model.family.audio_token_count(longest, 1) == n
        assert model.family.audio_token_count(longest + 1, 1) == n + 1
        shortest = next(k for k in range(max(1, longest - 400), longest + 1) if f.audio_tokens(k) == n)
        exact = [stops.budget(f, k) for k in range(shortest, longest + 1, 7)]
        # never cuts shorter than speechlm, and by at most what one placeholder's span holds
        assert stops.budget_for_placeholders(f, n) >= max(exact)
        assert stops.budget_for_placeholders(f, n) - min(exact) <= int(np.ceil(8.0 * 0.02))


def test_the_budget_is_speechlms(folder):
    from speechlm_vllm import stops

    model, f = folder
    for n in (160, 16000, 37_000, 200_000):
        assert stops.budget(f, n) == generation.token_budget([n / 16000], 8.0, 8, 64)[0]


def _speechlm_loop_cut(row: list[int], eot: int) -> int | None:
    """Where speechlm's LoopStop cuts a row generated token by token (None: it never stops it)."""
    stop = generation.LoopStop(1, 8, 4, eot)
    for k in range(1, len(row) + 1):
        ids = torch.tensor([[999] + row[:k]])  # one prompt token, then the new ones
        if stop(ids, None)[0]:
            return stop.cut[0]
    return None


def test_the_loop_cut_on_token_ids_is_speechlms(folder):
    from speechlm_vllm import stops

    _, f = folder
    rng = np.random.default_rng(0)
    looped = 0
    for _ in range(60):
        head = rng.integers(5, 60, int(rng.integers(0, 12))).tolist()
        unit = rng.integers(5, 60, int(rng.integers(1, 5))).tolist()
        tail = rng.integers(5, 60, int(rng.integers(0, 6))).tolist()
        row = head + unit * int(rng.integers(1, 7)) + tail
        want = _speechlm_loop_cut(row, f.end_of_turn_id)
        looped += want is not None
        assert stops.loop_end(f, row) == want, row
        assert stops.cut_loop(f, row + [f.end_of_turn_id]) == (row[:want] if want is not None else row)
    assert looped >= 10  # the rule was exercised, not only its absence


def test_the_loop_cut_on_text(folder):
    from speechlm_vllm import stops

    _, f = folder
    ids = f.tokenizer("the cat", add_special_tokens=False)["input_ids"]
    unit = f.tokenizer(" sat", add_special_tokens=False)["input_ids"]
    text = f.tokenizer.decode(ids + unit * 5)
    assert stops.cut_text(f, text) == f.tokenizer.decode(ids + unit).strip()
    assert stops.cut_text(f, " the cat sat on the mat ") == "the cat sat on the mat"


def test_the_prompt_is_speechlms_with_the_placeholders_expanded(folder):
    model, f = folder
    one = f.prompt_ids(1)
    i = one.index(f.audio_token_id)
    for n in (1, 5, 300):
        assert one[:i] + [f.audio_token_id] * n + one[i + 1 :] == text.prompt_ids(
            model.tokenizer, n, model.cfg.prompt, model.cfg.audio_token, model.cfg.system_prompt
        )


def test_a_checkpoint_folder_is_refused_with_what_to_do(folder, tmp_path):
    from speechlm_vllm.folder import read_config

    model, _ = folder
    save_pretrained(model, tmp_path / "ckpt")  # bases by reference, as a checkpoint's folder
    with pytest.raises(ValueError, match="self-contained folder"):
        read_config(tmp_path / "ckpt")
    with pytest.raises(ValueError, match="not a speechlm model folder"):
        read_config(tmp_path)


def test_a_multilingual_models_opening_is_taken_off_its_text(tmp_path):
    """A model trained to open its answers with the language: the plugin's text is speechlm's, without
    the opening (SpeechLM._language_opened), from token ids and from text; a model without it keeps all."""
    from speechlm_vllm import stops
    from speechlm_vllm.folder import load

    model, path = tiny_folder(tmp_path / "ml", answer_language=True, languages=["en", "es"])
    f = load(path)
    for answer in ("language Spanish: hola a todos", "hola a todos", "language Klingon: hola", "language None:"):
        ids = f.tokenizer(answer, add_special_tokens=False)["input_ids"]
        want = model._language_opened({"ids": ids, "text": f.tokenizer.decode(ids).strip()}, None)["text"]
        assert stops.text_of(f, ids) == stops.cut_text(f, answer) == want
    # audio the model hears no speech in: the no-speech opening and no text, no language (text.NO_SPEECH)
    ids = f.tokenizer("language None:", add_special_tokens=False)["input_ids"]
    said = model._language_opened({"ids": ids, "text": "language None:"}, None)
    assert (said["text"], said["ids"], said["language"]) == ("", [], None)
    assert stops.text_of(f, f.tokenizer("language Spanish: hola", add_special_tokens=False)["input_ids"]) == "hola"
    _, plain = tiny_folder(tmp_path / "en")
    g = load(plain)
    assert stops.cut_text(g, "language Spanish: hola") == "language Spanish: hola"


def test_a_request_is_asked_its_language_task_and_context_as_speechlm_asks(tmp_path):
    """The plugin's prompt for a language, task and context is speechlm's, with a pinned language's
    opening given after it; the engine reads the pin back off the prompt, and the budget is speechlm's
    (the pinned language's rate, the opening spending it)."""
    from speechlm_vllm import stops
    from speechlm_vllm.folder import load

    rates = {"en": 4.0, "es": 9.0, "de": 6.0}
    model, path = tiny_folder(
        tmp_path / "ml", answer_language=True, languages=["en", "es", "de"], tokens_per_second_by_language=rates
    )
    f, cfg = load(path), model.cfg
    for language, task, context in (
        (None, "transcribe", None),
        ("es", "transcribe", "hola"),
        ("de", "translate", None),
    ):
        langs, given, [instruction] = model._asked(1, None, language, task, context)
        prompt, opening = f.asked_ids(7, language, task, context)
        assert prompt == text.prompt_ids(model.tokenizer, 7, instruction, cfg.audio_token, cfg.system_prompt)
        assert opening == given[0] and bool(opening) == bool(language)
        assert f.pinned(prompt + opening) == ((language, len(opening)) if language else (None, 0))
        want = generation.token_budget(
            [2.0], model.token_rates(langs), cfg.new_tokens_margin, cfg.max_new_tokens, [len(opening)]
        )
        assert stops.budget(f, 32000, language, len(opening)) == want[0]
    assert (
        f.asked_ids(7, "de", "translate")[1]
        == model.tokenizer("language German to English:", add_special_tokens=False)["input_ids"]
    )
    _, plain = tiny_folder(tmp_path / "en")
    g = load(plain)  # a model that lists no languages is asked none, as speechlm's server asks it
    assert g.asked_ids(7, "es") == (g.prompt_ids(7), []) and g.languages == ["en"]
