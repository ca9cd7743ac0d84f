"""python -m speechlm.shard: sources -> normalized labels -> deterministic WebDataset tars + manifest.json.

`build(recipe, out_dir, workers)` is the library entry point (a recipe path, a name in shards/,
or a ShardRecipe object); see docs/design.md for the output contract.
"""
from speechlm.shard.pipeline import build
from speechlm.shard.schema import NormalizeConfig, OutputConfig, ShardRecipe, Source, SyntheticConfig, load_recipe

__all__ = ["build", "load_recipe", "ShardRecipe", "Source", "SyntheticConfig", "NormalizeConfig", "OutputConfig"]
