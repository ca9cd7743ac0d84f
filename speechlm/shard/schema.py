"""The shard recipe schema (shards/*.yaml), built with speechlm.config's typed machinery.

A source kind may have its own settings section, named by its type (`SourceType.section`, e.g. the
demo's `synthetic:`): the core schema does not know these, so `build_recipe` takes each source's
section out of the raw mapping, builds the rest, then builds the section into the type's
`settings_class` as `Source.settings` (errors name `sources[i].<section>.<key>`). `recipe_dict` is
the inverse, the form recipe.json, manifest.json and the fingerprint hold.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from speechlm import tasks, text
from speechlm.config import REPO_ROOT, ConfigError, build, find_recipe, load_tree
from speechlm.shard import sources
from speechlm.shard.sources import SPLITS

SHARD_RECIPES = REPO_ROOT / "shards"


@dataclass
class RowFilter:
    """Keep or drop rows by a column's value; a list cell matches when any of its items does."""

    column: str
    include: list[str] | None = None  # keep only rows whose value is one of these
    exclude: list[str] | None = None  # drop rows whose value is one of these


@dataclass
class Source:
    name: str
    # a registered source type (speechlm/shard/sources/): hf, manifest, librispeech, and the
    # plug-ins' (speechlm.plugins; the demo's synthetic and timed)
    kind: str
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
    # the kind's own section, built into its type's settings_class (the recipe's key is the type's
    # `section`, e.g. `synthetic:`; see build_recipe); None: the type's defaults, or a kind without one
    settings: Any = None
    # hf: null streams a hub id or parquet folder file by file and reads a save_to_disk folder in
    # place; false: map mode (load_dataset downloads and caches it all first); true: force streaming
    stream: bool | None = None
    filters: list[RowFilter] = field(default_factory=list)  # applied in order, before the cap
    # split -> at most this many rows, a seeded random choice among those the filters kept
    max_clips: dict[str, int] = field(default_factory=dict)
    # keep clips whose label is empty (non-speech examples: the model learns to say nothing);
    # false: an empty label is a counted drop (empty_text)
    keep_empty: bool = False
    # the spoken language, an ISO 639-1 code (speechlm.text.language_names), or the column that holds
    # it per row (Common Voice's `locale`; "es-ES" and "es_419" read as es); null: not stated
    language: str | None = None
    language_column: str | None = None
    # what the answer is (speechlm.tasks): transcribe, translate (target_language + target_column: the
    # translation per row) or a registered task of one's own (target_column: its answer per row)
    task: str = "transcribe"
    target_language: str | None = None
    target_column: str | None = None


# the language and task keys a source had none of before issue 38: at their defaults they are left out
# of the fingerprint, so sets built before keep it
LANGUAGE_KEYS = {
    "language": None,
    "language_column": None,
    "task": "transcribe",
    "target_language": None,
    "target_column": None,
}


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
    # per stated language, such a file (speechlm.shard.recasing: only a language with a truecaser is
    # re-cased; English ships one, `truecase_model` serves labels that state no language)
    truecase_models: dict[str, str] = field(default_factory=dict)
    # a source's split that drops more than this share of its rows (empty labels, missing or
    # undecodable audio, too short or long, duplicate ids; filters and max_clips aside) stops the
    # build with the reasons counted, before any manifest is written; so does a split with 0 clips
    max_drop_share: float = 0.5


@dataclass
class OutputConfig:
    # default: <the recipe's folder>/<recipe name>/ (shards/NAME/ for a recipe in shards/)
    root: str | None = None
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
            stype = sources.source_type(s.kind, f"{key}.kind")
            _check_settings(stype, s, key)
            stype.validate(s, key)
            if s.text_column is None and not s.keep_empty:
                raise ConfigError(f"{key}.text_column: null (no labels) needs keep_empty: true")
            _check_language_task(stype, s, key)
            for j, f in enumerate(s.filters):
                if (f.include is None) == (f.exclude is None):
                    raise ConfigError(f"{key}.filters[{j}]: give exactly one of include or exclude")
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
        for lang in n.truecase_models:
            try:
                text.check_language(lang, f"normalize.truecase_models.{lang}")
            except ValueError as e:
                raise ConfigError(str(e)) from None
        if not 0 <= n.max_drop_share <= 1:
            raise ConfigError(f"normalize.max_drop_share: must be in [0, 1], got {n.max_drop_share}")
        if self.workers < 0:
            raise ConfigError(f"workers: must be >= 0, got {self.workers}")


def _check_language_task(stype, src: Source, key: str) -> None:
    """A source's language (or language column), task and target, as speechlm.tasks and text define them."""
    try:
        text.check_language(src.language, f"{key}.language")
        text.check_language(src.target_language, f"{key}.target_language")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if src.language and src.language_column:
        raise ConfigError(f"{key}.language_column: give language or language_column, not both")
    task = tasks.get(src.task, f"{key}.task")
    for col in ("language_column", "target_column"):
        if getattr(src, col) and not stype.has_columns:
            raise ConfigError(f"{key}.{col}: kind '{stype.kind}' has no columns to read it from")
    if task.needs_target and not src.target_column:
        raise ConfigError(f"{key}.target_column: task {src.task} needs the column that holds each row's answer")
    if not task.needs_target and src.target_column:
        raise ConfigError(f"{key}.target_column: task {src.task} answers with the transcript; drop target_column")
    if task.needs_target_language and not src.target_language:
        raise ConfigError(f"{key}.target_language: task {src.task} needs the language it answers in (e.g. en)")
    if not task.needs_target_language and src.target_language:
        raise ConfigError(f"{key}.target_language: only a task that answers in another language takes one")


