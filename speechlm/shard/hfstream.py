"""Streaming an hf source: its split's parquet data files, one at a time.

`datasets` resolves a hub id (or a local folder) to the split's data files, as load_dataset would;
nothing is downloaded or cached as Arrow. The first pass reads only the light columns (ids, labels,
filter columns) of each file with parquet column projection (range reads on the hub). A task then
fetches one file at a time into its working folder, its workers read whole row groups' audio
bytes with pyarrow and decode them with soundfile (no torchcodec: pitfall 13), and the file is
deleted once its shards are written.
"""

from __future__ import annotations

import os
from pathlib import Path

import fsspec
import numpy as np
import pyarrow.parquet as pq

from speechlm import audio
from speechlm.config import ConfigError


def is_saved_dataset(path: str) -> bool:
    p = Path(path).expanduser()
    return p.is_dir() and ((p / "dataset_dict.json").is_file() or (p / "state.json").is_file())


def data_files(src, ds_split: str, key: str) -> list[str]:
    """The split's parquet files (URLs or local paths) in the dataset's own order."""
    import datasets
    from datasets.data_files import DataFilesDict, get_data_patterns

    try:
        if is_local(src.path) or src.path.startswith("hf://"):
            found = datasets.load_dataset_builder(src.path, name=src.subset, cache_dir=src.cache_dir).config.data_files
        else:  # a folder in object storage or on a web server: the Hub's file layout conventions
            if src.subset:
                raise ConfigError(f"{key}: subset is for hub datasets; for {src.path} name the config's folder in path")
            found = DataFilesDict.from_patterns(get_data_patterns(src.path), base_path=src.path)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - datasets raises many types for a bad id/path/config
        raise ConfigError(f"{key}: cannot resolve the data files of {src.path!r}: {type(e).__name__}: {e}") from None
    files = (found or {}).get(ds_split)
    if not files:
        have = ", ".join(found or {}) or "none"
        raise ConfigError(f"{key}: {src.path} has no data files for split {ds_split!r} (it has {have})")
    files = [str(f) for f in files]
    odd = [f for f in files if not f.endswith(".parquet")]
    if odd:
        raise ConfigError(
            f"{key}: streaming reads parquet data files, {src.path} has {odd[0]!r}; "
            f"set stream: false on the source for map mode (load_dataset)"
        )
    return files


def _open(url: str):
    fs, path = fsspec.core.url_to_fs(url)
    return fs.open(path, "rb")


def light_columns(url: str, columns: list[str], audio_column: str, key: str) -> tuple[dict, list[int]]:
    """column -> values for the named columns, and the rows per row group, of one parquet file
    (whose audio column is checked for, not read)."""
    with _open(url) as f:
        pf = pq.ParquetFile(f)
        have = pf.schema_arrow.names
        for c in [audio_column, *columns]:
            if c not in have:
                raise ConfigError(f"{key}: {url} has no column {c!r} (columns: {', '.join(have)})")
        groups = [pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)]
        table = pf.read(columns=list(dict.fromkeys(columns))) if columns else None
    cols = {c: table.column(c).to_pylist() for c in columns} if table is not None else {}
    return cols, groups


def is_local(url: str) -> bool:
    return "://" not in url or url.startswith("file://")  # a hub id has no scheme either


def fetch(url: str, dest: Path) -> Path:
    """A local copy of a remote data file (written under a temporary name, then renamed)."""
    if dest.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    fs, path = fsspec.core.url_to_fs(url)
    fs.get_file(path, str(tmp))
    os.replace(tmp, dest)
    return dest


def chunk_cells(path: str, groups: list[int], audio_column: str, first_row: int):
    """The audio cells of whole row groups `groups`, addressable by row index in the file."""
    pf = pq.ParquetFile(path)
    table = pf.read_row_groups(groups, columns=[audio_column])
    col = table.column(audio_column)
    return lambda row: col[row - first_row].as_py()


def decode_cell(value) -> np.ndarray:
    """An hf audio cell ({bytes, path}, bytes or a path) as 16 kHz mono float32."""
    if isinstance(value, dict):
        if value.get("bytes"):
            return audio.load(value["bytes"])
        if value.get("path"):
            return audio.load(value["path"])
        raise audio.AudioError("audio cell has neither bytes nor path")
    if isinstance(value, (bytes, str)):
        return audio.load(value)
    raise audio.AudioError(f"audio cell of unsupported type {type(value).__name__}")
