"""A user's own folder of WAVs and a manifest, as issue 35 found them: every mistake it names ends in a
clear error or a counted, reported drop, and a fixed label reaches the shards on the next build."""

from __future__ import annotations

import json
import os
import tarfile

import numpy as np
import pytest
import soundfile as sf

from shard_cli import run_cli
from speechlm.config import ConfigError
from speechlm.shard import NormalizeConfig, OutputConfig, ShardRecipe, Source, build

SENTENCES = ["the cat sat on the mat", "a dog ran in the park", "we like green apples", "she reads a book"]


def read_texts(out, split: str) -> list[str]:
    """Every clip's text in a split's tars, in tar order."""
    texts = []
    for tar in sorted(out.glob(f"*-{split}-*.tar")):
        with tarfile.open(tar) as t:
            texts += [json.loads(t.extractfile(m).read())["text"] for m in t.getmembers() if m.name.endswith(".json")]
    return texts


def wav(path, seconds=1.2, f0=220.0):
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(16000 * seconds)) / 16000
    sf.write(path, (0.3 * np.sin(2 * np.pi * f0 * t)).astype(np.float32), 16000)


@pytest.fixture
def mine(tmp_path):
    """spk/a/000.wav ... spk/b/001.wav: equal file names in two folders, with a JSONL, a CSV and a TSV."""
    root = tmp_path / "mine"
    rows = []
    for i, text in enumerate(SENTENCES):
        rel = f"wavs/spk/{'ab'[i // 2]}/{i % 2:03d}.wav"
        wav(root / rel, f0=200 + 40 * i)
        rows.append({"audio": rel, "text": text})
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "train.csv").write_text("audio,text\n" + "".join(f'{r["audio"]},"{r["text"]}, too"\n' for r in rows))
    (root / "train.tsv").write_text("audio\ttext\n" + "".join(f"{r['audio']}\t{r['text']}\n" for r in rows))
    return root


def recipe(root, *files, **src) -> ShardRecipe:
    return ShardRecipe(
        name="mine",
        sources=[Source(name="mine", kind="manifest", path=str(root), splits={"train": list(files)}, **src)],
        normalize=NormalizeConfig(truecase=False),
        output=OutputConfig(shard_clips=100),
    )


def manifest(out) -> dict:
    return json.loads((out / "manifest.json").read_text())


def test_1_a_column_no_row_has_is_an_error_naming_the_columns(mine, tmp_path):
    with pytest.raises(
        ConfigError, match=r"text_column: .*train.jsonl has no column 'transcript' \(its columns: audio, text\)"
    ):
        build(recipe(mine, "train.jsonl", text_column="transcript"), tmp_path / "out", workers=1)
    with pytest.raises(
        ConfigError, match=r"audio_column: .*train.csv has no column 'path' \(its columns: audio, text\)"
    ):
        build(recipe(mine, "train.csv", audio_column="path"), tmp_path / "out", workers=1)
    with pytest.raises(ConfigError, match=r"id_column: .*has no column 'utt'"):
        build(recipe(mine, "train.tsv", id_column="utt"), tmp_path / "out", workers=1)
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_2_an_edited_label_or_a_new_row_is_rebuilt_without_a_flag(mine, tmp_path, caplog):
    caplog.set_level("INFO", logger="speechlm.shard")
    out = build(recipe(mine, "train.jsonl"), tmp_path / "out", workers=1)
    assert "the cat sat on the mat" in read_texts(out, "train")
    caplog.clear()
    assert build(recipe(mine, "train.jsonl"), out, workers=1) == out and "is up to date" in caplog.text

    man = mine / "train.jsonl"
    man.write_text(man.read_text().replace("the cat sat", "the cat sits"))
    build(recipe(mine, "train.jsonl"), out, workers=1)
    assert "its inputs changed (mine: train.jsonl changed); rebuilding it" in caplog.text
    texts = read_texts(out, "train")
    assert "the cat sits on the mat" in texts and "the cat sat on the mat" not in texts

    wav(mine / "wavs/new.wav")
    man.write_text(man.read_text() + json.dumps({"audio": "wavs/new.wav", "text": "a new row"}) + "\n")
    build(recipe(mine, "train.jsonl"), out, workers=1)
    assert manifest(out)["splits"]["train"]["clips"] == 5 and "a new row" in read_texts(out, "train")

    # an audio file replaced under the same name counts as a change too
    caplog.clear()
    wav(mine / "wavs/new.wav", seconds=2.0)
    os.utime(mine / "wavs/new.wav", ns=(1, 1))
    build(recipe(mine, "train.jsonl"), out, workers=1)
    assert "train.jsonl (audio files) changed" in caplog.text


