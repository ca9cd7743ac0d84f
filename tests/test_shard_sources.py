"""Source types are plug-ins: a type defined here, registered with one line, shards like the
built-in ones; an unknown kind is a ConfigError naming the key and the known kinds."""

from __future__ import annotations

import json

import numpy as np
import pytest

from speechlm.config import ConfigError
from speechlm.shard import OutputConfig, ShardRecipe, Source, build, sources


class Tones(sources.SourceType):
    """Toy source: `splits: {train: ["3"]}` means 3 clips of pure tones, labelled by their pitch."""

    kind = "tones"

    def list_units(self, src, split, key):
        return [
            {"label": n, "rows": [(f"{split}{i}", f"tone {440 + 10 * i}", 440 + 10 * i, {}) for i in range(int(n))]}
            for n in src.splits[split]
        ]

    def fetch(self, src, ref):
        return (0.3 * np.sin(2 * np.pi * ref * np.arange(16000) / 16000)).astype(np.float32)


sources.register(Tones())


def test_a_source_type_registered_in_one_line_shards(tmp_path):
    recipe = ShardRecipe(
        name="toy",
        sources=[Source(name="toy", kind="tones", splits={"train": ["3"], "eval": ["2"]})],
        output=OutputConfig(shard_clips=2),
    )
    out = build(recipe, tmp_path / "toy", workers=1)
    man = json.loads((out / "manifest.json").read_text())
    assert {s: v["clips"] for s, v in man["splits"].items()} == {"train": 3, "eval": 2}
    assert [len(man["splits"]["train"]["shards"])] == [2]  # shard_clips=2 cuts the 3 clips in two tars
    assert man["sources"]["toy"]["kind"] == "tones"
    ids = sorted(i for sh in man["splits"]["train"]["shards"] for i in sh["ids"])
    assert ids == ["toy_train0", "toy_train1", "toy_train2"]
    assert all(d == pytest.approx(1.0) for sh in man["splits"]["eval"]["shards"] for d in sh["durations"])


def test_unknown_kind_and_type_rules_are_config_errors():
    bad = ShardRecipe(sources=[Source(name="a", kind="nope", splits={"train": ["x"]})])
    with pytest.raises(ConfigError, match=r"sources\[0\]\.kind: unknown source kind 'nope' \(known: .*tones"):
        bad.validate()
    # the base type's rules apply to a plug-in too: splits required, no streaming, no columns to filter
    with pytest.raises(ConfigError, match=r"sources\[0\]\.splits: required for kind 'tones'"):
        ShardRecipe(sources=[Source(name="a", kind="tones")]).validate()
    with pytest.raises(ConfigError, match=r"sources\[0\]\.stream: only an hf source streams"):
        ShardRecipe(sources=[Source(name="a", kind="tones", splits={"train": ["1"]}, stream=True)]).validate()
    with pytest.raises(ConfigError, match=r"sources\[0\]\.path: required for kind 'hf'"):
        ShardRecipe(sources=[Source(name="a", kind="hf", splits={"train": ["x"]})]).validate()


def test_size_estimates_come_from_the_source_type():
    assert sources.source_type("synthetic").estimate_bytes({"kind": "synthetic"}) == 0
    assert sources.source_type("tones").estimate_bytes({"kind": "tones"}) is None  # unknown unless the type says
