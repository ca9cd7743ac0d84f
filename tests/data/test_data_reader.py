"""The WebDataset reader over 2 ranks x 2 workers, simulated by one loader per rank in-process."""

from __future__ import annotations

import collections
import time

import numpy as np
import pytest

from data_helpers import all_ids, ids_collate, write_set
from speechlm.config import ConfigError, DataSet
from speechlm.data import TrainLoader

WORLD, WORKERS = 2, 2


def loaders(sets, world=WORLD, workers=WORKERS, **kw):
    kw.setdefault("batch_size", 3)
    return [
        TrainLoader(
            sets, ids_collate, rank=r, world_size=world, num_workers=workers, seed=7, shuffle_shards_per_block=2, **kw
        )
        for r in range(world)
    ]


def run_epoch(ls):
    """Per rank: the list of batches of one epoch."""
    return [list(l) for l in ls]


def real_ids(batches):
    return [i for b in batches for i, w in zip(b["ids"], b["weight"]) if w > 0]


@pytest.mark.parametrize(
    "sizes",
    [
        [4, 4, 4, 4, 4, 4],  # more shards than the 4 streams
        [7, 6],  # fewer shards than streams: split clip by clip
        [1, 14, 2, 6, 21],  # very different shard sizes
    ],
)
def test_every_clip_once_equal_steps(tmp_path, sizes):
    path = write_set(tmp_path, "a", sizes)
    ls = loaders([DataSet(str(path))])
    steps = ls[0].steps_per_epoch
    assert all(l.steps_per_epoch == steps for l in ls)
    per_rank = run_epoch(ls)
    assert [len(b) for b in per_rank] == [steps] * WORLD  # no rank stops early
    seen = [i for b in per_rank for i in real_ids(b)]
    assert collections.Counter(seen) == collections.Counter(all_ids(path))
    for b in per_rank:  # padding batches carry a real clip with weight 0
        for batch in b:
            assert len(batch["ids"]) >= 1 and all(n > 0 for n in batch["num_samples"])
            if 0.0 in batch["weight"]:
                assert batch["weight"] == [0.0] * len(batch["weight"])
    assert sum(ls[0].stats.values()) - ls[0].stats["shards_read"] - ls[0].stats["clips_decoded"] == 0
    # from an epoch's start the DataLoader hands batches over in exactly the planned step order
    assert all(l.stats["out_of_order"] == 0 for l in ls)


def test_batches_bucketed_and_sized(tmp_path):
    path = write_set(tmp_path, "a", [12] * 4, min_s=0.2, max_s=2.0)
    (l,) = loaders([DataSet(str(path))], world=1, workers=0, batch_size=4)
    for batch in l:
        assert len(batch["ids"]) <= 4
    (l,) = loaders([DataSet(str(path))], world=1, workers=0, batch_size=0, batch_seconds=2.5)
    durs = dict(zip(all_ids(path), np.concatenate([np.asarray(s.durations) for s in l.catalog.shards])))
    for batch in l:
        padded = len(batch["ids"]) * max(durs[i] for i in batch["ids"])
        assert padded <= 2.5 or len(batch["ids"]) == 1


def test_resume_exact_and_fast(tmp_path):
    path = write_set(tmp_path, "a", [5] * 8)
    sets = [DataSet(str(path))]
    full = [b["ids"] for b in loaders(sets)[0]]
    k = len(full) - 2
    first = loaders(sets)[0]
    it = iter(first)
    for _ in range(k):
        next(it)
    state = first.state_dict()
    it.close()
    assert state["step_in_epoch"] == k and state["epoch"] == 0 and state["seed"] == 7
    resumed = loaders(sets)[0]
    resumed.load_state_dict(state)
    t0 = time.perf_counter()
    rest = [b["ids"] for b in resumed]
    took = time.perf_counter() - t0
    assert rest == full[k:]
    # only the remaining batches' clips are decoded, and blocks already done are never opened
    assert resumed.stats["clips_decoded"] == sum(len(ids) for ids in full[k:])
    assert resumed.stats["shards_read"] < 8 / WORLD
    assert took < 10
    # finishing an epoch moves to the next one
    assert resumed.state_dict()["epoch"] == 1 and resumed.state_dict()["step_in_epoch"] == 0


