"""A data path that is not there is an error, unless the user's own config names the recipe that
builds it beside it (issue 35, mistake 3: a typo in a path trained on the demo corpus)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from speechlm.config import Config, ConfigError, load
from speechlm.train.inputs import ensure_shards


def test_3_a_typo_in_a_path_is_an_error_not_the_inherited_recipe(tmp_path):
    cfg = load(Config, "demo", None, [f"data.train.0.path={tmp_path}/mien"])
    with pytest.raises(ConfigError) as e:
        ensure_shards(cfg)
    msg = str(e.value)
    assert f"data.train[0].path: no shard set at {tmp_path}/mien" in msg and "from command line" in msg
    assert "data.recipe (shards/demo.yaml) was set by" in msg and "recipes/demo.yaml" in msg
    assert not (tmp_path / "mien").exists()  # nothing built there


def test_3_a_config_on_a_base_does_not_inherit_its_recipe_for_its_own_paths(tmp_path):
    (tmp_path / "mine.yaml").write_text(f"base: demo\ndata:\n  train: [{{path: {tmp_path}/mine}}]\n")
    cfg = load(Config, str(tmp_path / "mine.yaml"), None, [f"data.eval.0.path={tmp_path}/mine"])
    with pytest.raises(
        ConfigError, match=r"data.train\[0\].path: no shard set at .*mine \(no manifest.json; from .*mine.yaml\)"
    ):
        ensure_shards(cfg)


def test_3_a_recipe_named_beside_the_path_builds_it(tmp_path):
    t = np.arange(16000) / 16000
    for i in range(4):
        sf.write(tmp_path / f"{i}.wav", (0.3 * np.sin(2 * np.pi * (200 + 50 * i) * t)).astype(np.float32), 16000)
    rows = "".join(json.dumps({"audio": f"{i}.wav", "text": f"clip {i}"}) + "\n" for i in range(4))
    (tmp_path / "train.jsonl").write_text(rows)
    (tmp_path / "my.yaml").write_text(
        f"sources:\n- {{name: my, kind: manifest, path: {tmp_path}, "
        "splits: {train: [train.jsonl], eval: [train.jsonl]}}"
    )
    sets = [f"data.train.0.path={tmp_path}/a", f"data.eval.0.path={tmp_path}/a", f"data.recipe={tmp_path}/my.yaml"]
    ensure_shards(load(Config, "demo", None, sets))
    assert json.loads((tmp_path / "a" / "manifest.json").read_text())["splits"]["train"]["clips"] == 4
