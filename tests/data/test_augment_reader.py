"""Augmentation inside the reader: a clip's augmented audio depends on (seed, epoch, clip id) only, so it is
the same on any ranks x workers and after a resume (elastic too); eval never augments; the clip-length check
counts the slowest speed factor."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from data_helpers import all_ids, write_set
from speechlm.config import Config, ConfigError, DataSet, load
from speechlm.config.augment import AugmentConfig, NoiseAugment, ReverbAugment, SpeedAugment
from speechlm.data import EvalLoader, TrainLoader
from speechlm.data.augment import Augmenter

AUG = replace(
    AugmentConfig(enabled=True),
    speed=SpeedAugment([0.9, 1.0, 1.1]),
    noise=NoiseAugment(prob=0.7, snr_db=[5.0, 20.0]),
    reverb=ReverbAugment(prob=0.5),
    gain=replace(AugmentConfig().gain, prob=0.5),
)


def digest_collate(samples: list[dict]) -> dict:
    """Per clip: its id and a digest of the exact float32 samples the model would get."""
    return {
        "ids": [s["id"] for s in samples],
        "weight": [float(s["weight"]) for s in samples],
        "digest": [hashlib.sha1(np.ascontiguousarray(s["audio"], np.float32).tobytes()).hexdigest() for s in samples],
        "num_samples": [len(s["audio"]) for s in samples],
    }


def loader(sets, rank=0, world=1, workers=0, aug=AUG, seed=7):
    return TrainLoader(
        sets,
        digest_collate,
        batch_size=3,
        rank=rank,
        world_size=world,
        num_workers=workers,
        seed=seed,
        shuffle_shards_per_block=2,
        augment=Augmenter(aug, seed) if aug else None,
    )


def clips(batches) -> dict[str, str]:
    out = {}
    for b in batches:
        for i, w, d in zip(b["ids"], b["weight"], b["digest"]):
            if w > 0:
                assert i not in out  # every clip once
                out[i] = d
    return out


@pytest.fixture(scope="module")
def one_set(tmp_path_factory):
    return [DataSet(str(write_set(tmp_path_factory.mktemp("aug"), "a", [5] * 6, min_s=0.3, max_s=0.8)))]


def test_same_augmented_clips_on_any_layout_and_after_an_elastic_resume(one_set):
    ref = clips(loader(one_set))  # 1 rank, no workers
    assert sorted(ref) == sorted(all_ids(one_set[0].path))
    # 2 ranks x 2 DataLoader workers (separate processes)
    two = {}
    for r in range(2):
        two.update(clips(loader(one_set, rank=r, world=2, workers=2)))
    assert two == ref
    # interrupted after 2 steps on 2 ranks, resumed on 3
    ranks = [loader(one_set, rank=r, world=2) for r in range(2)]
    seen = {}
    for l in ranks:
        it = iter(l)
        seen.update(clips([next(it), next(it)]))
        state = l.state_dict()
        it.close()
    for r in range(3):
        l = loader(one_set, rank=r, world=3)
        l.load_state_dict(state)
        rest = clips(l)
        assert not set(rest) & set(seen)
        seen.update(rest)
    assert seen == ref


def test_augmentation_changes_clips_and_differs_by_epoch_and_seed(one_set):
    ref = clips(loader(one_set))
    clean = clips(loader(one_set, aug=None))
    assert sorted(clean) == sorted(ref)
    assert sum(ref[i] != clean[i] for i in ref) >= 0.8 * len(ref)
    l = loader(one_set)
    l.set_epoch(1)
    assert sum(d != ref[i] for i, d in clips(l).items()) >= 0.8 * len(ref)
    assert sum(d != ref[i] for i, d in clips(loader(one_set, seed=8)).items()) >= 0.8 * len(ref)
    # turned off (enabled: false) the reader gives the shards' audio exactly
    assert clips(loader(one_set, aug=replace(AUG, enabled=False))) == clean


def test_speed_perturbation_reaches_the_collator(one_set):
    slow = replace(AugmentConfig(enabled=True), speed=SpeedAugment([0.8]))
    lengths = {i: n for b in loader(one_set, aug=slow) for i, n in zip(b["ids"], b["num_samples"])}
    plain = {i: n for b in loader(one_set, aug=None) for i, n in zip(b["ids"], b["num_samples"])}
    assert all(abs(lengths[i] - plain[i] / 0.8) <= 1 for i in plain)


class LimitedCollate:
    """digest_collate with an encoder's clip limit, as the real Collator carries one."""

    max_seconds = 0.85

    class family:
        name = "limited"

    def __call__(self, samples):
        return digest_collate(samples)