def test_resume_mid_block_without_workers(tmp_path):
    path = write_set(tmp_path, "a", [6] * 4)
    sets = [DataSet(str(path))]
    (ref,) = loaders(sets, world=1, workers=0)
    full = [b["ids"] for b in ref]
    for k in (1, len(full) // 2, len(full) - 1):
        (l,) = loaders(sets, world=1, workers=0)
        l.load_state_dict({"epoch": 0, "step_in_epoch": k, "seed": 7})
        assert [b["ids"] for b in l] == full[k:]


def test_deterministic_and_epochs_differ(tmp_path):
    path = write_set(tmp_path, "a", [5] * 6)
    sets = [DataSet(str(path))]
    a = [b["ids"] for b in loaders(sets)[1]]
    b = [b["ids"] for b in loaders(sets)[1]]
    assert a == b
    l = loaders(sets)[1]
    l.set_epoch(1)
    c = [b["ids"] for b in l]
    assert c != a and sorted(map(tuple, c)) != sorted(map(tuple, a))
    ls = loaders(sets)
    for x in ls:
        x.set_epoch(1)
    assert sorted(i for r in run_epoch(ls) for i in real_ids(r)) == sorted(all_ids(path))
    other_seed = TrainLoader(
        sets,
        ids_collate,
        batch_size=3,
        rank=1,
        world_size=WORLD,
        num_workers=WORKERS,
        seed=8,
        shuffle_shards_per_block=2,
    )
    assert [b["ids"] for b in other_seed] != a


def test_bad_shards_skipped_counted_steps_equal(tmp_path):
    path = write_set(tmp_path, "a", [5] * 6)
    tars = sorted(path.glob("*.tar"))
    tars[1].unlink()  # a missing shard
    data = tars[3].read_bytes()
    tars[3].write_bytes(data[: len(data) // 2])  # a truncated one
    ls = loaders([DataSet(str(path))])
    steps = ls[0].steps_per_epoch
    per_rank = run_epoch(ls)
    assert [len(b) for b in per_rank] == [steps] * WORLD
    seen = collections.Counter(i for b in per_rank for i in real_ids(b))
    lost = set(all_ids(path)) - set(seen)
    assert max(seen.values()) == 1
    assert 5 < len(lost) < 10  # all of the missing shard, part of the truncated one
    stats = ls[0].stats + ls[1].stats
    assert stats["missing_clips"] == len(lost)
    assert stats["tar_errors"] >= 2


def test_corrupt_clips_dropped_counted(tmp_path):
    path = write_set(tmp_path, "a", [4] * 4, corrupt=(2, 9))
    ls = loaders([DataSet(str(path))], batch_size=1)  # batches of one: both become weight-0 batches
    steps = ls[0].steps_per_epoch
    per_rank = run_epoch(ls)
    assert [len(b) for b in per_rank] == [steps] * WORLD
    seen = sorted(i for b in per_rank for i in real_ids(b))
    ids = all_ids(path)
    assert seen == sorted(set(ids) - {ids[2], ids[9]})
    stats = ls[0].stats + ls[1].stats
    assert stats["bad_clips"] == 2 and stats["empty_batches"] == 2


def test_mixing_weights(tmp_path):
    a = write_set(tmp_path, "a", [4] * 3, seed=1)
    b = write_set(tmp_path, "b", [5] * 4, seed=2)
    sets = [DataSet(str(a), weight=2.0), DataSet(str(b), weight=0.5)]
    seen = collections.Counter(i for rank in run_epoch(loaders(sets)) for i in real_ids(rank))
    assert {seen[i] for i in all_ids(a)} == {2}  # two passes of set a
    picked = {i for i in all_ids(b) if seen[i]}
    assert len(picked) == 10 and all(seen[i] == 1 for i in picked)  # half of set b, once
    ls = loaders(sets)
    for l in ls:
        l.set_epoch(1)
    again = {i for rank in run_epoch(ls) for i in real_ids(rank) if i in set(all_ids(b))}
    assert len(again) == 10 and again != picked  # another half next epoch


def test_steps_from_manifest_only(tmp_path):
    """steps_per_epoch comes from the manifest alone: no tar exists here (pitfall 8)."""
    path = write_set(tmp_path, "big", [1000] * 40, audio=False, min_s=1, max_s=19)
    ls = loaders([DataSet(str(path))], world=4, workers=4, batch_size=32)
    t0 = time.perf_counter()
    steps = {l.steps_per_epoch for l in ls}
    assert len(steps) == 1 and steps.pop() >= 40000 / 4 / 32
    assert time.perf_counter() - t0 < 10


def test_config_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"data.train\[0\].path: no manifest.json"):
        TrainLoader([DataSet(str(tmp_path / "nope"))], ids_collate, batch_size=2)
    path = write_set(tmp_path, "a", [2], audio=False)
    with pytest.raises(ConfigError, match=r"data.train\[0\].split: 'dev' is not in"):
        TrainLoader([DataSet(str(path), split="dev")], ids_collate, batch_size=2)
    with pytest.raises(ConfigError, match="every weight is 0"):
        TrainLoader([DataSet(str(path), weight=0)], ids_collate, batch_size=2)
