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
