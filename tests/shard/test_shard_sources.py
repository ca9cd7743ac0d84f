"""Source types are plug-ins: a type defined here, registered with one line, shards like the
built-in ones, and may read its own recipe section; an unknown kind is a ConfigError naming the key
and the known kinds (the plug-ins' too); the shipped recipes keep their fingerprints."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import numpy as np
import pytest

from paths import REPO
from speechlm.config import ConfigError
from speechlm.shard import OutputConfig, ShardRecipe, Source, build, load_recipe, sources
from speechlm.shard.schema import build_recipe, fingerprint, recipe_dict


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


@dataclass
class ChirpSettings:
    seconds: float = 1.0
    low: int = 200


class Chirps(Tones):
    """Toy source with its own section: `chirps: {seconds: 1.5}`."""

    kind = "chirps"
    section = "chirps"
    settings_class = ChirpSettings

    def list_units(self, src, split, key):
        seconds = self.settings(src).seconds
        return [
            {"label": n, "rows": [(f"{split}{i}", "chirp", seconds, {}) for i in range(int(n))]}
            for n in src.splits[split]
        ]

    def fetch(self, src, ref):
        return np.zeros(int(16000 * ref), np.float32) + 0.1


sources.register(Tones())
sources.register(Chirps())


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
    # the known kinds: the core's, the demo plug-in's (loaded on lookup) and this file's
    known = "chirps, hf, librispeech, manifest, multilingual, synthetic, timed, tones"
    message = rf"sources\[0\]\.kind: unknown source kind 'nope' \(known: {known}; a plug-in's kinds need its package"
    with pytest.raises(ConfigError, match=message):
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


def test_a_kind_reads_its_own_section_and_errors_name_its_keys(tmp_path):
    path = tmp_path / "chirps.yaml"
    path.write_text("sources: [{name: c, kind: chirps, splits: {train: ['2']}, chirps: {seconds: 1.5}}]\n")
    recipe, _ = load_recipe(path)
    assert recipe.sources[0].settings == ChirpSettings(seconds=1.5, low=200)
    # the form recipe.json and manifest.json hold, and back (what `speechlm shard merge` reads)
    d = recipe_dict(recipe)
    assert d["sources"][0]["chirps"] == {"seconds": 1.5, "low": 200} and "settings" not in d["sources"][0]
    assert build_recipe(json.loads(json.dumps(d))).sources[0].settings == recipe.sources[0].settings
    # a recipe written out whole (dataclasses.asdict: settings null) or by an older speechlm (every
    # source held the synthetic section's defaults, and timed: null) still reads
    synthetic_defaults = dataclasses.asdict(sources.source_type("synthetic").settings_class())
    old = {**d, "sources": [{**d["sources"][0], "settings": None, "synthetic": synthetic_defaults, "timed": None}]}
    assert build_recipe(old).sources[0].settings == recipe.sources[0].settings
    out = build(recipe, tmp_path / "out", workers=1)
    man = json.loads((out / "manifest.json").read_text())
    assert man["recipe"]["sources"][0]["chirps"]["seconds"] == 1.5
    assert all(d == pytest.approx(1.5) for sh in man["splits"]["train"]["shards"] for d in sh["durations"])
    for body, message in [
        ("chirps: {second: 1}", r"unknown key 'sources\[0\]\.chirps\.second'.*did you mean 'seconds'"),
        ("chirps: {low: loud}", r"sources\[0\]\.chirps\.low: expected int, got 'loud'"),
        ("synthetic: {test: 4}", r"sources\[0\]\.synthetic: only a source of kind synthetic .*kind is 'chirps'"),
        ("chirps: 5", r"sources\[0\]\.chirps: expected ChirpSettings, got 5"),
        ("settings: {seconds: 1}", r"unknown key 'sources\[0\]\.settings'"),
        ("sparkles: {a: 1}", r"unknown key 'sources\[0\]\.sparkles'"),
    ]:
        path.write_text(f"sources: [{{name: c, kind: chirps, splits: {{train: ['2']}}, {body}}}]\n")
        with pytest.raises(ConfigError, match=message):
            load_recipe(path)
    no_section = ShardRecipe(
        sources=[Source(name="t", kind="tones", splits={"train": ["1"]}, settings=ChirpSettings())]
    )
    with pytest.raises(ConfigError, match=r"sources\[0\]: kind 'tones' has no settings section"):
        no_section.validate()


def test_a_section_needs_its_settings_class():
    class Half(Tones):
        kind, section = "half", "half"

    with pytest.raises(ValueError, match="Half: a settings section needs `section` and a dataclass"):
        sources.register(Half())
    assert "half" not in sources.kinds()


# The shipped recipes' fingerprints before source kinds brought their own sections (every source then
# hashed the demo's synthetic defaults): unchanged, so the sets built from them need no rebuild.
# (multilingual_demo changed since: its translate_share, for the multilingual demo's translation)
FINGERPRINTS = {
    "demo": "37135f04837c840ef1e338ddde0e2f6daa4290662bf0b487b28b0fea87da58a4",
    "librispeech": "f944b6f957db8058e5d468a454297eaedb61128e20f128ab0612f17cdd2b2295",
    "librispeech_folders": "a2a1716ecded2a49e80782ae6cfdec61a59568365eeff67231d0e77db5485286",
    "loquacious_small": "53259089ae8c9f38c35c77c4f7d4362dd15406f62760790239e6f7393613e315",
    "multiasr": "34878f93211e089d324c1c7ff6e30c1c70eb6c7de668e8d5352d39b3d8a5ffa2",
    "multilingual": "ecec13077e0d9590656e523cf40a79bd9e82bb07b672c7d66d45efc5dd3c5f35",
    "multilingual_demo": "d60f0eb23dd8637a947e240c8e7d2fdfb273d7a4870898bc399cf968fc70b579",
    "synthetic": "823b70e698db0c860172d3a9ad989c9517586e6f81073abf859b57343ae46f47",
    "timed": "c08942181c7d17374c598bcd83ad8874c0b5f7a95dabe302108e529300e07257",
}


def test_the_shipped_recipes_keep_their_fingerprints():
    shipped = sorted(p.stem for p in (REPO / "shards").glob("*.yaml"))
    assert shipped == sorted(FINGERPRINTS)
    assert {name: fingerprint(load_recipe(name)[0]) for name in shipped} == FINGERPRINTS
    recipe = load_recipe("timed")[0]
    recipe.sources[0].settings.test += 1
    assert fingerprint(recipe) != FINGERPRINTS["timed"]  # a kind's own settings are hashed
