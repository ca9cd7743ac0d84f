"""python -m speechlm.shard: sources -> normalized labels -> deterministic WebDataset tars + manifest.json.

`build(recipe, out_dir, workers)` is the library entry point (a recipe path, a name in shards/,
or a ShardRecipe object); see docs/design.md for the output contract.
"""
from speechlm.shard.schema import NormalizeConfig, OutputConfig, ShardRecipe, Source, SyntheticConfig, load_recipe


def build(*args, **kwargs):
    # imported on use: worker processes import this package but need none of the pipeline's imports
    from speechlm.shard.pipeline import build as _build

    return _build(*args, **kwargs)


build.__doc__ = "build(recipe, out_dir=None, workers=None, overrides=(), overwrite=False) -> Path (see pipeline.build)"

__all__ = ["build", "load_recipe", "ShardRecipe", "Source", "SyntheticConfig", "NormalizeConfig", "OutputConfig"]
