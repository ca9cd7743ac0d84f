"""speechlm eval (speechlm.inference) reads shard sets through the training reader (speechlm.data), so a set at a URL
evaluates like a local one, and unreadable shards are counted skips."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from model_helpers import tiny_config
from speechlm.config import ConfigError
from speechlm.inference import dataset_clips, evaluate
from tests.infra.httpfolder import HTTPFolder


@pytest.fixture()
def served(synthetic_shards):
    srv = HTTPFolder(synthetic_shards.parent)  # python's http.server on 127.0.0.1
    yield srv.url(synthetic_shards.name)
    srv.stop()


def test_a_shard_set_at_a_url_reads_as_the_local_one(synthetic_shards, served):
    name, local = dataset_clips(str(synthetic_shards), n=5)
    name_url, remote = dataset_clips(served, n=5)
    a, b = list(local), list(remote)
    assert name == name_url == "synthetic"
    manifest = json.loads((synthetic_shards / "manifest.json").read_text())
    first = [i for sh in manifest["splits"]["test"]["shards"] for i in sh["ids"]][:5]  # test split by default
    assert sorted(x[0] for x in a) == sorted(first) and [x[0] for x in a] == [x[0] for x in b]
    assert [x[2] for x in a] == [x[2] for x in b] and all(x[2] for x in a)
    assert all(np.array_equal(x[1], y[1]) and x[1].dtype == np.float32 for x, y in zip(a, b))
    with pytest.raises(ConfigError, match=r"dataset\[0\]\.split: 'dev' is not in"):
        dataset_clips(served, split="dev")


def test_evaluate_over_http_and_a_missing_tar_is_a_counted_skip(synthetic_shards, tmp_path):
    from speechlm.model import build_model

    copy = tmp_path / "synthetic"
    shutil.copytree(synthetic_shards, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    shards = manifest["splits"]["eval"]["shards"]
    (copy / shards[1]["file"]).unlink()  # the second eval tar is gone from the server
    srv = HTTPFolder(tmp_path)
    try:
        model = build_model(tiny_config())
        model.cfg.max_new_tokens = 3
        r = evaluate(model, srv.url("synthetic"), split="eval", batch_size=4)
    finally:
        srv.stop()
    assert r["dataset"] == "synthetic" and r["skipped"] == shards[1]["clips"]
    assert sorted(row["id"] for row in r["rows"]) == sorted(shards[0]["ids"]) and r["clips"] == shards[0]["clips"]
    assert all(set(row) == {"id", "reference", "hypothesis", "errors"} for row in r["rows"])


def test_a_poisoned_manifest_evaluates_every_clip_it_can(tmp_path, capsys):
    """Issue 36: a clip of 5 samples is padded and scored (as the silence it is), an undecodable and a
    NaN clip are skipped by name and counted; the good clips' hypotheses are those of a clean run."""
    import soundfile as sf

    from model_helpers import trained_looking, waves

    model = trained_looking("tiny/whisper", "tiny/qwen3_5")
    rows = []
    for i, w in enumerate(waves((16000, 12000), seed=9)):
        sf.write(tmp_path / f"good{i}.wav", w, 16000)
        rows.append({"id": f"good{i}", "audio": f"good{i}.wav", "text": "hello world"})
    clean = tmp_path / "clean.jsonl"
    clean.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sf.write(tmp_path / "tiny.wav", waves((5,), seed=1)[0], 16000)
    sf.write(tmp_path / "nan.wav", np.array([0.1, np.nan] * 80, np.float32), 16000, subtype="FLOAT")
    (tmp_path / "junk.wav").write_bytes(b"not audio")
    bad = [{"id": n, "audio": f"{n}.wav", "text": "hello"} for n in ("tiny", "nan", "junk")]
    poisoned = tmp_path / "poisoned.jsonl"
    poisoned.write_text("".join(json.dumps(r) + "\n" for r in [rows[0], *bad, rows[1]]))
    want = {r["id"]: r["hypothesis"] for r in evaluate(model, str(clean), batch_size=8)["rows"]}
    r = evaluate(model, str(poisoned), batch_size=8)
    got = {row["id"]: row["hypothesis"] for row in r["rows"]}
    assert set(got) == {"good0", "good1", "tiny"} and r["skipped"] == 2
    assert {k: got[k] for k in want} == want
    err = capsys.readouterr().err
    assert "skip nan: non-finite samples" in err and "skip junk: cannot decode" in err
