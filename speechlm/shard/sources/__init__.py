"""Data source types, one file each; `kind` in a shard recipe picks one (see base.SourceType).

Adding a type is one new file that subclasses `SourceType` and calls `register(...)`, plus its
import line below. A type from another package (or a test) needs only the `register` call, made
when its plug-in module is imported (speechlm.plugins: the demo's `synthetic` and `timed` kinds).
"""

from speechlm.shard.sources.base import SPLITS, SourceType, fields, kinds, of, register, source_type, types

# the built-in types register themselves on import
from speechlm.shard.sources import hf, librispeech, manifest  # noqa: E402,F401  isort: skip

__all__ = ["SPLITS", "SourceType", "fields", "kinds", "of", "register", "source_type", "types"]
