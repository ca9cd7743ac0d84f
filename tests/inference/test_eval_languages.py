"""`speechlm eval` on a set whose clips state their language and task (issue 38): each clip is asked its
task with its language pinned (a model that lists its languages), a translation is scored against its
target text, and the result holds the scores per language and task (speechlm.scoring.languages)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from model_helpers import tiny_config
from speechlm.inference import by_language, dataset_clips, evaluate
from speechlm.inference.transcribe import Task
from speechlm.scoring import languages as L
from speechlm.shard import NormalizeConfig, OutputConfig, ShardRecipe, Source, build

ROWS = [
    ("a", "hola a todos", "es", "hello everyone"),
    ("b", "el perro corre", "es", "the dog runs"),
    ("c", "guten Morgen", "de", "good morning"),
    ("d", "いぬ が はしる", "ja", "the dog runs"),
]


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """(transcription set, translation set): the same four clips, es/de/ja."""
    root = tmp_path_factory.mktemp("langs")
    rows = []
    for i, (name, said, lang, english) in enumerate(ROWS):
        t = np.arange(17000 + 3000 * i) / 16000
        sf.write(root / f"{name}.wav", (0.2 * np.sin(2 * np.pi * (180 + 40 * i) * t)).astype(np.float32), 16000)
        rows.append({"audio": f"{name}.wav", "text": said, "locale": lang, "english": english})
    (root / "test.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))

    def one(name, **labels):
        src = Source(name=name, kind="manifest", path=str(root), splits={"test": ["test.jsonl"]}, **labels)
        recipe = ShardRecipe(name=name, sources=[src], normalize=NormalizeConfig(truecase=False), output=OutputConfig())
        return build(recipe, root / name, workers=1)

    said = one("said", language_column="locale")
    translated = one(
        "translated", language_column="locale", task="translate", target_language="en", target_column="english"
    )
    return said, translated


@pytest.fixture(scope="module")
def model():
    import torch

    from speechlm.model import build_model

    torch.manual_seed(0)
    m = build_model(tiny_config())
    m.cfg.max_new_tokens = 4
    m.cfg.languages = ["es", "de", "ja"]
    return m


def test_each_clip_is_asked_its_language_and_scored_per_language(sets, model):
    said, _ = sets
    r = evaluate(model, str(said), batch_size=4)
    rows = {row["reference"]: row for row in r["rows"]}
    assert set(rows) == {s for _, s, _, _ in ROWS}
    for _, text, lang, _ in ROWS:
        row = rows[text]
        assert (row["language"], row["task"], row["pinned"]) == (lang, "transcribe", lang)
    # the hypotheses are those of the clips asked one by one with their language pinned
    for _, wave, ref in dataset_clips(str(said))[1]:
        want = model.transcribe([wave], language=rows[ref]["language"])[0]
        assert rows[ref]["hypothesis"] == want
    scores = r["languages"]
    assert scores == L.score_rows(r["rows"])
    assert {k for k in scores if k.startswith(("wer/", "cer/"))} == {"wer/es", "wer/de", "cer/ja"}
    assert scores["clips/transcribe/es"] == 2 and scores["clips/transcribe/ja"] == 1
    assert {k for k in scores if k.startswith("other_language/")} == {f"other_language/{x}" for x in ("es", "de", "ja")}


def test_a_translation_is_scored_against_its_target_with_bleu_and_chrf(sets, model):
    _, translated = sets
    r = evaluate(model, str(translated), batch_size=4)
    assert sorted(row["reference"] for row in r["rows"]) == sorted(e for *_, e in ROWS)
    assert all(row["task"] == "translate" and row["target_language"] == "en" for row in r["rows"])
    keys = {k for k in r["languages"] if not k.startswith("clips/")}
    assert keys == {f"{m}/{x}-en" for m in ("bleu", "chrf") for x in ("es", "de", "ja")}
    assert r["languages"]["clips/translate/es-en"] == 2


def test_a_model_without_languages_is_not_told_them(sets, model):
    said, _ = sets
    saved = model.cfg.languages
    model.cfg.languages = []
    try:
        r = evaluate(model, str(said), batch_size=4)
    finally:
        model.cfg.languages = saved
    assert all("pinned" not in row and row["language"] for row in r["rows"])
    assert not any(k.startswith("other_language/") for k in r["languages"])


def test_asked_tasks_group_and_come_back_in_order():
    calls = []

    def run(ws, task):
        calls.append((task, list(ws)))
        return [f"{task.language}:{w}" for w in ws]

    tasks = [Task("es"), Task(), Task("es"), Task("de", "translate")]
    assert by_language.run_by_task(run, [1, 2, 3, 4], tasks) == ["es:1", "None:2", "es:3", "de:4"]
    assert [t for t, _ in calls] == [Task("es"), Task(), Task("de", "translate")]
    assert by_language.reference(None, "x") == "x" and by_language.row_labels(None, Task()) == {}
    assert by_language.reference({"task": "translate", "target_text": "y"}, "x") == "y"


def test_the_in_training_eval_logs_scores_per_language(sets, model):
    from speechlm.config import DataSet
    from speechlm.train.transcribe_eval import transcribe_eval

    said, translated = sets
    cfg = tiny_config(eval_transcribe_clips=8, per_device_eval_batch_size=4)
    cfg.data.eval = [DataSet(str(said), split="test"), DataSet(str(translated), split="test")]
    scores, line = transcribe_eval(model, cfg)
    named = {k for k in scores if k.startswith(("eval/wer/", "eval/cer/", "eval/chrf/", "eval/bleu/"))}
    assert named == {"eval/wer/es", "eval/wer/de", "eval/cer/ja"} | {
        f"eval/{m}/{x}-en" for m in ("bleu", "chrf") for x in ("es", "de", "ja")
    }
    assert scores["eval/clips/transcribe/es"] == 2 and scores["eval/clips/translate/es-en"] == 2
    assert "wer/es" in line and "clips/" not in line


def test_speechlm_eval_prints_the_scores_per_language(capsys):
    from speechlm.commands.eval import print_languages

    scores = {"wer/es": 0.25, "clips/transcribe/es": 2, "chrf/de-en": 41.5, "clips/translate/de-en": 3}
    print_languages(
        [{"dataset": "said", "languages": {**scores, "lid": 0.5, "other_language/es": 1}}, {"dataset": "x"}]
    )
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "per language and task in said:"
    table = {line.split()[0]: line.split()[1:] for line in out[3:]}
    assert table == {
        "wer/es": ["25.00", "2"],
        "chrf/de-en": ["41.50", "3"],
        "lid": ["50.00"],
        "other_language/es": ["1"],
    }
