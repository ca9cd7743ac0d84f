"""Elastic resume on the data side: an epoch interrupted under one world size x workers and resumed
under another sees every clip exactly once, every rank runs the same number of steps, and the next
epoch is planned as usual for the new layout."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from data_helpers import all_ids, ids_collate, write_set
from speechlm.config import DataSet
from speechlm.data import TrainLoader
from speechlm.data.catalog import load_catalog
from speechlm.data.epoch_plan import PAD, plan_epoch

OPTS = dict(seed=5, shards_per_block=2, batch_size=4)


def _steps_equal(plan):
    for ranks in plan.workers:
        assert sum(len(b.batches) for blocks in ranks for b in blocks) == plan.steps


@pytest.mark.parametrize("weights", [[1.0, 1.0], [2.0, 0.5]])
def test_plan_rest_covers_the_epoch_once_over_three_layouts(tmp_path, weights):
    a = write_set(tmp_path, "a", [23, 17, 30, 9, 26], audio=False, min_s=1, max_s=15)
    b = write_set(tmp_path, "b", [11, 40, 8], audio=False, min_s=1, max_s=15)
    cat = load_catalog([str(a), str(b)], ["train", "train"])
    full = plan_epoch(cat, weights, epoch=1, world_size=2, num_workers=2, **OPTS)
    want = collections.Counter(full.consumed(full.steps).tolist())  # the epoch's clips, with repeats
    assert sum(want.values()) == full.clips

    layouts = [(2, 2), (1, 1), (3, 2)]
    stops = [5, 7]  # steps run under the first two layouts before the interruption
    done, seen = [], collections.Counter()
    for k, (ws, nw) in enumerate(layouts):
        plan = plan_epoch(cat, weights, epoch=1, world_size=ws, num_workers=nw, done=done, **OPTS)
        _steps_equal(plan)
        run = stops[k] if k < len(stops) else plan.steps
        seen.update(plan.consumed(run).tolist())
        done.append((ws, nw, run))
    assert seen == want
    # deterministic: the same history gives the same rest, and segment 0 is the ordinary plan
    again = plan_epoch(cat, weights, epoch=1, world_size=3, num_workers=2, done=done[:2], **OPTS)
    assert again.consumed(again.steps).tolist() == plan.consumed(plan.steps).tolist()
    assert (
        plan_epoch(cat, weights, epoch=1, world_size=2, num_workers=2, done=[], **OPTS).consumed(99).tolist()
        == full.consumed(99).tolist()
    )


def test_plan_rest_is_bucketed_and_balanced(tmp_path):
    a = write_set(tmp_path, "a", [200] * 8, audio=False, min_s=1, max_s=19)
    cat = load_catalog([str(a)], ["train"])
    first = plan_epoch(cat, [1.0], epoch=0, world_size=4, num_workers=2, seed=1, shards_per_block=4, batch_size=16)
    rest = plan_epoch(
        cat,
        [1.0],
        epoch=0,
        world_size=3,
        num_workers=1,
        seed=1,
        shards_per_block=4,
        batch_size=16,
        done=[(4, 2, first.steps // 3)],
    )
    batches = [b for r in rest.workers for w in r for blk in w for b in blk.batches if b is not PAD]
    padded = sum(cat.durations[b].max() * len(b) for b in batches)
    assert sum(cat.durations[b].sum() for b in batches) / padded > 0.92  # still sorted by duration
    assert max(rest.real_batches) - min(rest.real_batches) <= 2


def _run(loader, steps=None):
    ids = []
    it = iter(loader)
    for k, batch in enumerate(it):
        ids.extend(i for i, w in zip(batch["ids"], batch["weight"]) if w > 0)
        if steps is not None and k + 1 == steps:
            break
    it.close()
    return ids


def _loaders(sets, world, workers):
    return [
        TrainLoader(
            sets,
            ids_collate,
            batch_size=3,
            rank=r,
            world_size=world,
            num_workers=workers,
            seed=7,
            shuffle_shards_per_block=2,
        )
        for r in range(world)
    ]


def test_loader_resume_on_other_world_sizes_sees_each_clip_once(tmp_path):
    path = write_set(tmp_path, "a", [7, 5, 9, 6, 8])
    sets = [DataSet(str(path))]
    seen = collections.Counter()
    # 2 ranks x 2 workers run 3 steps; 1 rank without workers runs 4; 2 ranks x 1 worker finish
    ls = _loaders(sets, 2, 2)
    for l in ls:
        seen.update(_run(l, 3))
    state = ls[0].state_dict()
    assert [l.state_dict() for l in ls[1:]] == [state]
    (one,) = _loaders(sets, 1, 0)
    one.load_state_dict(state)
    seen.update(_run(one, 4))
    state = one.state_dict()
    assert state["done"] == [[2, 2, 3]] and state["step_in_epoch"] == 4
    ls = _loaders(sets, 2, 1)
    for l in ls:
        l.load_state_dict(state)
    counts = [len(l) for l in ls]
    assert counts[0] == counts[1] > 0
    for l in ls:
        seen.update(_run(l))
    assert seen == collections.Counter(all_ids(path))
    # the next epoch is the ordinary one for 2 x 1
    assert all(l.state_dict()["epoch"] == 1 and l.state_dict()["done"] == [] for l in ls)
    fresh = _loaders(sets, 2, 1)
    for l, f in zip(ls, fresh):
        f.set_epoch(1)
        assert _run(l) == _run(f)


def test_same_layout_resume_is_unchanged(tmp_path):
    path = write_set(tmp_path, "a", [5] * 6)
    sets = [DataSet(str(path))]
    (l,) = _loaders(sets, 1, 2)
    full = _run(l)
    (a,) = _loaders(sets, 1, 2)
    first = _run(a, 2)
    (b,) = _loaders(sets, 1, 2)
    b.load_state_dict(a.state_dict())
    assert first + _run(b) == full
    # a state from before elastic resume existed (no "done", no layout) still loads
    (c,) = _loaders(sets, 1, 2)
    c.load_state_dict({"epoch": 0, "step_in_epoch": 2, "seed": 7})
    assert first + _run(c) == full


def test_resume_at_an_epoch_end_plans_the_next_epoch_normally(tmp_path):
    path = write_set(tmp_path, "a", [5] * 6, audio=False)
    sets = [DataSet(str(path))]
    (l,) = _loaders(sets, 1, 1)
    steps = l.plan(0).steps
    ls = _loaders(sets, 2, 1)
    for x in ls:
        x.load_state_dict({"epoch": 0, "step_in_epoch": steps, "seed": 7, "world_size": 1, "num_workers": 1})
        assert len(x) == 0
    assert np.all([x.plan(1).steps == _loaders(sets, 2, 1)[0].plan(1).steps for x in ls])
