"""`data.bucket_by: tokens` (speechlm.data.token_rates.clip_tokens, the epoch plan's `cost`): a block's
clips are sorted by the decoder tokens each is estimated to take, so a batch mixing languages of unlike
tokens per second is not padded to its wordiest clip; for one language the plan is the duration plan."""

from __future__ import annotations

import json

import numpy as np
import pytest

from data_helpers import language_shards, write_set
from speechlm import text
from speechlm.config import ConfigError, DataSet
from speechlm.data import TrainLoader, token_rates
from speechlm.data.catalog import load_catalog
from speechlm.data.collate import Collator
from speechlm.data.epoch_plan import cut_batches, plan_epoch
from speechlm.model import ids as model_ids
from speechlm.model.encoders import family_for

AUDIO_PER_SECOND = 16.7  # Whisper's 50 frames a second stacked by 3, as the multilingual demo has them
TEXT_PER_SECOND = {"en": 3.0, "ja": 11.0}  # about SmolLM2's tokens a second of English and of kana


def _mixed_set(tmp_path):
    """A manifest-only set of 16 shards, each of one language (as a recipe's sources write them), and
    each clip's tokens: its audio placeholders and its language's text."""
    path = write_set(tmp_path, "mix", [100] * 16, audio=False, min_s=1, max_s=5)
    m = json.loads((path / "manifest.json").read_text())
    for k, sh in enumerate(m["splits"]["train"]["shards"]):
        sh["languages"] = ["en" if k % 2 else "ja"] * len(sh["ids"])
    (path / "manifest.json").write_text(json.dumps(m))
    cat = load_catalog([str(path)], ["train"])
    tokens = np.array([TEXT_PER_SECOND[x] for x in cat.languages()]) * cat.durations
    return cat, AUDIO_PER_SECOND * cat.durations + tokens


def _batches(plan):
    return [b for r in plan.workers for w in r for blk in w for b in blk.batches if b is not None]


def _padding(batches, tokens):
    """Share of the padded tokens (the longest x clips, per batch) that is padding."""
    return 1 - sum(tokens[b].sum() for b in batches) / sum(tokens[b].max() * len(b) for b in batches)


def test_a_language_mix_sorted_by_tokens_pads_less_and_keeps_every_clip(tmp_path):
    cat, tokens = _mixed_set(tmp_path)
    kw = dict(seed=3, epoch=0, world_size=1, num_workers=2, shards_per_block=4, batch_size=8)
    by_seconds, by_tokens = (_batches(plan_epoch(cat, [1.0], cost=c, **kw)) for c in (None, tokens))
    assert sorted(np.concatenate(by_tokens).tolist()) == list(range(cat.num_clips))  # each clip once
    seconds_pad, tokens_pad = _padding(by_seconds, tokens), _padding(by_tokens, tokens)
    assert tokens_pad < 0.5 * seconds_pad, (tokens_pad, seconds_pad)


def test_a_cost_in_the_order_of_the_durations_gives_the_duration_plan(tmp_path):
    cat, _ = _mixed_set(tmp_path)
    kw = dict(seed=1, epoch=2, world_size=2, num_workers=1, shards_per_block=3, batch_size=5)
    plain, scaled = (_batches(plan_epoch(cat, [1.0], cost=c, **kw)) for c in (None, 7.0 * cat.durations))
    assert [b.tolist() for b in plain] == [b.tolist() for b in scaled]


def test_seconds_batches_hold_their_longest_clip_wherever_it_sorts():
    # sorted by tokens a batch's durations need not rise: 3 clips padded to 3 s would be 9 s, over 6
    assert cut_batches(np.array([1.0, 3.0, 1.0, 1.0]), 0, 6.0) == [slice(0, 2), slice(2, 4)]
    assert cut_batches(np.array([1.0, 2.0, 3.0]), 0, 6.0) == [slice(0, 2), slice(2, 3)]  # sorted: as before


@pytest.fixture(scope="module")
def tok():
    return text.load_tokenizer(model_ids.resolve("tiny/qwen3"))


def _collator(tok):
    return Collator(tok, prompt="Transcribe.", audio_token="<audio>", family=family_for("tiny/whisper"), pool_stride=3)


def test_the_loader_estimates_each_clips_tokens_from_its_language(tmp_path, tok):
    rows = [("hola a todos", "es", 1.0), ("el perro corre", "es", 1.5), ("いぬ が こうえん を はしる", "ja", 1.5)]
    rows += [("ねこ が いぬ を みる", "ja", 1.0)]
    sets = [DataSet(path=str(language_shards(tmp_path, rows)), split="train")]
    col = _collator(tok)
    loader = TrainLoader(sets, col, batch_size=2, num_workers=0, bucket_by="tokens")
    rates = token_rates.mean_rates(tok, token_rates.sample(sets))
    for gid, lang in enumerate(loader.catalog.languages()):
        d = loader.catalog.durations[gid]
        want = col.num_audio_tokens(round(d * 16000)) + rates[lang] * d
        assert loader.cost[gid] == pytest.approx(want)
    assert rates["ja"] > 2 * rates["es"]  # kana: several byte-level tokens each
    assert TrainLoader(sets, col, batch_size=2, num_workers=0).cost is None  # the default: by seconds


def test_a_set_stating_no_language_buckets_by_seconds(tmp_path, tok):
    path = write_set(tmp_path, "plain", [6, 6], audio=True)
    loader = TrainLoader([DataSet(str(path))], _collator(tok), batch_size=2, num_workers=0, bucket_by="tokens")
    assert loader.cost is None  # no language to tell clips apart by: durations order them alike


def test_the_config_names_a_bad_bucket_by():
    from speechlm.config import load

    with pytest.raises(ConfigError, match="data.bucket_by"):
        load(recipe="tiny", overrides=["data.bucket_by=words"])


def test_a_manifest_whose_languages_miss_clips_names_the_shard(tmp_path):
    path = write_set(tmp_path, "bad", [5], audio=False)
    m = json.loads((path / "manifest.json").read_text())
    m["splits"]["train"]["shards"][0]["languages"] = ["en"] * 4  # one short: an edited or truncated manifest
    (path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ConfigError, match=r"lists 5 ids but 4 languages for bad-train-000000\.tar"):
        load_catalog([str(path)], ["train"])
