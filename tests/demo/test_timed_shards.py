"""kind: timed, the test set with true word times: the times are right to the sample (cut at them,
every word is sound and every gap silence) and they travel in the clip JSON to the readers."""

import io
import json
import tarfile

import numpy as np
import pytest

from speechlm import audio
from speechlm.config import ConfigError, DataSet
from speechlm.data import Clips, EvalLoader
from speechlm.demo.timed import TimedConfig
from speechlm.shard import build, load_recipe

SR = audio.SAMPLE_RATE


def small_recipe():
    recipe, _ = load_recipe("timed")
    t = recipe.sources[0].settings
    t.test, t.voices, t.max_words = 4, ["en-us", "en-gb+m3"], 6
    recipe.output.work_chunk = 2
    return recipe


@pytest.fixture(scope="module")
def timed_set(tmp_path_factory):
    return build(small_recipe(), tmp_path_factory.mktemp("timed") / "timed", workers=1)


def clips_of(out):
    man = json.loads((out / "manifest.json").read_text())
    clips = {}
    for sh in man["splits"]["test"]["shards"]:
        with tarfile.open(out / sh["file"]) as tar:
            for m in tar.getmembers():
                key, ext = m.name.rsplit(".", 1)
                clips.setdefault(key, {})[ext] = tar.extractfile(m).read()
    return man, {k: (json.loads(v["json"]), audio.load(io.BytesIO(v["flac"]).getvalue())) for k, v in clips.items()}


def test_word_times_cut_sound_from_silence(timed_set):
    man, clips = clips_of(timed_set)
    assert man["splits"]["test"]["clips"] == 4
    assert sorted(m["orig_id"] for m, _ in clips.values()) == [
        "test-common-00000",
        "test-common-00002",
        "test-demo-00001",
        "test-demo-00003",
    ]
    for meta, wave in clips.values():
        words = meta["words"]
        assert 4 <= len(words) <= 6
        assert " ".join(w["text"] for w in words) == meta["text"]
        bounds = [(round(w["start"] * SR), round(w["end"] * SR)) for w in words]
        for (s, e), w in zip(bounds, words):
            assert s / SR == w["start"] and e / SR == w["end"]  # whole samples: the times are exact
            seg = np.abs(wave[s:e])
            assert e - s > 0.05 * SR and seg.max() > 0.05, w  # a word, not a sliver
            # the cut is at the word's edge: its first and last samples are at >= -40 dB of its peak
            # (one 16-bit step of slack for the FLAC quantization)
            assert seg[0] >= 0.01 * seg.max() - 1 / 32768 and seg[-1] >= 0.01 * seg.max() - 1 / 32768, w
        edges = [0] + [x for b in bounds for x in b] + [len(wave)]
        gaps = [(edges[i], edges[i + 1]) for i in range(0, len(edges), 2)]
        for k, (a, b) in enumerate(gaps):
            assert np.all(wave[a:b] == 0), (meta["id"], k)  # the silences between the times are digital zero
            assert 0.05 * SR - 1 <= b - a <= 0.3 * SR + 1  # 50-300 ms, as the recipe says
        assert meta["duration"] == pytest.approx(len(wave) / SR, abs=1e-6)


def test_times_reach_the_reader(timed_set):
    loader = EvalLoader([DataSet(path=str(timed_set), split="test")], Clips(), batch_size=4, max_samples_per_set=0)
    got = [c for b in loader for c in b["clips"]]
    _, clips = clips_of(timed_set)
    assert len(got) == 4
    for c in got:
        assert c["words"] == clips[c["id"]][0]["words"]


def test_same_seed_same_bytes(tmp_path, timed_set):
    again = build(small_recipe(), tmp_path / "timed", workers=1)
    for f in sorted(p.name for p in timed_set.glob("*.tar")):
        assert (again / f).read_bytes() == (timed_set / f).read_bytes()


def test_recipe_errors_name_the_key(tmp_path):
    recipe = small_recipe()
    recipe.sources[0].settings.gap_ms = [300, 50]
    with pytest.raises(ConfigError, match=r"sources\[0\]\.timed\.gap_ms"):
        recipe.validate()
    recipe = small_recipe()
    recipe.sources[0].settings.pools = ["common", "nope"]
    with pytest.raises(ConfigError, match=r"sources\[0\]\.timed\.pools"):
        recipe.validate()
    path = tmp_path / "mixed.yaml"
    path.write_text("sources: [{name: s, kind: synthetic, timed: {test: 2}}]\n")
    with pytest.raises(ConfigError, match=r"sources\[0\]\.timed: only a source of kind timed .*kind is 'synthetic'"):
        load_recipe(path)
    path.write_text("sources: [{name: s, kind: timed, timed: {test: 2, gap: 1}}]\n")
    with pytest.raises(ConfigError, match=r"unknown key 'sources\[0\]\.timed\.gap'.*gap_ms"):
        load_recipe(path)
    recipe, _ = load_recipe("synthetic")
    recipe.sources[0].settings = TimedConfig()  # built in code: the type's own settings class only
    with pytest.raises(ConfigError, match=r"sources\[0\]\.synthetic: expected SyntheticConfig, got TimedConfig"):
        recipe.validate()
