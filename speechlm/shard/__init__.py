"""python -m speechlm.shard: sources -> normalized labels -> deterministic WebDataset tars + manifest.json.

`build(recipe, out_dir, workers)` is the library entry point (a recipe path, a name in shards/,
or a ShardRecipe object); see docs/design.md for the output contract.
"""

from speechlm.shard.schema import (
    NormalizeConfig,
    OutputConfig,
    RowFilter,
    ShardRecipe,
    Source,
    load_recipe,
)


def build(*args, **kwargs):
    from speechlm.shard.pipeline import build as _build  # on use: shard workers import this package, not the pipeline

    return _build(*args, **kwargs)


def merge(out_dir):
    from speechlm.shard.merge import merge as _merge  # on use, as build above

    return _merge(out_dir)


build.__doc__ = (
    "build(recipe, out_dir=None, workers=None, overrides=(), overwrite=False, num_tasks=1, "
    "task_index=0) -> Path (see pipeline.build)"
)
merge.__doc__ = "merge(out_dir) -> Path: the one manifest of a build split into tasks (see shard.merge)"

__all__ = [
    "build",
    "merge",
    "load_recipe",
    "ShardRecipe",
    "Source",
    "NormalizeConfig",
    "OutputConfig",
    "RowFilter",
]
