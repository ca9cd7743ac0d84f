"""Fixtures of the training tests."""

from __future__ import annotations

import pytest

from speechlm.train import engine as engine_mod


@pytest.fixture(scope="module")
def dist_world():
    """The process group of a world-size-1 run (gloo on CPU); yields the device."""
    rank, world, device = engine_mod.init_distributed()
    assert (rank, world) == (0, 1)
    # not destroyed at teardown: DeepSpeed caches the group, and other test modules reuse it
    return device