def test_7_a_lost_split_is_an_error_with_the_reasons_and_every_row_reported(mine, tmp_path):
    lost = mine / "lost.jsonl"
    lost.write_text((mine / "train.jsonl").read_text().replace("wavs/", "nowhere/"))
    r = recipe(mine, "train.jsonl")
    r.sources[0].splits["eval"] = ["lost.jsonl"]
    with pytest.raises(ConfigError) as e:
        build(r, tmp_path / "out", workers=1)
    msg = str(e.value)
    assert "split 'eval' ends with 0 clips" in msg and "mine/eval: 4 of 4 rows dropped (audio_not_found 4)" in msg
    assert "nowhere/spk/a/000" in msg and "drops.tsv" in msg
    assert not (tmp_path / "out" / "manifest.json").exists()
    rows = [line.split("\t") for line in (tmp_path / "out" / "drops.tsv").read_text().splitlines()[1:]]
    assert len(rows) == 4 and {r[4] for r in rows} == {"audio_not_found"}
    assert all(r[3].endswith(".wav") and "not found" in r[5] for r in rows)

    # more than max_drop_share of a split lost (here 1 of 4 at 0.2) stops the build too; the same
    # command after the data is fixed builds, no flag needed
    lost.write_text((mine / "train.jsonl").read_text().replace("wavs/spk/a/000", "nowhere/000"))
    r.normalize.max_drop_share = 0.2
    with pytest.raises(
        ConfigError,
        match=r"mine/eval: 1 of 4 rows dropped \(audio_not_found 1\), more than normalize.max_drop_share=0.2",
    ):
        build(r, tmp_path / "out", workers=1)
    r.normalize.max_drop_share = 0.5
    man = manifest(build(r, tmp_path / "out", workers=1))
    assert man["splits"]["eval"]["clips"] == 3 and man["drops"]["by_reason"] == {"audio_not_found": 1}


def test_8_equal_file_names_in_two_folders_are_two_clips(mine, tmp_path):
    man = manifest(build(recipe(mine, "train.jsonl"), tmp_path / "out", workers=1))
    assert man["drops"]["total"] == 0
    ids = sorted(i for sh in man["splits"]["train"]["shards"] for i in sh["ids"])
    assert ids == ["mine_wavs_spk_a_000", "mine_wavs_spk_a_001", "mine_wavs_spk_b_000", "mine_wavs_spk_b_001"]


def test_8_duplicate_ids_are_warned_with_the_fix_and_reported(mine, tmp_path, caplog):
    rows = [json.loads(x) for x in (mine / "train.jsonl").read_text().splitlines()]
    (mine / "ids.jsonl").write_text("".join(json.dumps(dict(r, utt=r["audio"][-7:-4])) + "\n" for r in rows))
    out = build(recipe(mine, "ids.jsonl", id_column="utt"), tmp_path / "out", workers=1)
    assert manifest(out)["drops"]["by_reason"] == {"duplicate_id": 2}
    warned = [r for r in caplog.records if r.levelname == "WARNING" and "duplicate_id" in r.getMessage()]
    assert warned and "sources[0].id_column" in warned[0].getMessage()
    report = (out / "drops.tsv").read_text()
    assert "ids.jsonl:3" in report and "is also ids.jsonl:1's" in report


@pytest.mark.parametrize("name", ["train.jsonl", "train.csv", "train.tsv"])
def test_9_jsonl_csv_and_tsv_read_alike(mine, tmp_path, name):
    out = build(recipe(mine, name), tmp_path / "out", workers=1)
    texts = read_texts(out, "train")
    suffix = ", too" if name.endswith(".csv") else ""  # the CSV's quoted texts hold a comma
    assert sorted(texts) == sorted(t + suffix for t in SENTENCES)


def test_9_hf_audiofolder_layout(tmp_path):
    """data/train/metadata.csv with a file_name column, as Hugging Face's audiofolder reads it."""
    root = tmp_path / "data"
    for split, texts in (("train", SENTENCES[:3]), ("test", SENTENCES[3:])):
        for i, _ in enumerate(texts):
            wav(root / split / f"clip{i}.wav")
        lines = "".join(f"clip{i}.wav,{t}\n" for i, t in enumerate(texts))
        (root / split / "metadata.csv").write_text("file_name,transcription\n" + lines)
    r = ShardRecipe(
        name="af",
        sources=[
            Source(
                name="af",
                kind="manifest",
                path=str(root),
                text_column="transcription",
                splits={"train": ["train"], "test": ["test"]},
            )
        ],
        normalize=NormalizeConfig(truecase=False),
    )
    out = build(r, tmp_path / "out", workers=1)
    assert sorted(read_texts(out, "train")) == sorted(SENTENCES[:3]) and read_texts(out, "test") == SENTENCES[3:]
    (root / "empty").mkdir()
    r.sources[0].splits["eval"] = ["empty"]
    with pytest.raises(ConfigError, match=r"splits.eval: .*empty is a folder without metadata.csv or metadata.jsonl"):
        build(r, tmp_path / "out2", workers=1)


def test_9_a_csv_named_jsonl_says_how_files_are_read(mine, tmp_path):
    (mine / "wrong.jsonl").write_text((mine / "train.csv").read_text())
    with pytest.raises(ConfigError, match=r"wrong.jsonl:1: not valid JSON .* .csv \(comma-separated, header row\)"):
        build(recipe(mine, "wrong.jsonl"), tmp_path / "out", workers=1)


def test_10_shard_help_says_where_the_output_goes(tmp_path):
    p = run_cli("--help")
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 0
    assert "default: <the recipe's folder>/<recipe name>/" in " ".join(out.split())
