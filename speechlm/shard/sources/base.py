"""What a data source type is, and the registry of types by `kind`.

A source type (one file under speechlm/shard/sources/) owns everything that differs between kinds
of input: which recipe fields it needs (`validate`), its splits, its units and their rows (the
first pass: text only, so listing stays cheap), how a worker fetches one row's audio, and the
planner's size estimate. It registers itself with one line: `register(MyType())`.

A unit is one input file of a split (a streamed parquet data file, a manifest file, a LibriSpeech
sub-folder, a map-mode dataset split, the synthetic split): what one build task reads, and the
group its shards are cut from. A row is (orig_id, raw text, audio ref, filter fields); the ref is
whatever the type's `fetch` needs, and must be JSON-serializable (it is staged in the listing).
"""

from __future__ import annotations

import numpy as np

from speechlm.config import ConfigError

SPLITS = ("train", "eval", "test")


class SourceType:
    kind: str = ""
    needs_path = False  # `path` is required
    has_columns = False  # rows carry columns that `filters` can test
    streamable = False  # `stream` means something for this kind

    def validate(self, src, key: str) -> None:
        """Type-specific recipe checks (ConfigError naming `key.field`); the common ones are in schema."""
        if self.needs_path and not src.path:
            raise ConfigError(f"{key}.path: required for kind '{self.kind}'")
        if not src.splits:
            raise ConfigError(f"{key}.splits: required for kind '{self.kind}' (e.g. {{train: [...], eval: [...]}})")
        for split, items in src.splits.items():
            if split not in SPLITS:
                raise ConfigError(f"{key}.splits.{split}: split must be one of {', '.join(SPLITS)}")
            if not isinstance(items, list) or not items or not all(isinstance(x, str) for x in items):
                raise ConfigError(f"{key}.splits.{split}: expected a non-empty list of names, got {items!r}")
        if src.stream is not None and not self.streamable:
            raise ConfigError(f"{key}.stream: only an hf source streams (kind is '{self.kind}')")
        if src.filters and not self.has_columns:
            raise ConfigError(f"{key}.filters: kind '{self.kind}' has no columns to filter on")

    def check(self, src, key: str) -> None:
        """Before listing: what the build needs on this machine (a tool, credentials)."""

    def splits(self, src) -> list[str]:
        return [s for s in SPLITS if s in src.splits]

    def list_units(self, src, split: str, key: str) -> list[dict]:
        """The split's units in a fixed order: {"label", "rows": [(oid, text, ref, fields)]}, plus
        "file" and "groups" (rows per parquet row group) for a streamed unit."""
        raise NotImplementedError

    def fetch(self, src, ref) -> np.ndarray | tuple[np.ndarray, dict]:
        """16 kHz mono float32 audio for a row; AudioError when it cannot be had (a counted drop).
        A type whose labels are made with the audio returns (audio, labels): the labels' keys are
        written into the clip's JSON beside "text" (kind timed: "words")."""
        raise NotImplementedError

    def estimate_bytes(self, src: dict) -> int | None:
        """Bytes a build downloads for this source (the planner's disk figure), from the recipe's raw
        YAML mapping; None when unknown."""
        return None


_TYPES: dict[str, SourceType] = {}


def register(stype: SourceType) -> SourceType:
    if not stype.kind:
        raise ValueError(f"{type(stype).__name__}: a source type needs a kind")
    _TYPES[stype.kind] = stype
    return stype


def source_type(kind: str, key: str = "kind") -> SourceType:
    try:
        return _TYPES[kind]
    except KeyError:
        raise ConfigError(f"{key}: unknown source kind {kind!r} (known: {', '.join(sorted(_TYPES))})") from None


def of(src) -> SourceType:
    """The type of a recipe's source (its `kind` was checked when the recipe was loaded)."""
    return source_type(src.kind)


def kinds() -> list[str]:
    return sorted(_TYPES)


def fields(record: dict, src) -> dict:
    """The row's values of the columns the source's filters test."""
    return {f.column: record.get(f.column) for f in src.filters}
