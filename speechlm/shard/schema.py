"""The shard recipe schema (shards/*.yaml), built with speechlm.config's typed machinery."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from speechlm.config import REPO_ROOT, ConfigError, build, find_recipe, load_tree

SHARD_RECIPES = REPO_ROOT / "shards"
SPLITS = ("train", "eval", "test")


@dataclass
class SyntheticConfig:
    """The built-in espeak-ng corpus: distinct sentences per split, random voice/speed/pitch per clip."""

    train: int = 400
    eval: int = 40
    test: int = 40
    # how many of the test sentences contain words never heard in train or eval (the rest use only
    # training words): the two halves whose WER the demo reports apart
    unseen_test: int = 0
    voices: list[str] = field(
        default_factory=lambda: ["en-us", "en-us+f3", "en-gb+m3", "en-gb-x-rp+f2", "en-gb-scotland", "en-029+m5"]
    )
    speeds: list[int] = field(default_factory=lambda: [140, 160, 180])  # words per minute
    pitches: list[int] = field(default_factory=lambda: [35, 50, 65])
    seed: int = 0
    # grammar: the sentences above (speechlm.shard.synthetic); listen: random word orders and
    # sentences, test split in parts (speechlm.shard.corpus); nonspeech: silence, noise, tones and
    # clicks with empty labels (speechlm.shard.nonspeech; the source needs keep_empty: true)
    corpus: Literal["grammar", "listen", "nonspeech"] = "grammar"
    vocabulary: int = 0  # listen: words from faker's English list added to the grammar's 52
    random_share: float = 0.5  # listen: share of training clips that are random word orders
    random_test: int = 0  # listen: test clips that are random word orders (eval gets its share)


@dataclass
class RowFilter:
    """Keep or drop rows by a column's value; a list cell matches when any of its items does."""

    column: str
    include: list[str] | None = None  # keep only rows whose value is one of these
    exclude: list[str] | None = None  # drop rows whose value is one of these


@dataclass
class Source:
    name: str
    kind: Literal["hf", "manifest", "librispeech", "synthetic"]
    # mixing weight, carried to manifest.json for the reader
    weight: float = 1.0
    # hf: hub id, save_to_disk folder, or folder of parquet files (local, or an fsspec URL such as
    # s3://bucket/ds, laid out as on the Hub); librispeech: the root folder;
    # manifest: the folder relative manifest file names resolve against (audio paths inside a
    # file resolve against that file's folder)
    path: str = ""
    # our split -> hf: the dataset's splits; manifest: JSONL/TSV files; librispeech: sub-folders
    splits: dict[str, list[str]] = field(default_factory=dict)
    subset: str | None = None  # hf: the dataset's config name, load_dataset(path, name=subset)
    audio_column: str = "audio"
    # null: the source has no labels (non-speech audio; needs keep_empty: true)
    text_column: str | None = "text"
    id_column: str | None = None
    cache_dir: str | None = None  # hf: datasets cache (default: HF_DATASETS_CACHE)
    # None: re-case when every label is all-lowercase or all-uppercase; True/False force it
    truecase: bool | None = None
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)
    # hf: null streams a hub id or parquet folder file by file and reads a save_to_disk folder in
    # place; false: map mode (load_dataset downloads and caches it all first); true: force streaming
    stream: bool | None = None
    filters: list[RowFilter] = field(default_factory=list)  # applied in order, before the cap
    # split -> at most this many rows, a seeded random choice among those the filters kept
    max_clips: dict[str, int] = field(default_factory=dict)
    # keep clips whose label is empty (non-speech examples: the model learns to say nothing);
    # false: an empty label is a counted drop (empty_text)
    keep_empty: bool = False


@dataclass
class NormalizeConfig:
    min_seconds: float = 0.8
    max_seconds: float = 19.0
    # drop: remove <unk>, <noise>, [laughter]-style tags from labels; keep: leave them in the text
    tags: Literal["drop", "keep"] = "drop"
    # re-case sources whose labels are all-lowercase or all-uppercase (see Source.truecase)
    truecase: bool = True
    # a MosesTruecaser model file to use instead of training on the recipe's cased sources
    truecase_model: str | None = None


@dataclass
class OutputConfig:
    root: str | None = None  # default: shards/<recipe name>/ beside the recipe
    # a shard closes at whichever limit comes first (0 disables a limit)
    shard_clips: int = 1000
    shard_bytes: int = 0
    seed: int = 0
    work_chunk: int = 64  # rows per worker task


