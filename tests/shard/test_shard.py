"""The shard pipeline end to end on the synthetic corpus: all source kinds, drops, truecasing,
determinism, and that the output is plain WebDataset (read with no speechlm code)."""

from __future__ import annotations

import io
import json
import re
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import webdataset as wds

from speechlm.shard import NormalizeConfig, OutputConfig, ShardRecipe, Source, build


def read_clips(shard_dir: Path, split: str) -> dict[str, tuple[bytes, dict]]:
    """id -> (flac bytes, json) for a split, straight from the tars."""
    out = {}
    for tar in sorted(shard_dir.glob(f"*-{split}-*.tar")):
        with tarfile.open(tar) as t:
            members = {m.name: t.extractfile(m).read() for m in t.getmembers()}
        for name, data in members.items():
            if name.endswith(".json"):
                key = name[: -len(".json")]
                out[key] = (members[f"{key}.flac"], json.loads(data))
    return out


def tar_bytes_of(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.glob("*.tar"))}


def test_synthetic_shards_are_plain_webdataset(synthetic_shards):
    man = json.loads((synthetic_shards / "manifest.json").read_text())
    assert {k: v["clips"] for k, v in man["splits"].items()} == {"train": 64, "eval": 16, "test": 8}
    assert [len(man["splits"][s]["shards"]) for s in ("train", "eval", "test")] == [8, 2, 1]
    for split, sp in man["splits"].items():
        for sh in sp["shards"]:
            urls = [str(synthetic_shards / sh["file"])]
            # webdataset alone, no speechlm code: keys, flac and json members
            samples = list(wds.WebDataset(urls, shardshuffle=False))
            assert [s["__key__"] for s in samples] == sh["ids"]
            for s, dur in zip(samples, sh["durations"]):
                meta = json.loads(s["json"])
                assert sorted(meta) == ["duration", "id", "orig_id", "source", "text"]
                assert meta["id"] == s["__key__"] and meta["source"] == "synthetic"
                wave, sr = sf.read(io.BytesIO(s["flac"]))
                assert sr == 16000 and wave.ndim == 1
                assert meta["duration"] == pytest.approx(len(wave) / 16000) == pytest.approx(dur)
                assert 0.8 <= dur <= 19 and meta["text"][0].isupper() and meta["text"][-1] in ".?"
            # and GNU tar lists the same members, owned by 0/0 at mtime 0
            listing = subprocess.run(["tar", "tvf", urls[0]], capture_output=True, text=True, check=True).stdout
            assert len(listing.splitlines()) == 2 * sh["clips"] and "0/0" in listing and "1970-01-01" in listing
        assert sp["clips"] == sum(s["clips"] for s in sp["shards"])
        assert sp["seconds"] == pytest.approx(sum(sum(s["durations"]) for s in sp["shards"]))
        assert sum(man["duration_histogram"]["counts"][split]) == sp["clips"]
    texts = {s: {c[1]["text"] for c in read_clips(synthetic_shards, s).values()} for s in ("train", "eval")}
    assert not texts["train"] & texts["eval"]
    # write-time shuffle: tar order is not the synthesis order
    ids = [i for sh in man["splits"]["train"]["shards"] for i in sh["ids"]]
    assert ids != sorted(ids) and sorted(ids) == [f"synthetic_train-{i:05d}" for i in range(64)]


def test_synthetic_build_is_byte_identical(synthetic_shards, tmp_path):
    from synthetic_set import small_synthetic_recipe

    again = build(small_synthetic_recipe(), tmp_path / "again", workers=1)  # other worker count too
    assert tar_bytes_of(again) == tar_bytes_of(synthetic_shards)
    assert (again / "manifest.json").read_bytes() == (synthetic_shards / "manifest.json").read_bytes()


# --------------------------------------------------------------------------- derived inputs


