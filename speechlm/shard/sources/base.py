"""What a data source type is, and the registry of types by `kind`.

A source type (one file under speechlm/shard/sources/, or a plug-in's: speechlm.plugins) owns
everything that differs between kinds of input: which recipe fields it needs (`validate`), its own
settings section, if any (`section` names the recipe key, `settings_class` the dataclass it builds
into: the demo's `synthetic:`), its splits, its units and their rows (the first pass: text only, so
listing stays cheap), how a worker fetches one row's audio, and the planner's size estimate. It is
registered with one line: `register(MyType())`. Looking a kind up loads the plug-ins first.

A unit is one input file of a split (a streamed parquet data file, a manifest file, a LibriSpeech
sub-folder, a map-mode dataset split, the synthetic split): what one build task reads, and the
group its shards are cut from. A row is (orig_id, raw text, audio ref, filter fields[, where]); the
ref is whatever the type's `fetch` needs, and must be JSON-serializable (it is staged in the listing);
`where`, optional, names the row for the drop report (`train.csv:12`; default: the orig_id).
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import numpy as np

from speechlm import plugins
from speechlm.config import ConfigError

SPLITS = ("train", "eval", "test")


class SourceType:
    kind: str = ""
    needs_path = False  # `path` is required
    has_columns = False  # rows carry columns that `filters` can test
    streamable = False  # `stream` means something for this kind
    # the kind's own recipe section (`sources[i].<section>`, built into `settings_class`, held as
    # `Source.settings`); "" for a kind that has none
    section: str = ""
    settings_class: type | None = None

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

    def settings(self, src):
        """The source's own settings: its section as the recipe gave it, else the defaults."""
        if not self.section:
            return None
        return src.settings if src.settings is not None else self.settings_class()

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

    def inputs(self, src, key: str) -> dict[str, str]:
        """What the build reads besides the recipe, as {name: digest}: a digest changes when the input
        does (a manifest's bytes, a folder's files with their sizes and mtimes), so a shard set built
        from other inputs is rebuilt. Cheap: no audio is decoded. {} for a type whose output the
        recipe alone decides (a generated corpus) or whose input it cannot see (a Hub id)."""
        return {}

    def estimate_bytes(self, src: dict) -> int | None:
        """Bytes a build downloads for this source (the planner's disk figure), from the recipe's raw
        YAML mapping; None when unknown."""
        return None


_TYPES: dict[str, SourceType] = {}


def register(stype: SourceType) -> SourceType:
    if not stype.kind:
        raise ValueError(f"{type(stype).__name__}: a source type needs a kind")
    if bool(stype.section) != dataclasses.is_dataclass(stype.settings_class):
        raise ValueError(f"{type(stype).__name__}: a settings section needs `section` and a dataclass `settings_class`")
    _TYPES[stype.kind] = stype
    return stype


def source_type(kind: str, key: str = "kind") -> SourceType:
    plugins.load()
    try:
        return _TYPES[kind]
    except KeyError:
        raise ConfigError(
            f"{key}: unknown source kind {kind!r} (known: {', '.join(sorted(_TYPES))}; a plug-in's kinds need its "
            f"package installed: `pip install -e .` in speechlm's checkout registers the demo's kinds)"
        ) from None


def of(src) -> SourceType:
    """The type of a recipe's source (its `kind` was checked when the recipe was loaded)."""
    return source_type(src.kind)


def kinds() -> list[str]:
    plugins.load()
    return sorted(_TYPES)


def types() -> list[SourceType]:
    """Every registered type, the plug-ins' too, by kind."""
    plugins.load()
    return [_TYPES[k] for k in sorted(_TYPES)]


def row_columns(src) -> list[str]:
    """The columns besides id and text the first pass reads of each row: those the filters test, the
    language column and the target column (a translation, a custom task's answer)."""
    cols = [f.column for f in src.filters] + [src.language_column, src.target_column]
    return list(dict.fromkeys(c for c in cols if c))


def fields(record: dict, src) -> dict:
    """The row's values of the columns of `row_columns`."""
    return {c: record.get(c) for c in row_columns(src)}


def stat_digest(paths) -> str:
    """sha256 over each path with its size and mtime (or `missing`): changes when a file does."""
    h = hashlib.sha256()
    for p in paths:
        try:
            st = Path(p).stat()
            h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        except OSError:
            h.update(f"{p}\0missing\n".encode())
    return h.hexdigest()


def folder_digest(root) -> str:
    """stat_digest of every file under a folder (its listing with sizes and mtimes)."""
    root = Path(root).expanduser()
    return stat_digest(sorted(p for p in root.rglob("*") if p.is_file()))