def _check_settings(stype, src: Source, key: str) -> None:
    if src.settings is None:
        return
    if not stype.section:
        raise ConfigError(f"{key}: kind '{src.kind}' has no settings section, got {type(src.settings).__name__}")
    if not isinstance(src.settings, stype.settings_class):
        raise ConfigError(
            f"{key}.{stype.section}: expected {stype.settings_class.__name__}, got {type(src.settings).__name__}"
        )


def _sections() -> dict[str, sources.SourceType]:
    """section key -> the type that reads it, for every registered type with one."""
    out = {}
    for t in sources.types():
        if t.section:
            if t.section in {f.name for f in dataclasses.fields(Source)}:
                raise ConfigError(f"source kind '{t.kind}': its section '{t.section}' is a key every source has")
            out[t.section] = t
    return out


def _take_sections(tree: dict) -> list[tuple[int, str, Any]]:
    """Take each source's own section out of the raw recipe (in place): [(i, section, raw value)].
    A section of another kind is an error naming it, unless null or that kind's defaults (a recipe
    written out whole before kinds had their own sections holds the demo's in every source)."""
    raw = tree.get("sources") if isinstance(tree, dict) else None
    if not isinstance(raw, list):
        return []  # build() names what is wrong with it
    by_key, taken = _sections(), []
    for i, src in enumerate(raw):
        if not isinstance(src, dict) or not isinstance(src.get("kind"), str):
            continue
        key = f"sources[{i}]"
        if src.pop("settings", None) is not None:
            raise ConfigError(f"unknown key '{key}.settings' (a kind's settings go under its own key, e.g. synthetic:)")
        own = sources.source_type(src["kind"], f"{key}.kind").section
        for section, stype in by_key.items():
            if section not in src:
                continue
            value = src.pop(section)
            if section == own:
                taken.append((i, section, value))
            elif value is not None and value != dataclasses.asdict(stype.settings_class()):
                raise ConfigError(
                    f"{key}.{section}: only a source of kind {stype.kind} reads this section (kind is '{src['kind']}')"
                )
    return taken


def build_recipe(tree: dict, origin: dict | None = None) -> ShardRecipe:
    """A ShardRecipe from a raw mapping (a recipe file's tree, or recipe_dict's output), not yet validated."""
    tree = copy.deepcopy(tree)  # the sections are taken out of it
    taken = _take_sections(tree)
    recipe = build(ShardRecipe, tree, origin)
    for i, section, value in taken:
        cls, key = sources.source_type(recipe.sources[i].kind).settings_class, f"sources[{i}].{section}"
        if value is not None and not isinstance(value, dict):
            raise ConfigError(f"{key}: expected {cls.__name__}, got {value!r}")
        if value is not None:
            recipe.sources[i].settings = build(cls, value, origin, key)
    return recipe


def recipe_dict(recipe: ShardRecipe) -> dict:
    """The recipe as a plain mapping, each source's settings under its section's key (build_recipe's input)."""
    d = dataclasses.asdict(recipe)
    for s, src in zip(d["sources"], recipe.sources):
        s.pop("settings")
        stype = sources.source_type(src.kind)
        if stype.section:
            s[stype.section] = dataclasses.asdict(stype.settings(src))
    return d


def resolve_recipe_path(name_or_path: str | Path) -> Path:
    """A recipe file path, or a recipe name looked up in shards/ (cwd first, then the repo's)."""
    return find_recipe(str(name_or_path), [Path.cwd() / "shards", SHARD_RECIPES])


def load_recipe(name_or_path: str | Path, overrides: list[str] | tuple = ()) -> tuple[ShardRecipe, Path]:
    path = resolve_recipe_path(name_or_path)
    tree, origin = load_tree(path, None, overrides)
    recipe = build_recipe(tree, origin)
    if recipe.name is None:
        recipe.name = path.stem
    recipe.validate()
    return recipe, path


# Before kinds brought their own sections, every source held the demo corpus's `synthetic:` section
# and hashed its defaults, whatever its kind. A source whose kind reads another section, or none,
# still hashes these frozen values: sets built before keep their fingerprint (no rebuild), and
# the demo's defaults may change without touching other kinds' hashes.
_LEGACY_SECTION = "synthetic"
_LEGACY_DEFAULTS = {
    "corpus": "grammar",
    "eval": 40,
    "pitches": [35, 50, 65],
    "random_share": 0.5,
    "random_test": 0,
    "seed": 0,
    "silence_seconds": 0.0,
    "speeds": [140, 160, 180],
    "test": 40,
    "train": 400,
    "unseen_test": 0,
    "vocabulary": 0,
    "voices": ["en-us", "en-us+f3", "en-gb+m3", "en-gb-x-rp+f2", "en-gb-scotland", "en-029+m5"],
}


def fingerprint(recipe: ShardRecipe) -> str:
    """Hash of everything that decides the output bytes (the worker count does not)."""
    d = recipe_dict(recipe)
    d.pop("workers")
    d["normalize"].pop("max_drop_share")  # decides whether a build passes, not its bytes
    if not d["normalize"]["truecase_models"]:
        d["normalize"].pop("truecase_models")  # new with issue 38: sets built before keep their fingerprint
    for s in d["sources"]:
        s.setdefault(_LEGACY_SECTION, _LEGACY_DEFAULTS)
        for k, default in LANGUAGE_KEYS.items():
            if s.get(k) == default:
                s.pop(k)
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()