def _write(path: Path, data: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


def _flac_of(wave: np.ndarray) -> bytes:
    from speechlm.audio import encode_flac

    return encode_flac(wave)


@pytest.fixture(scope="module")
def mixed_inputs(synthetic_shards, tmp_path_factory):
    """The synthetic clips re-packaged as a JSONL+TSV manifest, a LibriSpeech folder (uppercase
    labels, no punctuation) and HF save_to_disk + parquet datasets, plus bad rows."""
    import datasets

    root = tmp_path_factory.mktemp("inputs")
    train = sorted(read_clips(synthetic_shards, "train").items())
    evals = sorted(read_clips(synthetic_shards, "eval").items())
    expect = {"man": {}, "ls": {}, "disk": {}, "pq": {}}  # source -> split -> [(orig_id, text)]

    # manifest: JSONL train (24 good + 5 bad rows) and TSV eval (4)
    rows = []
    for cid, (flac, meta) in train[:24]:
        rows.append({"audio": f"audio/{cid}.flac", "text": meta["text"] + "\x00 <noise>", "id": cid})
        _write(root / "man" / "audio" / f"{cid}.flac", flac)
    expect["man"]["train"] = [(cid, m["text"]) for cid, (_, m) in train[:24]]
    wave, _ = sf.read(io.BytesIO(train[0][1][0]), dtype="float32")
    bad = {
        "garbage": _write(root / "man" / "audio" / "garbage.flac", b"not a flac file at all"),
        "short": _write(root / "man" / "audio" / "short.flac", _flac_of(wave[:8000])),  # 0.5 s
        "long": _write(root / "man" / "audio" / "long.flac", _flac_of(np.tile(wave, 12)[: 16000 * 12])),
    }
    rows += [
        {"audio": bad["garbage"], "text": "Corrupt audio.", "id": "garbage"},
        {"audio": str(root / "man" / "audio" / "missing.flac"), "text": "Missing file.", "id": "missing"},
        {"audio": bad["short"], "text": "Too short.", "id": "short"},
        {"audio": bad["long"], "text": "Too long.", "id": "long"},
        {"audio": f"audio/{train[1][0]}.flac", "text": " [laughter] <unk> ", "id": "empty"},
    ]
    (root / "man" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tsv = ["audio\ttext\tid"]
    for cid, (flac, meta) in evals[:4]:
        _write(root / "man" / "audio" / f"{cid}.flac", flac)
        tsv.append(f"audio/{cid}.flac\t{meta['text']}\t{cid}")
    (root / "man" / "eval.tsv").write_text("\n".join(tsv) + "\n")
    expect["man"]["eval"] = [(cid, m["text"]) for cid, (_, m) in evals[:4]]

    # librispeech: dev-clean/SPK/CH/SPK-CH-NNNN.flac + SPK-CH.trans.txt, LibriSpeech-style labels
    lines = []
    for k, (_cid, (flac, meta)) in enumerate(evals[4:12]):
        oid = f"84-121123-{k:04d}"
        _write(root / "ls" / "dev-clean" / "84" / "121123" / f"{oid}.flac", flac)
        lines.append(f"{oid} {re.sub(r'[^A-Za-z ]', '', meta['text']).upper()}")
        expect["ls"].setdefault("eval", []).append((oid, re.sub(r"[,.?]", "", meta["text"])))
    (root / "ls" / "dev-clean" / "84" / "121123" / "84-121123.trans.txt").write_text("\n".join(lines) + "\n")

    # hf: a save_to_disk DatasetDict (train, dev) and a parquet folder (train), audio as bytes
    def hf(items):
        feats = datasets.Features(
            {
                "wav": {"bytes": datasets.Value("binary"), "path": datasets.Value("string")},
                "text": datasets.Value("string"),
                "id": datasets.Value("string"),
            }
        )
        d = datasets.Dataset.from_dict(
            {
                "wav": [{"bytes": f, "path": f"{c}.flac"} for c, (f, _) in items],
                "text": [m["text"] for _, (_, m) in items],
                "id": [c for c, _ in items],
            },
            features=feats,
        )
        return d.cast_column("wav", datasets.Audio(decode=False))

    datasets.DatasetDict(train=hf(train[24:44]), dev=hf(evals[12:16])).save_to_disk(str(root / "disk"))
    expect["disk"] = {
        "train": [(c, m["text"]) for c, (_, m) in train[24:44]],
        "eval": [(c, m["text"]) for c, (_, m) in evals[12:16]],
    }
    (root / "pq" / "data").mkdir(parents=True)
    hf(train[44:64]).to_parquet(str(root / "pq" / "data" / "train-00000-of-00001.parquet"))
    expect["pq"]["train"] = [(f"train-{i:08d}", m["text"]) for i, (_, (_, m)) in enumerate(train[44:64])]
    return root, expect


def mixed_recipe(root: Path, **output) -> ShardRecipe:
    return ShardRecipe(
        name="mixed",
        sources=[
            Source(
                name="man",
                kind="manifest",
                path=str(root / "man"),
                splits={"train": ["train.jsonl"], "eval": ["eval.tsv"]},
                id_column="id",
                weight=2.0,
            ),
            Source(name="ls", kind="librispeech", path=str(root / "ls"), splits={"eval": ["dev-clean"]}),
            Source(
                name="disk",
                kind="hf",
                path=str(root / "disk"),
                splits={"train": ["train"], "eval": ["dev"]},
                audio_column="wav",
                id_column="id",
            ),
            Source(
                name="pq",
                kind="hf",
                path=str(root / "pq"),
                splits={"train": ["train"]},
                audio_column="wav",
                cache_dir=str(root / "hf_cache"),
            ),
        ],
        normalize=NormalizeConfig(min_seconds=0.8, max_seconds=10.0),
        output=OutputConfig(**{"shard_clips": 10, "work_chunk": 8, **output}),
    )


def test_all_source_kinds_counts_drops_and_truecasing(mixed_inputs, tmp_path, caplog):
    root, expect = mixed_inputs
    caplog.set_level("INFO", logger="speechlm.shard")
    out = build(mixed_recipe(root), tmp_path / "mixed", workers=2)
    man = json.loads((out / "manifest.json").read_text())

    assert man["drops"]["by_source"]["man"]["train"] == {
        "undecodable_audio": 1,
        "audio_not_found": 1,  # said as such, not as a decoder's "System error"
        "too_short": 1,
        "too_long": 1,
        "empty_text": 1,
    }
    assert man["drops"]["total"] == 5 and man["drops"]["by_reason"]["undecodable_audio"] == 1
    assert "skipped audio: garbage: cannot decode" in caplog.text
    assert "dropped 1 man/train clips: too_long" in caplog.text
    assert "missing: audio file not found" in caplog.text
    # every dropped row in the drop report beside the manifest: row, file, reason
    report = [line.split("\t") for line in (out / "drops.tsv").read_text().splitlines()]
    assert report[0] == ["source", "split", "row", "file", "reason", "detail"]
    assert sorted(r[4] for r in report[1:]) == sorted(man["drops"]["by_source"]["man"]["train"])
    assert {r[4]: r[3].endswith("missing.flac") for r in report[1:]}["audio_not_found"]
    for src in man["sources"].values():
        for split, n in src["input"].items():  # kept = input - counted drops, per source and split
            assert src["kept"][split] == n - src["dropped"].get(split, 0)
    assert man["sources"]["man"]["input"] == {"train": 29, "eval": 4} and man["sources"]["man"]["weight"] == 2.0
    assert {s["weight"] for s in man["splits"]["train"]["shards"] if s["source"] == "man"} == {2.0}

    # every good row arrives with its normalized (and for ls: re-cased) text
    for split in ("train", "eval"):
        clips = read_clips(out, split)
        got = {(c[1]["source"], c[1]["orig_id"]): c[1]["text"] for c in clips.values()}
        want = {(src, oid): text for src, per in expect.items() for oid, text in per.get(split, [])}
        assert got == want
        assert all(c[1]["id"] == f"{c[1]['source']}_{c[1]['orig_id']}" for c in clips.values())
    assert man["sources"]["ls"]["truecased"] and not man["sources"]["man"]["truecased"]
    assert man["truecaser"]["trained_on"] == ["man", "disk", "pq"] and (out / "truecaser.model").is_file()
    shard_names = sorted(p.name for p in out.glob("*.tar"))
    assert "man-train-000002.tar" in shard_names and "ls-eval-000000.tar" in shard_names


def test_builds_are_byte_identical_and_shard_bytes_limit(mixed_inputs, tmp_path):
    root, _ = mixed_inputs
    a = build(mixed_recipe(root), tmp_path / "a", workers=1)
    b = build(mixed_recipe(root), tmp_path / "b", workers=2)
    assert tar_bytes_of(a) == tar_bytes_of(b) and len(tar_bytes_of(a)) >= 6
    assert (a / "manifest.json").read_bytes() == (b / "manifest.json").read_bytes()
    assert (a / "truecaser.model").read_bytes() == (b / "truecaser.model").read_bytes()

    limit = 200_000
    c = build(mixed_recipe(root, shard_clips=0, shard_bytes=limit), tmp_path / "c", workers=1)
    man = json.loads((c / "manifest.json").read_text())
    man_train = [s for s in man["splits"]["train"]["shards"] if s["source"] == "man"]
    assert len(man_train) >= 3 and sum(s["clips"] for s in man_train) == 24
    for s in man_train:
        with tarfile.open(c / s["file"]) as t:
            payload = sum(512 + -(-m.size // 512) * 512 for m in t.getmembers())
        assert payload + 1024 <= limit
    # a different seed reorders clips within the same shards layout rules
    d = build(mixed_recipe(root, seed=1), tmp_path / "d", workers=1)
    first = lambda p: json.loads((p / "manifest.json").read_text())["splits"]["train"]["shards"][0]["ids"]  # noqa: E731
    assert first(d) != first(a)


def test_rebuild_is_noop_other_settings_need_overwrite(mixed_inputs, tmp_path, caplog):
    from speechlm.config import ConfigError

    root, _ = mixed_inputs
    caplog.set_level("INFO", logger="speechlm.shard")
    out = build(mixed_recipe(root), tmp_path / "m", workers=1)
    before = tar_bytes_of(out)
    build(mixed_recipe(root), out, workers=1)
    assert "is up to date" in caplog.text
    with pytest.raises(ConfigError, match="another recipe or other settings.*--overwrite"):
        build(mixed_recipe(root, shard_clips=5), out, workers=1)
    assert tar_bytes_of(out) == before
    build(mixed_recipe(root, shard_clips=5), out, workers=1, overwrite=True)
    man = json.loads((out / "manifest.json").read_text())
    assert sorted(p.name for p in out.glob("*.tar")) == sorted(
        s["file"] for sp in man["splits"].values() for s in sp["shards"]
    )
    assert max(s["clips"] for sp in man["splits"].values() for s in sp["shards"]) == 5