def test_clip_limit_counts_the_slowest_speed(one_set):
    TrainLoader(one_set, LimitedCollate(), batch_size=3, num_workers=0)  # clips up to 0.8 s fit 0.85 s
    with pytest.raises(ConfigError, match=r"data.train\[0\]: .*after data.augment.speed.factors slows them by 1.11x"):
        TrainLoader(
            one_set,
            LimitedCollate(),
            batch_size=3,
            num_workers=0,
            augment=Augmenter(replace(AugmentConfig(enabled=True), speed=SpeedAugment([0.9, 1.1])), 0),
        )


def test_eval_never_augments(one_set):
    cfg = Config()
    cfg.data.eval = one_set
    cfg.training.per_device_eval_batch_size = 4
    cfg.data.num_workers = 0
    clean = [b["digest"] for b in EvalLoader.from_config(cfg, digest_collate)]
    cfg.data.augment = replace(AUG, noise=NoiseAugment(prob=1.0), reverb=ReverbAugment(prob=1.0))
    cfg.data.train = one_set
    assert [b["digest"] for b in EvalLoader.from_config(cfg, digest_collate)] == clean
    # while the train loader of that same config does augment
    cfg.training.per_device_train_batch_size = 3
    train = clips(TrainLoader.from_config(cfg, digest_collate))
    plain = clips(loader(one_set, aug=None))
    assert sorted(train) == sorted(plain) and sum(train[i] != plain[i] for i in train) >= 0.8 * len(train)


def test_planner_counts_the_longest_train_clip_after_slowing_down(one_set, tmp_path):
    from speechlm.plan import data_facts, worst_clip_seconds

    manifest = json.loads((Path(one_set[0].path) / "manifest.json").read_text())
    longest = max(max(sh["durations"]) for sh in manifest["splits"]["train"]["shards"])
    cfg = Config()
    cfg.data.train = one_set
    cfg.data.augment = replace(AugmentConfig(enabled=True), speed=SpeedAugment([0.8, 1.0]))
    assert data_facts(cfg)["max_clip_seconds"] == pytest.approx(longest / 0.8)
    cfg.data.train, cfg.data.eval = [DataSet(str(tmp_path / "elsewhere"))], one_set  # eval clips never slow down
    cfg.data.recipe = None
    assert data_facts(cfg)["max_clip_seconds"] == pytest.approx(longest)
    # no manifest yet: the shard step's 19 s cap, slowed down (production: 0.9 -> 21.1 s)
    assert worst_clip_seconds(cfg, {"max_clip_seconds": None}) == pytest.approx(19 / 0.8)
    prod = load(Config, "production")
    assert worst_clip_seconds(prod, {"max_clip_seconds": None}) == pytest.approx(21.11, abs=0.01)


def test_spec_masks_on_the_collated_features_are_drawn_per_clip(one_set):
    from speechlm import text
    from speechlm.data import Collator
    from speechlm.model import tiny
    from speechlm.model.encoders import family_for

    tok = text.load_tokenizer(str(tiny.ensure("qwen3_5")), "<audio>")
    collator = Collator(
        tok,
        prompt="Transcribe the audio.",
        audio_token="<audio>",
        family=family_for("tiny/granite_speech5"),
        pool_stride=1,
    )
    masks = replace(
        AugmentConfig(enabled=True),
        spec=replace(AugmentConfig().spec, time_masks=1, time_mask_max_s=0.2, freq_masks=1, freq_mask_max_bins=20),
    )

    def feats(aug, world=1, rank=0):
        l = TrainLoader(
            one_set,
            collator,
            batch_size=3,
            rank=rank,
            world_size=world,
            num_workers=0,
            seed=7,
            shuffle_shards_per_block=2,
            augment=Augmenter(aug, 7) if aug else None,
        )
        out = {}
        for b in l:
            for i, cid in enumerate(b["ids"]):
                if b["weight"][i] > 0:
                    n = int(b["feature_mask"][i].sum())
                    out[cid] = b["input_features"][i, :n].clone()
        return out

    clean, masked = feats(None), feats(masks)
    # another layout: other batch mates, so other padding (a clip's last frames see it), same masks
    clean2 = {**feats(None, 2, 0), **feats(None, 2, 1)}
    masked2 = {**feats(masks, 2, 0), **feats(masks, 2, 1)}
    assert sorted(clean) == sorted(masked) == sorted(masked2)
    changed = 0
    for cid in clean:
        diff = masked[cid] != clean[cid]
        assert torch.equal(diff.all(dim=0), (masked2[cid] != clean2[cid]).all(dim=0))  # the same bands
        assert torch.equal(diff.all(dim=1), (masked2[cid] != clean2[cid]).all(dim=1))  # the same spans
        changed += bool(diff.any())
        band = diff.all(dim=0).reshape(4, 80)  # Granite: [mel, delta] x 2 stacked frames
        assert (band == band[0]).all()
    assert changed >= 0.8 * len(clean)
