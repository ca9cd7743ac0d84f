"""Elastic resume, trainer side, without processes: how the effective batch is kept."""

from __future__ import annotations

from speechlm.config import TrainingConfig
from speechlm.train import elastic


def state(micro, acc, world, configured=None):
    return {
        "world_size": world,
        "batch": {
            "micro": micro,
            "accumulation": acc,
            "world": world,
            "configured_accumulation": acc if configured is None else configured,
        },
    }


def t(micro=4, acc=1):
    return TrainingConfig(per_device_train_batch_size=micro, gradient_accumulation_steps=acc)


def fit(x, saved, world):
    """The accumulation and line fit_accumulation gives; the training config it read is unchanged."""
    before = (x.per_device_train_batch_size, x.gradient_accumulation_steps)
    acc, line = elastic.fit_accumulation(x, saved, world)
    assert (x.per_device_train_batch_size, x.gradient_accumulation_steps) == before
    return acc, line


def test_accumulation_keeps_the_effective_batch():
    acc, line = fit(t(), state(4, 1, 2), 1)
    assert acc == 2 and "2 -> 1 processes" in line and "1 -> 2 keeps the effective batch at 8" in line
    # back to 2 ranks from the 1-rank checkpoint, whose config said 1
    acc, line = fit(t(), state(4, 2, 1, configured=1), 2)
    assert acc == 1 and "2 -> 1 keeps the effective batch at 8" in line
    # requeued on the same 1 rank: the adjusted accumulation stays
    acc, line = fit(t(), state(4, 2, 1, configured=1), 1)
    assert acc == 2 and "as the checkpoint ran" in line
    assert fit(t(), state(4, 1, 2), 2) == (1, None)  # nothing changed: nothing to say


def test_an_effective_batch_that_cannot_be_kept_says_so_once():
    acc, line = fit(t(), state(4, 1, 2), 3)  # 8 clips per step on 3 ranks x 4: no
    assert acc == 1 and "not a multiple" in line and "becomes 12" in line
    acc, line = fit(t(micro=2, acc=3), state(2, 3, 4), 5)  # 24 on 5 x 2: nearest is 20 (accumulation 2)
    assert acc == 2 and "becomes 20" in line


def test_a_batch_the_user_changed_stands():
    assert fit(t(micro=8), state(4, 1, 2), 1) == (1, None)


def test_checkpoints_from_before_elastic_resume():
    old = {
        "world_size": 2,
        "config": {"training": {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 1}},
    }
    acc, line = fit(t(), old, 1)
    assert acc == 2 and "keeps the effective batch at 8" in line
