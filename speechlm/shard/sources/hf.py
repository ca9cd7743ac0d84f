"""kind: hf, a Hugging Face dataset: a hub id, a folder of parquet files laid out as on the Hub
(local, or an fsspec URL: s3://, gs://, ...) or a save_to_disk folder.

By default (`stream: null`) a hub id or parquet folder is read file by file (speechlm.shard.hfstream:
each parquet data file is a unit, listed by its light columns, its audio fetched and read in row
groups by the pipeline), and a save_to_disk folder is read in place; `stream: false` is map mode
(`load_dataset`, Arrow cache; each dataset split is a unit).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from speechlm.config import ConfigError
from speechlm.shard import hfstream
from speechlm.shard.sources.base import SourceType, folder_digest, register, row_columns

_OPEN: dict = {}  # per process: (source, split) -> dataset with only the audio column


class HF(SourceType):
    kind = "hf"
    needs_path = True
    has_columns = True
    streamable = True

    def streams(self, src) -> bool:
        if src.stream is None:
            return not hfstream.is_saved_dataset(src.path)  # a save_to_disk folder is read in place
        if src.stream and hfstream.is_saved_dataset(src.path):
            raise ConfigError(
                f"{src.name}: stream: true reads parquet data files; {src.path} is a save_to_disk "
                "folder (read in place by default: remove stream)"
            )
        return src.stream

    def list_units(self, src, split: str, key: str) -> list[dict]:
        key = f"{key}.splits.{split}"
        if self.streams(src):
            return _stream_units(src, split, key)
        return [{"label": ds_split, "rows": _map_rows(src, ds_split, key)} for ds_split in src.splits[split]]

    def fetch(self, src, ref) -> np.ndarray:
        ds_split, idx = ref
        return hfstream.decode_cell(_open_audio(src, ds_split)[idx][src.audio_column])

    def inputs(self, src, key: str) -> dict[str, str]:
        """A local folder (parquet files or save_to_disk): its files with their sizes and mtimes; a Hub
        id or a URL: nothing (the recipe names it)."""
        local = Path(src.path.removeprefix("file://")).expanduser()
        return {src.path: folder_digest(local)} if hfstream.is_local(src.path) and local.is_dir() else {}

    def estimate_bytes(self, src: dict) -> int | None:
        from huggingface_hub import HfApi  # the planner's online path only

        try:
            info = HfApi().dataset_info(src["path"], files_metadata=True)
        except Exception as e:  # noqa: BLE001 - gated, missing or unreachable: report it as unknown
            print(f"plan: {src['path']}: dataset metadata unavailable ({type(e).__name__})", file=sys.stderr)
            return None
        splits = [x for items in (src.get("splits") or {}).values() for x in items]
        return hub_files_bytes(
            [(f.rfilename, f.size or 0) for f in info.siblings or []], str(src.get("subset") or ""), splits
        )


register(HF())


def hub_files_bytes(files: list[tuple[str, int]], subset: str, splits: list[str]) -> int:
    """Bytes of a dataset repo's files that a build downloads: those of the subset (a folder or name
    prefix), narrowed to the recipe's splits where the files are named by split (clean/validation/...
    or validation-0000.parquet): openslr/librispeech_asr's `clean` also holds 30 GB of training
    splits that a dev-clean run never fetches."""

    def in_subset(name: str) -> bool:
        return not subset or subset in name.split("/") or name.startswith(subset)

    def in_split(name: str, split: str) -> bool:
        return any(part == split or part.startswith(split + "-") for part in name.split("/"))

    ours = [(n, b) for n, b in files if in_subset(n)]
    by_split = [(n, b) for n, b in ours if any(in_split(n, sp) for sp in splits)]
    return sum(b for _, b in (by_split or ours))  # files not named by split: all of the subset


def _open(src, ds_split: str, key: str = ""):
    import datasets  # heavy: only map mode and save_to_disk folders need it

    p = Path(src.path).expanduser()
    try:
        if hfstream.is_saved_dataset(src.path):
            ds = datasets.load_from_disk(str(p))
            if isinstance(ds, datasets.DatasetDict):
                if ds_split not in ds:
                    raise ConfigError(f"{key}: {p} has no split {ds_split!r} (it has {', '.join(ds)})")
                ds = ds[ds_split]
        else:
            ds = datasets.load_dataset(src.path, name=src.subset, split=ds_split, cache_dir=src.cache_dir)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - datasets raises many types for a bad id/split/path
        raise ConfigError(f"{key}: cannot load {src.path!r} split {ds_split!r}: {type(e).__name__}: {e}") from None
    for col in (src.audio_column, src.text_column, src.id_column, *row_columns(src)):
        if col and col not in ds.column_names:
            raise ConfigError(f"{key}: {src.path} has no column {col!r} (columns: {', '.join(ds.column_names)})")
    # decoding through datasets needs torchcodec (pitfall 13): take the bytes, decode with soundfile
    if isinstance(ds.features[src.audio_column], datasets.Audio):
        ds = ds.cast_column(src.audio_column, datasets.Audio(decode=False))
    return ds


def _map_rows(src, ds_split: str, key: str) -> list:
    ds = _open(src, ds_split, key)
    cols = _light(src)
    table = ds.select_columns(cols).to_dict() if cols else {}
    return _rows_of(src, table, len(ds), ds_split, 0, lambda i: (ds_split, i))


def _light(src) -> list[str]:
    """The columns the first pass reads: ids, labels, filter, language and target columns (never the audio)."""
    return list(dict.fromkeys(c for c in (src.text_column, src.id_column, *row_columns(src)) if c))


def _rows_of(src, cols: dict, n: int, ds_split: str, first: int, ref) -> list:
    texts = cols[src.text_column] if src.text_column else [""] * n
    ids = [str(x) for x in cols[src.id_column]] if src.id_column else [f"{ds_split}-{first + i:08d}" for i in range(n)]
    return [
        (oid, text or "", ref(i), {c: cols[c][i] for c in row_columns(src)})
        for i, (oid, text) in enumerate(zip(ids, texts))
    ]


def _stream_units(src, split: str, key: str) -> list[dict]:
    units = []
    for ds_split in src.splits[split]:
        first = 0  # ids without an id column count rows across the dataset split's files
        for url in hfstream.data_files(src, ds_split, key):
            cols, groups = hfstream.light_columns(url, _light(src), src.audio_column, key)
            n = sum(groups)
            units.append(
                {
                    "label": url,
                    "file": url,
                    "groups": groups,
                    "rows": _rows_of(src, cols, n, ds_split, first, lambda i: i),
                }
            )
            first += n
    return units


def _open_audio(src, ds_split: str):
    k = (src.name, src.path, src.subset, ds_split)
    if k not in _OPEN:
        _OPEN[k] = _open(src, ds_split).select_columns([src.audio_column])
    return _OPEN[k]
