"""Languages and tasks in shard recipes (issue 38): a source's `language` or `language_column`, `task`
(transcribe, translate with a target column, a registered task of one's own), carried into each
clip's JSON; manifest.json counts hours per language and task; the reader's mix weights by them."""

from __future__ import annotations

import json
import tarfile

import numpy as np
import pytest
import soundfile as sf

from speechlm import tasks
from speechlm.config import ConfigError, DataSet
from speechlm.data.catalog import load_catalog
from speechlm.data.epoch_plan import epoch_units
from speechlm.shard import NormalizeConfig, OutputConfig, ShardRecipe, Source, build
from speechlm.shard.languages import language_code
from speechlm.shard.normalize import normalize_text

ROWS = [
    {"audio": "a.wav", "text": "hola a todos", "locale": "es-ES", "english": "hello everyone", "caption": "a greeting"},
    {"audio": "b.wav", "text": "guten Morgen", "locale": "de", "english": "good morning", "caption": "a morning"},
    {"audio": "c.wav", "text": "bonjour !", "locale": "fr_FR", "english": "hello!", "caption": "hello again"},
    {"audio": "d.wav", "text": "???", "locale": "xx", "english": "", "caption": ""},
]

tasks.register(tasks.Task("describe", "Describe what you hear."))


@pytest.fixture
def corpus(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    for i, r in enumerate(ROWS):
        t = np.arange(16000) / 16000
        sf.write(root / r["audio"], (0.2 * np.sin(2 * np.pi * (200 + 50 * i) * t)).astype(np.float32), 16000)
    (root / "train.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS))
    return root


def recipe(root, **src) -> ShardRecipe:
    return ShardRecipe(
        name="langs",
        sources=[Source(name="mine", kind="manifest", path=str(root), splits={"train": ["train.jsonl"]}, **src)],
        normalize=NormalizeConfig(truecase=False),
        output=OutputConfig(shard_clips=100),
    )


def clips(out) -> dict[str, dict]:
    got = {}
    for tar in sorted(out.glob("*.tar")):
        with tarfile.open(tar) as t:
            for m in t.getmembers():
                if m.name.endswith(".json"):
                    j = json.loads(t.extractfile(m).read())
                    got[j["text"]] = j
    return got


def test_a_language_column_gives_each_clip_its_language_and_counts_hours(corpus, tmp_path):
    out = build(recipe(corpus, language_column="locale"), tmp_path / "out", workers=1)
    got = clips(out)
    assert {t: j["language"] for t, j in got.items()} == {"hola a todos": "es", "guten Morgen": "de", "bonjour !": "fr"}
    assert all(j["task"] == "transcribe" and "target_text" not in j for j in got.values())
    man = json.loads((out / "manifest.json").read_text())
    train = man["splits"]["train"]
    assert man["drops"]["by_source"]["mine"]["train"] == {"unknown_language": 1}  # "xx": counted, not guessed
    assert {k: v["clips"] for k, v in train["languages"].items()} == {"es": 1, "de": 1, "fr": 1}
    assert train["languages"]["es"]["hours"] == pytest.approx(1 / 3600, abs=1e-6)
    assert train["tasks"]["transcribe"]["clips"] == 3
    assert sorted(train["shards"][0]["languages"]) == ["de", "es", "fr"]


def test_translation_carries_its_target_and_a_custom_task_its_answer(corpus, tmp_path):
    out = build(
        recipe(corpus, language_column="locale", task="translate", target_language="en", target_column="english"),
        tmp_path / "tr",
        workers=1,
    )
    got = clips(out)
    assert got["guten Morgen"]["target_text"] == "good morning"
    assert got["guten Morgen"]["target_language"] == "en" and got["guten Morgen"]["task"] == "translate"
    man = json.loads((out / "manifest.json").read_text())
    assert man["splits"]["train"]["tasks"]["translate"]["clips"] == 3
    out = build(recipe(corpus, language="es", task="describe", target_column="caption"), tmp_path / "d", workers=1)
    got = clips(out)
    assert got["hola a todos"]["target_text"] == "a greeting" and got["hola a todos"]["task"] == "describe"
    man = json.loads((out / "manifest.json").read_text())
    assert man["drops"]["by_source"]["mine"]["train"] == {"empty_target": 1}  # the row with no caption


@pytest.mark.parametrize(
    "src, message",
    [
        ({"language": "xx"}, r"sources\[0\].language: unknown language 'xx'"),
        ({"language": "es", "language_column": "locale"}, r"language_column: give language or language_column"),
        ({"task": "summarize"}, r"sources\[0\].task: unknown task 'summarize' \(known: .*describe.*transcribe"),
        ({"task": "translate", "target_column": "english"}, r"target_language: task translate needs"),
        ({"task": "translate", "target_language": "en"}, r"target_column: task translate needs"),
        ({"target_column": "english"}, r"target_column: task transcribe answers with the transcript"),
        ({"task": "describe", "target_column": "caption", "target_language": "en"}, r"target_language: only a task"),
    ],
)
def test_bad_language_and_task_keys_name_the_key(corpus, src, message):
    with pytest.raises(ConfigError, match=message):
        recipe(corpus, **src).validate()


def test_a_kind_without_columns_cannot_read_a_language_column():
    r = ShardRecipe(name="x", sources=[Source(name="s", kind="librispeech", path="/x", splits={"train": ["a"]})])
    r.sources[0].language_column = "locale"
    with pytest.raises(ConfigError, match=r"sources\[0\].language_column: kind 'librispeech' has no columns"):
        r.validate()


def test_language_codes_from_columns():
    assert [language_code(v) for v in ("es-ES", "zh_CN", "FR", "yue", "xx", "", None, 3)] == [
        "es",
        "zh",
        "fr",
        "yue",
        None,
        None,
        None,
        None,
    ]


def test_normalization_keeps_other_languages_letters_and_typography():
    assert normalize_text("Ça va ? Très bien ! <noise> .", language="fr") == "Ça va ? Très bien !."
    assert normalize_text("hello ? yes <noise> .") == "hello? yes."  # English as before
    assert normalize_text("می\u200cخواهم", language="fa") == "می\u200cخواهم"  # the non-joiner is a letter of fa
    assert normalize_text("a\u200cb") == "a b"
    assert normalize_text("Straße ÉCOLE naïve", language="de") == "Straße ÉCOLE naïve"  # no letter rewritten


def test_the_mix_weights_clips_by_language_and_task(corpus, tmp_path):
    out = build(recipe(corpus, language_column="locale"), tmp_path / "out", workers=1)
    plain = load_catalog([str(out)], ["train"])
    assert plain.shards[0].factors is None
    mixed = load_catalog([str(out)], ["train"], mixes=[({"es": 3, "de": 0}, {})])
    ids = mixed.shards[0].ids
    counts = {}
    for unit in epoch_units(mixed, [1.0], seed=0, epoch=0):
        for gid in unit.tolist():
            counts[ids[gid]] = counts.get(ids[gid], 0) + 1
    assert counts == {"mine_a": 3, "mine_c": 1}  # es three times, fr once, de never
    with pytest.raises(ConfigError, match=r"data.train\[0\].languages: factors must be numbers >= 0"):
        load_catalog([str(out)], ["train"], mixes=[({"es": -1}, {})])
    assert DataSet(str(out), languages={"es": 2.0}).languages == {"es": 2.0}


def test_a_set_whose_clips_state_no_language_cannot_mix_by_it(corpus, tmp_path):
    out = build(recipe(corpus), tmp_path / "plain", workers=1)
    assert all("language" not in j and "task" not in j for j in clips(out).values())  # bytes as before
    with pytest.raises(ConfigError, match=r"state no language or task .* rebuild the set"):
        load_catalog([str(out)], ["train"], mixes=[({"es": 2}, {})])


def _recased(root, tmp_path, name, sources, **normalize):
    """Build `sources` ([(name, jsonl rows, language)]) with re-casing on; (clips by id, manifest)."""
    srcs = []
    for src, rows, lang in sources:
        for i in range(len(rows)):
            t = np.arange(16000) / 16000
            sf.write(root / f"{src}{i}.wav", (0.2 * np.sin(2 * np.pi * (200 + 30 * i) * t)).astype(np.float32), 16000)
        lines = [
            json.dumps({"audio": f"{src}{i}.wav", "text": r, "id": f"{src}{i}"}) + "\n" for i, r in enumerate(rows)
        ]
        (root / f"{src}.jsonl").write_text("".join(lines))
        srcs.append(
            Source(name=src, kind="manifest", path=str(root), splits={"train": [f"{src}.jsonl"]}, language=lang)
        )
    cfg = ShardRecipe(name=name, sources=srcs, normalize=NormalizeConfig(**normalize), output=OutputConfig())
    out = build(cfg, tmp_path / name, workers=1)
    got = {}
    for tar in sorted(out.glob("*.tar")):
        with tarfile.open(tar) as t:
            got.update({m.name: json.loads(t.extractfile(m).read())["text"] for m in t if m.name.endswith(".json")})
    # members are SOURCE_ID.json, and the ids here start with their source's name
    ids = {
        k.removesuffix(".json").removeprefix(s + "_"): v
        for k, v in got.items()
        for s, _, _ in sources
        if k.startswith(s + "_" + s)
    }
    return ids, json.loads((out / "manifest.json").read_text())


def test_recasing_only_where_a_truecaser_exists_for_the_language(tmp_path):
    """Issue 38: English all-caps labels are re-cased by the shipped English model; German all-caps ones
    by a truecaser trained on the recipe's cased German source (not the English one); German all-caps
    with no German truecaser is a ConfigError naming the source; all-lowercase German is left as it is."""
    root = tmp_path / "c"
    root.mkdir()
    en = ("en_caps", ["JOHN MET MARY IN LONDON"], "en")
    de_cased = ("de_cased", ["Der Hund sieht die Katze", "Die Katze sieht den Hund in Berlin"], "de")
    de_caps = ("de_caps", ["DER HUND IN BERLIN"], "de")
    got, man = _recased(root, tmp_path, "both", [en, de_cased, de_caps])
    assert got["en_caps0"] == "John met Mary in London"
    assert got["de_caps0"] == "Der Hund in Berlin"  # the German model's "Hund", a noun: capitalized
    by = man["truecaser"]["by_language"]
    assert by["en"]["model"] == "builtin:truecaser_en" and by["en"]["applied_to"] == ["en_caps"]
    assert by["de"]["model"] == "trained:de_cased" and by["de"]["file"] == "truecaser.de.model"
    assert man["sources"]["de_caps"]["truecaser"][0]["language"] == "de"
    assert not man["sources"]["de_cased"]["truecased"]

    with pytest.raises(ConfigError) as e:
        _recased(root, tmp_path, "nocaser", [en, de_caps])
    msg = str(e.value)
    assert msg.startswith("sources[1] (de_caps): its de labels are all uppercase and there is no de truecaser")
    assert "normalize.truecase_models: {de: FILE}" in msg and "sources[1].truecase: false" in msg

    lower = ("de_lower", ["der hund in berlin"], "de")
    got, man = _recased(root, tmp_path, "lower", [lower])
    assert got["de_lower0"] == "der hund in berlin" and man["truecaser"] is None
    assert not man["sources"]["de_lower"]["truecased"]


def test_a_truecaser_file_per_language_and_its_key(tmp_path):
    from speechlm.shard import truecase

    root = tmp_path / "c"
    root.mkdir()
    truecase.train(["Der Hund in Berlin", "Die Katze sieht den Hund"], tmp_path / "de.model")
    de_caps = ("de_caps", ["DIE KATZE IN BERLIN"], "de")
    got, man = _recased(root, tmp_path, "given", [de_caps], truecase_models={"de": str(tmp_path / "de.model")})
    assert got["de_caps0"] == "Die Katze in Berlin" and man["truecaser"]["language"] == "de"
    with pytest.raises(ConfigError, match=r"normalize.truecase_models.de: file not found"):
        _recased(root, tmp_path, "missing", [de_caps], truecase_models={"de": str(tmp_path / "no.model")})
    with pytest.raises(ConfigError, match=r"normalize.truecase_models.xx: unknown language"):
        _recased(root, tmp_path, "bad", [de_caps], truecase_models={"xx": "f"})


GRANITE_SPEECH = {"en", "fr", "de", "es", "pt", "ja"}  # the languages Granite Speech 4 transcribes


def test_the_multilingual_production_mix_covers_granite_speechs_languages():
    """shards/multilingual.yaml, offline: every language Granite Speech transcribes has a train and an
    eval source from the Hub; each lowercase MLS source has a cased FLEURS source of its language to train
    its truecaser on (speechlm.shard.recasing), so the build re-cases instead of stopping; the English
    mix is multiasr's; and the planner's Hub sizing counts only each MLS source's own language and splits."""
    from speechlm.shard.schema import load_recipe
    from speechlm.shard.sources.hf import hub_files_bytes

    mix, _ = load_recipe("multilingual")
    mix.validate()
    speech = [s for s in mix.sources if not s.keep_empty]
    assert {s.kind for s in mix.sources} == {"hf"} and {s.language for s in speech} == GRANITE_SPEECH
    for lang in GRANITE_SPEECH:
        mine = [s for s in speech if s.language == lang]
        assert all({"train", "eval"} <= set(s.splits) for s in mine), lang
    english, _ = load_recipe("multiasr")
    assert [s.name for s in mix.sources[: len(english.sources)]] == [s.name for s in english.sources]
    for mls in (s for s in speech if s.path == "facebook/multilingual_librispeech"):
        cased = [s for s in speech if s.language == mls.language and s.text_column == "raw_transcription"]
        assert cased and cased[0].path == "google/fleurs", mls.name
    assert {s.task for s in mix.sources} == {"transcribe"} and not mix.normalize.truecase_models
    files = [
        (f"{lang}/{split}-0000{i}-of-00002.parquet", 10)
        for lang in ("german", "french")
        for i in (0, 1)
        for split in ("train", "dev", "test", "9_hours")
    ]
    mls_de = next(s for s in mix.sources if s.name == "mls_de")
    assert hub_files_bytes(files, mls_de.subset, [x for v in mls_de.splits.values() for x in v]) == 40
