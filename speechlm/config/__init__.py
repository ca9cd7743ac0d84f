"""Typed configs from plain YAML: base recipe + experiment overlay + key=value overrides.

schema.py holds the dataclasses and their cross-field checks; loader.py reads and composes recipes,
applies overrides and type-checks every key. Import from here: `from speechlm.config import ...`.
"""

from speechlm.config.loader import (
    PACKAGE_RECIPES,
    REPO_ROOT,
    build,
    cli_errors,
    command_parser,
    dump,
    find_recipe,
    load,
    load_tree,
    origin_of,
    parse_override,
    to_dict,
)
from speechlm.config.schema import (
    Config,
    ConfigError,
    DataConfig,
    DataSet,
    DeepSpeedConfig,
    ModelConfig,
    TrainingConfig,
)

__all__ = [
    "PACKAGE_RECIPES",
    "REPO_ROOT",
    "build",
    "cli_errors",
    "command_parser",
    "dump",
    "find_recipe",
    "load",
    "load_tree",
    "origin_of",
    "parse_override",
    "to_dict",
    "Config",
    "ConfigError",
    "DataConfig",
    "DataSet",
    "DeepSpeedConfig",
    "ModelConfig",
    "TrainingConfig",
]
