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


def test_accumulation_keeps_the_effective_batch():
    x = t()
    line = elastic.fit_accumulation(x, state(4, 1, 2), 1)
    assert (
        x.gradient_accumulation_steps == 2
        and "2 -> 1 processes" in line
        and "1 -> 2 keeps the effective batch at 8" in line
    )
    x = t()  # back to 2 ranks from the 1-rank checkpoint, whose config said 1
    line = elastic.fit_accumulation(x, state(4, 2, 1, configured=1), 2)
    assert x.gradient_accumulation_steps == 1 and "2 -> 1 keeps the effective batch at 8" in line
    x = t()  # requeued on the same 1 rank: the adjusted accumulation stays
    assert "as the checkpoint ran" in elastic.fit_accumulation(x, state(4, 2, 1, configured=1), 1)
    assert x.gradient_accumulation_steps == 2
    x = t()  # nothing changed: nothing to say
    assert elastic.fit_accumulation(x, state(4, 1, 2), 2) is None and x.gradient_accumulation_steps == 1


def test_an_effective_batch_that_cannot_be_kept_says_so_once():
    x = t()
    line = elastic.fit_accumulation(x, state(4, 1, 2), 3)  # 8 clips per step on 3 ranks x 4: no
    assert x.gradient_accumulation_steps == 1 and "not a multiple" in line and "becomes 12" in line
    x = t(micro=2, acc=3)
    line = elastic.fit_accumulation(x, state(2, 3, 4), 5)  # 24 on 5 x 2: nearest is 20 (accumulation 2)
    assert x.gradient_accumulation_steps == 2 and "becomes 20" in line


def test_a_batch_the_user_changed_stands():
    x = t(micro=8)
    assert elastic.fit_accumulation(x, state(4, 1, 2), 1) is None
    assert (x.per_device_train_batch_size, x.gradient_accumulation_steps) == (8, 1)


def test_checkpoints_from_before_elastic_resume():
    old = {
        "world_size": 2,
        "config": {"training": {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 1}},
    }
    x = t()
    assert "keeps the effective batch at 8" in elastic.fit_accumulation(x, old, 1)
    assert x.gradient_accumulation_steps == 2
