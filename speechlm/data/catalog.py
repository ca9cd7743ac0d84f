"""The shard sets a loader reads, from their manifests alone: every shard's file, clip ids and
durations, numbered globally (a clip's `gid`). A set's path is a folder or a URL (speechlm.data.remote).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from speechlm.config import ConfigError
from speechlm.data import remote
from speechlm.shard.manifest import UNKNOWN_LANGUAGE_KEY


@dataclass
class Shard:
    file: str
    ids: list[str]
    durations: np.ndarray  # float64 seconds, from the manifest
    set_index: int
    empty_ok: bool = False  # its source keeps empty transcripts on purpose (non-speech clips)
    # per clip, the factor its language and task put on its set's weight (DataSet.languages, .tasks);
    # None: 1 for every clip
    factors: np.ndarray | None = None
    languages: list | None = None  # per clip, its spoken language (the manifest's), None where not stated


@dataclass
class Catalog:
    """All shards of the requested sets, with a global clip numbering."""

    shards: list[Shard]
    set_names: list[str]
    offsets: np.ndarray = field(init=False)  # gid of the first clip of each shard
    durations: np.ndarray = field(init=False)

    def __post_init__(self):
        sizes = np.array([len(s.ids) for s in self.shards], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.durations = np.concatenate([s.durations for s in self.shards]) if self.shards else np.zeros(0)

    @property
    def num_clips(self) -> int:
        return int(self.offsets[-1])

    def languages(self) -> np.ndarray:
        """Per gid, the clip's language code as its shard's manifest states it ("" where it does not)."""
        out = [lang or "" for s in self.shards for lang in (s.languages or [None] * len(s.ids))]
        return np.asarray(out, dtype=object)

    def shard_of(self, gids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.offsets, gids, side="right") - 1

    def locate(self, gid: int) -> tuple[int, str]:
        """(shard index, clip id) of a global clip id."""
        s = int(self.shard_of(np.asarray([gid]))[0])
        return s, self.shards[s].ids[gid - int(self.offsets[s])]

    def set_gids(self, set_index: int) -> list[np.ndarray]:
        """Per shard of one set, the gids of its clips."""
        return [
            np.arange(self.offsets[i], self.offsets[i + 1])
            for i, s in enumerate(self.shards)
            if s.set_index == set_index
        ]


def load_catalog(
    paths: list[str], splits: list[str], what: str = "data.train", io_=None, mixes: list[tuple] | None = None
) -> Catalog:
    """Read `manifest.json` of each shard set (docs/design.md) into one Catalog. A set's path may be
    a URL (speechlm.data.remote; `io_` is its RemoteIO): the manifest is fetched, the tars stay there.
    `mixes`: per set, (factor by language, factor by task) (DataSet.languages, .tasks)."""
    shards: list[Shard] = []
    for k, (path, split) in enumerate(zip(paths, splits)):
        mpath = remote.join(path, "manifest.json") if remote.is_url(path) else Path(path) / "manifest.json"
        manifest = read_manifest(path, f"{what}[{k}].path", io_)
        splits_ = manifest.get("splits", {})
        if split not in splits_:
            has = ", ".join(sorted(splits_)) or "none"
            raise ConfigError(f"{what}[{k}].split: '{split}' is not in {mpath} (has: {has})")
        for sh in splits_[split]["shards"]:
            ids, durs = list(sh["ids"]), np.asarray(sh["durations"], dtype=np.float64)
            if len(ids) != len(durs):
                raise ConfigError(
                    f"{what}[{k}]: {mpath} lists {len(ids)} ids but {len(durs)} durations for {sh['file']}"
                )
            empty_ok = bool(manifest.get("sources", {}).get(sh.get("source"), {}).get("keep_empty", False))
            factors = clip_factors(sh, mixes[k] if mixes else ({}, {}), f"{what}[{k}]", mpath)
            langs = sh.get("languages")
            if langs is not None and len(langs) != len(ids):
                raise ConfigError(
                    f"{what}[{k}]: {mpath} lists {len(ids)} ids but {len(langs)} languages for {sh['file']}"
                )
            shards.append(
                Shard(
                    remote.join(path, sh["file"]),
                    ids,
                    durs,
                    k,
                    empty_ok,
                    factors,
                    None if langs is None else list(langs),
                )
            )
    return Catalog(shards, [str(p) for p in paths])


def clip_factors(sh: dict, mix: tuple[dict, dict], key: str, mpath) -> np.ndarray | None:
    """Per clip of a manifest's shard entry, its language's factor times its task's (`mix`: the set's
    DataSet.languages and .tasks); None when the set mixes by neither."""
    by_language, by_task = mix
    if not by_language and not by_task:
        return None
    for name, table in (("languages", by_language), ("tasks", by_task)):
        bad = {k: v for k, v in table.items() if not isinstance(v, (int, float)) or v < 0}
        if bad:
            raise ConfigError(f"{key}.{name}: factors must be numbers >= 0, got {bad}")
    if "languages" not in sh:
        raise ConfigError(
            f"{key}.languages/tasks: the clips of {sh['file']} state no language or task ({mpath}); "
            "give their source a language or task in its shard recipe and rebuild the set"
        )
    langs, tasks = sh["languages"], sh["tasks"]
    return np.array(
        [
            by_language.get(lang or UNKNOWN_LANGUAGE_KEY, 1.0) * by_task.get(task, 1.0)
            for lang, task in zip(langs, tasks)
        ],
        dtype=np.float64,
    )


def read_manifest(path: str, key: str, io_=None) -> dict:
    """A shard set's manifest.json (folder or URL); ConfigError naming `key` when absent or not JSON."""
    if remote.is_url(path):
        mpath, manifest = remote.join(path, "manifest.json"), _fetch_manifest(path, key, io_)
    else:
        mpath = Path(path) / "manifest.json"
        if not mpath.is_file():
            raise ConfigError(f"{key}: no manifest.json in '{path}' (build it with python -m speechlm.shard)")
        manifest = mpath.read_text()
    try:
        return json.loads(manifest)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{key}: {mpath} is not valid JSON ({e})") from None


def _fetch_manifest(url: str, key: str, io_) -> bytes:
    try:
        return remote.read_bytes(remote.join(url, "manifest.json"), io_ or remote.DEFAULT)
    except FileNotFoundError as e:
        raise ConfigError(
            f"{key}: {e} (a shard set at a URL is never built by the trainer: build it with "
            "python -m speechlm.shard and upload the whole folder)"
        ) from None
    except (ImportError, ValueError) as e:  # fsspec: an unknown protocol, or its package (gcsfs...) missing
        raise ConfigError(f"{key}: cannot open '{url}': {e}") from None
