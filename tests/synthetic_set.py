"""The session's synthetic shard set, scaled down from the shipped shards/synthetic.yaml: its sizes and
recipe, for tests/conftest.py's `synthetic_shards` fixture and the tests that check against its sizes
(a module of its own: a test can't import a conftest by name once several folders have one)."""

from __future__ import annotations

SYNTHETIC_SIZES = {"train": 64, "eval": 16, "test": 8}
SYNTHETIC_SHARD_CLIPS = 8


def small_synthetic_recipe():
    """The shipped shards/synthetic.yaml, scaled down (same voices, grammar and seed)."""
    from speechlm.shard import load_recipe

    recipe, _ = load_recipe("synthetic")
    recipe.name = "synthetic"
    for split, n in SYNTHETIC_SIZES.items():
        setattr(recipe.sources[0].settings, split, n)
    recipe.sources[0].settings.unseen_test = SYNTHETIC_SIZES["test"] // 2  # both halves, as shipped
    recipe.output.shard_clips = SYNTHETIC_SHARD_CLIPS
    recipe.output.work_chunk = 16
    return recipe
