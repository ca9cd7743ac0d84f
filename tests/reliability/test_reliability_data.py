"""Issue #7, item 3 (fast part): bad data in sharding and reading is skipped, counted by reason,
logged, and never changes step counts. The trainer side runs in test_reliability_faults.py."""

from __future__ import annotations

import collections
import io
import json
import logging

import numpy as np
import soundfile as sf

from data_helpers import ids_collate
from faults.bad_data import BAD, make_bad_set
from speechlm.config import DataSet
from speechlm.data import TrainLoader
from speechlm.shard import build
from speechlm.shard.schema import NormalizeConfig, OutputConfig, ShardRecipe, Source


def test_reader_skips_and_counts_every_bad_item(synthetic_shards, tmp_path, caplog):
    bad = make_bad_set(synthetic_shards, tmp_path / "bad")
    caplog.set_level(logging.WARNING)
    world = 2
    loaders = [
        TrainLoader(
            [DataSet(str(bad.path))], ids_collate, batch_size=4, rank=r, world_size=world, num_workers=0, seed=3
        )
        for r in range(world)
    ]
    steps = loaders[0].steps_per_epoch
    per_rank = [list(lo) for lo in loaders]
    assert [len(b) for b in per_rank] == [steps] * world  # equal steps: no rank waits in a collective
    seen = collections.Counter(
        i for b in per_rank for batch in b for i, w in zip(batch["ids"], batch["weight"]) if w > 0
    )
    assert set(seen) == set(bad.good) and max(seen.values()) == 1
    stats = loaders[0].stats + loaders[1].stats
    assert stats["bad_clips"] == len(BAD)  # corrupt, zero-length, NaN, inf, non-UTF-8, empty text
    assert stats["missing_clips"] == len(bad.truncated) + len(bad.missing)
    assert stats["tar_errors"] >= 2  # the truncated tar and the missing one
    for cid in BAD:
        assert f"clip {cid} in" in caplog.text, cid  # each named in the log with its reason
    assert "non-finite" in caplog.text and "no samples" in caplog.text and "empty text" in caplog.text


def _wav(wave) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, np.asarray(wave, np.float32), 16000, format="WAV", subtype="FLOAT")
    return buf.getvalue()


def test_shard_build_drops_bad_rows_by_reason(tmp_path, caplog):
    root = tmp_path / "in"
    (root / "a").mkdir(parents=True)
    t = np.arange(16000 * 2) / 16000
    good = 0.3 * np.sin(2 * np.pi * 220 * t)
    files = {
        "good1": _wav(good),
        "good2": _wav(good * 0.5),
        "zero": _wav(np.zeros(0)),
        "nan": _wav(np.where(t > 1, np.nan, good)),
        "inf": _wav(np.where(t > 1, np.inf, good)),
        "corrupt": b"RIFF not really a wav",
        "utf8": _wav(good),
        "empty": _wav(good),
    }
    for k, v in files.items():
        (root / "a" / f"{k}.wav").write_bytes(v)
    lines = [
        json.dumps({"audio": f"a/{k}.wav", "text": "A tone." if k != "empty" else " <noise> ", "id": k}).encode()
        for k in files
        if k != "utf8"
    ]
    lines.append(b'{"audio": "a/utf8.wav", "text": "caf\xe9 \xff", "id": "utf8"}')  # latin-1 bytes, not UTF-8
    lines.append(json.dumps({"audio": "a/missing.wav", "text": "Gone.", "id": "missing"}).encode())
    (root / "train.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    recipe = ShardRecipe(
        name="bad",
        sources=[
            Source(name="man", kind="manifest", path=str(root), splits={"train": ["train.jsonl"]}, id_column="id")
        ],
        # 7 of 9 rows are bad on purpose: above the default share of 0.5, which stops a build
        normalize=NormalizeConfig(min_seconds=0.5, max_seconds=10.0, truecase=False, max_drop_share=0.8),
        output=OutputConfig(shard_clips=10, work_chunk=4),
    )
    caplog.set_level(logging.INFO, logger="speechlm.shard")
    out = build(recipe, tmp_path / "out", workers=1)
    man = json.loads((out / "manifest.json").read_text())
    assert man["drops"]["by_source"]["man"]["train"] == {
        "undecodable_audio": 4,  # zero, nan, inf, corrupt
        "audio_not_found": 1,  # missing
        "empty_text": 1,
        "text_not_utf8": 1,
    }
    assert man["splits"]["train"]["clips"] == 2
    for reason in ("undecodable_audio", "audio_not_found", "empty_text", "text_not_utf8"):
        assert f"man/train clips: {reason}" in caplog.text  # the printed summary
    report = (out / "drops.tsv").read_text().splitlines()
    assert len(report) == 1 + 7 and "train.jsonl:8\t" in report[2] and "\ttext_not_utf8\t" in report[2]


def test_empty_transcripts_pass_only_from_sources_that_keep_them(synthetic_shards, tmp_path):
    """Non-speech clips (shard recipe `keep_empty: true`) reach training with an empty transcript;
    the same clip from any other source is a counted skip (test above)."""
    import tarfile

    man = json.loads((synthetic_shards / "manifest.json").read_text())
    first = man["splits"]["train"]["shards"][0]
    with tarfile.open(synthetic_shards / first["file"]) as t:
        flac = next(t.extractfile(m).read() for m in t.getmembers() if m.name.endswith(".flac"))
    out = tmp_path / "noise"
    out.mkdir()
    ids = ["noise_a", "noise_b"]
    with tarfile.open(out / "noise-train-000000.tar", "w") as t:
        for cid in ids:
            for name, data in ((f"{cid}.flac", flac), (f"{cid}.json", json.dumps({"id": cid, "text": ""}).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    shard = {
        **first,
        "file": "noise-train-000000.tar",
        "clips": 2,
        "ids": ids,
        "durations": first["durations"][:2],
        "source": "noise",
    }
    manifest = {"splits": {"train": {"shards": [shard], "clips": 2}}, "sources": {"noise": {"keep_empty": True}}}
    (out / "manifest.json").write_text(json.dumps(manifest))
    loader = TrainLoader([DataSet(str(out))], ids_collate, batch_size=2, num_workers=0, seed=0)
    assert sorted(i for b in loader for i, w in zip(b["ids"], b["weight"]) if w > 0) == ids
    assert loader.stats["bad_clips"] == 0
    manifest["sources"]["noise"]["keep_empty"] = False
    (out / "manifest.json").write_text(json.dumps(manifest))
    loader = TrainLoader([DataSet(str(out))], ids_collate, batch_size=2, num_workers=0, seed=0)
    assert [i for b in loader for i, w in zip(b["ids"], b["weight"]) if w > 0] == []
    assert loader.stats["bad_clips"] == 2