@dataclass
class ShardRecipe:
    name: str | None = None  # default: the recipe file's stem
    sources: list[Source] = field(default_factory=list)
    normalize: NormalizeConfig = field(default_factory=NormalizeConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    workers: int = 0  # 0: one per CPU core

    def validate(self) -> None:
        if not self.sources:
            raise ConfigError("sources: a shard recipe needs at least one source")
        seen = set()
        for i, s in enumerate(self.sources):
            key = f"sources[{i}]"
            if not s.name or not all(c.isalnum() or c == "_" for c in s.name):
                raise ConfigError(f"{key}.name: use letters, digits and '_' only (it names the tars), got {s.name!r}")
            if s.name in seen:
                raise ConfigError(f"{key}.name: duplicate source name {s.name!r}")
            seen.add(s.name)
            if s.weight <= 0:
                raise ConfigError(f"{key}.weight: must be > 0, got {s.weight}")
            if s.kind in ("hf", "librispeech") and not s.path:
                raise ConfigError(f"{key}.path: required for kind '{s.kind}'")
            if s.kind == "synthetic" and not 0 <= s.synthetic.unseen_test <= s.synthetic.test:
                raise ConfigError(f"{key}.synthetic.unseen_test: must be between 0 and {key}.synthetic.test "
                                  f"({s.synthetic.test}), got {s.synthetic.unseen_test}")
            if s.kind == "synthetic" and s.synthetic.corpus == "listen":
                sy = s.synthetic
                if not 0 <= sy.random_share <= 1:
                    raise ConfigError(f"{key}.synthetic.random_share: must be between 0 and 1, got {sy.random_share}")
                if sy.random_test < 0 or sy.random_test + sy.unseen_test > sy.test:
                    raise ConfigError(f"{key}.synthetic.random_test: random_test + unseen_test must be at most "
                                      f"test ({sy.test}), got {sy.random_test} + {sy.unseen_test}")
            if s.kind == "synthetic" and s.synthetic.corpus == "nonspeech" and not s.keep_empty:
                raise ConfigError(f"{key}.keep_empty: a nonspeech corpus has empty labels and needs keep_empty: true")
            if s.kind != "synthetic":
                if not s.splits:
                    raise ConfigError(f"{key}.splits: required for kind '{s.kind}' (e.g. {{train: [...], eval: [...]}})")
                for split, items in s.splits.items():
                    if split not in SPLITS:
                        raise ConfigError(f"{key}.splits.{split}: split must be one of {', '.join(SPLITS)}")
                    if not isinstance(items, list) or not items or not all(isinstance(x, str) for x in items):
                        raise ConfigError(f"{key}.splits.{split}: expected a non-empty list of names, got {items!r}")
            if s.stream is not None and s.kind != "hf":
                raise ConfigError(f"{key}.stream: only an hf source streams (kind is '{s.kind}')")
            if s.text_column is None and not s.keep_empty:
                raise ConfigError(f"{key}.text_column: null (no labels) needs keep_empty: true")
            for j, f in enumerate(s.filters):
                if (f.include is None) == (f.exclude is None):
                    raise ConfigError(f"{key}.filters[{j}]: give exactly one of include or exclude")
                if s.kind not in ("hf", "manifest"):
                    raise ConfigError(f"{key}.filters: only hf and manifest sources have columns to filter on")
            for split, n in s.max_clips.items():
                if split not in SPLITS:
                    raise ConfigError(f"{key}.max_clips.{split}: split must be one of {', '.join(SPLITS)}")
                if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                    raise ConfigError(f"{key}.max_clips.{split}: expected a positive whole number, got {n!r}")
        o, n = self.output, self.normalize
        if o.shard_clips < 0 or o.shard_bytes < 0 or (o.shard_clips == 0 and o.shard_bytes == 0):
            raise ConfigError("output.shard_clips/shard_bytes: set at least one positive shard size limit")
        if o.work_chunk < 1:
            raise ConfigError(f"output.work_chunk: must be >= 1, got {o.work_chunk}")
        if not 0 <= n.min_seconds < n.max_seconds:
            raise ConfigError(f"normalize: need 0 <= min_seconds < max_seconds, got {n.min_seconds}, {n.max_seconds}")
        if self.workers < 0:
            raise ConfigError(f"workers: must be >= 0, got {self.workers}")


def resolve_recipe_path(name_or_path: str | Path) -> Path:
    """A recipe file path, or a recipe name looked up in shards/ (cwd first, then the repo's)."""
    return find_recipe(str(name_or_path), [Path.cwd() / "shards", SHARD_RECIPES])


def load_recipe(name_or_path: str | Path, overrides: list[str] | tuple = ()) -> tuple[ShardRecipe, Path]:
    path = resolve_recipe_path(name_or_path)
    tree, origin = load_tree(path, None, overrides)
    recipe = build(ShardRecipe, tree, origin)
    if recipe.name is None:
        recipe.name = path.stem
    recipe.validate()
    return recipe, path


def fingerprint(recipe: ShardRecipe) -> str:
    """Hash of everything that decides the output bytes (the worker count does not)."""
    d = dataclasses.asdict(recipe)
    d.pop("workers")
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()
