"""The epoch plan (manifest only, no audio) and the eval loader."""

from __future__ import annotations

import collections

import numpy as np

from data_helpers import all_ids, ids_collate, write_set
from speechlm.config import DataSet
from speechlm.data import EvalLoader, TrainLoader
from speechlm.data.catalog import load_catalog
from speechlm.data.epoch_plan import plan_epoch


def padding_fraction(batches, durations):
    """Share of the padded audio (max duration x clips per batch) that is padding."""
    padded = sum(durations[b].max() * len(b) for b in batches)
    return 1 - sum(durations[b].sum() for b in batches) / padded


def test_bucketing_keeps_padding_low(tmp_path):
    path = write_set(tmp_path, "big", [250] * 16, audio=False, min_s=1, max_s=19)
    cat = load_catalog([str(path)], ["train"])
    plan = plan_epoch(cat, [1.0], seed=3, epoch=0, world_size=2, num_workers=2, shards_per_block=4, batch_size=32)
    batches = [b for r in plan.workers for w in r for blk in w for b in blk.batches if b is not None]
    assert sorted(np.concatenate(batches).tolist()) == list(range(cat.num_clips))
    bucketed = padding_fraction(batches, cat.durations)
    shuffled = np.random.default_rng(0).permutation(cat.num_clips)
    random = padding_fraction([shuffled[i : i + 32] for i in range(0, len(shuffled), 32)], cat.durations)
    assert bucketed < 0.05 and random > 0.25, (bucketed, random)


def test_steps_vary_little_and_total(tmp_path):
    path = write_set(tmp_path, "s", [30, 7, 50, 12, 9, 40], audio=False)
    l = TrainLoader([DataSet(str(path))], ids_collate, batch_seconds=5.0, world_size=2, num_workers=2, seed=1)
    per_epoch = [l.plan(e).steps for e in range(3)]
    assert l.total_steps(2) == per_epoch[0] + per_epoch[1]
    assert l.total_steps(2.5) == per_epoch[0] + per_epoch[1] + round(per_epoch[2] / 2)
    assert l.steps_per_epoch == per_epoch[0]
    # balanced by clips per stream, ranks need little padding even with uneven shards
    for e in range(3):
        real = l.plan(e).real_batches
        assert max(real) - min(real) <= 0.25 * max(real)


def test_eval_loader_equal_deterministic(tmp_path):
    a = write_set(tmp_path, "a", [4, 4], split="eval", seed=1)
    b = write_set(tmp_path, "b", [3], split="eval", seed=2)
    sets = [DataSet(str(a), split="eval"), DataSet(str(b), split="eval")]
    ls = [
        EvalLoader(sets, ids_collate, batch_size=2, max_samples_per_set=5, rank=r, world_size=2, num_workers=w)
        for r, w in ((0, 2), (1, 2))
    ]
    runs = [[b for b in l] for l in ls]
    assert len(runs[0]) == len(runs[1]) == len(ls[0])
    seen = collections.Counter(i for r in runs for b in r for i, w in zip(b["ids"], b["weight"]) if w > 0)
    assert seen == collections.Counter(all_ids(a, "eval")[:5] + all_ids(b, "eval")[:3])
    assert [b["ids"] for b in ls[0]] == [b["ids"] for b in runs[0]]  # the same batches every time
